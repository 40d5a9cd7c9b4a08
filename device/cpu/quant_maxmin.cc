// Max-min bucketed quantization with counter-based stochastic rounding (CPU
// reference). Arithmetic is fp64 per element and rounded once to fp32, so the
// result depends only on (inputs, spec, indexBase): any backend that follows
// device/quant_types.h reproduces it.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <vector>

#include "device/cpu/multiversion.h"
#include "device/cpu/quant_bitpack.h"
#include "device/cpu/quant_primitives.h"
#include "device/cpu/sparse_ops.h"

namespace gradcomp::device::cpu {
namespace {

Status checkSpec(const MaxMinSpec& spec, const char* what) {
  GC_REQUIRE(spec.bits == 1 || spec.bits == 2 || spec.bits == 4 || spec.bits == 8,
             Err::InvalidArgument, "%s: bits %d not supported (accepted: 1, 2, 4, 8)", what,
             spec.bits);
  GC_REQUIRE(spec.bucket >= 1, Err::InvalidArgument, "%s: bucket size must be >= 1", what);
  return Status::Ok();
}

}  // namespace

Status absStats(const float* src, size_t n, AbsStats* out) {
  AbsStats s;
  for (size_t i = 0; i < n; ++i) {
    const double a = std::fabs(double(src[i]));
    if (!std::isfinite(a)) {
      ++s.nonFinite;
      continue;
    }
    if (a > s.maxAbs) s.maxAbs = a;
  }
  *out = s;
  return Status::Ok();
}

namespace {

// Floats map to order-preserving integer keys (orderKey: bits ^ ((bits >> 31)
// & 0x7fffffff), -0.0 < +0.0), so min and max reduce as integers and vectorize.
__attribute__((always_inline)) inline float fromKey(int32_t k) {
  const int32_t b = k ^ ((k >> 31) & 0x7fffffff);
  float v;
  std::memcpy(&v, &b, 4);
  return v;
}

// [lo, hi] over the finite values of x[0..len): (0, 0) when there are none;
// -0.0 is reported as +0.0 so every backend agrees on the bits.
__attribute__((always_inline)) inline void minMax(const float* x, size_t len, float* lo,
                                                  float* hi) {
  int32_t kmin = INT32_MAX, kmax = INT32_MIN;
  for (size_t i = 0; i < len; ++i) {
    uint32_t bits;
    std::memcpy(&bits, x + i, 4);
    const int32_t b = int32_t(bits);
    const int32_t k = b ^ ((b >> 31) & 0x7fffffff);  // orderKey
    // Masks, not selects: GCC vectorizes min/max reductions written this way.
    const int32_t bad = -int32_t((bits & 0x7f800000u) == 0x7f800000u);  // NaN, Inf
    kmin = std::min(kmin, (k & ~bad) | (INT32_MAX & bad));
    kmax = std::max(kmax, (k & ~bad) | (INT32_MIN & bad));
  }
  if (kmin > kmax) {  // no finite value
    *lo = *hi = 0.0f;
    return;
  }
  *lo = fromKey(kmin) + 0.0f;  // -0.0 + 0.0 = +0.0
  *hi = fromKey(kmax) + 0.0f;
}

// Whole bytes of Bits-bit fields: constant shifts, so the loops vectorize.
template <int Bits>
__attribute__((always_inline)) inline void packBytes(const uint8_t* c, size_t whole, uint8_t* out) {
  constexpr size_t per = 8 / Bits;
  for (size_t k = 0; k < whole; ++k) {
    uint32_t v = 0;
    for (size_t j = 0; j < per; ++j) v |= uint32_t(c[k * per + j]) << (j * Bits);
    out[k] = uint8_t(v);
  }
}
template <int Bits>
__attribute__((always_inline)) inline void unpackBytes(const uint8_t* in, size_t whole, uint8_t* c) {
  constexpr size_t per = 8 / Bits;
  constexpr uint32_t mask = (1u << Bits) - 1;
  for (size_t k = 0; k < whole; ++k)
    for (size_t j = 0; j < per; ++j) c[k * per + j] = uint8_t((in[k] >> (j * Bits)) & mask);
}

// Packs len codes (one per byte) into the stream at element `first`: whole
// bytes at once when the range starts on a byte, else field by field.
__attribute__((always_inline)) inline void pack(const uint8_t* c, size_t len, int bits,
                                                size_t first, uint8_t* stream) {
  const size_t per = size_t(8 / bits);
  size_t done = 0;
  if ((first * size_t(bits)) % 8 == 0) {
    uint8_t* out = stream + first * size_t(bits) / 8;
    const size_t whole = len / per;
    switch (bits) {
      case 1: packBytes<1>(c, whole, out); break;
      case 2: packBytes<2>(c, whole, out); break;
      case 4: packBytes<4>(c, whole, out); break;
      default: std::memcpy(out, c, whole); break;
    }
    done = whole * per;
  }
  for (size_t i = done; i < len; ++i) putBits(stream, first + i, bits, c[i]);
}

__attribute__((always_inline)) inline void unpack(const uint8_t* stream, size_t first, size_t len,
                                                  int bits, uint8_t* c) {
  const size_t per = size_t(8 / bits);
  size_t done = 0;
  if ((first * size_t(bits)) % 8 == 0) {
    const uint8_t* in = stream + first * size_t(bits) / 8;
    const size_t whole = len / per;
    switch (bits) {
      case 1: unpackBytes<1>(in, whole, c); break;
      case 2: unpackBytes<2>(in, whole, c); break;
      case 4: unpackBytes<4>(in, whole, c); break;
      default: std::memcpy(c, in, whole); break;
    }
    done = whole * per;
  }
  for (size_t i = done; i < len; ++i) c[i] = uint8_t(getBits(stream, first + i, bits));
}

// Codes of src[0..len) (stream elements indexBase + first ...), one per
// byte, and (Residual) src - decoded. Branch-free, so it vectorizes: +Inf
// clamps to the top code and -Inf, NaN to 0 through the arithmetic itself.
template <bool Residual>
__attribute__((always_inline)) inline void codesOf(const float* src, size_t len, double lo,
                                                   double step, double levels, uint64_t seed,
                                                   uint64_t index0, uint8_t* c, float* residual) {
  for (size_t i = 0; i < len; ++i) {
    const float x = src[i];
    const double q = (double(x) - lo) / step;
    const double fl = std::floor(q);
    const double u = double(mix64(seed ^ mix64(index0 + i)) >> 11) * 0x1.0p-53;
    double code = fl + (u < q - fl ? 1.0 : 0.0);
    code = code < 0.0 ? 0.0 : code;
    code = code > levels ? levels : code;
    code = code == code ? code : 0.0;  // NaN
    c[i] = uint8_t(int32_t(code));
    if (Residual) residual[i] = x - float(lo + code * step);
  }
}

template <bool Residual>
__attribute__((always_inline)) inline void quantizeBody(const float* src, size_t n, int bits,
                                                        size_t bucket, uint64_t seed,
                                                        uint64_t indexBase, float* meta,
                                                        uint8_t* codes, float* residual,
                                                        uint8_t* scratch) {
  const uint32_t levels = (uint32_t(1) << bits) - 1;
  for (size_t b = 0, begin = 0; begin < n; ++b, begin += bucket) {
    const size_t len = std::min(n - begin, bucket);
    float lo = 0, hi = 0;
    minMax(src + begin, len, &lo, &hi);
    meta[2 * b] = lo;
    meta[2 * b + 1] = hi;
    const double step = (double(hi) - double(lo)) / levels;
    if (step > 0) {
      codesOf<Residual>(src + begin, len, double(lo), step, double(levels), seed,
                        indexBase + begin, scratch, Residual ? residual + begin : nullptr);
    } else {  // a constant bucket (or none finite): every code 0, decoded as lo
      std::memset(scratch, 0, len);
      if (Residual)
        for (size_t i = 0; i < len; ++i) residual[begin + i] = src[begin + i] - lo;
    }
    pack(scratch, len, bits, begin, codes);
  }
}

template <bool Residual>
void quantizeBase(const float* src, size_t n, int bits, size_t bucket, uint64_t seed,
                  uint64_t indexBase, float* meta, uint8_t* codes, float* residual,
                  uint8_t* scratch) {
  quantizeBody<Residual>(src, n, bits, bucket, seed, indexBase, meta, codes, residual, scratch);
}

template <bool Residual>
GC_AVX512DQ void quantizeAvx512(const float* src, size_t n, int bits, size_t bucket,
                                uint64_t seed, uint64_t indexBase, float* meta, uint8_t* codes,
                                float* residual, uint8_t* scratch) {
  quantizeBody<Residual>(src, n, bits, bucket, seed, indexBase, meta, codes, residual, scratch);
}

template <bool Residual>
void quantizeBuckets(const float* src, size_t n, int bits, size_t bucket, uint64_t seed,
                     uint64_t indexBase, float* meta, uint8_t* codes, float* residual,
                     uint8_t* scratch) {
  (avx512DqAvailable() ? quantizeAvx512<Residual> : quantizeBase<Residual>)(
      src, n, bits, bucket, seed, indexBase, meta, codes, residual, scratch);
}

template <bool Accumulate>
GC_CPU_CLONES void dequantizeBuckets(const float* meta, const uint8_t* codes, size_t n, int bits,
                                     size_t bucket, float* dst, uint8_t* scratch) {
  const uint32_t levels = (uint32_t(1) << bits) - 1;
  for (size_t b = 0, begin = 0; begin < n; ++b, begin += bucket) {
    const size_t len = std::min(n - begin, bucket);
    const float lo = meta[2 * b], hi = meta[2 * b + 1];
    const double step = (double(hi) - double(lo)) / levels;
    unpack(codes, begin, len, bits, scratch);
    float* out = dst + begin;
    for (size_t i = 0; i < len; ++i) {
      const float v = float(double(lo) + double(scratch[i]) * step);
      out[i] = Accumulate ? out[i] + v : v;
    }
  }
}

}  // namespace

Status quantizeMaxMin(const float* src, size_t n, const MaxMinSpec& spec, uint64_t indexBase,
                      float* meta, uint8_t* codes, float* residual) {
  GC_CHECK(checkSpec(spec, "quantizeMaxMin"));
  zeroStream(codes, n, spec.bits);
  thread_local std::vector<uint8_t> scratch;
  scratch.resize(std::min(n, spec.bucket) + 1);
  if (residual)
    quantizeBuckets<true>(src, n, spec.bits, spec.bucket, spec.seed, indexBase, meta, codes,
                          residual, scratch.data());
  else
    quantizeBuckets<false>(src, n, spec.bits, spec.bucket, spec.seed, indexBase, meta, codes,
                           nullptr, scratch.data());
  return Status::Ok();
}

Status dequantizeMaxMin(const float* meta, const uint8_t* codes, size_t n, const MaxMinSpec& spec,
                        float* dst, bool accumulate, int source) {
  GC_CHECK(checkSpec(spec, "dequantizeMaxMin"));
  char from[32];
  sourceText(source, from);
  GC_REQUIRE(paddingClear(codes, n, spec.bits), Err::RemoteError,
             "max-min payload%s: padding bits after %zu codes are set (corrupt payload)", from, n);
  for (size_t b = 0, begin = 0; begin < n; ++b, begin += spec.bucket) {
    const float lo = meta[2 * b], hi = meta[2 * b + 1];
    GC_REQUIRE(std::isfinite(lo) && std::isfinite(hi) && lo <= hi, Err::RemoteError,
               "max-min payload%s: bucket %zu has min %g, max %g (expected finite, min <= max)",
               from, b, double(lo), double(hi));
  }
  thread_local std::vector<uint8_t> scratch;
  scratch.resize(std::min(n, spec.bucket) + 1);
  if (accumulate) dequantizeBuckets<true>(meta, codes, n, spec.bits, spec.bucket, dst, scratch.data());
  else dequantizeBuckets<false>(meta, codes, n, spec.bits, spec.bucket, dst, scratch.data());
  return Status::Ok();
}

}  // namespace gradcomp::device::cpu
