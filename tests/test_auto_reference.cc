// The Reference of GRADCOMP_ALGO=auto (auto_reference.h) against real runs
// (threads over the in-process transport): it replays the recorded choices,
// trials, switches between compressors and flushes included, with #wrong 0;
// and once auto has settled on dense, its dense calls are dense's, bit for
// bit, from the second on (the first, the flush, carries the residual).
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/auto/auto_algorithm.h"
#include "algorithms/error_feedback.h"
#include "device/backend.h"
#include "transport/local_transport.h"

using namespace gradcomp;
using algo::autosel::AutoAlgorithm;

namespace {

constexpr size_t kCount = 20000;
constexpr int kRanks = 3;

float valueAt(int rank, int call, size_t i) {
  const uint64_t h = (i * 2654435761u + uint64_t(call) * 40503u + uint64_t(rank) * 977u) % 4001u;
  return (float(h) - 2000.0f) / 2000.0f * (i % 61 == 0 ? 8.0f : 1.0f);
}

struct Runs {
  std::vector<std::string> choices;                    // rank 0's; every rank's must match
  std::vector<std::vector<std::vector<float>>> out;    // [rank][call]
};

// `calls` calls of one tensor on every rank. algo "auto" or a schedule's
// name; hookOf(rank, &call) gives auto's timing hook (nullptr: none).
Runs run(const std::string& algo, int calls, const param::Overrides& config,
         std::function<algo::autosel::TimingHook(int, const int*)> hookOf = nullptr) {
  auto nets = transport::createLocalTransports(kRanks, 60.0);
  Runs res;
  res.out.assign(kRanks, {});
  std::vector<std::vector<std::string>> choices(kRanks);
  std::vector<Status> st(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r)
    threads.emplace_back([&, r] {
      std::unique_ptr<algo::Algorithm> alg = algo::findAlgorithm(algo)->create();
      auto* selector = dynamic_cast<AutoAlgorithm*>(alg.get());
      int call = 0;
      if (selector && hookOf) selector->tuner().setTimingHook(hookOf(r, &call));
      std::unique_ptr<algo::ErrorFeedbackStore> ef;
      st[r] = algo::ErrorFeedbackStore::create(config, &ef);
      for (call = 0; call < calls && st[r].ok(); ++call) {
        std::vector<float> in(kCount), out(kCount);
        for (size_t i = 0; i < kCount; ++i) in[i] = valueAt(r, call, i);
        algo::Context ctx{*nets[size_t(r)], device::cpuBackend(), config, uint64_t(call), ef.get()};
        algo::AllreduceArgs a;
        a.sendBuf = in.data();
        a.recvBuf = out.data();
        a.count = kCount;
        a.bufferKey = 7;
        st[r] = alg->allreduce(ctx, a);
        res.out[size_t(r)].push_back(out);
        choices[size_t(r)].push_back(selector ? selector->lastChoice() : algo);
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) REQUIRE(st[r].ok());
  for (int r = 1; r < kRanks; ++r) REQUIRE(choices[size_t(r)] == choices[0]);
  res.choices = choices[0];
  return res;
}

// Elements of every rank's output outside auto's Reference, per call, when
// the reference is told `choices` (as gradcomp-bench and refcheck tell it).
std::vector<uint64_t> wrongPerCall(const Runs& r, const param::Overrides& config,
                                   const std::vector<std::string>& choices) {
  std::unique_ptr<algo::Reference> ref = algo::findAlgorithm("auto")->reference(kRanks);
  REQUIRE(ref);
  REQUIRE(ref->configure(config).ok());
  std::vector<uint64_t> wrong;
  std::vector<std::vector<float>> in(kRanks, std::vector<float>(kCount));
  for (size_t c = 0; c < choices.size(); ++c) {
    std::vector<const void*> ptrs;
    for (int k = 0; k < kRanks; ++k) {
      for (size_t i = 0; i < kCount; ++i) in[size_t(k)][i] = valueAt(k, int(c), i);
      ptrs.push_back(in[size_t(k)].data());
    }
    algo::AllreduceArgs a;
    a.count = kCount;
    a.bufferKey = 7;
    std::vector<double> e, tol;
    REQUIRE(ref->recordChoice(choices[c]).ok());
    REQUIRE(ref->expect(ptrs, a, &e, &tol).ok());
    uint64_t n = 0;
    for (int k = 0; k < kRanks; ++k)
      for (size_t i = 0; i < kCount; ++i) {
        const float o = r.out[size_t(k)][c][i];
        n += (o == float(e[i]) || std::fabs(o - e[i]) <= tol[i]) ? 0 : 1;
      }
    wrong.push_back(n);
  }
  return wrong;
}

param::Overrides autoConfig(const char* candidates) {
  param::Overrides c;
  REQUIRE(c.set("AUTO_CANDIDATES", candidates, "test").ok());
  REQUIRE(c.set("AUTO_PROBE_LIMIT_MS", "60000", "test").ok());  // calibrate under any load
  REQUIRE(c.set("AUTO_REFINE_CALLS", "2", "test").ok());
  REQUIRE(c.set("AUTO_EXPLORE", "100", "test").ok());  // every candidate gets trials
  REQUIRE(c.set("AUTO_TRIAL_MS", "0", "test").ok());   // three rounds
  return c;
}

}  // namespace

TEST_CASE("auto reference: trials, compressor switches and flushes replay with #wrong 0",
          "[auto]") {
  // The trials interleave blocks of every candidate: residuals pass from
  // topka to qsgd and back, and each dense block after them flushes.
  const param::Overrides config = autoConfig("topka:DENSITY=0.05,qsgd:BITS=4,dense");
  const Runs r = run("auto", 30, config);
  size_t flushes = 0, compressorSwitches = 0;
  for (size_t c = 1; c < r.choices.size(); ++c) {
    flushes += r.choices[c] == "dense(flush)";
    const bool was = r.choices[c - 1].rfind("dense", 0) != 0;
    const bool is = r.choices[c].rfind("dense", 0) != 0;
    compressorSwitches += was && is && r.choices[c] != r.choices[c - 1];
  }
  CHECK(flushes >= 2);
  CHECK(compressorSwitches >= 2);
  const std::vector<uint64_t> wrong = wrongPerCall(r, config, r.choices);
  for (size_t c = 0; c < wrong.size(); ++c) {
    INFO("call " << c << " ran " << r.choices[c]);
    CHECK(wrong[c] == 0);
  }
  // The flush is checked, not waved through: replayed as plain dense, the
  // residual it sent makes it wrong.
  std::vector<std::string> plain = r.choices;
  size_t first = 0;
  while (plain[first] != "dense(flush)") ++first;
  plain[first] = "dense";
  CHECK(wrongPerCall(r, config, plain)[first] > 0);
}

TEST_CASE("auto settled on dense: dense calls from the second on equal dense alone, bit for bit",
          "[auto]") {
  // topka is chosen while measured dense calls read 1000x slow (the trials),
  // then from call 12 topka's do: auto moves to dense and stays there.
  const param::Overrides config = autoConfig("topka:DENSITY=0.05,dense");
  // When auto moves depends on when its agreed medians turn, which real
  // times under load delay (a CI run flushed at call 38 of 45): calls to
  // spare, so at least 20 settled calls remain.
  const int calls = 80;
  const Runs a = run("auto", calls, config, [](int, const int* call) {
    return [call](const std::string& what, double s) {
      if (what.rfind("call ", 0) != 0) return s;  // the probe measures truly
      return (what == "call dense") == (*call < 12) ? s * 1000 : s;
    };
  });
  const Runs dense = run("dense", calls, config);
  size_t flush = a.choices.size();
  for (size_t c = 12; c < a.choices.size() && flush == a.choices.size(); ++c)
    if (a.choices[c] == "dense(flush)") flush = c;
  REQUIRE(flush < a.choices.size());
  size_t denseCalls = 0;
  for (size_t c = flush + 1; c < a.choices.size(); ++c) {
    INFO("call " << c << " ran " << a.choices[c]);
    REQUIRE(a.choices[c] == "dense");
    ++denseCalls;
    for (int k = 0; k < kRanks; ++k) CHECK(a.out[size_t(k)][c] == dense.out[size_t(k)][c]);
  }
  CHECK(denseCalls >= 20);
  // The flush carries topka's residual (so differs from dense alone) and is
  // what the Reference predicts; so is every other call.
  CHECK(a.out[0][flush] != dense.out[0][flush]);
  for (uint64_t w : wrongPerCall(a, config, a.choices)) CHECK(w == 0);
}
