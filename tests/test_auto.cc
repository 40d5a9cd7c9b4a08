// GRADCOMP_ALGO=auto between ranks (threads over the in-process transport):
// every rank holds the same model and makes the same choices even when its
// local timings differ; error feedback survives a switch to dense; bad input
// and a probe over its budget run dense; results stay right.
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <functional>
#include <set>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/auto/auto_algorithm.h"
#include "algorithms/auto/ef_flush.h"
#include "algorithms/error_feedback.h"
#include "device/backend.h"
#include "transport/local_transport.h"

using namespace gradcomp;
using algo::autosel::AutoAlgorithm;

namespace {

float valueAt(int rank, int call, size_t i) {
  const uint64_t h = (i * 2654435761u + uint64_t(call) * 40503u + uint64_t(rank) * 977u) % 4001u;
  return (float(h) - 2000.0f) / 2000.0f * (i % 61 == 0 ? 8.0f : 1.0f);
}

struct RankLog {
  Status status;
  std::vector<double> modelWords;
  std::vector<std::string> choices;
  std::vector<std::vector<float>> outputs;
  bool disabled = false;
  std::string why;
};

struct AutoRun {
  int ranks = 4;
  std::vector<size_t> counts;  // one call per entry, keyed by its size
  param::Overrides config;
  // Per rank: the timing hook (empty: none).
  std::function<algo::autosel::TimingHook(int rank)> hookOf;
  bool keepOutputs = false;
  // Called on a rank between calls (call index, the rank's algorithm).
  std::function<void(int rank, int call, AutoAlgorithm&)> between;
};

std::vector<RankLog> runAuto(const AutoRun& run) {
  auto nets = transport::createLocalTransports(run.ranks, 60.0);
  std::vector<RankLog> logs(size_t(run.ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < run.ranks; ++r)
    threads.emplace_back([&, r] {
      RankLog& log = logs[size_t(r)];
      device::Backend& dev = device::cpuBackend();
      AutoAlgorithm alg;
      if (run.hookOf) alg.tuner().setTimingHook(run.hookOf(r));
      std::unique_ptr<algo::ErrorFeedbackStore> ef;
      log.status = algo::ErrorFeedbackStore::create(run.config, &ef);
      for (size_t c = 0; c < run.counts.size() && log.status.ok(); ++c) {
        const size_t n = run.counts[c];
        std::vector<float> in(n), out(n);
        for (size_t i = 0; i < n; ++i) in[i] = valueAt(r, int(c), i);
        algo::Context ctx{*nets[size_t(r)], dev, run.config, uint64_t(c), ef.get()};
        algo::AllreduceArgs a;
        a.sendBuf = in.data();
        a.recvBuf = out.data();
        a.count = n;
        a.bufferKey = 100 + n;
        log.status = alg.allreduce(ctx, a);
        if (!log.status.ok()) break;
        log.choices.push_back(alg.lastChoice());
        if (run.keepOutputs) log.outputs.push_back(out);
        if (run.between) run.between(r, int(c), alg);
      }
      log.modelWords = algo::autosel::modelWords(alg.tuner().model());
      log.disabled = alg.tuner().disabled();
      log.why = alg.tuner().why();
    });
  for (auto& t : threads) t.join();
  return logs;
}

// Deterministic per-rank multiplicative jitter in [0.5, 2.5).
algo::autosel::TimingHook jitter(int rank, double scale) {
  auto state = std::make_shared<uint64_t>(0x9E3779B97F4A7C15ull * uint64_t(rank + 1));
  return [state, scale](const std::string&, double s) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return s * scale * (0.5 + 2.0 * double(*state >> 11) / double(uint64_t(1) << 53));
  };
}

}  // namespace

TEST_CASE("auto: ranks with different local timings hold one model and choose alike", "[auto]") {
  AutoRun run;
  run.ranks = 4;
  REQUIRE(run.config.set("AUTO_PROBE_MS", "150", "test").ok());
  // Calibration must finish here whatever the machine's load (sanitizers, CI).
  REQUIRE(run.config.set("AUTO_PROBE_LIMIT_MS", "60000", "test").ok());
  REQUIRE(run.config.set("AUTO_REFINE_CALLS", "3", "test").ok());
  REQUIRE(run.config.set("AUTO_EXPLORE", "100", "test").ok());  // every candidate gets trials
  REQUIRE(run.config.set("AUTO_TRIAL_MS", "0", "test").ok());    // three rounds
  // Three sizes interleaved: several classes, trials and agreements in each.
  for (int i = 0; i < 20; ++i)
    for (size_t n : {size_t(70000), size_t(300000), size_t(9000)}) run.counts.push_back(n);
  // Rank r's clock runs (1 + 2r) times slower, with its own noise.
  run.hookOf = [](int r) { return jitter(r, 1.0 + 2.0 * r); };
  const std::vector<RankLog> logs = runAuto(run);
  for (const RankLog& log : logs) REQUIRE(log.status.ok());
  REQUIRE_FALSE(logs[0].disabled);
  std::set<std::string> seen;
  for (size_t r = 1; r < logs.size(); ++r) {
    CHECK(logs[r].modelWords == logs[0].modelWords);  // bit for bit
    CHECK(logs[r].choices == logs[0].choices);
  }
  // "dense(flush)" is dense sending a residual: the same candidate.
  for (const std::string& c : logs[0].choices) seen.insert(c == "dense(flush)" ? "dense" : c);
  // With every candidate within the explore factor, the trials ran them all.
  CHECK(seen.size() == 4);
}

TEST_CASE("auto: switching to dense sends and clears the residual, and back to a compressor",
          "[auto]") {
  // Two candidates, topka at density 0.05 (its error feedback is exact: what
  // a rank does not send stays in its residual) and dense. The hook makes
  // measured dense calls 1000x slower at first (the trials, three rounds,
  // pick topka), then from call 12 topka's (a re-check of dense moves the
  // choice to dense), then from call 40 dense's again (a re-check of topka
  // moves it back).
  AutoRun run;
  run.ranks = 3;
  REQUIRE(run.config.set("AUTO_CANDIDATES", "topka:DENSITY=0.05,dense", "test").ok());
  REQUIRE(run.config.set("AUTO_PROBE_LIMIT_MS", "60000", "test").ok());
  REQUIRE(run.config.set("AUTO_REFINE_CALLS", "2", "test").ok());
  REQUIRE(run.config.set("AUTO_EXPLORE", "100", "test").ok());
  REQUIRE(run.config.set("AUTO_TRIAL_MS", "0", "test").ok());
  run.counts.assign(75, 20000);
  run.keepOutputs = true;
  auto phase = std::make_shared<std::vector<int>>(3, 0);  // per rank: 0 dense slow, 1 topka slow
  run.hookOf = [phase](int r) -> algo::autosel::TimingHook {
    return [phase, r](const std::string& what, double s) {
      if (what.rfind("call ", 0) != 0) return s;  // the probe measures truly
      const bool dense = what == "call dense";
      return dense == ((*phase)[size_t(r)] == 0) ? s * 1000 : s;
    };
  };
  run.between = [&](int r, int call, AutoAlgorithm&) {
    if (call == 11) (*phase)[size_t(r)] = 1;
    if (call == 39) (*phase)[size_t(r)] = 0;
  };
  const std::vector<RankLog> logs = runAuto(run);
  for (const RankLog& log : logs) REQUIRE(log.status.ok());
  const std::vector<std::string>& ch = logs[0].choices;
  for (const RankLog& log : logs) CHECK(log.choices == ch);
  // Find the first dense call after topka ran (the flush, reported as
  // "dense(flush)") and the first topka after it.
  size_t firstTopka = ch.size(), flush = ch.size(), back = ch.size();
  for (size_t c = 0; c < ch.size(); ++c) {
    if (firstTopka == ch.size() && ch[c] == "topka:DENSITY=0.05") firstTopka = c;
    else if (firstTopka < ch.size() && flush == ch.size() && ch[c] == "dense(flush)") flush = c;
    else if (flush < ch.size() && back == ch.size() && ch[c] == "topka:DENSITY=0.05") back = c;
  }
  INFO("choices: first topka " << firstTopka << ", flush " << flush << ", back " << back);
  REQUIRE(flush < ch.size());
  REQUIRE(back < ch.size());
  // Conservation: with error feedback, what the calls returned up to and
  // including the flush equals everything the ranks put in (the residual
  // was sent and is zero now). Before the flush it does not (topka holds a
  // residual back).
  const size_t n = run.counts[0];
  auto gap = [&](size_t lastCall) {
    double worst = 0, scale = 0;
    for (size_t i = 0; i < n; ++i) {
      double in = 0, out = 0;
      for (size_t c = 0; c <= lastCall; ++c) {
        for (int r = 0; r < run.ranks; ++r) in += valueAt(r, int(c), i);
        out += logs[0].outputs[c][i];
      }
      worst = std::max(worst, std::fabs(in - out));
      scale = std::max(scale, std::fabs(in));
    }
    return worst / scale;
  };
  CHECK(gap(flush - 1) > 1e-3);
  CHECK(gap(flush) < 1e-5);
  // Dense calls are exact and every rank got the same result.
  for (size_t c = flush; c < back; ++c)
    for (const RankLog& log : logs) CHECK(log.outputs[c] == logs[0].outputs[c]);
}

TEST_CASE("FlushDense: residual plus gradient summed, residual cleared, avg divides", "[auto]") {
  const int P = 3;
  const size_t n = 5000;
  auto nets = transport::createLocalTransports(P, 30.0);
  std::vector<Status> st(P);
  std::vector<std::vector<float>> outs(P, std::vector<float>(n)), left(P, std::vector<float>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < P; ++r)
    threads.emplace_back([&, r] {
      device::Backend& dev = device::cpuBackend();
      param::Overrides cfg;
      std::unique_ptr<algo::ErrorFeedbackStore> ef;
      st[r] = algo::ErrorFeedbackStore::create(cfg, &ef);
      // Plant residual r+1 in every element through the store's accumulator.
      float* acc = nullptr;
      bool fresh = false;
      device::DeviceArray<float> scratch;
      if (st[r].ok()) st[r] = ef->begin(dev, 42, n, 0, &scratch, &acc, &fresh);
      std::vector<float> planted(n, float(r + 1));
      if (st[r].ok()) st[r] = dev.copy(acc, planted.data(), n * sizeof(float));
      if (st[r].ok()) st[r] = ef->end(dev, 42, acc);
      if (st[r].ok()) st[r] = dev.sync();
      std::vector<float> in(n);
      for (size_t i = 0; i < n; ++i) in[i] = valueAt(r, 0, i);
      algo::autosel::FlushDense flush(algo::findAlgorithm("dense")->create());
      algo::Context ctx{*nets[size_t(r)], dev, cfg, 1, ef.get()};
      algo::AllreduceArgs a;
      a.sendBuf = in.data();
      a.recvBuf = outs[size_t(r)].data();
      a.count = n;
      a.op = RedOp::Avg;
      a.bufferKey = 42;
      if (st[r].ok()) st[r] = flush.allreduce(ctx, a);
      if (st[r].ok()) st[r] = ef->readResidual(42, n, left[size_t(r)].data());
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < P; ++r) REQUIRE(st[r].ok());
  for (size_t i = 0; i < n; ++i) {
    double sum = 1 + 2 + 3;
    for (int r = 0; r < P; ++r) sum += valueAt(r, 0, i);
    for (int r = 0; r < P; ++r) {
      CHECK(outs[size_t(r)][i] == Approx(sum / P).epsilon(1e-6));
      CHECK(left[size_t(r)][i] == 0.0f);
    }
  }
}

TEST_CASE("auto: a bad candidate list runs dense, exactly, with a message naming the variable",
          "[auto]") {
  for (const char* text : {"dense,nosuch", ""}) {
    INFO(text);
    AutoRun run;
    run.ranks = 3;
    REQUIRE(run.config.set("AUTO_CANDIDATES", text, "test").ok());
    run.counts = {4096, 4096};
    run.keepOutputs = true;
    const std::vector<RankLog> logs = runAuto(run);
    for (const RankLog& log : logs) {
      REQUIRE(log.status.ok());
      CHECK(log.disabled);
      CHECK(log.why.find("GRADCOMP_AUTO_CANDIDATES") != std::string::npos);
      CHECK(log.choices == std::vector<std::string>{"dense", "dense"});
      for (size_t i = 0; i < 4096; i += 97) {
        double sum = 0;
        for (int r = 0; r < 3; ++r) sum += valueAt(r, 1, i);
        CHECK(log.outputs[1][i] == Approx(sum).epsilon(1e-6));
      }
    }
  }
}

TEST_CASE("auto: a probe past its limit runs dense on every rank, naming the variable",
          "[auto]") {
  AutoRun run;
  run.ranks = 4;
  REQUIRE(run.config.set("AUTO_PROBE_LIMIT_MS", "300", "test").ok());
  // Rank 2 is slow: each of its link measurements takes 0.2 s more.
  run.hookOf = [](int r) -> algo::autosel::TimingHook {
    return [r](const std::string& what, double s) {
      if (r == 2 && what == "shift") std::this_thread::sleep_for(std::chrono::milliseconds(200));
      return s;
    };
  };
  run.counts = {30000, 30000, 30000};
  run.keepOutputs = true;
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<RankLog> logs = runAuto(run);
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 20);
  for (const RankLog& log : logs) {
    REQUIRE(log.status.ok());
    CHECK(log.disabled);
    CHECK(log.why.find("over GRADCOMP_AUTO_PROBE_LIMIT_MS=300") != std::string::npos);
    CHECK(log.choices == std::vector<std::string>(3, "dense"));
    CHECK(log.outputs[2] == logs[0].outputs[2]);
  }
}

TEST_CASE("auto: an unusable candidate (qsgd at 3 bits) is dropped on every rank", "[auto]") {
  AutoRun run;
  run.ranks = 3;
  REQUIRE(run.config.set("AUTO_CANDIDATES", "qsgd:BITS=3,dense", "test").ok());
  REQUIRE(run.config.set("AUTO_PROBE_LIMIT_MS", "60000", "test").ok());
  run.counts.assign(8, 50000);
  const std::vector<RankLog> logs = runAuto(run);
  for (const RankLog& log : logs) {
    REQUIRE(log.status.ok());
    CHECK_FALSE(log.disabled);
    CHECK(log.modelWords == logs[0].modelWords);
    for (const std::string& c : log.choices) CHECK(c == "dense");
  }
  algo::autosel::Model m;
  REQUIRE(algo::autosel::modelFromWords(logs[0].modelWords, &m).ok());
  REQUIRE(m.candidates.size() == 2);
  CHECK_FALSE(m.candidates[0].usable);
  CHECK(m.candidates[1].usable);
}
