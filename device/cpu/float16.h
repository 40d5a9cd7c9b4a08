// Scalar conversions between float/double/int64 and the 16-bit float formats
// (IEEE binary16 "half" and bfloat16), on raw bit patterns.
//
// Contract (the reference every backend is checked against):
// - Narrowing rounds ONCE to nearest, ties to even, straight from the source
//   value: double -> half never goes through float (no double rounding).
// - Values past the largest finite number round to +-Inf exactly as IEEE RNE
//   says (half: |x| >= 65520 -> Inf; 65519.99 -> 65504).
// - Subnormals are produced and read exactly; nothing is flushed to zero.
// - -0.0 keeps its sign; +-Inf stay Inf; NaN stays NaN and comes out quiet,
//   keeping the sign and the top payload bits that fit.
#pragma once

#include <cstdint>
#include <cstring>

namespace gradcomp::device {

namespace detail {

template <class To, class From>
inline To bitCast(From v) {
  static_assert(sizeof(To) == sizeof(From), "bitCast needs equal sizes");
  To out;
  std::memcpy(&out, &v, sizeof out);
  return out;
}

// Rounds (-1)^neg * m * 2^e (m < 2^64, exact) once, to nearest even, into a
// 16-bit format with kMant stored mantissa bits and kExp exponent bits.
template <int kMant, int kExp>
inline uint16_t roundToNarrow(bool neg, uint64_t m, int e) {
  constexpr int kBias = (1 << (kExp - 1)) - 1;
  constexpr int kMinExp = 1 - kBias;                          // smallest normal exponent
  constexpr uint32_t kInf = ((1u << kExp) - 1) << kMant;      // exponent all ones
  const uint16_t sign = neg ? uint16_t(1u << (kMant + kExp)) : uint16_t(0);
  if (m == 0) return sign;
  const int msb = 63 - __builtin_clzll(m);
  const int exp = msb + e;                                    // unbiased exponent of the value
  if (exp + kBias >= int((1u << kExp) - 1)) return uint16_t(sign | kInf);
  // Weight of the last kept bit: normal numbers keep kMant bits below the
  // leading one, subnormals have the fixed weight 2^(kMinExp - kMant).
  const int lsb = (exp > kMinExp ? exp : kMinExp) - kMant;
  const int shift = lsb - e;  // bits of m below that weight
  uint64_t q;
  if (shift <= 0) {
    q = m << -shift;  // exact: fits kMant + 1 bits
  } else if (shift >= 64) {
    q = (shift == 64 && m > (uint64_t(1) << 63)) ? 1 : 0;  // below half an ulp -> 0
  } else {
    q = m >> shift;
    const uint64_t rem = m & ((uint64_t(1) << shift) - 1);
    const uint64_t half = uint64_t(1) << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
  }
  // q counts units of 2^lsb and holds the implicit bit for normals; a carry out
  // of the mantissa moves into the exponent field by plain addition.
  const uint64_t bits = exp < kMinExp ? q : (uint64_t(exp + kBias) << kMant) + q - (uint64_t(1) << kMant);
  if (bits >= kInf) return uint16_t(sign | kInf);
  return uint16_t(sign | bits);
}

// Quiet NaN of the narrow format from a wide NaN: sign, quiet bit, top payload bits.
template <int kMant, int kExp>
inline uint16_t narrowNaN(bool neg, uint64_t payloadTopBits) {
  const uint32_t inf = ((1u << kExp) - 1) << kMant;
  const uint32_t quiet = 1u << (kMant - 1);
  return uint16_t((neg ? 1u << (kMant + kExp) : 0u) | inf | quiet |
                  (payloadTopBits & ((1u << kMant) - 1)));
}

template <int kMant, int kExp>
inline uint16_t fromDouble(double d) {
  const uint64_t x = bitCast<uint64_t>(d);
  const bool neg = x >> 63;
  const int be = int((x >> 52) & 0x7FF);
  const uint64_t frac = x & ((uint64_t(1) << 52) - 1);
  if (be == 0x7FF) {
    if (frac == 0) return uint16_t((neg ? 1u << (kMant + kExp) : 0u) | (((1u << kExp) - 1) << kMant));
    return narrowNaN<kMant, kExp>(neg, frac >> (52 - kMant));
  }
  if (be == 0) return roundToNarrow<kMant, kExp>(neg, frac, -1074);
  return roundToNarrow<kMant, kExp>(neg, frac | (uint64_t(1) << 52), be - 1075);
}

template <int kMant, int kExp>
inline uint16_t fromInt64(int64_t v) {
  const bool neg = v < 0;
  const uint64_t mag = neg ? uint64_t(0) - uint64_t(v) : uint64_t(v);
  return roundToNarrow<kMant, kExp>(neg, mag, 0);
}

}  // namespace detail

// ---- half (binary16: 1 sign, 5 exponent, 10 mantissa bits) ----

inline float halfToFloat(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
  uint32_t bits;
  if (e == 0x1F) {
    bits = sign | 0x7F800000u | (m << 13) | (m ? 0x00400000u : 0u);  // NaN made quiet
  } else if (e != 0) {
    bits = sign | ((e + 112) << 23) | (m << 13);
  } else {
    // Zero or subnormal: m * 2^-24, exact in float.
    const float mag = float(m) * 5.9604644775390625e-08f;
    return sign ? -mag : mag;
  }
  return detail::bitCast<float>(bits);
}

inline uint16_t doubleToHalf(double d) { return detail::fromDouble<10, 5>(d); }
// Fast path for results in the normal half range: rebias the exponent and
// round the 13 dropped bits to nearest even (a carry runs into the exponent).
// Zeros, subnormals, overflow, Inf and NaN take the generic path (every float
// is exact in double, so that is still one rounding).
inline uint16_t floatToHalf(float f) {
  const uint32_t x = detail::bitCast<uint32_t>(f);
  const uint32_t a = x & 0x7FFFFFFFu;
  if (a >= 0x38800000u && a < 0x477FF000u) {  // [2^-14, 65520): stays finite and normal
    const uint32_t r = a - 0x38000000u;        // exponent bias 127 -> 15
    return uint16_t(((x >> 16) & 0x8000u) | ((r + 0x0FFFu + ((r >> 13) & 1)) >> 13));
  }
  return detail::fromDouble<10, 5>(double(f));
}
inline uint16_t int64ToHalf(int64_t v) { return detail::fromInt64<10, 5>(v); }

// ---- bfloat16 (1 sign, 8 exponent, 7 mantissa bits: the top half of a float) ----

inline float bf16ToFloat(uint16_t b) {
  uint32_t bits = uint32_t(b) << 16;
  if ((bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu)) bits |= 0x00400000u;
  return detail::bitCast<float>(bits);
}

// Fast path: adding 0x7FFF plus the kept lsb rounds the dropped half to nearest
// even; the carry runs into the exponent (up to Inf) by itself.
inline uint16_t floatToBf16(float f) {
  const uint32_t x = detail::bitCast<uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((x >> 16) | 0x0040);  // quiet NaN
  return uint16_t((x + 0x7FFFu + ((x >> 16) & 1)) >> 16);
}

inline uint16_t doubleToBf16(double d) { return detail::fromDouble<7, 8>(d); }
inline uint16_t int64ToBf16(int64_t v) { return detail::fromInt64<7, 8>(v); }

}  // namespace gradcomp::device
