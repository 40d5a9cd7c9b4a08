// Range-based float codec (notes section 6; layout in device/quant_types.h).
// Encoding works on r = |x| / eps in fp64: frexp gives the binade e exactly,
// so round-to-nearest of the mantissa keeps the relative error within
// 2^-(m+1) on [eps, vmax].
#include <cmath>
#include <cstring>

#include "device/cpu/quant_bitpack.h"
#include "device/cpu/quant_primitives.h"
#include "device/cpu/sparse_ops.h"

namespace gradcomp::device::cpu {
namespace {

Status checkSpec(const RbfSpec& spec, const char* what) {
  GC_REQUIRE(spec.bits >= 3 && spec.bits <= 16, Err::InvalidArgument,
             "%s: RBF width %d bits not supported (accepted: 3..16)", what, spec.bits);
  GC_REQUIRE(rbfValidLayout(spec.bits, spec.mantissa), Err::InvalidArgument,
             "%s: RBF mantissa %d bits not supported for %d-bit words (accepted: m <= %d with "
             "at most 64 binades, i.e. (2^(N-1) - 2) >> m <= 63)",
             what, spec.mantissa, spec.bits, spec.bits - 2);
  GC_REQUIRE(std::isfinite(spec.eps) && spec.eps >= 0, Err::InvalidArgument,
             "%s: RBF eps %g must be finite and >= 0", what, double(spec.eps));
  return Status::Ok();
}

uint32_t magnitudeCode(double a, const RbfSpec& spec) {
  const uint32_t cmax = rbfMaxCode(spec.bits);
  if (!(a >= 0.5 * spec.eps) || spec.eps == 0) return 0;  // also NaN
  if (a >= double(spec.eps) * rbfUnitMax(spec.bits, spec.mantissa)) return cmax;  // also Inf
  const double r = a / double(spec.eps);
  if (r < 1.0) return 1;  // [eps/2, eps) rounds to eps
  int ex = 0;
  const double fr = std::frexp(r, &ex);  // r = fr * 2^ex, fr in [0.5, 1)
  const double scaled = (2.0 * fr - 1.0) * double(uint32_t(1) << spec.mantissa);
  const double f = std::nearbyint(scaled);  // ties to even
  // t = e * 2^m + f; f == 2^m carries into the next binade by itself.
  const double t = double(ex - 1) * double(uint32_t(1) << spec.mantissa) + f;
  const double c = t + 1.0;
  return c >= double(cmax) ? cmax : uint32_t(c);
}

}  // namespace

uint32_t rbfEncodeOne(float x, const RbfSpec& spec) {
  const uint32_t sign = std::signbit(x) && !std::isnan(x) ? 1u : 0u;
  return sign << (spec.bits - 1) | magnitudeCode(std::fabs(double(x)), spec);
}

float rbfDecodeOne(uint32_t word, const RbfSpec& spec) {
  const uint32_t c = word & rbfMaxCode(spec.bits);
  const float mag = float(rbfDecodeMagnitude(c, spec.mantissa, double(spec.eps)));
  return (word >> (spec.bits - 1)) & 1u ? -mag : mag;
}

Status rbfEncode(const float* src, size_t n, const RbfSpec& spec, uint8_t* codes,
                 float* residual) {
  GC_CHECK(checkSpec(spec, "rbfEncode"));
  zeroStream(codes, n, spec.bits);
  for (size_t i = 0; i < n; ++i) {
    const float x = src[i];
    const uint32_t word = rbfEncodeOne(x, spec);
    putBits(codes, i, spec.bits, word);
    if (residual) residual[i] = x - rbfDecodeOne(word, spec);
  }
  return Status::Ok();
}

Status rbfDecode(const uint8_t* codes, size_t n, const RbfSpec& spec, float* dst,
                 bool accumulate, int source) {
  GC_CHECK(checkSpec(spec, "rbfDecode"));
  char from[32];
  GC_REQUIRE(paddingClear(codes, n, spec.bits), Err::RemoteError,
             "RBF payload%s: padding bits after %zu words are set (corrupt payload)",
             sourceText(source, from), n);
  for (size_t i = 0; i < n; ++i) {
    const float v = rbfDecodeOne(getBits(codes, i, spec.bits), spec);
    dst[i] = accumulate ? dst[i] + v : v;
  }
  return Status::Ok();
}

namespace {

// Layout of run s of rbfEncodeSegments.
size_t segmentLength(size_t s, size_t segments, size_t perSegment, size_t lastSegment) {
  return s + 1 == segments ? lastSegment : perSegment;
}

}  // namespace

Status rbfEncodeSegments(const float* values, size_t segments, size_t perSegment,
                         size_t lastSegment, int bits, int mantissa, double fixedVmax,
                         uint8_t* out) {
  RbfSpec spec{bits, mantissa, 0.0f};
  GC_CHECK(checkSpec(spec, "rbfEncodeSegments"));
  for (size_t s = 0; s < segments; ++s) {
    const size_t len = segmentLength(s, segments, perSegment, lastSegment);
    if (len == 0) continue;
    float vmax = float(fixedVmax);
    if (fixedVmax <= 0) {
      AbsStats st;
      GC_CHECK(absStats(values, len, &st));
      vmax = float(st.maxAbs);
    }
    spec.eps = rbfEpsForVmax(double(vmax), bits, mantissa);
    std::memcpy(out, &vmax, sizeof(float));
    GC_CHECK(rbfEncode(values, len, spec, out + sizeof(float), nullptr));
    out += sizeof(float) + packedBytes(len, bits);
    values += len;
  }
  return Status::Ok();
}

Status rbfDecodeSegments(const uint8_t* in, size_t segments, size_t perSegment,
                         size_t lastSegment, int bits, int mantissa, float* values, int source) {
  RbfSpec spec{bits, mantissa, 0.0f};
  GC_CHECK(checkSpec(spec, "rbfDecodeSegments"));
  char from[32];
  for (size_t s = 0; s < segments; ++s) {
    const size_t len = segmentLength(s, segments, perSegment, lastSegment);
    if (len == 0) continue;
    float vmax = 0;
    std::memcpy(&vmax, in, sizeof(float));
    GC_REQUIRE(std::isfinite(vmax) && vmax >= 0, Err::RemoteError,
               "RBF payload%s: segment %zu has vmax %g (expected finite and >= 0)",
               sourceText(source, from), s, double(vmax));
    spec.eps = rbfEpsForVmax(double(vmax), bits, mantissa);
    GC_CHECK(rbfDecode(in + sizeof(float), len, spec, values, false, source));
    in += sizeof(float) + packedBytes(len, bits);
    values += len;
  }
  return Status::Ok();
}

}  // namespace gradcomp::device::cpu
