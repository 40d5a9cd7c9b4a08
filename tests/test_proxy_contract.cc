// The proxy contract (docs/design.md, "Who may call what, and when"): while a
// caller's stream is parked on a call, the threads running it grow no memory
// and make no FFT plan; everything comes from what the calling thread
// reserved and prepared before. Proven on the cpu-device backend, which
// enforces the rule with the allocator the CUDA backend uses (SlabHeap), and
// through CallBudget, the code the CUDA executor runs each call with.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "algorithms/call_budget.h"
#include "device/cpu/cpu_device_backend.h"
#include "device/slab_heap.h"
#include "support/algo_runner.h"

using namespace gradcomp;
using device::Backend;
using device::SlabHeap;

namespace {

// A heap over plain memory that counts the slabs it asked for.
struct CountingHeap {
  int grown = 0;
  SlabHeap heap{"test heap", source(), 1 << 16};
  SlabHeap::Source source() {
    SlabHeap::Source s;
    s.grow = [this](size_t bytes) {
      ++grown;
      return ::operator new(bytes, std::align_val_t(64));
    };
    s.free = [](void* p, size_t) { ::operator delete(p, std::align_val_t(64)); };
    return s;
  }
};

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// `run` strict on 4 cpu-device backends (as the CUDA executor runs it when
// run.throughBudget): every rank finishes every call.
void requireParkedRunsOk(const testing::AlgoRun& run, const std::string& label) {
  std::vector<std::vector<std::vector<uint8_t>>> out;
  std::vector<Status> st;
  std::vector<std::unique_ptr<Backend>> backends;
  for (int r = 0; r < run.ranks; ++r) backends.push_back(device::makeCpuDeviceBackend());
  testing::runRanks(run, [&](int r) -> Backend& { return *backends[r]; }, &out, &st);
  for (int r = 0; r < run.ranks; ++r) {
    INFO(label << " rank " << r << ": " << st[r].toString());
    CHECK(st[r].ok());
    CHECK(out[r].size() == size_t(run.calls));
  }
}

}  // namespace

TEST_CASE("slab heap: size classes round up by at most a quarter", "[proxy-contract]") {
  for (size_t b : {size_t(1), size_t(256), size_t(257), size_t(1000), size_t(4097),
                   size_t(1) << 20, (size_t(1) << 20) + 1, size_t(3) << 30}) {
    const size_t c = SlabHeap::classBytes(b);
    INFO(b << " -> " << c);
    CHECK(c >= b);
    CHECK(c % 64 == 0);
    CHECK(double(c) <= std::max(256.0, 1.25 * double(b)));
  }
  // Beyond kMaxBytes nothing is served, and nothing loops (the doubling
  // overflowed above 2^63: gcMemAlloc(SIZE_MAX) hung the backend).
  CHECK(SlabHeap::classBytes(SlabHeap::kMaxBytes) == SlabHeap::kMaxBytes);
  SlabHeap heap("test", SlabHeap::Source{[](size_t) -> void* { return nullptr; },
                                         [](void*, size_t) {}},
                1 << 20);
  for (size_t huge : {SIZE_MAX, (size_t(1) << 63) + 1, SlabHeap::kMaxBytes + 1}) {
    CHECK(heap.allocate(huge) == nullptr);
    CHECK_FALSE(heap.reserve(huge));
  }
}

TEST_CASE("slab heap: a parked call draws from what was reserved, and growing is a violation",
          "[proxy-contract]") {
  CountingHeap h;
  REQUIRE(h.heap.reserve(200000));
  const int slabs = h.grown;
  h.heap.park("call #0", /*strict=*/true);
  void* a = h.heap.allocate(100000);
  void* b = h.heap.allocate(90000);
  CHECK(a != nullptr);
  CHECK(b != nullptr);
  CHECK(h.grown == slabs);
  size_t carved = 0;
  CHECK(h.heap.unpark(200000, &carved).empty());
  CHECK(carved >= 190000);

  // Freed blocks serve the next call without carving.
  h.heap.release(a, 100000);
  h.heap.release(b, 90000);
  h.heap.park("call #1", true);
  CHECK(h.heap.allocate(100000) != nullptr);
  CHECK(h.heap.unpark(0, &carved).empty());
  CHECK(carved == 0);

  // Beyond the reservation: strict refuses, lenient grows; both report it.
  h.heap.park("call #2", true);
  CHECK(h.heap.allocate(size_t(8) << 20) == nullptr);
  std::vector<std::string> bad = h.heap.unpark(0, &carved);
  REQUIRE(bad.size() == 1);
  CHECK(contains(bad[0], "parked on call #2"));
  h.heap.park("call #3", false);
  CHECK(h.heap.allocate(size_t(8) << 20) != nullptr);
  CHECK(h.heap.unpark(0, &carved).size() == 1);
  CHECK(h.grown == slabs + 1);
}

TEST_CASE("slab heap: promises of calls in flight add up", "[proxy-contract]") {
  CountingHeap h;
  REQUIRE(h.heap.reserve(300000));  // call 1, not yet run
  REQUIRE(h.heap.reserve(300000));  // call 2 reserved while call 1 waits
  h.heap.park("call 1", true);
  CHECK(h.heap.allocate(290000) != nullptr);
  CHECK(h.heap.unpark(300000, nullptr).empty());
  h.heap.park("call 2", true);
  CHECK(h.heap.allocate(290000) != nullptr);  // still covered
  CHECK(h.heap.unpark(300000, nullptr).empty());
}

TEST_CASE("cpu-device: memory grown or an FFT plan made while parked is named", "[proxy-contract]") {
  std::unique_ptr<Backend> dev = device::makeCpuDeviceBackend();
  REQUIRE(dev->reserve({size_t(1) << 20, size_t(1) << 20}).ok());
  dev->park("qsgd call #7 (1000 x float sum)", /*strict=*/true);
  void* inside = dev->allocate(size_t(512) << 10);
  CHECK(inside != nullptr);
  CHECK(dev->allocate(size_t(64) << 20) == nullptr);  // refused: beyond the reservation
  float* spectrum = static_cast<float*>(dev->allocate(16384));
  const Status planned = dev->fftInverse(spectrum, 1000, 256, static_cast<float*>(inside));
  CHECK(planned.code() == Err::Internal);
  CHECK(contains(planned.message(), "FFT plan"));
  Backend::Reservation drawn;
  const Status s = dev->unpark({size_t(1) << 20, size_t(1) << 20}, &drawn);
  INFO(s.toString());
  CHECK(s.code() == Err::Internal);
  CHECK(contains(s.message(), "proxy contract"));
  CHECK(contains(s.message(), "parked on qsgd call #7"));
  CHECK(contains(s.message(), "device memory"));
  CHECK(contains(s.message(), "FFT plan for 1000 values in chunks of 256"));
  CHECK(drawn.deviceBytes >= (size_t(512) << 10));

  // Prepared before parking, the same transform is fine.
  REQUIRE(dev->prepareFft(2000, 256).ok());
  dev->park("fft call #8", true);
  CHECK(dev->fftInverse(spectrum, 2000, 256, static_cast<float*>(inside)).ok());
  CHECK(dev->unpark({}, nullptr).ok());
  dev->deallocate(spectrum, 16384);
  dev->deallocate(inside, size_t(512) << 10);
  CHECK(dev->sync().ok());
}

TEST_CASE("CallBudget: a call of a new shape reserves the first-call bound, a seen one what "
          "it drew", "[proxy-contract]") {
  const auto b = algo::CallBudget::firstCallBound(1 << 20);
  CHECK(b.deviceBytes >= 4u << 20);
  CHECK(b.hostBytes >= 2u << 20);
}

// Every schedule as the CUDA executor runs it, strict (cpu-device): P 3 and
// 4, first and later calls, a size that grows between calls and comes back,
// three dtypes, fft's plans, hierarchy and auto. A schedule that allocates
// beyond its reservation or plans mid-call fails here with the violation.
TEST_CASE("proxy contract: every algorithm, first and later calls, growing sizes, dtypes",
          "[proxy-contract]") {
  std::vector<std::string> names;
  for (const algo::AlgorithmInfo* info : algo::listAlgorithms()) names.push_back(info->name);
  names.push_back("auto");
  REQUIRE(names.size() >= 11);
  for (const std::string& algo : names)
    for (int P : {3, 4})
      for (DataType t : {DataType::Float32, DataType::Float16, DataType::BFloat16}) {
        if (P == 3 && t != DataType::Float32) continue;  // dtypes at P 4
        testing::AlgoRun run;
        run.algo = algo;
        run.ranks = P;
        run.dtype = t;
        run.counts = {3001, 40000, 3001, 90001, 40000};
        run.calls = 6;
        run.throughBudget = true;
        std::vector<std::vector<std::vector<uint8_t>>> out;
        std::vector<Status> st;
        std::vector<std::unique_ptr<Backend>> backends;
        for (int r = 0; r < P; ++r) backends.push_back(device::makeCpuDeviceBackend());
        testing::runRanks(run, [&](int r) -> Backend& { return *backends[r]; }, &out, &st);
        for (int r = 0; r < P; ++r) {
          INFO(algo << " P=" << P << " " << dtypeName(t) << " rank " << r << ": "
                    << st[r].toString());
          CHECK(st[r].ok());
          CHECK(out[r].size() == size_t(run.calls));
        }
      }
}

// The hierarchical reduce-scatter of every form, as the CUDA executor runs
// it (strict cpu-device, parked): its portion and staging buffers come from
// the reservation, first call and later, in place on odd calls.
TEST_CASE("proxy contract: hierarchical reduce-scatters (2 hosts)", "[proxy-contract][rs]") {
  for (const char* algo : {"dense", "qsgd", "rbf", "oktopk", "cltk", "sign"}) {
    testing::AlgoRun run;
    run.algo = algo;
    run.ranks = 4;
    run.hosts = {{0, 2}, {1, 3}};
    run.coll = algo::Collective::ReduceScatter;
    run.counts = {4 * 1250, 4 * 17501, 4 * 1250};
    run.calls = 4;
    run.throughBudget = true;
    requireParkedRunsOk(run, std::string(algo) + " hierarchical reduce-scatter");
  }
}

TEST_CASE("proxy contract: hierarchical schedules (2 hosts) and fft at other chunk sizes",
          "[proxy-contract]") {
  for (const char* algo : {"dense", "oktopk", "qsgd", "fft", "sign"}) {
    testing::AlgoRun run;
    run.algo = algo;
    run.ranks = 4;
    run.hosts = {{0, 1}, {2, 3}};
    run.counts = {5000, 70001};
    run.calls = 4;
    run.throughBudget = true;
    if (std::string(algo) == "fft") REQUIRE(run.config.set("FFT_CHUNK", "1024", "test").ok());
    requireParkedRunsOk(run, std::string(algo) + " hierarchical");
  }
}
