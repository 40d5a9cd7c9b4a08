// The tuner plugin (ncclTunerPlugin_v3 .. v6 of libgradcomp.so), loaded as
// NCCL loads it and handed a cost table as NCCL fills it for an allreduce on
// a CollNet-capable job: it must make NCCL pick CollNet for allreduces of at
// least GRADCOMP_MIN_BYTES exactly when gradcomp's CollNet compresses in the
// process (its init ran with a compressing configuration), and change
// nothing otherwise.
#include <catch2/catch.hpp>
#include <cstdarg>
#include <cstring>

#include "plugin/tuner/tuner_abi.h"
#include "support/collnet_api.h"
#include "support/multiproc.h"

namespace {

using namespace gradcomp;

void testLogger(ncclDebugLogLevel level, unsigned long, const char*, int, const char* fmt, ...) {
  if (level > NCCL_LOG_WARN) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

}  // namespace

namespace {

// A cost table as NCCL fills it for an allreduce on a CollNet-capable job:
// ring/tree estimated, CollNetChain SIMPLE available and slower, CollNetDirect
// unavailable, every LL/LL128 CollNet entry ignored.
struct Table {
  static constexpr int kAlgos = 7, kProtos = 3;
  float t[kAlgos][kProtos];
  Table() {
    for (auto& row : t)
      for (float& v : row) v = -1.0f;
    t[0][2] = 90;  // tree
    t[1][0] = 80;  // ring LL
    t[1][2] = 50;  // ring SIMPLE
    t[3][2] = 70;  // CollNetChain SIMPLE
  }
  int argmin() const {
    int best = -1;
    for (int a = 0; a < kAlgos; ++a)
      for (int p = 0; p < kProtos; ++p)
        if (t[a][p] >= 0 && (best < 0 || t[a][p] < t[best / kProtos][best % kProtos])) best = a * kProtos + p;
    return best / kProtos;
  }
  float** raw() { return reinterpret_cast<float**>(t); }
};

// Allreduce steered to CollNetChain (3), or left on the ring (1), for each
// tuner version; *chunk: what v6 makes of a 128 KiB CollNetChain chunk.
int tunerChoices(void* lib, size_t bytes, int coll, std::vector<int>* picks, size_t* chunk) {
  picks->clear();
  auto* v3 = static_cast<const ncclTuner_v3_t*>(dlsym(lib, "ncclTunerPlugin_v3"));
  auto* v4 = static_cast<const ncclTuner_v4_t*>(dlsym(lib, "ncclTunerPlugin_v4"));
  auto* v5 = static_cast<const ncclTuner_v5_t*>(dlsym(lib, "ncclTunerPlugin_v5"));
  auto* v6 = static_cast<const ncclTuner_v6_t*>(dlsym(lib, "ncclTunerPlugin_v6"));
  CHILD_CHECK(v3 && v4 && v5 && v6 && strcmp(v6->name, "gradcomp") == 0);
  void* ctx = nullptr;
  int nch = 0;
  Table a, b, c, d;
  CHILD_CHECK(v3->init(8, 2, testLogger, &ctx) == ncclSuccess);
  CHILD_CHECK(v3->getCollInfo(ctx, ncclFunc_t(coll), bytes, 1, a.raw(), 7, 3, &nch) == ncclSuccess);
  CHILD_CHECK(v3->destroy(ctx) == ncclSuccess);
  CHILD_CHECK(v4->init(8, 2, testLogger, &ctx) == ncclSuccess);
  CHILD_CHECK(v4->getCollInfo(ctx, ncclFunc_t(coll), bytes, 1, b.raw(), 7, 3, 0, &nch) == ncclSuccess);
  CHILD_CHECK(v4->destroy(ctx) == ncclSuccess);
  CHILD_CHECK(v5->init(&ctx, 7, 8, 2, testLogger, nullptr, nullptr) == ncclSuccess);
  CHILD_CHECK(v5->getCollInfo(ctx, ncclFunc_t(coll), bytes, 1, c.raw(), 7, 3, 0, &nch) == ncclSuccess);
  CHILD_CHECK(v5->finalize(ctx) == ncclSuccess);
  CHILD_CHECK(v6->init(&ctx, 7, 8, 2, testLogger, nullptr, nullptr) == ncclSuccess);
  CHILD_CHECK(v6->getCollInfo(ctx, ncclFunc_t(coll), bytes, 1, d.raw(), 7, 3, 0, &nch) == ncclSuccess);
  *chunk = 128 << 10;
  CHILD_CHECK(v6->getChunkSize(ctx, ncclFunc_t(coll), bytes, d.argmin(), 2, 4, chunk) == ncclSuccess);
  size_t ringChunk = 128 << 10;
  CHILD_CHECK(v6->getChunkSize(ctx, ncclFunc_t(coll), bytes, 1, 2, 4, &ringChunk) == ncclSuccess);
  CHILD_CHECK(ringChunk == (128 << 10));  // never touches other algorithms
  CHILD_CHECK(v6->finalize(ctx) == ncclSuccess);
  *picks = {a.argmin(), b.argmin(), c.argmin(), d.argmin()};
  return 0;
}

}  // namespace

TEST_CASE("tuner: allreduces from GRADCOMP_MIN_BYTES on go to CollNet when gradcomp's CollNet "
          "compresses, nothing changes otherwise", "[collnet][tuner]") {
  const std::vector<int> steered{3, 3, 3, 3}, unchanged{1, 1, 1, 1};
  struct Case {
    std::string algo;
    bool initCollNet;  // NCCL initialized gradcomp's CollNet in this process
    bool steers;
  };
  for (const Case& c : {Case{"qsgd", true, true}, Case{"qsgd", false, false},
                        Case{"off", true, false}, Case{"oktopk", true, false}}) {
    INFO("GRADCOMP_ALGO=" << c.algo << (c.initCollNet ? ", CollNet initialized" : ", no CollNet"));
    std::map<std::string, std::string> env = {{"GRADCOMP_ALGO", c.algo}, {"GRADCOMP_NET_IFNAME", "lo"},
                                              {"GRADCOMP_CONFIG", ""}, {"GRADCOMP_MIN_BYTES", "1M"}};
    auto exits = test::runRanks(1, [&](int) {
      void* lib = test::openGradcomp();
      if (c.initCollNet) CHILD_CHECK(test::loadCollNet(lib, 11).init(testLogger) == ncclSuccess);
      std::vector<int> picks;
      size_t chunk = 0;
      CHILD_CHECK(tunerChoices(lib, 4 << 20, ncclFuncAllReduce, &picks, &chunk) == 0);
      CHILD_CHECK(picks == (c.steers ? steered : unchanged));
      CHILD_CHECK(chunk == (c.steers ? size_t(512 << 10) : size_t(128 << 10)));
      // Below GRADCOMP_MIN_BYTES, and other collectives: unchanged.
      CHILD_CHECK(tunerChoices(lib, (1 << 20) - 4, ncclFuncAllReduce, &picks, &chunk) == 0);
      CHILD_CHECK(picks == unchanged && chunk == size_t(128 << 10));
      CHILD_CHECK(tunerChoices(lib, 4 << 20, ncclFuncReduceScatter, &picks, &chunk) == 0);
      CHILD_CHECK(picks == unchanged);
      return 0;
    }, env);
    REQUIRE(test::allSucceeded(exits));
  }
}
