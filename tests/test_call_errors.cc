// Errors travel as fast as deaths (algorithms/call_check.h): real processes
// over UCX through the C API, GRADCOMP_TIMEOUT_S=20 so that no rank can pass
// by timing out.
// - A rank that fails a call by itself: every rank's call fails within 2 s
//   with the same message naming that rank and its error.
// - Calls that disagree (count, dtype, op, algorithm parameters): every rank
//   fails call #0 within 5 s with the same message naming both sides.
#include <sys/mman.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <algorithm>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/call_check.h"
#include "gradcomp/gradcomp.h"
#include "support/multiproc.h"

using namespace gradcomp;

namespace {

// Fails at once on rank 2 (a local error, no death); the other ranks run the
// dense allreduce, which waits for rank 2 until something ends it.
class FailOnRank2 : public algo::Algorithm {
 public:
  Status allreduce(algo::Context& ctx, const algo::AllreduceArgs& args) override {
    if (ctx.net.rank() == 2)
      return Status(Err::RemoteError, "injected: rank 2 rejects its input");
    return dense_->allreduce(ctx, args);
  }

 private:
  std::unique_ptr<algo::Algorithm> dense_ = algo::findAlgorithm("dense")->create();
};

const bool kRegistered = [] {
  algo::AlgorithmInfo info;
  info.name = "test-fail-rank2";
  info.summary = "test only: rank 2 fails every call";
  info.create = [] { return std::unique_ptr<algo::Algorithm>(new FailOnRank2()); };
  info.selector = true;  // found by name, left out of listAlgorithms
  algo::registerAlgorithm(std::move(info));
  return true;
}();

struct Record {
  int init = -1, rc = -1, destroyRc = -1;
  double callS = -1, exitS = -1;  // the call's duration; call start -> gcCommDestroy returned
  char message[1024] = {0};
};

struct Call {
  const char* algo = "dense";
  size_t count = 4096;
  gcDataType_t dtype = gcFloat32;
  gcRedOp_t op = gcSum;
  std::vector<std::pair<std::string, std::string>> params;
};

// Every rank makes one call as `callOf(rank)` says and records what it got.
std::vector<Record> runCalls(int P, const std::function<Call(int rank)>& callOf) {
  REQUIRE(kRegistered);
  void* shared = mmap(nullptr, sizeof(Record) * size_t(P), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(shared != MAP_FAILED);
  auto* records = static_cast<Record*>(shared);
  for (int r = 0; r < P; ++r) new (records + r) Record();
  const auto exits = test::runRanks(
      P,
      [&](int rank) {
        Record& r = records[rank];
        gcComm_t comm = nullptr;
        r.init = gcCommInitFromEnv(&comm);
        if (r.init != gcSuccess) return 1;
        const Call c = callOf(rank);
        gcAlgoConfig_t cfg = nullptr;
        if (gcAlgoConfigCreate(c.algo, &cfg) != gcSuccess) return 2;
        for (const auto& [k, v] : c.params)
          if (gcAlgoConfigSet(cfg, k.c_str(), v.c_str()) != gcSuccess) return 3;
        const size_t esz = c.dtype == gcFloat64 || c.dtype == gcInt64 ? 8 : 4;
        std::vector<char> buf(c.count * esz, 0);
        for (size_t i = 0; i < c.count && esz == 4; ++i) {
          const float v = float((i * 7 + size_t(rank)) % 64) / 64.0f - 0.5f;
          std::memcpy(buf.data() + i * 4, &v, 4);
        }
        const auto t0 = std::chrono::steady_clock::now();
        r.rc = gcAllreduce(buf.data(), buf.data(), c.count, c.dtype, c.op, cfg, 7, comm);
        r.callS = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::snprintf(r.message, sizeof r.message, "%s", gcLastError());
        r.destroyRc = gcCommDestroy(comm);
        r.exitS = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        gcAlgoConfigDestroy(cfg);
        return 0;
      },
      {{"GRADCOMP_TIMEOUT_S", "20"}, {"UCX_TLS", "sm,self"}}, 60);
  std::vector<Record> out(records, records + P);
  munmap(shared, sizeof(Record) * size_t(P));
  for (int r = 0; r < P; ++r) {
    INFO("rank " << r << ": exit " << exits[size_t(r)].exitCode << " signal "
                 << exits[size_t(r)].signal << ", init " << out[size_t(r)].init);
    REQUIRE(exits[size_t(r)].exitCode == 0);
  }
  return out;
}

// Every rank failed the call with gcRemoteError within `boundS`, its
// communicator torn down at once too, and every message carries the same
// verdict: "rank F (host, pid N) failed: <F's error>" (a rank whose
// transport was waiting appends what it was doing after "; rank r was").
std::string checkAgreed(const std::vector<Record>& rec, double boundS) {
  auto core = [](const std::string& m) {
    const size_t failed = m.find(" failed: ");
    return failed == std::string::npos ? m : m.substr(0, m.find("; rank ", failed));
  };
  const std::string verdict = core(rec[0].message);
  for (size_t i = 0; i < rec.size(); ++i) {
    const Record& r = rec[i];
    INFO("rank " << i << ": rc " << r.rc << " in " << r.callS << " s, exit after " << r.exitS
                 << " s: " << r.message);
    CHECK(r.rc == gcRemoteError);
    CHECK(r.callS < boundS);
    CHECK(r.exitS < boundS);
    CHECK(core(r.message) == verdict);  // the same verdict on every rank
    std::printf("rank %zu: call failed after %.3f s, destroyed after %.3f s: %s\n", i, r.callS,
                r.exitS, r.message);
  }
  CHECK_THAT(verdict, Catch::Contains(" failed: ") && !Catch::Contains("no verdict"));
  return verdict;
}

}  // namespace

TEST_CASE("call errors: a rank that fails by itself fails the call on every rank within 2 s",
          "[call_check][mp]") {
  const auto rec = runCalls(4, [](int) {
    Call c;
    c.algo = "test-fail-rank2";
    c.count = 100000;
    return c;
  });
  const std::string verdict = checkAgreed(rec, 2.0);
  CHECK_THAT(verdict, Catch::StartsWith("RemoteError: rank 2 (") &&
                          Catch::EndsWith("failed: RemoteError: injected: rank 2 rejects its input"));
}

TEST_CASE("call errors: a count that differs across ranks is named on every rank",
          "[call_check][mp]") {
  // The issue's run: oktopk, ranks 2 and 3 with twice the count of 0 and 1.
  const auto rec = runCalls(4, [](int rank) {
    Call c;
    c.algo = "oktopk";
    c.count = rank >= 2 ? 2 * 65536 : 65536;
    return c;
  });
  const std::string verdict = checkAgreed(rec, 5.0);
  // Whichever rank reported first names the other half.
  const bool fromSmall = verdict.find("with count 131072 float sum, rank ") != std::string::npos &&
                         verdict.find("with count 65536") != std::string::npos;
  const bool fromLarge = verdict.find("with count 65536 float sum, rank ") != std::string::npos &&
                         verdict.find("with count 131072") != std::string::npos;
  CHECK_THAT(verdict, Catch::Contains("called allreduce #0 with count"));
  CHECK((fromSmall || fromLarge));
}

TEST_CASE("call errors: a dtype that differs across ranks is named on every rank",
          "[call_check][mp]") {
  const auto rec = runCalls(3, [](int rank) {
    Call c;
    c.dtype = rank == 1 ? gcFloat64 : gcFloat32;
    return c;
  });
  const std::string verdict = checkAgreed(rec, 5.0);
  CHECK_THAT(verdict, Catch::Matches(".*rank [0-2] called allreduce #0 with count 4096 "
                                     "(float sum, rank [0-2] with double|double sum, rank [0-2] "
                                     "with float)$"));
}

TEST_CASE("call errors: an op that differs across ranks is named on every rank",
          "[call_check][mp]") {
  // sum against avg: every schedule completes, only the signatures can tell.
  const auto rec = runCalls(3, [](int rank) {
    Call c;
    c.op = rank == 0 ? gcAvg : gcSum;
    return c;
  });
  const std::string verdict = checkAgreed(rec, 5.0);
  CHECK_THAT(verdict, Catch::Matches(".*rank [0-2] called allreduce #0 with count 4096 float "
                                     "(sum, rank [0-2] with avg|avg, rank [0-2] with sum)$"));
}

TEST_CASE("call errors: algorithm parameters that differ across ranks are named on every rank",
          "[call_check][mp]") {
  const auto rec = runCalls(3, [](int rank) {
    Call c;
    c.algo = "oktopk";
    c.count = 20000;
    if (rank == 2) c.params = {{"DENSITY", "0.02"}};
    return c;
  });
  const std::string verdict = checkAgreed(rec, 5.0);
  CHECK_THAT(verdict, Catch::Matches(".*rank [0-2] called allreduce #0 with count 20000 float sum "
                                     "algorithm oktopk parameters 0x[0-9a-f]+, rank [0-2] with "
                                     "parameters 0x[0-9a-f]+ \\(the algorithm's parameters "
                                     "differ.*"));
}

TEST_CASE("call errors: signatures compare what was asked, field by field", "[call_check]") {
  algo::AllreduceArgs args;
  args.count = 1048576;
  const algo::AlgorithmInfo* oktopk = algo::findAlgorithm("oktopk");
  REQUIRE(oktopk);
  param::Overrides none, denser;
  REQUIRE(denser.set("DENSITY", "0.5", "test").ok());
  const algo::CallSignature mine = algo::callSignature(*oktopk, none, 0, args);
  unsigned char wire[algo::kSignatureBytes];

  algo::encodeSignature(mine, wire);
  CHECK(algo::compareSignature(mine, 2, wire, sizeof wire, 1).ok());

  algo::AllreduceArgs twice = args;
  twice.count *= 2;
  algo::encodeSignature(algo::callSignature(*oktopk, none, 0, twice), wire);
  CHECK(algo::compareSignature(mine, 1, wire, sizeof wire, 2).message() ==
        "rank 2 called allreduce #0 with count 2097152 float sum, rank 1 with count 1048576");

  algo::encodeSignature(algo::callSignature(*oktopk, none, 3, args), wire);
  CHECK(algo::compareSignature(mine, 1, wire, sizeof wire, 2).message() ==
        "rank 2 called allreduce #3 with count 1048576 float sum, rank 1 called allreduce #0");

  // The same parameters hash alike whatever their spelling; others do not.
  param::Overrides spelled;
  REQUIRE(spelled.set("DENSITY", "5e-1", "test").ok());
  CHECK(algo::callSignature(*oktopk, spelled, 0, args).paramsHash ==
        algo::callSignature(*oktopk, denser, 0, args).paramsHash);
  algo::encodeSignature(algo::callSignature(*oktopk, denser, 0, args), wire);
  CHECK_THAT(algo::compareSignature(mine, 1, wire, sizeof wire, 2).message(),
             Catch::StartsWith("rank 2 called allreduce #0 with count 1048576 float sum algorithm "
                               "oktopk parameters 0x"));

  // Another algorithm is named as such.
  const algo::AlgorithmInfo* dense = algo::findAlgorithm("dense");
  algo::encodeSignature(algo::callSignature(*dense, none, 0, args), wire);
  CHECK_THAT(algo::compareSignature(mine, 1, wire, sizeof wire, 2).message(),
             Catch::EndsWith("algorithm dense, rank 1 with algorithm oktopk"));

  wire[0] ^= 1;
  CHECK_THAT(algo::compareSignature(mine, 1, wire, sizeof wire, 2).message(),
             Catch::StartsWith("call signature from rank 2 is malformed"));
  CHECK_THAT(algo::compareSignature(mine, 1, wire, 10, 2).message(),
             Catch::Contains("10 bytes"));
}

namespace {

struct Traffic {
  int failures = 0;
  uint64_t bytesSent = 0, msgsSent = 0;
  double maxError = 0;
};

// Every rank makes `calls` dense calls and then `autoCalls` calls of auto,
// all agreeing; records failures, traffic of the dense calls and the worst
// error against the exact sum.
std::vector<Traffic> agreeingCalls(const char* check, int calls, int autoCalls) {
  constexpr int P = 3;
  void* shared = mmap(nullptr, sizeof(Traffic) * P, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(shared != MAP_FAILED);
  auto* out = static_cast<Traffic*>(shared);
  for (int r = 0; r < P; ++r) new (out + r) Traffic();
  const auto exits = test::runRanks(
      P,
      [&](int rank) {
        Traffic& t = out[rank];
        gcComm_t comm = nullptr;
        if (gcCommInitFromEnv(&comm) != gcSuccess) return 1;
        constexpr size_t n = 4097;
        std::vector<float> buf(n);
        for (int c = 0; c < calls; ++c) {
          for (size_t i = 0; i < n; ++i) buf[i] = float((i + size_t(rank) + size_t(c)) % 16);
          if (gcAllreduce(buf.data(), buf.data(), n, gcFloat32, gcSum, nullptr, 0, comm) != gcSuccess)
            t.failures++;
          for (size_t i = 0; i < n; ++i) {
            float want = 0;
            for (int r = 0; r < P; ++r) want += float((i + size_t(r) + size_t(c)) % 16);
            t.maxError = std::max(t.maxError, double(std::abs(buf[i] - want)));
          }
        }
        gcTraffic_t traffic;
        if (gcCommGetTraffic(comm, &traffic) != gcSuccess) return 2;
        t.bytesSent = traffic.bytesSent, t.msgsSent = traffic.msgsSent;
        gcAlgoConfig_t autoCfg = nullptr;
        if (gcAlgoConfigCreate("auto", &autoCfg) != gcSuccess) return 3;
        std::vector<float> big(20000, 0.25f);
        for (int c = 0; c < autoCalls; ++c)
          if (gcAllreduce(big.data(), big.data(), big.size(), gcFloat32, gcSum, autoCfg, 9, comm) != gcSuccess) {
            std::fprintf(stderr, "rank %d: auto call %d: %s\n", rank, c, gcLastError());
            t.failures++;
          }
        gcAlgoConfigDestroy(autoCfg);
        return gcCommDestroy(comm) == gcSuccess ? 0 : 4;
      },
      {{"GRADCOMP_CALL_CHECK", check}, {"UCX_TLS", "sm,self"}}, 60);
  std::vector<Traffic> result(out, out + P);
  munmap(shared, sizeof(Traffic) * P);
  REQUIRE(test::allSucceeded(exits));
  return result;
}

}  // namespace

TEST_CASE("call errors: agreeing calls pass, auto included, and signatures are not counted",
          "[call_check][mp]") {
  const auto on = agreeingCalls("1", 20, 6);
  const auto off = agreeingCalls("0", 20, 0);
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r);
    CHECK(on[size_t(r)].failures == 0);
    CHECK(on[size_t(r)].maxError == 0);  // small integers: exact
    // The gcCommGetTraffic counters see the schedule's messages only.
    CHECK(on[size_t(r)].msgsSent == off[size_t(r)].msgsSent);
    CHECK(on[size_t(r)].bytesSent == off[size_t(r)].bytesSent);
    CHECK(on[size_t(r)].msgsSent > 0);
  }
}
