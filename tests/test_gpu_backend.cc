// [gpu] CudaBackend's frame and element-wise primitives against the CPU
// reference: every dtype (and every convert pair) on random bit patterns
// (NaN, Inf, subnormals included) and hand-picked edge values, bit-identical
// except that any NaN matches any NaN (payloads are not part of the
// contract); the fused accumulate with its statistics; and the v2 contract's
// machinery: memory spaces, scalar results delivered by sync(), deferred
// release of host blocks, traffic counters, data errors reported by sync()
// naming the primitive and the source rank, and the sticky failure that
// keeps later kernels from running.
//
// main: tests/support/gpu_main.cc (exits 4, skipped, without a CUDA device).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "device/backend.h"
#include "device/cpu/float16.h"
#include "device/cuda/cuda_backend.h"
#include "support/backend_buffers.h"

using namespace gradcomp;
using namespace gradcomp::device;
using testing::DevBuf;

namespace {

const DataType kTypes[] = {DataType::Int32,   DataType::Int64,   DataType::Float16,
                           DataType::Float32, DataType::Float64, DataType::BFloat16};

std::unique_ptr<CudaBackend> makeGpu() {
  std::unique_ptr<CudaBackend> gpu;
  const Status s = CudaBackend::create(0, &gpu);
  INFO(s.toString());
  REQUIRE(s.ok());
  return gpu;
}

bool isNaNAt(const std::vector<char>& buf, DataType t, size_t i) {
  switch (t) {
    case DataType::Float16: {
      uint16_t h;
      std::memcpy(&h, buf.data() + 2 * i, 2);
      return std::isnan(halfToFloat(h));
    }
    case DataType::BFloat16: {
      uint16_t h;
      std::memcpy(&h, buf.data() + 2 * i, 2);
      return std::isnan(bf16ToFloat(h));
    }
    case DataType::Float32: {
      float f;
      std::memcpy(&f, buf.data() + 4 * i, 4);
      return std::isnan(f);
    }
    case DataType::Float64: {
      double d;
      std::memcpy(&d, buf.data() + 8 * i, 8);
      return std::isnan(d);
    }
    default: return false;
  }
}

// Number of elements where gpu and cpu differ (NaN == NaN).
size_t mismatches(const std::vector<char>& gpu, const std::vector<char>& cpu, DataType t, size_t n) {
  const size_t esz = dtypeSize(t);
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(gpu.data() + i * esz, cpu.data() + i * esz, esz) == 0) continue;
    if (isNaNAt(gpu, t, i) && isNaNAt(cpu, t, i)) continue;
    if (bad < 5) {
      double g = 0, c = 0;
      (void)cpuBackend().convert(&g, DataType::Float64, gpu.data() + i * esz, t, 1);
      (void)cpuBackend().convert(&c, DataType::Float64, cpu.data() + i * esz, t, 1);
      UNSCOPED_INFO(dtypeName(t) << " element " << i << ": gpu " << g << " cpu " << c);
    }
    ++bad;
  }
  return bad;
}

// n elements of t: a third random bit patterns, a third values of moderate
// magnitude (so sums are not dominated by Inf/NaN), a third edge values.
std::vector<char> makeInput(DataType t, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const size_t esz = dtypeSize(t);
  std::vector<char> out(n * esz);
  const double edges[] = {0.0, -0.0, 1.0, -1.0, 0.5, 2.5, -2.5, 65504, 65520, -65536, 1e-7,
                          5.960464477539063e-08, 2.98e-08, 1e38, 3.5e38, -1e300, 1e-300,
                          INFINITY, -INFINITY, NAN, 2147483647.5, -2147483648.0, 9.3e18, 1.0 / 3};
  std::uniform_real_distribution<double> moderate(-1000, 1000);
  for (size_t i = 0; i < n; ++i) {
    char* p = out.data() + i * esz;
    switch (i % 3) {
      case 0: {
        const uint64_t bits = rng();
        std::memcpy(p, &bits, esz);
        break;
      }
      case 1: {
        const double v = moderate(rng) * std::ldexp(1.0, int(rng() % 20) - 10);
        REQUIRE(cpuBackend().convert(p, t, &v, DataType::Float64, 1).ok());
        break;
      }
      default: {
        const double v = edges[(i / 3) % (sizeof(edges) / sizeof(edges[0]))];
        REQUIRE(cpuBackend().convert(p, t, &v, DataType::Float64, 1).ok());
      }
    }
  }
  return out;
}

std::vector<float> floats(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  return x;
}

constexpr size_t kN = 100003;  // odd: exercises the grid-stride and vector tails

}  // namespace

TEST_CASE("cuda add, divide and scale match the cpu reference", "[gpu]") {
  auto gpu = makeGpu();
  for (DataType t : kTypes) {
    INFO(dtypeName(t));
    const size_t bytes = kN * dtypeSize(t);
    const std::vector<char> a = makeInput(t, kN, 1), b = makeInput(t, kN, 2);
    DevBuf<char> da(*gpu, a), db(*gpu, b), dd(*gpu, bytes);
    REQUIRE(gpu->add(dd.ptr(), da.ptr(), db.ptr(), kN, t).ok());
    REQUIRE(gpu->add(da.ptr(), da.ptr(), db.ptr(), kN, t).ok());  // dst aliases a
    std::vector<char> want(bytes);
    REQUIRE(cpuBackend().add(want.data(), a.data(), b.data(), kN, t).ok());
    CHECK(mismatches(dd.get(), want, t, kN) == 0);
    CHECK(mismatches(da.get(), want, t, kN) == 0);
    for (int divisor : {1, 3, 7, 8}) {
      INFO("divide by " << divisor);
      std::vector<char> x = makeInput(t, kN, 3 + divisor);
      DevBuf<char> dx(*gpu, x);
      REQUIRE(gpu->divide(dx.ptr(), kN, t, divisor).ok());
      REQUIRE(cpuBackend().divide(x.data(), kN, t, divisor).ok());
      CHECK(mismatches(dx.get(), x, t, kN) == 0);
    }
    for (double factor : {-1.0, 0.5, 3.0, 1.0 / 3, 1e300}) {
      INFO("scale by " << factor);
      std::vector<char> x = makeInput(t, kN, 9);
      DevBuf<char> dx(*gpu, x);
      const Status sg = gpu->scale(dx.ptr(), kN, t, factor);
      const Status sc = cpuBackend().scale(x.data(), kN, t, factor);
      REQUIRE(sg.code() == sc.code());
      if (sc.ok()) CHECK(mismatches(dx.get(), x, t, kN) == 0);
    }
  }
  DevBuf<float> one(*gpu, 2);
  CHECK(gpu->divide(one.ptr(), 1, DataType::Float32, 0).code() == Err::InvalidArgument);
  CHECK(gpu->scale(one.ptr(), 1, DataType::Int32, 2.0).code() == Err::InvalidArgument);
}

TEST_CASE("cuda convert matches the cpu reference for every dtype pair", "[gpu]") {
  auto gpu = makeGpu();
  for (DataType src : kTypes)
    for (DataType dst : kTypes) {
      INFO(dtypeName(src) << " -> " << dtypeName(dst));
      const std::vector<char> in = makeInput(src, kN, 4);
      DevBuf<char> din(*gpu, in), dout(*gpu, kN * dtypeSize(dst));
      REQUIRE(gpu->convert(dout.ptr(), dst, din.ptr(), src, kN).ok());
      std::vector<char> want(kN * dtypeSize(dst));
      REQUIRE(cpuBackend().convert(want.data(), dst, in.data(), src, kN).ok());
      CHECK(mismatches(dout.get(), want, dst, kN) == 0);
    }
}

TEST_CASE("cuda subtract and checkFinite", "[gpu]") {
  auto gpu = makeGpu();
  std::vector<float> a = floats(kN, 5), b = floats(kN, 6);
  a[7] = NAN, b[8] = INFINITY, a[9] = -0.0f, b[9] = 0.0f;
  DevBuf<float> da(*gpu, a), db(*gpu, b), dd(*gpu, kN);
  REQUIRE(gpu->subtract(dd.ptr(), da.ptr(), db.ptr(), kN).ok());
  std::vector<float> want(kN);
  REQUIRE(cpuBackend().subtract(want.data(), a.data(), b.data(), kN).ok());
  const std::vector<char> got = [&] {
    std::vector<float> v = dd.get();
    return std::vector<char>(reinterpret_cast<char*>(v.data()), reinterpret_cast<char*>(v.data() + kN));
  }();
  CHECK(mismatches(got, std::vector<char>(reinterpret_cast<char*>(want.data()),
                                          reinterpret_cast<char*>(want.data() + kN)),
                   DataType::Float32, kN) == 0);
  // checkFinite: the first non-finite value, named with its source rank.
  REQUIRE(gpu->checkFinite(da.ptr(), kN, 3).ok());
  const Status sg = gpu->sync();
  const Status sc = cpuBackend().checkFinite(a.data(), kN, 3);
  CHECK(sg.code() == Err::RemoteError);
  CHECK(sg.message() == sc.message());
  CHECK(sg.message().find("from rank 3") != std::string::npos);
  std::vector<float> fine = floats(1000, 7);
  DevBuf<float> df(*gpu, fine);
  REQUIRE(gpu->checkFinite(df.ptr(), fine.size(), 1).ok());
  CHECK(gpu->sync().ok());
}

TEST_CASE("cuda accumulate matches the cpu, values and statistics", "[gpu]") {
  auto gpu = makeGpu();
  for (DataType t : kTypes)
    for (bool add : {false, true})
      for (float threshold : {-1.0f, 0.0f, 2.5f})
        for (size_t offset : {size_t(0), size_t(1)}) {  // 1: unaligned, the scalar path
          INFO(dtypeName(t) << " add " << add << " threshold " << threshold << " offset " << offset);
          const size_t n = kN - offset;
          const std::vector<char> in = makeInput(t, kN, 10);
          std::vector<float> acc(kN);
          std::memcpy(acc.data(), makeInput(DataType::Float32, kN, 11).data(), kN * 4);
          DevBuf<char> din(*gpu, in);
          DevBuf<float> dacc(*gpu, acc);
          AccumulateStats sg, sc;
          sg.maxAbs = -7;
          REQUIRE(gpu->accumulate(dacc.ptr() + offset, din.ptr() + offset * dtypeSize(t), t, n,
                                  add, threshold, &sg).ok());
          CHECK(sg.maxAbs == -7);  // delivered by sync, not before
          REQUIRE(gpu->sync().ok());
          REQUIRE(cpuBackend().accumulate(acc.data() + offset, in.data() + offset * dtypeSize(t),
                                          t, n, add, threshold, &sc).ok());
          std::vector<float> got = dacc.get();
          CHECK(mismatches(std::vector<char>(reinterpret_cast<char*>(got.data()),
                                             reinterpret_cast<char*>(got.data() + kN)),
                           std::vector<char>(reinterpret_cast<char*>(acc.data()),
                                             reinterpret_cast<char*>(acc.data() + kN)),
                           DataType::Float32, kN) == 0);
          CHECK(sg.maxAbs == sc.maxAbs);
          CHECK(sg.nonFinite == sc.nonFinite);
          CHECK(sg.above == sc.above);
        }
  AccumulateStats empty;
  empty.above = 99;
  DevBuf<float> d(*gpu, 4);
  REQUIRE(gpu->accumulate(d.ptr(), d.ptr(), DataType::Float32, 0, true, 1.0f, &empty).ok());
  REQUIRE(gpu->sync().ok());
  CHECK(empty.above == 0);
  CHECK(gpu->accumulate(d.ptr(), d.ptr(), DataType(5), 1, true, 1.0f, &empty).code() ==
        Err::InvalidArgument);
}

TEST_CASE("cuda memory spaces: copies, fills, traffic and deferred host release", "[gpu]") {
  auto gpu = makeGpu();
  CHECK(std::string(gpu->name()) == "cuda");
  CHECK_FALSE(gpu->hostAccessible());
  const size_t n = 4096;
  std::vector<float> x = floats(n, 12);
  HostArray<float> h = testing::hostCopy(*gpu, x);
  DeviceArray<float> d1(*gpu, n), d2(*gpu, n);
  CHECK(uintptr_t(d1.data()) % 64 == 0);
  CHECK(uintptr_t(h.data()) % 64 == 0);
  gpu->resetTraffic();
  REQUIRE(gpu->copy(d1.data(), h.data(), n * 4).ok());   // h2d
  REQUIRE(gpu->copy(d2.data(), d1.data(), n * 4).ok());  // d2d: no traffic
  HostArray<float> back(*gpu, n);
  REQUIRE(gpu->copy(back.data(), d2.data(), n * 4).ok());  // d2h
  REQUIRE(gpu->zero(d1.data(), n * 4).ok());
  HostArray<float> zeros(*gpu, n);
  for (float& v : zeros) v = 1.0f;
  REQUIRE(gpu->zero(zeros.data(), n * 4).ok());  // host memory: a kernel, not a memset
  REQUIRE(gpu->sync().ok());
  CHECK(std::vector<float>(back.begin(), back.end()) == x);
  for (float v : zeros) CHECK(v == 0.0f);
  const Traffic t = gpu->traffic();
  CHECK(t.h2dBytes == n * 4);
  CHECK(t.d2hBytes == 2 * n * 4);
  CHECK(t.syncs == 1);
  CHECK(t.primitives == 5);
  // A primitive reading host memory counts its bytes; scalar results count too.
  gpu->resetTraffic();
  AbsStats st;
  REQUIRE(gpu->absStats(h.data(), n, &st).ok());
  REQUIRE(gpu->sync().ok());
  CHECK(gpu->traffic().h2dBytes == n * 4);
  CHECK(gpu->traffic().d2hBytes == sizeof(AbsStats));
  CHECK(gpu->sync().ok());
  CHECK(gpu->traffic().syncs == 1);  // nothing to wait for: not counted

  // A host block given back is not handed out again before the next sync
  // (kernels enqueued before may still use it).
  void* p = gpu->allocateHost(1000);
  REQUIRE(p != nullptr);
  REQUIRE(gpu->zero(p, 1000).ok());
  gpu->deallocateHost(p, 1000);
  void* q = gpu->allocateHost(1000);
  CHECK(q != p);
  REQUIRE(gpu->sync().ok());
  void* r = gpu->allocateHost(1000);
  CHECK(r == p);
  gpu->deallocateHost(q, 1000);
  gpu->deallocateHost(r, 1000);
  REQUIRE(gpu->sync().ok());
  // Device memory: stream-ordered, reusable across many cycles.
  for (int i = 0; i < 100; ++i) {
    void* dp = gpu->allocate(size_t(1) << 20);
    REQUIRE(dp != nullptr);
    CHECK(uintptr_t(dp) % 64 == 0);
    REQUIRE(gpu->zero(dp, size_t(1) << 20).ok());
    gpu->deallocate(dp, size_t(1) << 20);
  }
  CHECK(gpu->sync().ok());
}

TEST_CASE("cuda data errors: reported by sync, first failing primitive, sticky", "[gpu]") {
  auto gpu = makeGpu();
  const size_t n = 1000;
  std::vector<float> bad = floats(n, 13), a = floats(n, 14);
  bad[600] = NAN;
  bad[700] = INFINITY;
  std::vector<float> ones(n, 1.0f);
  DevBuf<float> dbad(*gpu, bad), da(*gpu, a), out(*gpu, ones);
  size_t counted = 12345;
  float threshold = -3;
  // A primitive that succeeds, one that fails, then later ones that must not run.
  REQUIRE(gpu->kthLargestAbs(da.ptr(), n, 10, &threshold, nullptr).ok());
  REQUIRE(gpu->checkFinite(dbad.ptr(), n, 5).ok());
  REQUIRE(gpu->subtract(out.ptr(), da.ptr(), da.ptr(), n).ok());  // would write zeros
  REQUIRE(gpu->countAbove(da.ptr(), n, 0.0f, &counted).ok());
  const Status s = gpu->sync();
  INFO(s.toString());
  CHECK(s.code() == Err::RemoteError);
  CHECK(s.message() == cpuBackend().checkFinite(bad.data(), n, 5).message());
  CHECK(s.message().find("value 600 ") != std::string::npos);  // the first of two
  float want = 0;
  REQUIRE(cpuBackend().kthLargestAbs(a.data(), n, 10, &want, nullptr).ok());
  CHECK(threshold == want);  // before the failure: delivered
  CHECK(counted == 12345);   // after it: did not run
  for (float v : out.get()) CHECK(v == 1.0f);
  // The failure is reported once; later work runs again.
  DevBuf<float> d1(*gpu, ones);
  REQUIRE(gpu->zero(out.ptr(), n * 4).ok());
  REQUIRE(gpu->checkFinite(dbad.ptr(), n, 2).ok());
  REQUIRE(gpu->copy(out.ptr(), d1.ptr(), n * 4).ok());  // a copy runs regardless (bounded)
  REQUIRE(gpu->scale(out.ptr(), n, DataType::Float32, 3.0).ok());  // a kernel: skipped
  CHECK(gpu->sync().message().find("from rank 2") != std::string::npos);
  for (float v : out.get()) CHECK(v == 1.0f);
  REQUIRE(gpu->scale(out.ptr(), n, DataType::Float32, 3.0).ok());
  REQUIRE(gpu->countAbove(da.ptr(), n, 0.0f, &counted).ok());
  REQUIRE(gpu->sync().ok());
  for (float v : out.get()) CHECK(v == 3.0f);
  size_t wantCount = 0;
  REQUIRE(cpuBackend().countAbove(a.data(), n, 0.0f, &wantCount).ok());
  CHECK(counted == wantCount);
}

TEST_CASE("cuda backend shared by two threads", "[gpu]") {
  auto gpu = makeGpu();
  const size_t n = 50000;
  std::vector<std::vector<float>> results(2);
  std::vector<Status> status(2);
  std::vector<float> x = floats(n, 15);
  {
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t)
      threads.emplace_back([&, t] {
        DeviceArray<float> d(*gpu, n);
        HostArray<float> h = testing::hostCopy(*gpu, x), back(*gpu, n);
        Status s = gpu->copy(d.data(), h.data(), n * 4);
        for (int i = 0; i < 20 && s.ok(); ++i) s = gpu->scale(d.data(), n, DataType::Float32, -1.0);
        if (s.ok()) s = gpu->copy(back.data(), d.data(), n * 4);
        if (s.ok()) s = gpu->sync();
        results[t].assign(back.begin(), back.end());
        status[t] = s;
      });
    for (auto& th : threads) th.join();
  }
  for (int t = 0; t < 2; ++t) {
    INFO(status[t].toString());
    REQUIRE(status[t].ok());
    CHECK(results[t] == x);  // an even number of negations
  }
}

TEST_CASE("cuda backend retires with memory still held", "[gpu]") {
  auto gpu = makeGpu();
  {
    DeviceArray<float> d(*gpu, 1000);
    HostArray<float> h(*gpu, 1000);
    REQUIRE(gpu->zero(d.data(), 4000).ok());
    REQUIRE(gpu->copy(h.data(), d.data(), 4000).ok());
    gpu->retire();  // waits; the arrays go afterwards, as a communicator's state does
    for (float v : h) CHECK(v == 0.0f);
  }
  CHECK(gpu->sync().ok());
}
