// Plain data shared by the quantized-family primitives of device::Backend
// (max-min/QSGD, range-based float, sign counts, FFT bins) and the algorithms
// that call them. Everything here is a POD or a pure inline function of its
// arguments, so a CUDA backend reproduces the CPU reference bit for bit.
//
// Packed code streams: element i of a stream with `width` bits per element
// occupies bits [i*width, (i+1)*width) of a little-endian bit stream (bit j
// of the stream is bit j%8 of byte j/8); the stream is ceil(n*width/8) bytes
// and its padding bits are zero (decoders reject a stream whose are not).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

// The block quantization's per-element functions below are compiled for the
// device too (device/cuda/quant_blockq.cu calls these very functions), so the
// CUDA kernels and the CPU reference share one definition of every code.
#if defined(__CUDACC__)
#define GC_HOST_DEVICE __host__ __device__
#else
#define GC_HOST_DEVICE
#endif

namespace gradcomp::device {

inline size_t packedBytes(size_t n, int width) { return (n * size_t(width) + 7) / 8; }

// ---- Counter-based randomness (stochastic rounding) ----------------------
// splitmix64's finalizer: a bijective 64-bit mix.
inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
// One independent stream per (user seed, call, rank, phase): ranks and reruns
// reproduce exactly, and a reference can recompute any rank's rounding.
inline uint64_t streamSeed(uint64_t seed, uint64_t call, uint64_t rank, uint64_t phase) {
  return mix64(mix64(mix64(seed) ^ call) ^ (rank << 8 | (phase & 0xFF)));
}
// Uniform in [0, 1) with 53 random bits for element `index` of a stream.
inline double counterUniform(uint64_t stream, uint64_t index) {
  return double(mix64(stream ^ mix64(index)) >> 11) * 0x1.0p-53;
}

// ---- Max-min (QSGD-style) bucketed quantization --------------------------
// Bucket b covers elements [b*bucket, min(n, (b+1)*bucket)) and carries
// meta[2b] = min, meta[2b+1] = max over its finite values (0, 0 when it has
// none; a -0.0 min or max is written as +0.0, so every backend agrees on the
// bits). With L = 2^bits - 1 and step = (max - min) / L (fp64), element x gets
// code floor(q) + (u < q - floor(q)) for q = (x - min) / step, u =
// counterUniform(seed, indexBase + i), clamped to [0, L]; step == 0 gives code
// 0. Decoded value: float(min + code * step) in fp64. So E[decoded] = x (up to
// one fp32 rounding) and |decoded - x| < step. Non-finite inputs (which the
// algorithms never pass: such calls fall back to dense) map to: +Inf -> L,
// -Inf and NaN -> 0, except that step == 0 gives code 0 to +Inf as well.
struct MaxMinSpec {
  int bits = 8;         // 1, 2, 4 or 8
  size_t bucket = 512;  // elements per bucket, >= 1
  uint64_t seed = 0;    // streamSeed(...) of this encoding
};
inline size_t maxMinBuckets(size_t n, size_t bucket) { return (n + bucket - 1) / bucket; }

// ---- Block quantization (blockq allgather, ZeRO++ qwZ style) --------------
// Symmetric codes of `bits` (8 or 4) bits, two's complement, packed as above;
// block b covers elements [b*block, min(n, (b+1)*block)) and carries one
// fp32 scale. With Q = 2^(bits-1) - 1 (127, 7) and M = the block's largest
// finite |x|: a block whose values are all finite has s = M / Q (fp32) and
// codes c = rint(x / s) (fp32 division, ties to even) in [-Q, Q]; decoded
// value: float(c) * s. A block holding NaN or +-Inf is flagged by the sign
// bit of its scale (scale = -s, -0.0 when s = 0) and keeps three codes for
// them: -(Q+1) NaN, -Q -Inf, +Q +Inf; its finite values use s = M / (Q - 1)
// and codes in [-(Q-1), Q-1]. So a non-finite value never changes the
// others' scale (only their code range, by one step) and comes back as what
// it was (NaN as the canonical quiet NaN). s is lowered by one ulp where
// Q * s would overflow to Inf; s == 0 (every finite value 0, or M
// underflowing) gives code 0. -0.0 decodes as +0.0.
// Payload: the scales (4 * blocks bytes, little-endian fp32) then the codes.
struct BlockQuantSpec {
  int bits = 8;          // 8 or 4 (fp8: 8)
  size_t block = 2048;   // elements per block, >= 1
  bool fp8 = false;      // e4m3 codes instead of integers (below)
};
inline size_t blockqBlocks(size_t n, size_t block) { return (n + block - 1) / block; }
inline size_t blockqBytes(size_t n, const BlockQuantSpec& spec) {
  return 4 * blockqBlocks(n, spec.block) + packedBytes(n, spec.bits);
}
GC_HOST_DEVICE inline int blockqMaxCode(int bits) { return (1 << (bits - 1)) - 1; }

// fp8 (spec.fp8, the cast allgather's GRADCOMP_AG_CAST=fp8): the same blocks
// and scales, codes are OCP E4M3FN bytes of x / s (bias 7, subnormals, no
// infinities, largest 448 = 0x7E, NaN 0x7F / 0xFF), rounded to nearest even
// and saturated at 448: s = M / 448. A flagged block uses s = M / 416 (its
// largest finite code 0x7D) and keeps 0x7F for NaN, 0x7E / 0xFE for +-Inf.
// The sign of zero is kept. Decoding rejects a NaN code in an unflagged
// block.
GC_HOST_DEVICE inline uint8_t e4m3FromFloat(float v) {  // v finite
  const uint8_t sign = std::signbit(v) ? 0x80 : 0;
  const float a = std::fabs(v);
  int code;
  if (a < 0x1p-6f) {
    code = int(std::rint(a * 512.0f));  // subnormal steps of 2^-9; 8 is the smallest normal
  } else {
    int k;
    const float f = std::frexp(a, &k);  // a = f 2^k, f in [0.5, 1): exponent k - 1
    // (2f - 1) * 8 is exact; a carry out of the mantissa moves the exponent.
    code = (k + 6) * 8 + int(std::rint((2.0f * f - 1.0f) * 8.0f));
  }
  return uint8_t(sign | (code > 0x7E ? 0x7E : code));
}
GC_HOST_DEVICE inline float e4m3ToFloat(uint8_t c) {  // c not a NaN code
  const int e = (c >> 3) & 15, m = c & 7;
  const float mag = e == 0 ? std::ldexp(float(m), -9) : std::ldexp(float(8 + m), e - 10);
  return (c & 0x80) ? -mag : mag;
}

// The canonical quiet NaN (0x7fc00000) on host and device alike.
GC_HOST_DEVICE inline float blockqQuietNaN() {
#if defined(__CUDA_ARCH__)
  return __int_as_float(0x7fc00000);
#else
  return std::numeric_limits<float>::quiet_NaN();
#endif
}

// The scale word of a block (sign bit: the block holds non-finite values).
GC_HOST_DEVICE inline float blockqScale(float maxAbs, bool nonFinite,
                                        const BlockQuantSpec& spec) {
  const float q = spec.fp8 ? (nonFinite ? 416.0f : 448.0f)
                           : float(blockqMaxCode(spec.bits) - (nonFinite ? 1 : 0));
  float s = maxAbs / q;
  if (std::isinf(s * q)) s = std::nextafter(s, 0.0f);
  return nonFinite ? -s : s;  // -0.0f when s == 0: still flagged
}
// Code of x in a block with scale word `scale` (integers: two's complement
// in `bits` bits; fp8: the byte).
GC_HOST_DEVICE inline int blockqEncodeOne(float x, float scale, const BlockQuantSpec& spec) {
  const bool flagged = std::signbit(scale);
  const float s = std::fabs(scale);
  if (spec.fp8) {
    if (std::isnan(x)) return 0x7F;
    if (std::isinf(x)) return x > 0 ? 0x7E : 0xFE;
    if (s == 0.0f) return std::signbit(x) ? 0x80 : 0;
    const int c = e4m3FromFloat(x / s), lim = flagged ? 0x7D : 0x7E;
    return (c & 0x7F) > lim ? (c & 0x80) | lim : c;
  }
  const int q = blockqMaxCode(spec.bits);
  if (std::isnan(x)) return -(q + 1);
  if (std::isinf(x)) return x > 0 ? q : -q;
  if (s == 0.0f) return 0;
  const int lim = flagged ? q - 1 : q;
  const float c = std::rint(x / s);
  return c > float(lim) ? lim : c < float(-lim) ? -lim : int(c);
}
// Decoded value of code c; *ok = false for a code the block cannot hold.
GC_HOST_DEVICE inline float blockqDecodeOne(int c, float scale, const BlockQuantSpec& spec,
                                            bool* ok) {
  const bool flagged = std::signbit(scale);
  if (spec.fp8) {
    const int mag = c & 0x7F;
    if (mag == 0x7F) {
      if (!flagged) *ok = false;
      return blockqQuietNaN();
    }
    if (flagged && mag == 0x7E) return (c & 0x80) ? -HUGE_VALF : HUGE_VALF;
    return e4m3ToFloat(uint8_t(c)) * std::fabs(scale);
  }
  const int q = blockqMaxCode(spec.bits);
  if (flagged && c == -(q + 1)) return blockqQuietNaN();
  if (flagged && (c == q || c == -q)) return c > 0 ? HUGE_VALF : -HUGE_VALF;
  if (c == -(q + 1)) *ok = false;
  return float(c) * std::fabs(scale);
}

// ---- Range-based float (RBF, notes section 6) ----------------------------
// An N-bit word: sign bit (bit N-1) + (N-1)-bit magnitude code c. c = 0 is
// zero; otherwise t = c - 1, e = t >> m, f = t & (2^m - 1) and
// |v| = eps * 2^e * (1 + f / 2^m). Code 1 decodes to eps, spacing doubles
// every 2^m codes, the largest code decodes to eps * rbfUnitMax(N, m): vmax,
// or one eps step below it (rbfEpsForVmax never rounds eps up).
// Encode: |x| < eps/2 -> c = 0, |x| >= vmax (and +-Inf) -> largest code, else
// round to nearest (ties to even f). The sign bit keeps the sign of x, so
// -0.0 round-trips. NaN encodes as +0 (the algorithms never pass one).
struct RbfSpec {
  int bits = 10;     // N, 3..16
  int mantissa = 6;  // m, 0..N-2
  float eps = 0.0f;  // value of code 1; 0 encodes everything as zero
};
inline uint32_t rbfMaxCode(int bits) { return (uint32_t(1) << (bits - 1)) - 1; }
inline double rbfDecodeMagnitude(uint32_t c, int mantissa, double eps) {
  if (c == 0) return 0.0;
  const uint32_t t = c - 1;
  const int e = int(t >> mantissa);
  const uint32_t f = t & ((uint32_t(1) << mantissa) - 1);
  return std::ldexp(eps * (1.0 + std::ldexp(double(f), -mantissa)), e);
}
// Layouts whose binades span at most 2^64 (largest exponent e <= 63), so eps
// and vmax are both normal fp32 numbers for any useful vmax. N = 10 allows
// m >= 3; the default m = N - 4 is valid for every N in 3..16.
inline bool rbfValidLayout(int bits, int mantissa) {
  if (bits < 3 || bits > 16 || mantissa < 0 || mantissa > bits - 2) return false;
  return ((rbfMaxCode(bits) - 1) >> mantissa) <= 63;
}
// vmax / eps for (N, m): vmax is linear in eps.
inline double rbfUnitMax(int bits, int mantissa) {
  return rbfDecodeMagnitude(rbfMaxCode(bits), mantissa, 1.0);
}
// eps = float(vmax / unit), one float step lower where that rounded up, so the
// largest code decodes to at most vmax: no decoded value leaves the sender's
// range, and a vmax near FLT_MAX cannot decode to Inf. eps * unit is exact in
// fp64 (24 + at most m + 1 <= 15 significant bits), as is every code's
// magnitude; the CUDA kernels (device/cuda/quant_rbf.cu epsFor) derive eps the
// same way.
inline float rbfEpsForVmax(double vmax, int bits, int mantissa) {
  const double unit = rbfUnitMax(bits, mantissa);
  const float eps = float(vmax / unit);
  return double(eps) * unit > vmax ? std::nextafter(eps, 0.0f) : eps;
}
// Default mantissa width for N bits: N - 4 (N = 10 -> m = 6, the paper's
// eps0 = 0.002 at vmax = 0.5), at least 0.
inline int rbfDefaultMantissa(int bits) { return bits > 4 ? bits - 4 : 0; }

// ---- Sign majority ties ---------------------------------------------------
// A tie (2 * count == ranks, even P) is decided -1 (negative, the seed paper's
// rule), or by a hash bit every rank computes alike for the same call and
// element: +1 when bit 0 of mix64(seed ^ mix64(index)) is set. The hash costs
// no bits on the wire and has no bias, where ties-to--1 pushes every tied
// coordinate the same way every call.
struct SignTies {
  bool hash = true;
  uint64_t seed = 0;  // streamSeed(0, call, 0, 3) in the sign algorithm
};
inline bool signTieUp(const SignTies& t, uint64_t index) {
  return t.hash && (mix64(t.seed ^ mix64(index)) & 1u);
}

// ---- Chunked real FFT -----------------------------------------------------
// A buffer of n reals is transformed in chunks of `chunk` elements (the last
// one shorter). Chunk c of length L has L/2 + 1 complex bins, stored as
// interleaved (re, im) fp32; chunks follow each other. Forward transforms are
// unnormalized, the inverse divides by L, so inverse(forward(x)) = x.
inline size_t fftChunkCount(size_t n, size_t chunk) { return (n + chunk - 1) / chunk; }
inline size_t fftChunkLength(size_t n, size_t chunk, size_t c) {
  const size_t start = c * chunk;
  return n - start < chunk ? n - start : chunk;
}
inline size_t fftBinsOfLength(size_t len) { return len / 2 + 1; }
// Total complex bins of a chunked spectrum.
inline size_t fftBinCount(size_t n, size_t chunk) {
  if (n == 0) return 0;
  const size_t full = n / chunk, rest = n % chunk;
  return full * fftBinsOfLength(chunk) + (rest ? fftBinsOfLength(rest) : 0);
}
// Bins kept in a chunk with `bins` bins for keep fraction `keep` in [0, 1]:
// round(keep * bins), so every rank computes the same payload size.
inline size_t fftKeepCount(size_t bins, double keep) {
  if (keep <= 0) return 0;
  const double k = std::floor(keep * double(bins) + 0.5);
  return k >= double(bins) ? bins : size_t(k);
}

// ---- Reductions used to agree on a call's parameters ---------------------
struct AbsStats {
  double maxAbs = 0;      // over finite values
  uint64_t nonFinite = 0; // NaN and +-Inf count
};

}  // namespace gradcomp::device
