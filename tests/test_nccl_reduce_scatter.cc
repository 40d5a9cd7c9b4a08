// ncclReduceScatter through the interposer against the test-double NCCL in
// real rank processes (support/nccl_api.h): eligible calls run compressed
// on the host executor in NCCL's layout and never reach NCCL; everything
// else reaches NCCL with its arguments unchanged; bad configuration and
// mismatched calls give clear errors, not hangs.
#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "support/multiproc.h"
#include "support/nccl_api.h"

namespace {

using Api = gradcomp::test::NcclApi;
using Job = gradcomp::test::NcclJob;

bool has(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

// Rank r's input element i: small integers, so every sum is exact in fp32.
float inputOf(int rank, size_t i) { return float(int((i * 7 + size_t(rank) * 13) % 61) - 30); }

constexpr int kRanks = 3;
constexpr size_t kRecv = 1 << 17;  // 3 x 512 KiB = 1.5 MiB per call: above the 1 MiB default

}  // namespace

TEST_CASE("reduce-scatter: eligible calls are compressed in NCCL's layout", "[mp][nccl]") {
  Job job;
  const std::string stats = job.dir + "/stats";
  auto exits = gradcomp::test::runRanks(kRanks, [&](int rank) {
    Api a = gradcomp::test::loadNcclApi();
    ncclComm_t comm = nullptr;
    CHILD_CHECK(a.initRank(&comm, kRanks, job.id, rank) == ncclSuccess);
    const size_t n = kRecv * kRanks;
    std::vector<float> send(n), recv(kRecv, -1.0f);
    for (size_t i = 0; i < n; ++i) send[i] = inputOf(rank, i);
    const int before = a.count("ncclReduceScatter");
    CHILD_CHECK(a.reduceScatter(send.data(), recv.data(), kRecv, ncclFloat32, ncclSum, comm,
                                nullptr) == ncclSuccess);
    for (size_t i = 0; i < kRecv; i += 97) {
      const size_t g = size_t(rank) * kRecv + i;
      CHILD_CHECK(recv[i] == inputOf(0, g) + inputOf(1, g) + inputOf(2, g));
    }
    CHILD_CHECK(send[5] == inputOf(rank, 5));  // the input is only read
    // In place: recvbuff = sendbuff + rank x recvcount; avg.
    CHILD_CHECK(a.reduceScatter(send.data(), send.data() + size_t(rank) * kRecv, kRecv,
                                ncclFloat32, ncclAvg, comm, nullptr) == ncclSuccess);
    for (size_t i = 0; i < kRecv; i += 101) {
      const size_t g = size_t(rank) * kRecv + i;
      const float want = float(double(inputOf(0, g) + inputOf(1, g) + inputOf(2, g)) / 3.0);
      CHILD_CHECK(send[g] == want);
    }
    CHILD_CHECK(a.count("ncclReduceScatter") == before);  // neither reached NCCL
    ncclResult_t err = ncclInternalError;
    CHILD_CHECK(a.asyncError(comm, &err) == ncclSuccess && err == ncclSuccess);
    CHILD_CHECK(a.destroy(comm) == ncclSuccess);
    const std::string json =
        gradcomp::test::readWholeFile(stats + ".rank" + std::to_string(rank) + ".json");
    CHILD_CHECK(has(json, "\"reduce_scatter\": {\"calls_compressed\": 2, \"calls_passed\": 0"));
    CHILD_CHECK(has(json, "\"logical_bytes\": " + std::to_string(2 * n * 4)));
    CHILD_CHECK(has(json, "\"collective\": \"reducescatter\""));
    return 0;
  }, job.env({{"GRADCOMP_ALGO", "dense"}, {"GRADCOMP_STATS", stats}}));
  REQUIRE(gradcomp::test::allSucceeded(exits));
}

TEST_CASE("reduce-scatter: what gradcomp does not compress reaches NCCL unchanged", "[mp][nccl]") {
  // (environment, why): each case's eligible-looking call must pass through.
  const std::vector<std::pair<std::map<std::string, std::string>, std::string>> cases = {
      {{{"GRADCOMP_ALGO", "dense"}, {"GRADCOMP_RS_ALGO", "off"}}, "GRADCOMP_RS_ALGO=off"},
      {{{"GRADCOMP_ALGO", "wagma"}}, "algorithm has no reduce-scatter form"},
      {{{"GRADCOMP_ALGO", "dense"}, {"GRADCOMP_MIN_BYTES", "4M"}}, "below GRADCOMP_MIN_BYTES"},
  };
  for (const auto& [env, why] : cases) {
    INFO(why);
    Job job;
    const std::string stats = job.dir + "/stats";
    auto vars = env;
    vars["GRADCOMP_STATS"] = stats;
    auto exits = gradcomp::test::runRanks(2, [&](int rank) {
      Api a = gradcomp::test::loadNcclApi();
      ncclComm_t comm = nullptr;
      CHILD_CHECK(a.initRank(&comm, 2, job.id, rank) == ncclSuccess);
      std::vector<float> send(2 * kRecv, float(rank + 1)), recv(kRecv);
      const int before = a.count("ncclReduceScatter");
      CHILD_CHECK(a.reduceScatter(send.data(), recv.data(), kRecv, ncclFloat32, ncclSum, comm,
                                  nullptr) == ncclSuccess);
      CHILD_CHECK(a.count("ncclReduceScatter") == before + 1);
      CHILD_CHECK(recv[0] == 3.0f && recv[kRecv - 1] == 3.0f);
      // Not eligible whatever the configuration: int32, a max, a group.
      std::vector<int32_t> ints(2 * kRecv, 1), intOut(kRecv);
      CHILD_CHECK(a.reduceScatter(ints.data(), intOut.data(), kRecv, ncclInt32, ncclSum, comm,
                                  nullptr) == ncclSuccess);
      CHILD_CHECK(a.reduceScatter(send.data(), recv.data(), kRecv, ncclFloat32, ncclMax, comm,
                                  nullptr) == ncclSuccess);
      CHILD_CHECK(a.groupStart() == ncclSuccess);
      CHILD_CHECK(a.reduceScatter(send.data(), recv.data(), kRecv, ncclFloat32, ncclSum, comm,
                                  nullptr) == ncclSuccess);
      CHILD_CHECK(a.groupEnd() == ncclSuccess);
      CHILD_CHECK(a.count("ncclReduceScatter") == before + 4);
      CHILD_CHECK(a.destroy(comm) == ncclSuccess);
      return 0;
    }, job.env(vars));
    REQUIRE(gradcomp::test::allSucceeded(exits));
  }
}

TEST_CASE("reduce-scatter: an overlap other than NCCL's in-place layout passes through",
          "[mp][nccl]") {
  Job job;
  auto exits = gradcomp::test::runRanks(2, [&](int rank) {
    Api a = gradcomp::test::loadNcclApi();
    ncclComm_t comm = nullptr;
    CHILD_CHECK(a.initRank(&comm, 2, job.id, rank) == ncclSuccess);
    std::vector<float> buf(3 * kRecv, 1.0f);
    const int before = a.count("ncclReduceScatter");
    // recvbuff one element into sendbuff: neither disjoint nor in place.
    CHILD_CHECK(a.reduceScatter(buf.data(), buf.data() + 1, kRecv, ncclFloat32, ncclSum, comm,
                                nullptr) == ncclSuccess);
    CHILD_CHECK(a.count("ncclReduceScatter") == before + 1);
    CHILD_CHECK(a.destroy(comm) == ncclSuccess);
    return 0;
  }, job.env({{"GRADCOMP_ALGO", "dense"}}));
  REQUIRE(gradcomp::test::allSucceeded(exits));
}

TEST_CASE("reduce-scatter: recvcounts that differ across ranks fail with both named, no hang",
          "[mp][nccl]") {
  Job job;
  auto exits = gradcomp::test::runRanks(2, [&](int rank) {
    Api a = gradcomp::test::loadNcclApi();
    ncclComm_t comm = nullptr;
    CHILD_CHECK(a.initRank(&comm, 2, job.id, rank) == ncclSuccess);
    const size_t recv = rank == 0 ? kRecv * 4 : kRecv * 8;  // both compressed (>= 1 MiB)
    std::vector<float> send(2 * recv, 1.0f), out(recv);
    ncclResult_t rc =
        a.reduceScatter(send.data(), out.data(), recv, ncclFloat32, ncclSum, comm, nullptr);
    CHILD_CHECK(rc != ncclSuccess);
    const std::string text = a.lastError(comm);
    CHILD_CHECK(has(text, "compressed reducescatter failed"));
    CHILD_CHECK(has(text, "called reducescatter #0 with count "));
    CHILD_CHECK(a.abort(comm) == ncclSuccess);
    return 0;
  }, job.env({{"GRADCOMP_ALGO", "dense"}, {"GRADCOMP_TIMEOUT_S", "5"}}));
  REQUIRE(gradcomp::test::allSucceeded(exits));
}

TEST_CASE("reduce-scatter: a bad GRADCOMP_RS_ALGO is named; strict fails the init", "[mp][nccl]") {
  for (const char* bad : {"nosuch", "wagma"}) {
    INFO(bad);
    Job job;
    auto exits = gradcomp::test::runRanks(1, [&](int rank) {
      Api a = gradcomp::test::loadNcclApi();
      ncclComm_t comm = nullptr;
      CHILD_CHECK(a.initRank(&comm, 1, job.id, rank) == ncclInvalidUsage);
      return 0;
    }, job.env({{"GRADCOMP_ALGO", "dense"}, {"GRADCOMP_RS_ALGO", bad},
                {"GRADCOMP_STRICT", "1"}}));
    REQUIRE(gradcomp::test::allSucceeded(exits));
  }
}

// Faked hosts with interleaved ranks ({0, 2} and {1, 3}): the interposer's
// reduce-scatter runs the hierarchical schedule (dense portions inside each
// host, the algorithm's reduce-scatter across hosts) and every rank still
// gets NCCL's shard, exact for these integer inputs, out of place and in place.
TEST_CASE("reduce-scatter: faked hosts run the hierarchical schedule with NCCL's shards",
          "[mp][nccl][hierarchy]") {
  Job job;
  const std::string logs = job.dir + "/log.rank";
  static constexpr int kP = 4;
  auto exits = gradcomp::test::runRanks(kP, [&](int rank) {
    setenv("GRADCOMP_HOSTID", rank % 2 ? "hostB" : "hostA", 1);
    const std::string log = logs + std::to_string(rank);
    CHILD_CHECK(freopen(log.c_str(), "w", stderr) != nullptr);
    Api a = gradcomp::test::loadNcclApi();
    ncclComm_t comm = nullptr;
    CHILD_CHECK(a.initRank(&comm, kP, job.id, rank) == ncclSuccess);
    const size_t n = kRecv * kP;
    auto sum = [](size_t g) {
      float s = 0;
      for (int r = 0; r < kP; ++r) s += inputOf(r, g);
      return s;
    };
    std::vector<float> send(n), recv(kRecv, -1.0f);
    for (size_t i = 0; i < n; ++i) send[i] = inputOf(rank, i);
    const int before = a.count("ncclReduceScatter");
    CHILD_CHECK(a.reduceScatter(send.data(), recv.data(), kRecv, ncclFloat32, ncclSum, comm,
                                nullptr) == ncclSuccess);
    for (size_t i = 0; i < kRecv; i += 89) CHILD_CHECK(recv[i] == sum(size_t(rank) * kRecv + i));
    CHILD_CHECK(recv[kRecv - 1] == sum(size_t(rank + 1) * kRecv - 1));
    CHILD_CHECK(a.reduceScatter(send.data(), send.data() + size_t(rank) * kRecv, kRecv,
                                ncclFloat32, ncclAvg, comm, nullptr) == ncclSuccess);
    for (size_t i = 0; i < kRecv; i += 103) {
      const size_t g = size_t(rank) * kRecv + i;
      CHILD_CHECK(send[g] == float(double(sum(g)) / kP));
    }
    CHILD_CHECK(a.count("ncclReduceScatter") == before);  // compressed path, not NCCL's
    CHILD_CHECK(a.destroy(comm) == ncclSuccess);
    fflush(stderr);
    const std::string err = gradcomp::test::readWholeFile(log);
    CHILD_CHECK(has(err, "local rank " + std::to_string(rank / 2) + " of 2, schedule host"));
    return 0;
  }, job.env({{"GRADCOMP_ALGO", "dense"}, {"GRADCOMP_DEBUG", "INFO"},
              {"GRADCOMP_DEBUG_SUBSYS", "INIT"}}));
  INFO("rank 0 stderr: " << gradcomp::test::readWholeFile(logs + "0"));
  REQUIRE(gradcomp::test::allSucceeded(exits));
}
