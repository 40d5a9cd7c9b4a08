// Max-min bucketed quantization with counter-based stochastic rounding and
// the fused error-feedback residual, its validating decoder, and the |x|
// statistics that fix a call's parameters. Bit-identical to
// device/cpu/quant_maxmin.cc: the same fp64 operations, each rounded once,
// the same splitmix64 counter hash, and a zero bucket min or max written as
// +0.0 (x + 0.0f, as the CPU does: which of -0.0 and +0.0 a tie keeps then
// does not matter).
//
// Buckets of at most kFusedBucket elements whose codes fill whole bytes get
// one warp each: min/max, then codes and residuals from the values the warp
// just read (one pass over device memory, 16-byte loads and stores where
// aligned; no block barriers). Other buckets take three steps:
// min/max partials per chunk, one thread per bucket folding them in order,
// then one thread per output byte.
#include "device/cuda/cuda_backend.h"
#include "device/cuda/kernel_common.cuh"

namespace gradcomp::device {
namespace {

using namespace cuda;

constexpr size_t kFusedBucket = 8192;
constexpr size_t kChunk = 4096;  // min/max partial of the general path

// ---- absStats -----------------------------------------------------------------
// One streamed pass (16-byte loads). |x| as its bit pattern without the sign
// (monotone for non-negative floats; finite below 0x7f800000): max and count
// are integer reductions, so any order gives the CPU's fp64 scan's result
// (the largest finite |x|, +0 when none; |float| is exact in fp64).
struct AbsPartial {
  uint32_t maxBits;
  unsigned long long bad;
  __device__ void operator()(float v, size_t) {
    const uint32_t m = __float_as_uint(v) & 0x7FFFFFFFu;
    if (m >= 0x7F800000u) ++bad;  // Inf or NaN
    else maxBits = m > maxBits ? m : maxBits;
  }
};
struct AbsFold {
  __device__ AbsPartial operator()(const AbsPartial& a, const AbsPartial& b) const {
    return {a.maxBits > b.maxBits ? a.maxBits : b.maxBits, a.bad + b.bad};
  }
};

__global__ void __launch_bounds__(kThreads)
    absStatsKernel(Ctl ctl, const float* src, size_t n, ReduceCell* cell, AbsStats* out) {
  if (skipBlock(ctl)) return;
  AbsPartial s{0u, 0};
  forEachStreamed(src, n, s);
  using Reduce = cub::BlockReduce<AbsPartial, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  s = Reduce(tmp).Reduce(s, AbsFold());
  if (threadIdx.x == 0) {
    atomicMax(&cell->u[0], (unsigned long long)s.maxBits);
    atomicAdd(&cell->u[1], s.bad);
    if (lastBlockIn(&cell->done)) {
      out->maxAbs = double(__uint_as_float(uint32_t(loadVolatile(&cell->u[0]))));
      out->nonFinite = loadVolatile(&cell->u[1]);
      cell->u[0] = cell->u[1] = 0;
      cell->done = 0;
    }
  }
}

// ---- quantization -----------------------------------------------------------------
// (value, index in its bucket) with the CPU's tie rule: the earlier element wins.
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

__device__ inline double stepOf(float lo, float hi, uint32_t levels) {
  return __ddiv_rn(__dsub_rn(double(hi), double(lo)), double(levels));
}

__device__ inline float decodeOne(float lo, double step, uint32_t code) {
  return __double2float_rn(__dadd_rn(double(lo), __dmul_rn(double(code), step)));
}

// The code of x (device/quant_types.h), and the residual x - decoded.
__device__ inline uint32_t codeOf(float x, float lo, double step, uint32_t levels, uint64_t seed,
                                  uint64_t index) {
  // step == 0 first: a constant bucket (or one without finite values) codes
  // every element 0, +Inf too, as the CPU does.
  if (!(step > 0)) return 0;
  if (x == INFINITY) return levels;
  if (!isfinite(x)) return 0;
  const double q = __ddiv_rn(__dsub_rn(double(x), double(lo)), step);
  const double fl = floor(q);
  double c = __dadd_rn(fl, cuda::counterUniform(seed, index) < __dsub_rn(q, fl) ? 1.0 : 0.0);
  c = fmin(fmax(c, 0.0), double(levels));
  return uint32_t(c);
}

struct QuantSpec {
  size_t n, bucket;
  int bits;
  uint32_t levels;
  uint64_t seed, indexBase;
};

// Fused path: one warp per bucket (bucket * bits a multiple of 8). Lane j
// takes groups of 8 consecutive elements (group g starts at element 8 g of
// the bucket; its codes are the `bits` bytes from byte g * bits of the
// bucket's codes): min/max over its groups, the warp's min/max by shuffles
// (MinFirst / MaxFirst select by (value, index): any order of folding gives
// the same element), then the groups again (from L1/L2) for codes and
// residuals. Per element the same operations as the CPU; `vec`: src and
// residual 16-byte aligned and the bucket a multiple of 8, so a group is two
// 16-byte loads and stores.
constexpr int kGroup = 8;

__device__ inline void loadGroup(const float* src, size_t e0, size_t end, bool vec,
                                 float (&v)[kGroup]) {
  if (vec && e0 + kGroup <= end) {
    const float4 a = *reinterpret_cast<const float4*>(src + e0);
    const float4 b = *reinterpret_cast<const float4*>(src + e0 + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z,
    v[7] = b.w;
    return;
  }
#pragma unroll
  for (int k = 0; k < kGroup; ++k) v[k] = e0 + k < end ? src[e0 + k] : 0.0f;
}

__device__ inline Extreme shuffleExtreme(const Extreme& e, int lane) {
  return {__shfl_sync(0xFFFFFFFFu, e.v, lane), __shfl_sync(0xFFFFFFFFu, e.at, lane)};
}

__global__ void __launch_bounds__(kThreads)
    quantizeFused(Ctl ctl, const float* src, QuantSpec q, float* meta, uint8_t* codes,
                  float* residual, bool vec) {
  if (skipBlock(ctl)) return;
  const size_t buckets = (q.n + q.bucket - 1) / q.bucket;
  const int lane = threadIdx.x % 32;
  const size_t warps = size_t(gridDim.x) * (kThreads / 32);
  const size_t groups = (q.bucket + kGroup - 1) / kGroup;
  for (size_t b = blockIdx.x * size_t(kThreads / 32) + threadIdx.x / 32; b < buckets;
       b += warps) {
    const size_t begin = b * q.bucket, end = begin + q.bucket < q.n ? begin + q.bucket : q.n;
    Extreme mn{0, 0xFFFFFFFFu}, mx{0, 0xFFFFFFFFu};
    for (size_t g = lane; g < groups && begin + g * kGroup < end; g += 32) {
      float v[kGroup];
      loadGroup(src, begin + g * kGroup, end, vec, v);
#pragma unroll
      for (int k = 0; k < kGroup; ++k) {
        const size_t i = begin + g * kGroup + k;
        if (i >= end || !isfinite(v[k])) continue;
        const Extreme e{v[k], uint32_t(i - begin)};
        mn = MinFirst()(mn, e);
        mx = MaxFirst()(mx, e);
      }
    }
    for (int s = 16; s >= 1; s /= 2) {
      mn = MinFirst()(mn, shuffleExtreme(mn, lane ^ s));
      mx = MaxFirst()(mx, shuffleExtreme(mx, lane ^ s));
    }
    const float lo = mn.at == 0xFFFFFFFFu ? 0.0f : __fadd_rn(mn.v, 0.0f);  // -0.0 -> +0.0
    const float hi = mx.at == 0xFFFFFFFFu ? 0.0f : __fadd_rn(mx.v, 0.0f);
    if (lane == 0) {
      meta[2 * b] = lo;
      meta[2 * b + 1] = hi;
    }
    const double step = stepOf(lo, hi, q.levels);
    uint8_t* out = codes + begin * size_t(q.bits) / 8;  // begin * bits is a multiple of 8
    for (size_t g = lane; g < groups && begin + g * kGroup < end; g += 32) {
      const size_t e0 = begin + g * kGroup;
      float v[kGroup], r[kGroup];
      loadGroup(src, e0, end, vec, v);
      unsigned long long word = 0;
#pragma unroll
      for (int k = 0; k < kGroup; ++k) {
        if (e0 + k >= end) break;
        const uint32_t c = codeOf(v[k], lo, step, q.levels, q.seed, q.indexBase + e0 + k);
        word |= (unsigned long long)c << (k * q.bits);
        r[k] = __fsub_rn(v[k], decodeOne(lo, step, c));
      }
      // The group's bytes that hold an element (the bucket's last group may be short).
      const size_t have = (end - e0 < kGroup ? end - e0 : kGroup) * size_t(q.bits);
      for (int j = 0; j < q.bits && size_t(j) * 8 < have; ++j)
        out[g * q.bits + j] = uint8_t(word >> (8 * j));
      if (!residual) continue;
      if (vec && e0 + kGroup <= end) {
        *reinterpret_cast<float4*>(residual + e0) = make_float4(r[0], r[1], r[2], r[3]);
        *reinterpret_cast<float4*>(residual + e0 + 4) = make_float4(r[4], r[5], r[6], r[7]);
      } else {
        for (int k = 0; k < kGroup && e0 + k < end; ++k) residual[e0 + k] = r[k];
      }
    }
  }
}

// General path, step 1: min/max of chunk g (chunks never straddle buckets).
__global__ void chunkMinMax(Ctl ctl, const float* src, size_t n, size_t bucket, size_t perBucket,
                            size_t chunks, Extreme* partial) {
  if (skipBlock(ctl)) return;
  using Reduce = cub::BlockReduce<Extreme, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  for (size_t g = blockIdx.x; g < chunks; g += gridDim.x) {
    const size_t b = g / perBucket, c = g % perBucket;
    const size_t bucketEnd = (b + 1) * bucket < n ? (b + 1) * bucket : n;
    const size_t begin = b * bucket + c * kChunk;
    const size_t end = begin + kChunk < bucketEnd ? begin + kChunk : bucketEnd;
    Extreme mn{0, 0xFFFFFFFFu}, mx{0, 0xFFFFFFFFu};
    for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const float x = src[i];
      if (!isfinite(x)) continue;
      const Extreme e{x, uint32_t(i - b * bucket)};
      mn = MinFirst()(mn, e);
      mx = MaxFirst()(mx, e);
    }
    mn = Reduce(tmp).Reduce(mn, MinFirst());
    __syncthreads();
    mx = Reduce(tmp).Reduce(mx, MaxFirst());
    if (threadIdx.x == 0) {
      partial[2 * g] = mn;
      partial[2 * g + 1] = mx;
    }
    __syncthreads();
  }
}

// Step 2: one thread per bucket folds its chunks in order. The meta goes to
// the payload and to a device copy the next step reads per element.
__global__ void foldMinMax(Ctl ctl, const Extreme* partial, size_t buckets, size_t perBucket,
                           float* meta, float* metaDev) {
  if (skipBlock(ctl)) return;
  GC_GRID_STRIDE(b, buckets) {
    Extreme mn{0, 0xFFFFFFFFu}, mx{0, 0xFFFFFFFFu};
    for (size_t c = 0; c < perBucket; ++c) {
      mn = MinFirst()(mn, partial[2 * (b * perBucket + c)]);
      mx = MaxFirst()(mx, partial[2 * (b * perBucket + c) + 1]);
    }
    // -0.0 -> +0.0, as the CPU writes it.
    const float lo = mn.at == 0xFFFFFFFFu ? 0.0f : __fadd_rn(mn.v, 0.0f);
    const float hi = mx.at == 0xFFFFFFFFu ? 0.0f : __fadd_rn(mx.v, 0.0f);
    meta[2 * b] = metaDev[2 * b] = lo;
    meta[2 * b + 1] = metaDev[2 * b + 1] = hi;
  }
}

// Step 3: one thread per output byte (bits divide 8: every element lies in
// exactly one byte, so its residual is written once).
struct CodeField {
  const float* src;
  const float* meta;
  QuantSpec q;
  float* residual;
  __device__ uint32_t operator()(size_t i, bool) const {
    const size_t b = i / q.bucket;
    const float lo = meta[2 * b];
    const double step = stepOf(lo, meta[2 * b + 1], q.levels);
    const float x = src[i];
    const uint32_t c = codeOf(x, lo, step, q.levels, q.seed, q.indexBase + i);
    if (residual) residual[i] = __fsub_rn(x, decodeOne(lo, step, c));
    return c;
  }
};
__global__ void quantizeBytes(Ctl ctl, CodeField field, uint8_t* codes, size_t bytes) {
  if (skipBlock(ctl)) return;
  GC_GRID_STRIDE(byte, bytes) codes[byte] = packByte(byte, field.q.n, field.q.bits, field);
}

// ---- dequantization ---------------------------------------------------------------
// The stream's padding first (key 0), then the first bucket whose meta is not
// finite with min <= max (key b + 1), as the CPU checks them.
// One thread per group of 8 elements (group G: elements 8G .. 8G + 7, whose
// codes are the `bits` bytes from byte G * bits of the stream, whatever the
// bucket size): one load of the group's code bytes (one word when `codesWide`:
// codes 8-byte aligned), two 16-byte loads and stores of dst when `vec` (dst
// 16-byte aligned, the group whole), the bucket's step computed once per
// bucket the group touches. Per element the CPU's operations: decodeOne, then
// dst + v when accumulating.
__device__ inline uint64_t groupCodes(const uint8_t* codes, size_t g, size_t n, int bits,
                                      bool codesWide) {
  const size_t first = g * size_t(bits);
  if (codesWide && 8 * (g + 1) <= n) {
    switch (bits) {
      case 1: return codes[first];
      case 2: return *reinterpret_cast<const uint16_t*>(codes + first);
      case 4: return *reinterpret_cast<const uint32_t*>(codes + first);
      default: return *reinterpret_cast<const uint64_t*>(codes + first);
    }
  }
  const size_t total = (n * size_t(bits) + 7) / 8;  // the stream's bytes
  uint64_t w = 0;
  for (int b = 0; b < bits && first + b < total; ++b) w |= uint64_t(codes[first + b]) << (8 * b);
  return w;
}

__global__ void __launch_bounds__(kThreads)
    dequantizeKernel(Ctl ctl, const float* meta, const uint8_t* codes, size_t n, size_t bucket,
                     int bits, uint32_t levels, float* dst, bool accumulate, bool vec,
                     bool codesWide) {
  if (skipBlock(ctl)) return;
  if (blockIdx.x == 0 && threadIdx.x == 0 && !paddingClear(codes, n, bits)) fail(ctl, 0);
  const uint32_t mask = (uint32_t(1) << bits) - 1;
  GC_GRID_STRIDE(g, groupCount(n)) {
    const size_t e0 = 8 * g;
    const int len = n - e0 < 8 ? int(n - e0) : 8;
    const bool whole = vec && len == 8;
    const uint64_t word = groupCodes(codes, g, n, bits, codesWide);
    float d[8];
    if (accumulate) {
      if (whole) {
        const float4 a = *reinterpret_cast<const float4*>(dst + e0);
        const float4 b = *reinterpret_cast<const float4*>(dst + e0 + 4);
        d[0] = a.x, d[1] = a.y, d[2] = a.z, d[3] = a.w, d[4] = b.x, d[5] = b.y, d[6] = b.z,
        d[7] = b.w;
      } else {
        for (int k = 0; k < len; ++k) d[k] = dst[e0 + k];
      }
    }
    size_t b = e0 / bucket, start = b * bucket;
    float lo = 0;
    double step = 0;
    bool fresh = true;  // lo, step not yet read for bucket b
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      if (k >= len) break;
      const size_t i = e0 + k;
      if (i - start >= bucket) {  // the next bucket starts at i
        ++b;
        start = i;
        fresh = true;
      }
      if (fresh) {
        lo = meta[2 * b];
        const float hi = meta[2 * b + 1];
        if (i == start && !(isfinite(lo) && isfinite(hi) && lo <= hi))
          fail(ctl, b + 1, __float_as_uint(lo), __float_as_uint(hi));
        step = stepOf(lo, hi, levels);
        fresh = false;
      }
      const float v = decodeOne(lo, step, uint32_t(word >> (k * bits)) & mask);
      d[k] = accumulate ? __fadd_rn(d[k], v) : v;
    }
    if (whole) {
      *reinterpret_cast<float4*>(dst + e0) = make_float4(d[0], d[1], d[2], d[3]);
      *reinterpret_cast<float4*>(dst + e0 + 4) = make_float4(d[4], d[5], d[6], d[7]);
    } else {
      for (int k = 0; k < len; ++k) dst[e0 + k] = d[k];
    }
  }
}

Status dequantizeFailure(const OpInfo& op, const FailureRecord& f) {
  const std::string from = fromRank(op.source);
  if (f.key == 0)
    return makeStatus(Err::RemoteError,
                      "max-min payload%s: padding bits after %llu codes are set (corrupt payload)",
                      from.c_str(), op.p[0]);
  return makeStatus(Err::RemoteError,
                    "max-min payload%s: bucket %llu has min %g, max %g (expected finite, min <= "
                    "max)",
                    from.c_str(), f.key - 1, floatOfBits(f.a), floatOfBits(f.b));
}

Status checkSpec(const MaxMinSpec& spec, const char* what) {
  GC_REQUIRE(spec.bits == 1 || spec.bits == 2 || spec.bits == 4 || spec.bits == 8,
             Err::InvalidArgument, "%s: bits %d not supported (accepted: 1, 2, 4, 8)", what,
             spec.bits);
  GC_REQUIRE(spec.bucket >= 1, Err::InvalidArgument, "%s: bucket size must be >= 1", what);
  GC_REQUIRE(spec.bucket <= 0xFFFFFFFFull, Err::InvalidArgument,
             "%s: bucket size %zu above 2^32 - 1 (the CUDA backend's limit)", what, spec.bucket);
  return Status::Ok();
}

}  // namespace

Status CudaBackend::absStats(const float* src, size_t n, AbsStats* out) {
  Prim p(state(), "absStats");
  if (n == 0) return p.resultValue(out, AbsStats{});
  AbsStats* slot = nullptr;
  GC_CHECK(p.result(out, &slot));
  p.reads(src, n * 4);
  absStatsKernel<<<streamBlocks(n), kThreads, 0, p.stream()>>>(p.ctl(), src, n,
                                                              &p.control()->cell, slot);
  return p.launched();
}

Status CudaBackend::quantizeMaxMin(const float* src, size_t n, const MaxMinSpec& spec,
                                   uint64_t indexBase, float* meta, uint8_t* codes,
                                   float* residual) {
  Prim p(state(), "quantizeMaxMin");
  GC_CHECK(checkSpec(spec, "quantizeMaxMin"));
  if (n == 0) return Status::Ok();
  const size_t buckets = maxMinBuckets(n, spec.bucket), bytes = packedBytes(n, spec.bits);
  const QuantSpec q{n, spec.bucket, spec.bits, (uint32_t(1) << spec.bits) - 1, spec.seed,
                    indexBase};
  p.reads(src, n * 4);
  p.writes(meta, 8 * buckets);
  p.writes(codes, bytes);
  if (residual) p.writes(residual, n * 4);
  if (spec.bucket <= kFusedBucket && (spec.bucket * size_t(spec.bits)) % 8 == 0) {
    const bool vec = spec.bucket % kGroup == 0 && uintptr_t(src) % 16 == 0 &&
                     uintptr_t(residual) % 16 == 0;
    const size_t warpsPerBlock = kThreads / 32;
    const size_t grid = std::min<size_t>((buckets + warpsPerBlock - 1) / warpsPerBlock,
                                         8 * kMaxBlocks);
    quantizeFused<<<unsigned(grid), kThreads, 0, p.stream()>>>(p.ctl(), src, q, meta, codes,
                                                               residual, vec);
    return p.launched();
  }
  const size_t perBucket = (spec.bucket + kChunk - 1) / kChunk, chunks = buckets * perBucket;
  void* ws = nullptr;
  GC_CHECK(p.scratch(Carve::bytes<Extreme>(2 * chunks) + Carve::bytes<float>(2 * buckets), &ws));
  Carve carve(ws);
  Extreme* partial = carve.take<Extreme>(2 * chunks);
  float* metaDev = carve.take<float>(2 * buckets);
  chunkMinMax<<<unsigned(std::min<size_t>(chunks, 8 * kMaxBlocks)), kThreads, 0, p.stream()>>>(
      p.ctl(), src, n, spec.bucket, perBucket, chunks, partial);
  foldMinMax<<<blocksFor(buckets), kThreads, 0, p.stream()>>>(p.ctl(), partial, buckets, perBucket,
                                                               meta, metaDev);
  quantizeBytes<<<blocksFor(bytes), kThreads, 0, p.stream()>>>(
      p.ctl(), CodeField{src, metaDev, q, residual}, codes, bytes);
  return p.launched();
}

Status CudaBackend::dequantizeMaxMin(const float* meta, const uint8_t* codes, size_t n,
                                     const MaxMinSpec& spec, float* dst, bool accumulate,
                                     int source) {
  Prim p(state(), "dequantizeMaxMin");
  GC_CHECK(checkSpec(spec, "dequantizeMaxMin"));
  if (n == 0) return Status::Ok();
  const size_t metaBytes = 8 * maxMinBuckets(n, spec.bucket), codeBytes = packedBytes(n, spec.bits);
  p.reads(meta, metaBytes);
  p.reads(codes, codeBytes);
  if (accumulate) p.reads(dst, n * 4);
  p.writes(dst, n * 4);
  // Every element reads its bucket's meta and shares code bytes with its
  // neighbours: a payload in host memory is copied over once first.
  void* ws = nullptr;
  GC_CHECK(p.scratch(p.stageBytes(meta, metaBytes) + p.stageBytes(codes, codeBytes), &ws));
  Carve carve(ws);
  GC_CHECK(p.stage(meta, metaBytes, carve, &meta));
  GC_CHECK(p.stage(codes, codeBytes, carve, &codes));
  p.onFailure(source, &dequantizeFailure, n);
  const bool vec = uintptr_t(dst) % 16 == 0, codesWide = uintptr_t(codes) % 8 == 0;
  dequantizeKernel<<<blocksFor(groupCount(n)), kThreads, 0, p.stream()>>>(
      p.ctl(), meta, codes, n, spec.bucket, spec.bits, (uint32_t(1) << spec.bits) - 1, dst,
      accumulate, vec, codesWide);
  return p.launched();
}

}  // namespace gradcomp::device
