// Error-feedback residual store: accumulation, retirement on size change and
// disuse, the memory cap (LRU), bf16 residuals, and GRADCOMP_EF=off.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "algorithms/error_feedback.h"
#include "device/arrays.h"
#include "gradcomp/gradcomp.h"
#include "support/multiproc.h"

using namespace gradcomp;
using namespace gradcomp::algo;

namespace {

std::unique_ptr<ErrorFeedbackStore> makeStore(std::map<std::string, std::string> values) {
  param::Overrides o;
  for (const auto& [k, v] : values) REQUIRE(o.set(k, v, "test").ok());
  std::unique_ptr<ErrorFeedbackStore> s;
  REQUIRE(ErrorFeedbackStore::create(o, &s).ok());
  return s;
}

// One call's use of the store on the CPU reference backend: acc = residual
// (+)= g, then the caller leaves acc - contribution in it.
std::vector<float> callWith(ErrorFeedbackStore& ef, uint64_t key, uint64_t seq,
                            const std::vector<float>& g, const std::vector<float>& contribution) {
  device::Backend& cpu = device::cpuBackend();
  device::DeviceArray<float> scratch(cpu);
  float* acc = nullptr;
  bool fresh = false;
  REQUIRE(ef.begin(cpu, key, g.size(), seq, &scratch, &acc, &fresh).ok());
  device::AccumulateStats st;
  REQUIRE(cpu.accumulate(acc, g.data(), DataType::Float32, g.size(), !fresh, -1.0f, &st).ok());
  std::vector<float> seen(acc, acc + g.size());
  for (size_t i = 0; i < contribution.size(); ++i) acc[i] -= contribution[i];
  REQUIRE(ef.end(cpu, key, acc).ok());
  return seen;
}

}  // namespace

TEST_CASE("residual = acc - contribution is added to the next call", "[ef]") {
  auto ef = makeStore({});
  CHECK(callWith(*ef, 7, 0, {1, 2, 3}, {1, 0, 2.5f}) == std::vector<float>({1, 2, 3}));
  CHECK(ef->residualNorm(7) == Approx(std::sqrt(4.0 + 0.25)));
  CHECK(callWith(*ef, 7, 1, {10, 10, 10}, {}) == std::vector<float>({10, 12, 10.5f}));
  CHECK(ef->bytesUsed() == 12);
  CHECK(ef->keyCount() == 1);
  // end() without a begin() of that key is an internal error
  float x = 0;
  CHECK(ef->end(device::cpuBackend(), 8, &x).code() == Err::Internal);
  // clear() zeroes a residual
  REQUIRE(ef->clear(device::cpuBackend(), 7).ok());
  CHECK(ef->residualNorm(7) == 0.0);
}

TEST_CASE("a key that changes size restarts at zero, and unused keys retire", "[ef]") {
  auto ef = makeStore({{"EF_RETIRE_CALLS", "5"}});
  callWith(*ef, 1, 0, std::vector<float>(4, 1.0f), {});
  CHECK(callWith(*ef, 1, 1, std::vector<float>(6, 0.0f), {}) == std::vector<float>(6, 0.0f));
  CHECK(ef->bytesUsed() == 24);
  callWith(*ef, 2, 3, std::vector<float>(4, 1.0f), {});
  ef->retireStale(6);  // key 1 last used at 1: 5 calls ago is not more than 5
  CHECK(ef->keyCount() == 2);
  ef->retireStale(7);
  CHECK(ef->keyCount() == 1);
  CHECK(ef->residualNorm(1) == 0.0);
  CHECK(ef->bytesUsed() == 16);
}

TEST_CASE("the memory cap retires least-recently-used residuals", "[ef]") {
  auto ef = makeStore({{"EF_MAX_MB", "1"}});
  const size_t quarter = (1u << 20) / 4 / sizeof(float);  // 256 KiB each
  const std::vector<float> ones(quarter, 1.0f);
  for (uint64_t key = 1; key <= 4; ++key) callWith(*ef, key, key, ones, {});
  CHECK(ef->keyCount() == 4);
  callWith(*ef, 1, 5, ones, {});  // touch key 1
  callWith(*ef, 5, 6, ones, {});  // evicts key 2 (LRU)
  CHECK(ef->keyCount() == 4);
  CHECK(ef->bytesUsed() <= (1u << 20));
  CHECK(ef->residualNorm(1) > 0);   // key 1 survived
  CHECK(ef->residualNorm(2) == 0);  // key 2 is gone
  device::DeviceArray<float> scratch(device::cpuBackend());
  float* acc = nullptr;
  bool fresh = false;
  const Status s = ef->begin(device::cpuBackend(), 9, (1u << 20) / sizeof(float) + 1, 7, &scratch,
                             &acc, &fresh);
  CHECK(s.code() == Err::InvalidConfig);
  CHECK(s.message().find("GRADCOMP_EF_MAX_MB") != std::string::npos);
}

TEST_CASE("bf16 residuals halve memory and round once; EF=off disables the store", "[ef]") {
  auto ef = makeStore({{"EF_DTYPE", "bfloat16"}});
  callWith(*ef, 3, 0, {1.0f + 1.0f / 1024, -3.0f}, {});
  CHECK(ef->bytesUsed() == 4);
  // 1 + 2^-10 was stored rounded to 1 in bf16 (7 mantissa bits)
  CHECK(callWith(*ef, 3, 1, {0, 0}, {}) == std::vector<float>({1.0f, -3.0f}));
  auto off = makeStore({{"EF", "off"}});
  CHECK_FALSE(off->enabled());
}

TEST_CASE("forCall: the call's EF override wins over the store's creation value", "[ef]") {
  std::unique_ptr<ErrorFeedbackStore> store;
  REQUIRE(ErrorFeedbackStore::createForCommunicator(&store).ok());
  CHECK(store->enabled());
  ErrorFeedbackStore* used = nullptr;
  param::Overrides off, on;
  REQUIRE(off.set("EF", "off", "test").ok());
  REQUIRE(on.set("EF", "on", "test").ok());
  REQUIRE(ErrorFeedbackStore::forCall(store.get(), off, &used).ok());
  CHECK(used == nullptr);
  REQUIRE(ErrorFeedbackStore::forCall(store.get(), on, &used).ok());
  CHECK(used == store.get());
}

namespace {

// One rank of a 2-rank job through the public C API (the path of gradcomp-bench
// and gradcomp-train): topka with k = 1 on the same input twice. With error
// feedback the second call adds the first call's residual and selects index 8
// (9 + 9 > 10); with EF=off set on the config it selects index 9 again.
int efThroughApi(int rank, const char* ef) {
  gcComm_t comm = nullptr;
  if (gcCommInitFromEnv(&comm) != gcSuccess) return 10;
  gcAlgoConfig_t cfg = nullptr;
  int rc = 0;
  if (gcAlgoConfigCreate("topka", &cfg) != gcSuccess ||
      gcAlgoConfigSet(cfg, "DENSITY", "0.1") != gcSuccess ||
      (ef && gcAlgoConfigSet(cfg, "EF", ef) != gcSuccess)) {
    fprintf(stderr, "rank %d: config: %s\n", rank, gcLastError());
    rc = 11;
  }
  std::vector<float> in(10), out(10);
  for (size_t i = 0; i < in.size(); ++i) in[i] = float(i + 1);
  for (int call = 0; call < 2 && rc == 0; ++call)
    if (gcAllreduce(in.data(), out.data(), in.size(), gcFloat32, gcSum, cfg, 5, comm) != gcSuccess)
      rc = 12;
  const bool efOn = !ef || std::string(ef) == "on";
  if (rc == 0 && efOn && !(out[8] == 36.0f && out[9] == 0.0f)) rc = 13;
  if (rc == 0 && !efOn && !(out[9] == 20.0f && out[8] == 0.0f)) rc = 14;
  if (rc > 12) fprintf(stderr, "rank %d EF=%s: out[8]=%g out[9]=%g\n", rank, ef ? ef : "default",
                       out[8], out[9]);
  gcAlgoConfigDestroy(cfg);
  if (gcCommDestroy(comm) != gcSuccess && rc == 0) rc = 15;
  return rc;
}

}  // namespace

TEST_CASE("EF=off set on an algorithm config reaches the communicator's store", "[ef][mp]") {
  for (const char* ef : {(const char*)nullptr, "off", "on"}) {
    INFO("EF=" << (ef ? ef : "default"));
    const auto exits = test::runRanks(2, [&](int rank) { return efThroughApi(rank, ef); }, {}, 60);
    REQUIRE(test::allSucceeded(exits));
  }
}
