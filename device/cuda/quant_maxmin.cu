// Max-min bucketed quantization with counter-based stochastic rounding, and
// the |x| statistics that fix a call's parameters. Bit-identical to
// device/cpu/quant_maxmin.cc: the same fp64 operations, each rounded once
// (_rn intrinsics, no FMA contraction), the same splitmix64 counter hash, and
// bucket min/max ties resolved to the earliest element as the CPU's
// sequential scan does (it matters for -0.0 against +0.0).
// absStats' fp64 sum is a fixed-shape tree (deterministic run to run); it
// differs from the CPU's index-order sum by fp64 rounding only.
#include "device/cuda/backend_internal.h"
#include "device/cuda/cuda_backend.h"
#include "device/cuda/kernel_common.cuh"

namespace gradcomp::device {
namespace {

using namespace cuda;

constexpr unsigned kStatBlocks = 1024;

struct Stats {
  double sum, max;
  unsigned long long nonFinite;
};
struct StatsSum {
  __device__ Stats operator()(const Stats& a, const Stats& b) const {
    return {__dadd_rn(a.sum, b.sum), a.max > b.max ? a.max : b.max, a.nonFinite + b.nonFinite};
  }
};

__global__ void statsPartial(const float* src, size_t n, Stats* partial) {
  using Reduce = cub::BlockReduce<Stats, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  Stats s{0, 0, 0};
  GC_GRID_STRIDE(i, n) {
    const double a = fabs(double(src[i]));
    if (!isfinite(a)) {
      ++s.nonFinite;
      continue;
    }
    s.sum = __dadd_rn(s.sum, a);
    if (a > s.max) s.max = a;
  }
  s = Reduce(tmp).Reduce(s, StatsSum());
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void statsFinal(const Stats* partial, unsigned count, Stats* out) {
  using Reduce = cub::BlockReduce<Stats, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  Stats s{0, 0, 0};
  for (unsigned i = threadIdx.x; i < count; i += blockDim.x) s = StatsSum()(s, partial[i]);
  s = Reduce(tmp).Reduce(s, StatsSum());
  if (threadIdx.x == 0) *out = s;
}

// (value, index) with the CPU's tie rule: the earlier element wins.
struct Extreme {
  float v;
  uint32_t at;  // UINT32_MAX: none (no finite value seen)
};
struct MinFirst {
  __device__ Extreme operator()(const Extreme& a, const Extreme& b) const {
    if (a.at == 0xFFFFFFFFu) return b;
    if (b.at == 0xFFFFFFFFu) return a;
    return (b.v < a.v || (b.v == a.v && b.at < a.at)) ? b : a;
  }
};
struct MaxFirst {
  __device__ Extreme operator()(const Extreme& a, const Extreme& b) const {
    if (a.at == 0xFFFFFFFFu) return b;
    if (b.at == 0xFFFFFFFFu) return a;
    return (b.v > a.v || (b.v == a.v && b.at < a.at)) ? b : a;
  }
};

// One CUDA block per bucket (grid-stride over buckets).
__global__ void bucketMinMax(const float* src, size_t n, size_t bucket, size_t buckets,
                             float* meta) {
  using Reduce = cub::BlockReduce<Extreme, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  for (size_t b = blockIdx.x; b < buckets; b += gridDim.x) {
    const size_t begin = b * bucket, end = begin + bucket < n ? begin + bucket : n;
    Extreme lo{0, 0xFFFFFFFFu}, hi{0, 0xFFFFFFFFu};
    for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const float x = src[i];
      if (!isfinite(x)) continue;
      const Extreme e{x, uint32_t(i - begin)};
      lo = MinFirst()(lo, e);
      hi = MaxFirst()(hi, e);
    }
    lo = Reduce(tmp).Reduce(lo, MinFirst());
    __syncthreads();
    hi = Reduce(tmp).Reduce(hi, MaxFirst());
    if (threadIdx.x == 0) {
      meta[2 * b] = lo.at == 0xFFFFFFFFu ? 0.0f : lo.v;
      meta[2 * b + 1] = hi.at == 0xFFFFFFFFu ? 0.0f : hi.v;
    }
    __syncthreads();
  }
}

__device__ inline double stepOf(float lo, float hi, uint32_t levels) {
  return __ddiv_rn(__dsub_rn(double(hi), double(lo)), double(levels));
}

struct MaxMinCode {
  const float* src;
  const float* meta;
  size_t bucket;
  uint32_t levels;
  uint64_t seed, indexBase;
  __device__ uint32_t operator()(size_t i) const {
    const float x = src[i];
    if (x == INFINITY) return levels;
    const size_t b = i / bucket;
    const float lo = meta[2 * b], hi = meta[2 * b + 1];
    const double step = stepOf(lo, hi, levels);
    if (!isfinite(x) || !(step > 0)) return 0;
    const double q = __ddiv_rn(__dsub_rn(double(x), double(lo)), step);
    const double fl = floor(q);
    double c = __dadd_rn(fl, cuda::counterUniform(seed, indexBase + i) < __dsub_rn(q, fl) ? 1.0 : 0.0);
    c = fmin(fmax(c, 0.0), double(levels));
    return uint32_t(c);
  }
};

__global__ void quantizeKernel(MaxMinCode code, size_t n, int bits, uint8_t* out, size_t bytes) {
  GC_GRID_STRIDE(byte, bytes) out[byte] = packByte(byte, n, bits, code);
}

// First bucket whose meta is not finite with min <= max; thread 0 also checks
// the stream's padding bits (reported as bucket ~0 - 1).
__global__ void checkMeta(const float* meta, size_t buckets, const uint8_t* codes, size_t n,
                          int bits, uint64_t* firstBadBucket, uint64_t* badPadding) {
  GC_GRID_STRIDE(b, buckets) {
    const float lo = meta[2 * b], hi = meta[2 * b + 1];
    if (!(isfinite(lo) && isfinite(hi) && lo <= hi)) reportFirst(firstBadBucket, b);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0 && !paddingClear(codes, n, bits)) *badPadding = 1;
}

// Decodes elements [0, limit): the buckets before the first invalid one, as
// the CPU writes them before it fails.
__global__ void dequantizeKernel(const float* meta, const uint8_t* codes, size_t limit,
                                 size_t bucket, int bits, uint32_t levels, float* dst,
                                 bool accumulate) {
  GC_GRID_STRIDE(i, limit) {
    const size_t b = i / bucket;
    const float lo = meta[2 * b], hi = meta[2 * b + 1];
    const double step = stepOf(lo, hi, levels);
    const float v = __double2float_rn(
        __dadd_rn(double(lo), __dmul_rn(double(getBits(codes, i, bits)), step)));
    dst[i] = accumulate ? __fadd_rn(dst[i], v) : v;
  }
}

Status checkSpec(const MaxMinSpec& spec, const char* what) {
  GC_REQUIRE(spec.bits == 1 || spec.bits == 2 || spec.bits == 4 || spec.bits == 8,
             Err::InvalidArgument, "%s: bits %d not supported (accepted: 1, 2, 4, 8)", what,
             spec.bits);
  GC_REQUIRE(spec.bucket >= 1, Err::InvalidArgument, "%s: bucket size must be >= 1", what);
  GC_REQUIRE(spec.bucket <= 0xFFFFFFFFull, Err::InvalidArgument,
             "%s: bucket size %zu above 2^32 - 1", what, spec.bucket);
  return Status::Ok();
}

}  // namespace

Status CudaBackend::absStats(const float* src, size_t n, AbsStats* out) {
  void* ws = nullptr;
  GC_CHECK(scratch(Carve::bytes<Stats>(kStatBlocks) + Carve::bytes<Stats>(1), &ws));
  Carve carve(ws);
  Stats* partial = carve.take<Stats>(kStatBlocks);
  Stats* total = carve.take<Stats>(1);
  // A fixed grid: the reduction tree, and so every bit of the sum, does not
  // depend on the device or on n's rounding to blocks.
  statsPartial<<<kStatBlocks, kThreads, 0, stream_>>>(src, n, partial);
  statsFinal<<<1, kThreads, 0, stream_>>>(partial, kStatBlocks, total);
  GC_CHECK(launched("absStats"));
  Stats s;
  GC_CHECK(cudaCall(cudaMemcpyAsync(&s, total, sizeof(s), cudaMemcpyDeviceToHost, stream_),
                    "absStats copy"));
  GC_CHECK(synchronize());
  out->sumAbs = s.sum;
  out->maxAbs = s.max;
  out->nonFinite = s.nonFinite;
  return Status::Ok();
}

Status CudaBackend::quantizeMaxMin(const float* src, size_t n, const MaxMinSpec& spec,
                                   uint64_t indexBase, float* meta, uint8_t* codes) {
  GC_CHECK(checkSpec(spec, "quantizeMaxMin"));
  if (n == 0) return Status::Ok();
  const size_t buckets = maxMinBuckets(n, spec.bucket);
  const uint32_t levels = (uint32_t(1) << spec.bits) - 1;
  bucketMinMax<<<unsigned(std::min<size_t>(buckets, 65535)), kThreads, 0, stream_>>>(
      src, n, spec.bucket, buckets, meta);
  const MaxMinCode code{src, meta, spec.bucket, levels, spec.seed, indexBase};
  quantizeKernel<<<blocksFor(packedBytes(n, spec.bits)), kThreads, 0, stream_>>>(
      code, n, spec.bits, codes, packedBytes(n, spec.bits));
  return launched("quantizeMaxMin");
}

Status CudaBackend::dequantizeMaxMin(const float* meta, const uint8_t* codes, size_t n,
                                     const MaxMinSpec& spec, float* dst, bool accumulate) {
  GC_CHECK(checkSpec(spec, "dequantizeMaxMin"));
  if (n == 0) return Status::Ok();
  const size_t buckets = maxMinBuckets(n, spec.bucket);
  GC_CHECK(resetResults());
  uint64_t* res = deviceResults();
  checkMeta<<<blocksFor(buckets), kThreads, 0, stream_>>>(meta, buckets, codes, n, spec.bits,
                                                         res + kFirstBad, res);
  uint64_t host[kResultWords];
  GC_CHECK(fetchResults(host));
  GC_REQUIRE(host[0] == 0, Err::RemoteError,
             "max-min payload: padding bits after %zu codes are set (corrupt payload)", n);
  const size_t badBucket = host[kFirstBad] == kNoneHost ? buckets : size_t(host[kFirstBad]);
  const size_t limit = std::min(n, badBucket * spec.bucket);
  const uint32_t levels = (uint32_t(1) << spec.bits) - 1;
  if (limit)
    dequantizeKernel<<<blocksFor(limit, 4), kThreads, 0, stream_>>>(meta, codes, limit, spec.bucket,
                                                                   spec.bits, levels, dst, accumulate);
  GC_CHECK(launched("dequantizeMaxMin"));
  GC_REQUIRE(badBucket == buckets, Err::RemoteError,
             "max-min payload: bucket %zu has a min/max that is not finite with min <= max",
             badBucket);
  return Status::Ok();
}

}  // namespace gradcomp::device
