// Block quantization for the blockq allgather (CPU reference). Every value
// comes from the per-element functions of device/quant_types.h in fp32, so
// the result depends only on (src, spec): a backend that follows them
// reproduces it bit for bit.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "device/cpu/quant_primitives.h"

namespace gradcomp::device::cpu {
namespace {

Status checkSpec(const BlockQuantSpec& spec, const char* what) {
  GC_REQUIRE(spec.bits == 8 || (spec.bits == 4 && !spec.fp8), Err::InvalidArgument,
             "%s: bits %d not supported (accepted: 8, 4; fp8: 8)", what, spec.bits);
  GC_REQUIRE(spec.block >= 1, Err::InvalidArgument, "%s: block size must be >= 1", what);
  return Status::Ok();
}

void putCode(uint8_t* codes, size_t i, int c, int bits) {
  if (bits == 8) {
    codes[i] = uint8_t(c & 0xFF);  // two's complement, or an fp8 byte
    return;
  }
  const uint8_t nib = uint8_t(c) & 0xF;
  if (i % 2 == 0)
    codes[i / 2] = nib;
  else
    codes[i / 2] |= uint8_t(nib << 4);
}

int getCode(const uint8_t* codes, size_t i, int bits, bool fp8) {
  if (fp8) return int(codes[i]);
  if (bits == 8) return int(int8_t(codes[i]));
  const int nib = (codes[i / 2] >> (i % 2 ? 4 : 0)) & 0xF;
  return nib >= 8 ? nib - 16 : nib;  // two's complement in 4 bits
}

// Fast paths for the common block: every value finite (an unflagged scale
// s > 0). They compute what blockqEncodeOne/DecodeOne do,
// bit for bit, in loops without branches that the compiler vectorizes:
// (v + 1.5 * 2^23) - 1.5 * 2^23 is rint(v) (ties to even, the default
// rounding mode) for |v| < 2^22, and |x / s| stays near Q (at most about
// 2 Q where s is subnormal); larger values clamp to the same limit either
// way. 4-bit blocks take it only where they start on a byte.
constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23

// The block's largest finite |x|; returns whether any x is not finite.
// Works on the bit patterns: non-negative floats order as their bits do, and
// |x| is finite below 0x7f800000. An integer max reduction vectorizes, a
// float one does not.
bool scanBlock(const float* x, size_t n, float* maxAbs) {
  uint32_t maxBits = 0, nonFinite = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, x + i, 4);
    bits &= 0x7fffffffu;
    const uint32_t finite = uint32_t(bits < 0x7f800000u);
    nonFinite |= finite ^ 1u;
    maxBits = std::max(maxBits, bits & (0u - finite));  // 0 stands in for non-finite values
  }
  std::memcpy(maxAbs, &maxBits, 4);
  return nonFinite != 0;
}

bool fastBlock(const BlockQuantSpec& spec, size_t lo) {
  return spec.fp8 || spec.bits == 8 || lo % 2 == 0;
}

// e4m3FromFloat(v) on the bit pattern, for |v| finite: a normal value keeps
// its exponent and the top 3 of its 23 mantissa bits, rounded to nearest
// even on the other 20 (a carry moves the exponent, as the code's layout
// does); below 2^-6, rint(|v| * 512) (exact scaling, the magic rounding
// above). Saturates at 0x7E like the reference.
inline uint8_t e4m3FromBits(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  const uint32_t sign = (bits >> 24) & 0x80u, mag = bits & 0x7fffffffu;
  int code;
  if (mag < 0x3c800000u) {  // |v| < 2^-6
    float a;
    std::memcpy(&a, &mag, 4);
    code = int((a * 512.0f + kRoundMagic) - kRoundMagic);
  } else {
    const uint32_t exp = mag >> 23, man = mag & 0x7fffffu;
    const uint32_t q = man >> 20, rest = man & 0xfffffu;
    const uint32_t up = rest > 0x80000u || (rest == 0x80000u && (q & 1u));
    code = int((exp - 127 + 7) * 8 + q + up);  // exp >= 121 here
  }
  return uint8_t(sign | uint32_t(code > 0x7E ? 0x7E : code));
}

void encodeFp8Finite(const float* src, size_t lo, size_t hi, float s, uint8_t* codes) {
  for (size_t i = lo; i < hi; ++i) codes[i] = e4m3FromBits(src[i] / s);
}

// e4m3ToFloat of every byte; the NaN codes (0x7F, 0xFF) hold 0 and are
// caught by the caller.
const float* e4m3Table() {
  static const auto table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[size_t(c)] = (c & 0x7F) == 0x7F ? 0.0f : e4m3ToFloat(uint8_t(c));
    return t;
  }();
  return table.data();
}

// Returns false where a byte is a NaN code, which only a flagged block holds.
bool decodeFp8Unflagged(const uint8_t* codes, size_t lo, size_t hi, float s, float* dst) {
  const float* table = e4m3Table();
  uint32_t nanSeen = 0;
  for (size_t i = lo; i < hi; ++i) {
    nanSeen |= uint32_t((codes[i] & 0x7F) == 0x7F);
    dst[i] = table[codes[i]] * s;
  }
  return nanSeen == 0;
}

void encodeFinite(const float* src, size_t lo, size_t hi, float s, int bits, uint8_t* codes) {
  const float lim = float(blockqMaxCode(bits));
  auto code = [&](float x) {
    float v = (x / s + kRoundMagic) - kRoundMagic;
    v = v > lim ? lim : v;
    v = v < -lim ? -lim : v;
    return int(v);
  };
  if (bits == 8) {
    for (size_t i = lo; i < hi; ++i) codes[i] = uint8_t(code(src[i]) & 0xFF);
    return;
  }
  const size_t pairs = (hi - lo) / 2;  // lo is even: byte lo / 2 + j holds lo + 2j, lo + 2j + 1
  uint8_t* bytes = codes + lo / 2;
  const float* x = src + lo;
  for (size_t j = 0; j < pairs; ++j)
    bytes[j] = uint8_t((code(x[2 * j]) & 0xF) | ((code(x[2 * j + 1]) & 0xF) << 4));
  if (lo + 2 * pairs < hi) bytes[pairs] = uint8_t(code(x[2 * pairs]) & 0xF);
}

// Returns false where a code is -(Q+1), which only a flagged block may hold.
bool decodeUnflagged(const uint8_t* codes, size_t lo, size_t hi, float s, int bits, float* dst) {
  int lowest = 0;
  if (bits == 8) {
    for (size_t i = lo; i < hi; ++i) {
      const int c = int(int8_t(codes[i]));
      lowest = c < lowest ? c : lowest;
      dst[i] = float(c) * s;
    }
    return lowest > -128;
  }
  const size_t pairs = (hi - lo) / 2;  // lo is even, as in encodeFinite
  const uint8_t* bytes = codes + lo / 2;
  float* y = dst + lo;
  for (size_t j = 0; j < pairs; ++j) {
    const int c0 = int(int8_t(uint8_t(bytes[j] << 4))) >> 4, c1 = int(int8_t(bytes[j])) >> 4;
    lowest = c0 < lowest ? c0 : lowest;
    lowest = c1 < lowest ? c1 : lowest;
    y[2 * j] = float(c0) * s;
    y[2 * j + 1] = float(c1) * s;
  }
  if (lo + 2 * pairs < hi) {
    const int c = int(int8_t(uint8_t(bytes[pairs] << 4))) >> 4;
    lowest = c < lowest ? c : lowest;
    y[2 * pairs] = float(c) * s;
  }
  return lowest > -8;
}

}  // namespace

Status blockqEncode(const float* src, size_t n, const BlockQuantSpec& spec, uint8_t* out) {
  GC_CHECK(checkSpec(spec, "blockqEncode"));
  const size_t blocks = blockqBlocks(n, spec.block);
  uint8_t* codes = out + 4 * blocks;
  for (size_t b = 0; b < blocks; ++b) {
    const size_t lo = b * spec.block, hi = std::min(n, lo + spec.block);
    float maxAbs;
    const bool nonFinite = scanBlock(src + lo, hi - lo, &maxAbs);
    const float scale = blockqScale(maxAbs, nonFinite, spec);
    std::memcpy(out + 4 * b, &scale, 4);
    if (!nonFinite && scale > 0.0f && fastBlock(spec, lo)) {
      if (spec.fp8)
        encodeFp8Finite(src, lo, hi, scale, codes);
      else
        encodeFinite(src, lo, hi, scale, spec.bits, codes);
      continue;
    }
    for (size_t i = lo; i < hi; ++i) putCode(codes, i, blockqEncodeOne(src[i], scale, spec),
                                             spec.bits);
  }
  return Status::Ok();
}

Status blockqDecode(const uint8_t* in, size_t n, const BlockQuantSpec& spec, float* dst,
                    int source) {
  GC_CHECK(checkSpec(spec, "blockqDecode"));
  const size_t blocks = blockqBlocks(n, spec.block);
  const uint8_t* codes = in + 4 * blocks;
  GC_REQUIRE(spec.bits == 8 || n % 2 == 0 || (codes[n / 2] >> 4) == 0, Err::RemoteError,
             "blockqDecode: padding bits set in the payload from rank %d", source);
  for (size_t b = 0; b < blocks; ++b) {
    float scale;
    std::memcpy(&scale, in + 4 * b, 4);
    GC_REQUIRE(!std::isnan(scale) && !std::isinf(scale), Err::RemoteError,
               "blockqDecode: block %zu from rank %d has a non-finite scale", b, source);
    const size_t lo = b * spec.block, hi = std::min(n, lo + spec.block);
    bool ok = true;
    if (scale > 0.0f && spec.fp8)
      ok = decodeFp8Unflagged(codes, lo, hi, scale, dst);
    else if (scale > 0.0f && fastBlock(spec, lo))
      ok = decodeUnflagged(codes, lo, hi, scale, spec.bits, dst);
    else
      for (size_t i = lo; i < hi; ++i)
        dst[i] = blockqDecodeOne(getCode(codes, i, spec.bits, spec.fp8), scale, spec, &ok);
    GC_REQUIRE(ok, Err::RemoteError,
               "blockqDecode: block %zu from rank %d holds a code reserved for non-finite "
               "values without its flag", b, source);
  }
  return Status::Ok();
}

}  // namespace gradcomp::device::cpu
