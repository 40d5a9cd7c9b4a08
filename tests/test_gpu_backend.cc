// [gpu] CudaBackend against the CPU reference: every primitive, every dtype
// (and every convert pair), on random bit patterns (NaN, Inf, subnormals
// included) and on hand-picked edge values. Results must be bit-identical,
// except that any NaN matches any NaN (payloads are not part of the contract).
//
// main: tests/support/gpu_main.cc (exits 4, skipped, without a CUDA device).
#include <catch2/catch.hpp>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "device/backend.h"
#include "device/cpu/float16.h"
#include "device/cuda/cuda_backend.h"

using namespace gradcomp;
using namespace gradcomp::device;

namespace {

const DataType kTypes[] = {DataType::Int32,   DataType::Int64,   DataType::Float16,
                           DataType::Float32, DataType::Float64, DataType::BFloat16};

struct DeviceBuffer {
  explicit DeviceBuffer(size_t bytes) { REQUIRE(cudaMalloc(&ptr, bytes ? bytes : 1) == cudaSuccess); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* ptr = nullptr;
};

void upload(void* dst, const std::vector<char>& src) {
  REQUIRE(cudaMemcpy(dst, src.data(), src.size(), cudaMemcpyHostToDevice) == cudaSuccess);
}
std::vector<char> download(const void* src, size_t bytes) {
  std::vector<char> out(bytes);
  REQUIRE(cudaMemcpy(out.data(), src, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
  return out;
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

struct StreamFixture {
  StreamFixture() { REQUIRE(cudaStreamCreate(&stream) == cudaSuccess); }
  ~StreamFixture() { cudaStreamDestroy(stream); }
  cudaStream_t stream = nullptr;
};

constexpr size_t kN = 100003;  // odd: exercises the grid-stride tail

}  // namespace

TEST_CASE("cuda add matches the cpu reference", "[gpu]") {
  StreamFixture fx;
  CudaBackend gpu(fx.stream);
  for (DataType t : kTypes) {
    INFO(dtypeName(t));
    const size_t bytes = kN * dtypeSize(t);
    const std::vector<char> a = makeInput(t, kN, 1), b = makeInput(t, kN, 2);
    DeviceBuffer da(bytes), db(bytes), dd(bytes);
    upload(da.ptr, a);
    upload(db.ptr, b);
    REQUIRE(gpu.add(dd.ptr, da.ptr, db.ptr, kN, t).ok());
    REQUIRE(gpu.add(da.ptr, da.ptr, db.ptr, kN, t).ok());  // dst aliases a
    REQUIRE(gpu.synchronize().ok());
    std::vector<char> want(bytes);
    REQUIRE(cpuBackend().add(want.data(), a.data(), b.data(), kN, t).ok());
    CHECK(mismatches(download(dd.ptr, bytes), want, t, kN) == 0);
    CHECK(mismatches(download(da.ptr, bytes), want, t, kN) == 0);
  }
}

TEST_CASE("cuda divide matches the cpu reference", "[gpu]") {
  StreamFixture fx;
  CudaBackend gpu(fx.stream);
  for (DataType t : kTypes)
    for (int divisor : {1, 3, 7, 8}) {
      INFO(dtypeName(t) << " / " << divisor);
      const size_t bytes = kN * dtypeSize(t);
      std::vector<char> x = makeInput(t, kN, 3);
      DeviceBuffer dx(bytes);
      upload(dx.ptr, x);
      REQUIRE(gpu.divide(dx.ptr, kN, t, divisor).ok());
      REQUIRE(gpu.synchronize().ok());
      REQUIRE(cpuBackend().divide(x.data(), kN, t, divisor).ok());
      CHECK(mismatches(download(dx.ptr, bytes), x, t, kN) == 0);
    }
  DeviceBuffer one(8);
  CHECK_FALSE(gpu.divide(one.ptr, 1, DataType::Float32, 0).ok());
}

TEST_CASE("cuda convert matches the cpu reference for every dtype pair", "[gpu]") {
  StreamFixture fx;
  CudaBackend gpu(fx.stream);
  for (DataType src : kTypes)
    for (DataType dst : kTypes) {
      INFO(dtypeName(src) << " -> " << dtypeName(dst));
      const std::vector<char> in = makeInput(src, kN, 4);
      DeviceBuffer din(in.size()), dout(kN * dtypeSize(dst));
      upload(din.ptr, in);
      REQUIRE(gpu.convert(dout.ptr, dst, din.ptr, src, kN).ok());
      REQUIRE(gpu.synchronize().ok());
      std::vector<char> want(kN * dtypeSize(dst));
      REQUIRE(cpuBackend().convert(want.data(), dst, in.data(), src, kN).ok());
      CHECK(mismatches(download(dout.ptr, want.size()), want, dst, kN) == 0);
    }
}

TEST_CASE("cuda copy, zero-length calls and bad dtypes", "[gpu]") {
  StreamFixture fx;
  CudaBackend gpu(fx.stream);
  CHECK(std::string(gpu.name()) == "cuda");
  const std::vector<char> in = makeInput(DataType::Float32, kN, 5);
  DeviceBuffer a(in.size()), b(in.size());
  upload(a.ptr, in);
  REQUIRE(gpu.copy(b.ptr, a.ptr, in.size()).ok());
  REQUIRE(gpu.synchronize().ok());
  CHECK(download(b.ptr, in.size()) == in);
  CHECK(gpu.add(a.ptr, a.ptr, a.ptr, 0, DataType::Float16).ok());
  CHECK(gpu.convert(b.ptr, DataType::Float16, a.ptr, DataType::Float32, 0).ok());
  CHECK(gpu.add(a.ptr, a.ptr, a.ptr, 1, DataType(5)).code() == Err::InvalidArgument);
  CHECK(gpu.convert(b.ptr, DataType(1), a.ptr, DataType::Float32, 1).code() == Err::InvalidArgument);
}
