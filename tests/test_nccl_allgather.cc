// ncclAllGather through the interposer against the test-double NCCL in real
// rank processes (support/nccl_api.h): with GRADCOMP_AG_ALGO eligible calls
// run compressed on the host executor (in place and out of place) and never
// reach NCCL; by default, and for what is not eligible, NCCL gets the call
// unchanged; sendcounts that differ across ranks fail on every rank.
#include <catch2/catch.hpp>
#include <cmath>
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

float inputOf(int rank, size_t i) { return float(rank + 1) * std::sin(float(i) * 0.01f); }

constexpr size_t kSend = 1 << 17;  // x 2 or 3 ranks x 4 bytes: above the 1 MiB default

}  // namespace

TEST_CASE("allgather: GRADCOMP_AG_ALGO=blockq compresses, in place and out of place",
          "[mp][nccl][allgather]") {
  Job job;
  const std::string stats = job.dir + "/stats";
  auto exits = gradcomp::test::runRanks(3, [&](int rank) {
    Api a = gradcomp::test::loadNcclApi();
    ncclComm_t comm = nullptr;
    CHILD_CHECK(a.initRank(&comm, 3, job.id, rank) == ncclSuccess);
    std::vector<float> send(kSend), out(3 * kSend, -1.0f);
    for (size_t i = 0; i < kSend; ++i) send[i] = inputOf(rank, i);
    const int before = a.count("ncclAllGather");
    CHILD_CHECK(a.allGather(send.data(), out.data(), kSend, ncclFloat32, comm, nullptr) ==
                ncclSuccess);
    // int8 codes, a scale per 2048: within half a step of each value.
    for (int r = 0; r < 3; ++r)
      for (size_t i = 0; i < kSend; i += 7)
        CHILD_CHECK(std::fabs(out[size_t(r) * kSend + i] - inputOf(r, i)) <=
                    float(r + 1) / 127.0f * 0.5001f);
    std::vector<float> inPlace(3 * kSend, 0.0f);
    for (size_t i = 0; i < kSend; ++i) inPlace[size_t(rank) * kSend + i] = inputOf(rank, i);
    CHILD_CHECK(a.allGather(inPlace.data() + size_t(rank) * kSend, inPlace.data(), kSend,
                            ncclFloat32, comm, nullptr) == ncclSuccess);
    CHILD_CHECK(inPlace == out);  // the owner's shard went through the codec too
    CHILD_CHECK(a.count("ncclAllGather") == before);  // neither reached NCCL
    CHILD_CHECK(a.destroy(comm) == ncclSuccess);
    const std::string json =
        gradcomp::test::readWholeFile(stats + ".rank" + std::to_string(rank) + ".json");
    CHILD_CHECK(has(json, "\"collective\": \"allgather\""));
    return 0;
  }, job.env({{"GRADCOMP_AG_ALGO", "blockq"}, {"GRADCOMP_STATS", stats}}));
  REQUIRE(gradcomp::test::allSucceeded(exits));
}

// Faked hosts (GRADCOMP_HOSTID, consecutive: {0, 1}, {2, 3}): the allgather
// runs hierarchically (hierarchy/hierarchical.h), every rank holding the
// same bytes, each shard within half a quantization step of its values.
TEST_CASE("allgather: faked hosts run the hierarchical form, every rank the same bytes",
          "[mp][nccl][allgather][hierarchy]") {
  Job job;
  const std::string outs = job.dir + "/out.rank", stats = job.dir + "/stats";
  auto exits = gradcomp::test::runRanks(4, [&](int rank) {
    setenv("GRADCOMP_HOSTID", rank < 2 ? "hostA" : "hostB", 1);
    Api a = gradcomp::test::loadNcclApi();
    ncclComm_t comm = nullptr;
    CHILD_CHECK(a.initRank(&comm, 4, job.id, rank) == ncclSuccess);
    std::vector<float> send(kSend), out(4 * kSend, -1.0f);
    for (size_t i = 0; i < kSend; ++i) send[i] = inputOf(rank, i);
    const int before = a.count("ncclAllGather");
    CHILD_CHECK(a.allGather(send.data(), out.data(), kSend, ncclFloat32, comm, nullptr) ==
                ncclSuccess);
    CHILD_CHECK(a.count("ncclAllGather") == before);
    for (int r = 0; r < 4; ++r)
      for (size_t i = 0; i < kSend; i += 5)
        CHILD_CHECK(std::fabs(out[size_t(r) * kSend + i] - inputOf(r, i)) <=
                    float(r + 1) / 127.0f * 0.5001f);
    FILE* f = fopen((outs + std::to_string(rank)).c_str(), "wb");
    CHILD_CHECK(f && fwrite(out.data(), 4, out.size(), f) == out.size() && fclose(f) == 0);
    CHILD_CHECK(a.destroy(comm) == ncclSuccess);
    // Sent: one int8 payload (4 x 64 scale bytes + kSend codes) to the other
    // host, the rail's 2 decoded shards to the host peer (flat: 3 payloads).
    const std::string json =
        gradcomp::test::readWholeFile(stats + ".rank" + std::to_string(rank) + ".json");
    const std::string wire = std::to_string(4 * 64 + kSend + 2 * kSend * 4);
    CHILD_CHECK(has(json, "\"logical_bytes\": " + std::to_string(4 * 4 * kSend) +
                              ", \"wire_bytes\": " + wire));
    return 0;
  }, job.env({{"GRADCOMP_AG_ALGO", "blockq"}, {"GRADCOMP_STATS", stats}}));
  REQUIRE(gradcomp::test::allSucceeded(exits));
  const std::string first = gradcomp::test::readWholeFile(outs + "0");
  CHECK(first.size() == 4 * 4 * kSend);
  for (int r = 1; r < 4; ++r) CHECK(gradcomp::test::readWholeFile(outs + std::to_string(r)) == first);
}

TEST_CASE("allgather: by default and when not eligible NCCL gets the call unchanged",
          "[mp][nccl][allgather]") {
  const std::vector<std::map<std::string, std::string>> cases = {
      {{"GRADCOMP_ALGO", "dense"}},  // GRADCOMP_AG_ALGO defaults to off
      {{"GRADCOMP_AG_ALGO", "blockq"}, {"GRADCOMP_COMMS", "size:3"}},
      {{"GRADCOMP_AG_ALGO", "blockq"}, {"GRADCOMP_MIN_BYTES", "4M"}},
  };
  for (const auto& env : cases) {
    Job job;
    auto exits = gradcomp::test::runRanks(2, [&](int rank) {
      Api a = gradcomp::test::loadNcclApi();
      ncclComm_t comm = nullptr;
      CHILD_CHECK(a.initRank(&comm, 2, job.id, rank) == ncclSuccess);
      std::vector<float> send(kSend, 0.1f * float(rank + 1)), out(2 * kSend);
      const int before = a.count("ncclAllGather");
      CHILD_CHECK(a.allGather(send.data(), out.data(), kSend, ncclFloat32, comm, nullptr) ==
                  ncclSuccess);
      CHILD_CHECK(out[0] == 0.1f && out[kSend] == 0.2f);  // bit for bit
      CHILD_CHECK(a.count("ncclAllGather") == before + 1);
      CHILD_CHECK(a.destroy(comm) == ncclSuccess);
      return 0;
    }, job.env(env));
    REQUIRE(gradcomp::test::allSucceeded(exits));
  }
  // Eligible configuration, ineligible calls: int32, a group, an overlap that
  // is not NCCL's in-place layout.
  Job job;
  auto exits = gradcomp::test::runRanks(2, [&](int rank) {
    Api a = gradcomp::test::loadNcclApi();
    ncclComm_t comm = nullptr;
    CHILD_CHECK(a.initRank(&comm, 2, job.id, rank) == ncclSuccess);
    const int before = a.count("ncclAllGather");
    std::vector<int32_t> ints(kSend, rank + 7), intOut(2 * kSend);
    CHILD_CHECK(a.allGather(ints.data(), intOut.data(), kSend, ncclInt32, comm, nullptr) ==
                ncclSuccess);
    CHILD_CHECK(intOut[0] == 7 && intOut[kSend] == 8);
    std::vector<float> send(kSend, 1.0f), out(2 * kSend);
    CHILD_CHECK(a.groupStart() == ncclSuccess);
    CHILD_CHECK(a.allGather(send.data(), out.data(), kSend, ncclFloat32, comm, nullptr) ==
                ncclSuccess);
    CHILD_CHECK(a.groupEnd() == ncclSuccess);
    std::vector<float> buf(2 * kSend + 4, 1.0f);
    CHILD_CHECK(a.allGather(buf.data() + 1, buf.data(), kSend, ncclFloat32, comm, nullptr) ==
                ncclSuccess);
    CHILD_CHECK(a.count("ncclAllGather") == before + 3);
    CHILD_CHECK(a.destroy(comm) == ncclSuccess);
    return 0;
  }, job.env({{"GRADCOMP_AG_ALGO", "blockq"}}));
  REQUIRE(gradcomp::test::allSucceeded(exits));
}

TEST_CASE("allgather: sendcounts that differ across ranks fail with both named, no hang",
          "[mp][nccl][allgather]") {
  Job job;
  auto exits = gradcomp::test::runRanks(2, [&](int rank) {
    Api a = gradcomp::test::loadNcclApi();
    ncclComm_t comm = nullptr;
    CHILD_CHECK(a.initRank(&comm, 2, job.id, rank) == ncclSuccess);
    const size_t n = rank == 0 ? kSend * 2 : kSend * 4;  // both compressed (>= 1 MiB)
    std::vector<float> send(n, 1.0f), out(2 * n);
    CHILD_CHECK(a.allGather(send.data(), out.data(), n, ncclFloat32, comm, nullptr) !=
                ncclSuccess);
    const std::string text = a.lastError(comm);
    CHILD_CHECK(has(text, "compressed allgather failed"));
    CHILD_CHECK(has(text, "called allgather #0 with count "));
    CHILD_CHECK(a.abort(comm) == ncclSuccess);
    return 0;
  }, job.env({{"GRADCOMP_AG_ALGO", "cast"}, {"GRADCOMP_TIMEOUT_S", "5"}}));
  REQUIRE(gradcomp::test::allSucceeded(exits));
}
