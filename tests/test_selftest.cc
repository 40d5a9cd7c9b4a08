// The self-test before a communicator's first compressed call
// (plugin/nccl/selftest.h), through libgradcomp.so over the test-double NCCL
// in real rank processes: a passing test and then compressed calls; a wrong
// result, an error and a stall injected into rank 2's test
// (GRADCOMP_SELFTEST_INJECT): every rank passes the communicator through to
// NCCL, with NCCL's results, within the test's time limit.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "support/multiproc.h"
#include "support/nccl_api.h"

namespace {

using Api = gradcomp::test::NcclApi;
using Job = gradcomp::test::NcclJob;

constexpr int P = 4;
constexpr size_t kCount = (1 << 18) + 5;

float inputOf(int rank, size_t i) { return float((i * 7 + size_t(rank) * 3) % 97); }

struct Outcome {
  bool compressed = false;  // the calls stayed away from NCCL
  double firstCallS = 0;    // the first call, the self-test included
};

// Every rank: two allreduces of kCount floats (exact small integers, so
// NCCL's and every exact algorithm's results are bit-identical), results
// checked, the stats file's self-test record checked against `record`.
std::vector<int> runJob(const std::string& algo, const std::string& inject, double timeoutS,
                        const std::string& record, double boundS, bool expectCompressed) {
  Job job;
  const std::string stats = job.dir + "/stats";
  std::map<std::string, std::string> env = {{"GRADCOMP_ALGO", algo},
                                            {"GRADCOMP_SELFTEST", "on"},
                                            {"GRADCOMP_SELFTEST_TIMEOUT_S", std::to_string(timeoutS)},
                                            {"GRADCOMP_STATS", stats}};
  if (!inject.empty()) env["GRADCOMP_SELFTEST_INJECT"] = inject;
  const auto exits = gradcomp::test::runRanks(P, [&](int rank) {
    Api a = gradcomp::test::loadNcclApi();
    ncclComm_t comm = nullptr;
    CHILD_CHECK(a.initRank(&comm, P, job.id, rank) == ncclSuccess);
    std::vector<float> send(kCount), recv(kCount, -1.0f);
    for (size_t i = 0; i < kCount; ++i) send[i] = inputOf(rank, i);
    const int before = a.count("ncclAllReduce");
    const auto t0 = std::chrono::steady_clock::now();
    CHILD_CHECK(a.allReduce(send.data(), recv.data(), kCount, ncclFloat32, ncclSum, comm, nullptr) ==
                ncclSuccess);
    const double firstS =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fprintf(stderr, "rank %d: first call (self-test included) %.3f s\n", rank, firstS);
    CHILD_CHECK(firstS < boundS);
    CHILD_CHECK(a.allReduce(send.data(), send.data(), kCount, ncclFloat32, ncclSum, comm, nullptr) ==
                ncclSuccess);
    // NCCL's results (and dense's) are exact; a compressing algorithm's are not.
    const bool exact = !expectCompressed || algo == "dense";
    for (size_t i = 0; exact && i < kCount; ++i) {
      float want = 0;
      for (int r = 0; r < P; ++r) want += inputOf(r, i);
      CHILD_CHECK(recv[i] == want);
      CHILD_CHECK(send[i] == want);
    }
    // auto may choose NCCL's own allreduce for a call (its dense candidate).
    const int reached = a.count("ncclAllReduce") - before;
    if (!(expectCompressed && algo == "auto")) CHILD_CHECK(reached == (expectCompressed ? 0 : 2));
    ncclResult_t err = ncclInternalError;
    CHILD_CHECK(a.asyncError(comm, &err) == ncclSuccess && err == ncclSuccess);
    CHILD_CHECK(a.destroy(comm) == ncclSuccess);
    const std::string json =
        gradcomp::test::readWholeFile(stats + ".rank" + std::to_string(rank) + ".json");
    if (json.find(record) == std::string::npos) {
      fprintf(stderr, "rank %d: stats lack '%s':\n%s\n", rank, record.c_str(), json.c_str());
      return 1;
    }
    return 0;
  }, job.env(env), 120);
  std::vector<int> codes;
  for (const auto& e : exits) codes.push_back(e.exitCode);
  return codes;
}

void requireAllZero(const std::vector<int>& codes) {
  for (size_t r = 0; r < codes.size(); ++r) {
    INFO("rank " << r);
    CHECK(codes[r] == 0);
  }
}

}  // namespace

TEST_CASE("self-test: passes, then the communicator's calls run compressed", "[selftest][mp][nccl]") {
  // dense is exact; oktopk's candidate machinery is exercised by its own tests.
  requireAllZero(runJob("dense", "", 30, "\"selftest\": {\"passed\": true", 30, true));
}

TEST_CASE("self-test: passes for compressing algorithms and auto's candidates",
          "[selftest][mp][nccl]") {
  for (const char* algo : {"qsgd", "oktopk", "auto"}) {
    INFO(algo);
    requireAllZero(runJob(algo, "", 30, "\"selftest\": {\"passed\": true", 30, true));
  }
}

TEST_CASE("self-test: a wrong result on one rank passes the communicator through on every rank",
          "[selftest][mp][nccl]") {
  requireAllZero(runJob("dense", "wrong:2", 30, "\"verdict\": \"rank 2: wrong: dense allreduce", 30,
                        false));
}

TEST_CASE("self-test: an error on one rank passes the communicator through on every rank",
          "[selftest][mp][nccl]") {
  requireAllZero(runJob("qsgd", "error:2", 30, "\"verdict\": \"rank 2: error: qsgd allreduce", 30,
                        false));
}

TEST_CASE("self-test: a stall on one rank ends the test within its limit + 2 s on every rank",
          "[selftest][mp][nccl]") {
  constexpr double kLimitS = 3;
  requireAllZero(runJob("dense", "stall:2", kLimitS, "\"verdict\": \"rank 2: timeout:", kLimitS + 2,
                        false));
}

// GRADCOMP_AG_ALGO's allgather is one of the test's calls: it passes (and
// the allgathers then run compressed, int4 codes within half a step), and
// a wrong result injected on rank 1 names "blockq allgather" and passes the
// communicator's allgathers through to NCCL, bit for bit, on every rank.
TEST_CASE("self-test: GRADCOMP_AG_ALGO's allgather is tested against its reference",
          "[selftest][mp][nccl][allgather]") {
  for (const std::string inject : {"", "wrong:1"}) {
    INFO("inject '" << inject << "'");
    Job job;
    const std::string stats = job.dir + "/stats";
    std::map<std::string, std::string> env = {{"GRADCOMP_AG_ALGO", "blockq"},
                                              {"GRADCOMP_BITS", "4"},
                                              {"GRADCOMP_SELFTEST", "on"},
                                              {"GRADCOMP_STATS", stats}};
    if (!inject.empty()) env["GRADCOMP_SELFTEST_INJECT"] = inject;
    const bool pass = inject.empty();
    const auto exits = gradcomp::test::runRanks(P, [&](int rank) {
      Api a = gradcomp::test::loadNcclApi();
      ncclComm_t comm = nullptr;
      CHILD_CHECK(a.initRank(&comm, P, job.id, rank) == ncclSuccess);
      const size_t m = kCount / P;
      std::vector<float> send(m), out(m * P, -1.0f);
      for (size_t i = 0; i < m; ++i) send[i] = inputOf(rank, i);
      // The first call runs the test (whose agreement is NCCL allgathers of its own).
      CHILD_CHECK(a.allGather(send.data(), out.data(), m, ncclFloat32, comm, nullptr) ==
                  ncclSuccess);
      const int before = a.count("ncclAllGather");
      CHILD_CHECK(a.allGather(send.data(), out.data(), m, ncclFloat32, comm, nullptr) ==
                  ncclSuccess);
      CHILD_CHECK(a.count("ncclAllGather") - before == (pass ? 0 : 1));
      for (int r = 0; r < P; ++r)
        for (size_t i = 0; i < m; i += 3) {
          const float want = inputOf(r, i), got = out[size_t(r) * m + i];
          // Inputs up to 96: an int4 step is 96 / 7.
          CHILD_CHECK(pass ? std::fabs(got - want) <= 96.0f / 7 / 2 * 1.0001f : got == want);
        }
      CHILD_CHECK(a.destroy(comm) == ncclSuccess);
      const std::string json =
          gradcomp::test::readWholeFile(stats + ".rank" + std::to_string(rank) + ".json");
      const std::string record = pass ? "\"selftest\": {\"passed\": true"
                                      : "\"verdict\": \"rank 1: wrong: blockq allgather";
      if (json.find(record) == std::string::npos) {
        fprintf(stderr, "rank %d: stats lack '%s':\n%s\n", rank, record.c_str(), json.c_str());
        return 1;
      }
      return 0;
    }, job.env(env), 120);
    REQUIRE(gradcomp::test::allSucceeded(exits));
  }
}
