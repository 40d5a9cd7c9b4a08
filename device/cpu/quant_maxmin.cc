// Max-min bucketed quantization with counter-based stochastic rounding (CPU
// reference). Arithmetic is fp64 per element and rounded once to fp32, so the
// result depends only on (inputs, spec, indexBase): any backend that follows
// device/quant_types.h reproduces it.
#include <algorithm>
#include <cmath>

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

Status quantizeMaxMin(const float* src, size_t n, const MaxMinSpec& spec, uint64_t indexBase,
                      float* meta, uint8_t* codes, float* residual) {
  GC_CHECK(checkSpec(spec, "quantizeMaxMin"));
  zeroStream(codes, n, spec.bits);
  const uint32_t levels = (uint32_t(1) << spec.bits) - 1;
  for (size_t b = 0, begin = 0; begin < n; ++b, begin += spec.bucket) {
    const size_t end = std::min(n, begin + spec.bucket);
    float lo = 0, hi = 0;
    bool any = false;
    for (size_t i = begin; i < end; ++i) {
      const float x = src[i];
      if (!std::isfinite(x)) continue;
      if (!any || x < lo) lo = x;
      if (!any || x > hi) hi = x;
      any = true;
    }
    meta[2 * b] = lo;
    meta[2 * b + 1] = hi;
    const double step = (double(hi) - double(lo)) / levels;
    for (size_t i = begin; i < end; ++i) {
      const float x = src[i];
      uint32_t code = 0;
      if (x == INFINITY) {
        code = levels;
      } else if (std::isfinite(x) && step > 0) {
        const double q = (double(x) - double(lo)) / step;
        const double fl = std::floor(q);
        double c = fl + (counterUniform(spec.seed, indexBase + i) < q - fl ? 1.0 : 0.0);
        c = std::min(std::max(c, 0.0), double(levels));
        code = uint32_t(c);
      }
      putBits(codes, i, spec.bits, code);
      // The decoder's arithmetic (dequantizeMaxMin), then what it missed.
      if (residual) residual[i] = x - float(double(lo) + double(code) * step);
    }
  }
  return Status::Ok();
}

Status dequantizeMaxMin(const float* meta, const uint8_t* codes, size_t n, const MaxMinSpec& spec,
                        float* dst, bool accumulate, int source) {
  GC_CHECK(checkSpec(spec, "dequantizeMaxMin"));
  char from[32];
  sourceText(source, from);
  GC_REQUIRE(paddingClear(codes, n, spec.bits), Err::RemoteError,
             "max-min payload%s: padding bits after %zu codes are set (corrupt payload)", from, n);
  const uint32_t levels = (uint32_t(1) << spec.bits) - 1;
  for (size_t b = 0, begin = 0; begin < n; ++b, begin += spec.bucket) {
    const size_t end = std::min(n, begin + spec.bucket);
    const float lo = meta[2 * b], hi = meta[2 * b + 1];
    GC_REQUIRE(std::isfinite(lo) && std::isfinite(hi) && lo <= hi, Err::RemoteError,
               "max-min payload%s: bucket %zu has min %g, max %g (expected finite, min <= max)",
               from, b, double(lo), double(hi));
    const double step = (double(hi) - double(lo)) / levels;
    for (size_t i = begin; i < end; ++i) {
      const float v = float(double(lo) + double(getBits(codes, i, spec.bits)) * step);
      dst[i] = accumulate ? dst[i] + v : v;
    }
  }
  return Status::Ok();
}

}  // namespace gradcomp::device::cpu
