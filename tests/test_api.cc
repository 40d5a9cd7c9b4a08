// The public C API (include/gradcomp/gradcomp.h) end to end: argument
// validation with messages, algorithm configs, and allreduce + traffic
// counters between real processes over UCX.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gradcomp/gradcomp.h"
#include "support/multiproc.h"

using namespace gradcomp;

namespace {

bool lastErrorHas(const char* needle) { return std::strstr(gcLastError(), needle) != nullptr; }

}  // namespace

TEST_CASE("api: configs are validated with messages", "[api]") {
  CHECK(std::string(gcAlgorithmNames()).find("dense") != std::string::npos);
  gcAlgoConfig_t cfg = nullptr;
  CHECK(gcAlgoConfigCreate("no-such-algo", &cfg) == gcInvalidArgument);
  CHECK(cfg == nullptr);
  CHECK(lastErrorHas("unknown algorithm 'no-such-algo'"));
  CHECK(lastErrorHas("dense"));  // lists what is known
  CHECK(gcAlgoConfigCreate(nullptr, &cfg) == gcInvalidArgument);
  CHECK(gcAlgoConfigCreate("dense", nullptr) == gcInvalidArgument);

  REQUIRE(gcAlgoConfigCreate("dense", &cfg) == gcSuccess);
  CHECK(gcAlgoConfigSet(cfg, "DENSE_RD_MAX_BYTES", "banana") == gcInvalidConfig);
  CHECK(lastErrorHas("DENSE_RD_MAX_BYTES"));
  CHECK(lastErrorHas("banana"));
  CHECK(gcAlgoConfigSet(cfg, "DENSE_RD_MAX_BYTES", "2G") == gcInvalidConfig);  // range 0..1G
  CHECK(gcAlgoConfigSet(cfg, "NO_SUCH_PARAM", "1") == gcInvalidConfig);
  CHECK(lastErrorHas("NO_SUCH_PARAM"));
  CHECK(lastErrorHas("accepted: DENSE_RD_MAX_BYTES"));
  CHECK(gcAlgoConfigSet(cfg, "DENSE_RD_MAX_BYTES", nullptr) == gcInvalidArgument);
  CHECK(gcAlgoConfigSet(nullptr, "DENSE_RD_MAX_BYTES", "1") == gcInvalidArgument);
  CHECK(gcAlgoConfigSet(cfg, "DENSE_RD_MAX_BYTES", "64K") == gcSuccess);
  gcAlgoConfigDestroy(cfg);
  gcAlgoConfigDestroy(nullptr);  // like free(NULL)
}

TEST_CASE("api: handles and results without a communicator", "[api]") {
  CHECK(gcCommRank(nullptr) == -1);
  CHECK(gcCommSize(nullptr) == -1);
  CHECK(gcCommDestroy(nullptr) == gcSuccess);
  CHECK(gcCommInitFromEnv(nullptr) == gcInvalidArgument);
  float x = 1;
  CHECK(gcAllreduce(&x, &x, 1, gcFloat32, gcSum, nullptr, 0, nullptr) == gcInvalidArgument);
  CHECK(lastErrorHas("comm is NULL"));
  gcTraffic_t t;
  CHECK(gcCommGetTraffic(nullptr, &t) == gcInvalidArgument);
  CHECK(gcCommResetTraffic(nullptr) == gcInvalidArgument);
  CHECK(std::string(gcResultString(gcTimeout)) == "timeout");
  CHECK(std::string(gcResultString(gcResult_t(99))) == "unknown gcResult_t");
}

namespace {

#define RANK_CHECK(cond)                                                                   \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "rank %d: %s:%d: check failed: %s (last error: %s)\n", rank,    \
                   __FILE__, __LINE__, #cond, gcLastError());                              \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)

// Bad arguments on a live communicator: rejected locally (no traffic, no
// call number consumed), so the following valid collective still matches.
int badArguments(int rank, gcComm_t comm) {
  std::vector<float> buf(16, 1.0f);
  RANK_CHECK(gcAllreduce(nullptr, buf.data(), 16, gcFloat32, gcSum, nullptr, 0, comm) ==
             gcInvalidArgument);
  RANK_CHECK(lastErrorHas("sendbuf is NULL with count 16"));
  RANK_CHECK(gcAllreduce(buf.data(), nullptr, 16, gcFloat32, gcSum, nullptr, 0, comm) ==
             gcInvalidArgument);
  RANK_CHECK(lastErrorHas("recvbuf is NULL"));
  RANK_CHECK(gcAllreduce(buf.data(), buf.data(), 16, gcDataType_t(3), gcSum, nullptr, 0, comm) ==
             gcInvalidArgument);
  RANK_CHECK(lastErrorHas("dtype 3 is invalid"));
  RANK_CHECK(gcAllreduce(buf.data(), buf.data(), 16, gcFloat32, gcRedOp_t(1), nullptr, 0, comm) ==
             gcInvalidArgument);
  RANK_CHECK(lastErrorHas("op 1 is invalid"));
  RANK_CHECK(gcAllreduce(buf.data(), buf.data(), SIZE_MAX / 2, gcFloat32, gcSum, nullptr, 0,
                         comm) == gcInvalidArgument);
  RANK_CHECK(lastErrorHas("overflows"));
  RANK_CHECK(gcAllreduce(buf.data(), buf.data() + 1, 8, gcFloat32, gcSum, nullptr, 0, comm) ==
             gcInvalidArgument);
  RANK_CHECK(lastErrorHas("overlap"));
  gcTraffic_t t;
  RANK_CHECK(gcCommGetTraffic(comm, nullptr) == gcInvalidArgument);
  RANK_CHECK(gcCommGetTraffic(comm, &t) == gcSuccess && t.bytesSent == 0 && t.msgsSent == 0);
  return 0;
}

int apiRank(int rank) {
  gcComm_t comm = nullptr;
  RANK_CHECK(gcCommInitFromEnv(&comm) == gcSuccess);
  const int P = gcCommSize(comm);
  RANK_CHECK(gcCommRank(comm) == rank);
  RANK_CHECK(P >= 2);
  RANK_CHECK(gcCommResetTraffic(comm) == gcSuccess);
  if (int rc = badArguments(rank, comm)) return rc;

  // count 0: success, no traffic.
  RANK_CHECK(gcAllreduce(nullptr, nullptr, 0, gcFloat32, gcSum, nullptr, 0, comm) == gcSuccess);
  gcTraffic_t t;
  RANK_CHECK(gcCommGetTraffic(comm, &t) == gcSuccess && t.bytesSent == 0 && t.bytesRecv == 0);

  // Ring forced through the config: each rank sends 2(P-1)/P of the buffer.
  gcAlgoConfig_t ring = nullptr;
  RANK_CHECK(gcAlgoConfigCreate("dense", &ring) == gcSuccess);
  RANK_CHECK(gcAlgoConfigSet(ring, "DENSE_RD_MAX_BYTES", "0") == gcSuccess);
  const size_t n = 3000;  // divisible by 2 and 3: equal chunks
  std::vector<float> in(n), out(n, -1.0f);
  for (size_t i = 0; i < n; ++i) in[i] = float(rank + 1) * float(i % 17);
  RANK_CHECK(gcAllreduce(in.data(), out.data(), n, gcFloat32, gcSum, ring, 0, comm) == gcSuccess);
  const float ranksSum = float(P * (P + 1) / 2);
  for (size_t i = 0; i < n; ++i) RANK_CHECK(out[i] == ranksSum * float(i % 17));
  RANK_CHECK(gcCommGetTraffic(comm, &t) == gcSuccess);
  RANK_CHECK(t.bytesSent == 2 * uint64_t(P - 1) * n * 4 / P);
  RANK_CHECK(t.bytesRecv == t.bytesSent);
  RANK_CHECK(t.msgsSent >= 2 * uint64_t(P - 1));
  RANK_CHECK(gcCommResetTraffic(comm) == gcSuccess);
  RANK_CHECK(gcCommGetTraffic(comm, &t) == gcSuccess && t.bytesSent == 0 && t.msgsRecv == 0);
  gcAlgoConfigDestroy(ring);

  // NULL config = dense with environment defaults; integers in place.
  std::vector<int64_t> v = {int64_t(rank) * 10 + 1, -7, int64_t(1) << 40};
  RANK_CHECK(gcAllreduce(v.data(), v.data(), 3, gcInt64, gcAvg, nullptr, 0, comm) == gcSuccess);
  int64_t sum0 = 0;
  for (int r = 0; r < P; ++r) sum0 += int64_t(r) * 10 + 1;
  RANK_CHECK(v[0] == sum0 / P && v[1] == -7 && v[2] == int64_t(1) << 40);
  int32_t w = rank + 1;
  RANK_CHECK(gcAllreduce(&w, &w, 1, gcInt32, gcSum, nullptr, 0, comm) == gcSuccess);
  RANK_CHECK(w == P * (P + 1) / 2);

  RANK_CHECK(gcCommDestroy(comm) == gcSuccess);
  return 0;
}

}  // namespace

TEST_CASE("api: allreduce, traffic and bad arguments over 2 and 3 processes", "[api][mp]") {
  for (int P : {2, 3}) {
    INFO("P=" << P);
    REQUIRE(test::allSucceeded(test::runRanks(P, apiRank, {}, 120)));
  }
}

TEST_CASE("api: a bad GRADCOMP_* value fails communicator init with its name", "[api][mp]") {
  const auto exits = test::runRanks(
      1,
      [](int rank) {
        gcComm_t comm = nullptr;
        RANK_CHECK(gcCommInitFromEnv(&comm) == gcInvalidConfig);
        RANK_CHECK(comm == nullptr);
        RANK_CHECK(lastErrorHas("GRADCOMP_DENSE_RD_MAX_BYTES"));
        return 0;
      },
      {{"GRADCOMP_DENSE_RD_MAX_BYTES", "lots"}}, 60);
  REQUIRE(test::allSucceeded(exits));
}

TEST_CASE("api: gcGetUniqueId / gcCommInitRank and gcCommPolicyConfig on one rank", "[api]") {
  setenv("GRADCOMP_CONFIG", "", 1);  // not this machine's admin file; GRADCOMP_ALGO unset: off
  gcUniqueId id;
  CHECK(gcGetUniqueId("127.0.0.1", nullptr) == gcInvalidArgument);
  gcComm_t comm = nullptr;
  CHECK(gcCommInitRank(nullptr, 1, &id, 0) == gcInvalidArgument);
  CHECK(gcCommInitRank(&comm, 1, nullptr, 0) == gcInvalidArgument);
  std::memset(&id, 0, sizeof id);
  std::strcpy(id.internal, "127.0.0.1:1");
  CHECK(gcCommInitRank(&comm, 2, &id, 2) == gcInvalidArgument);
  CHECK(lastErrorHas("rank 2 of 2"));
  std::strcpy(id.internal, "no-port");
  CHECK(gcCommInitRank(&comm, 2, &id, 1) == gcInvalidArgument);
  CHECK(lastErrorHas("'no-port' is not host:port"));
  CHECK(comm == nullptr);

  REQUIRE(gcGetUniqueId(nullptr, &id) == gcSuccess);  // 127.0.0.1, a kernel-picked port
  CHECK(std::string(id.internal).rfind("127.0.0.1:", 0) == 0);
  REQUIRE(gcCommInitRank(&comm, 1, &id, 0) == gcSuccess);
  CHECK(gcCommSize(comm) == 1);
  gcAlgoConfig_t cfg = nullptr;
  const char* why = nullptr;
  CHECK(gcCommPolicyConfig(comm, 1 << 20, gcFloat32, gcAvg, nullptr, &why) == gcInvalidArgument);
  REQUIRE(gcCommPolicyConfig(comm, 1 << 20, gcFloat32, gcAvg, &cfg, &why) == gcSuccess);
  CHECK(cfg == nullptr);
  CHECK(std::string(why) == "algorithm off");
  float x[4] = {1, 2, 3, 4};
  CHECK(gcAllreduce(x, x, 4, gcFloat32, gcSum, nullptr, 0, comm) == gcSuccess);
  CHECK(x[3] == 4);
  CHECK(gcCommDestroy(comm) == gcSuccess);
}
