// Properties of the quantized-family primitives of the CPU reference backend:
// RBF codes, max-min quantization, sign vote packing, and (test_quant_fft.cc)
// the FFT. Each test states the property it checks.
#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "device/cpu/quant_bitpack.h"
#include "device/cpu/quant_primitives.h"

using namespace gradcomp;
using namespace gradcomp::device;

namespace {

RbfSpec rbfSpec(int bits, int mantissa, double vmax) {
  RbfSpec s;
  s.bits = bits;
  s.mantissa = mantissa;
  s.eps = rbfEpsForVmax(vmax, bits, mantissa);
  return s;
}

}  // namespace

TEST_CASE("rbf: code 0..01 is eps, codes are monotone and symmetric, the top is vmax", "[quant]") {
  for (int bits = 3; bits <= 16; ++bits) {
    for (int m = 0; m <= bits - 2; ++m) {
      if (!rbfValidLayout(bits, m)) continue;
      const RbfSpec s = rbfSpec(bits, m, 0.5);
      const uint32_t cmax = rbfMaxCode(bits), signBit = 1u << (bits - 1);
      REQUIRE(cpu::rbfDecodeOne(1, s) == s.eps);
      REQUIRE(cpu::rbfDecodeOne(0, s) == 0.0f);
      REQUIRE(std::fabs(double(cpu::rbfDecodeOne(cmax, s)) - 0.5) <= 0.5 * 1e-6);
      float prev = 0;
      for (uint32_t c = 1; c <= cmax; ++c) {
        const float v = cpu::rbfDecodeOne(c, s);
        REQUIRE(v > prev);  // strictly monotone
        REQUIRE(cpu::rbfDecodeOne(c | signBit, s) == -v);  // symmetric
        // Every representable value encodes to its own code.
        REQUIRE(cpu::rbfEncodeOne(v, s) == c);
        REQUIRE(cpu::rbfEncodeOne(-v, s) == (c | signBit));
        prev = v;
      }
    }
  }
}

TEST_CASE("rbf: the largest code decodes to at most vmax, also for vmax = FLT_MAX", "[quant]") {
  // eps = float(vmax / unit) alone can round up: the top code then decoded
  // above vmax, and to Inf for vmax = FLT_MAX (found by fuzz_quant_payload).
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  for (int bits = 3; bits <= 16; ++bits) {
    for (int m = 0; m <= bits - 2; ++m) {
      if (!rbfValidLayout(bits, m)) continue;
      const uint32_t cmax = rbfMaxCode(bits);
      for (int trial = 0; trial < 64; ++trial) {
        const float vmax = trial == 0 ? FLT_MAX : std::ldexp(mant(rng), int(rng() % 160) - 60);  // eps stays normal
        const RbfSpec s = rbfSpec(bits, m, vmax);
        const float top = cpu::rbfDecodeOne(cmax, s);
        REQUIRE(std::isfinite(top));
        REQUIRE(top <= vmax);
        REQUIRE(double(top) >= double(vmax) * (1 - 1e-6));  // one eps step lower at most
        REQUIRE(cpu::rbfEncodeOne(vmax, s) == cmax);
        REQUIRE(cpu::rbfEncodeOne(-FLT_MAX, s) == (cmax | (1u << (bits - 1))));
      }
    }
  }
}

TEST_CASE("rbf: the paper's layout N=10, m=6, vmax=0.5 gives eps ~ 0.002", "[quant]") {
  const RbfSpec s = rbfSpec(10, 6, 0.5);
  REQUIRE(std::fabs(double(s.eps) - 0.5 / 252.0) < 1e-9);
  REQUIRE(std::fabs(double(s.eps) - 0.002) < 0.00005);
}

TEST_CASE("rbf: relative error <= 2^-(m+1) on [eps, vmax], absolute <= eps/2 below", "[quant]") {
  std::mt19937_64 rng(11);
  for (int bits : {4, 6, 8, 10, 12, 16}) {
    for (int m : {0, 2, bits - 4 > 0 ? bits - 4 : 1, bits - 2}) {
      if (!rbfValidLayout(bits, m)) continue;
      const double vmax = 3.0;
      const RbfSpec s = rbfSpec(bits, m, vmax);
      const double bound = std::ldexp(1.0, -(m + 1));
      std::uniform_real_distribution<double> logu(std::log(double(s.eps)), std::log(vmax));
      for (int k = 0; k < 4000; ++k) {
        const float x = float(std::exp(logu(rng))) * (k % 2 ? -1.0f : 1.0f);
        if (std::fabs(x) < s.eps || std::fabs(x) > vmax) continue;
        const float y = cpu::rbfDecodeOne(cpu::rbfEncodeOne(x, s), s);
        // 2^-24 covers rounding the decoded value to fp32.
        REQUIRE(std::fabs(double(y) - double(x)) <= (bound + 0x1p-23) * std::fabs(double(x)));
        REQUIRE(std::signbit(y) == std::signbit(x));
      }
      std::uniform_real_distribution<double> small(0, s.eps);
      for (int k = 0; k < 1000; ++k) {
        const float x = float(small(rng));
        const float y = cpu::rbfDecodeOne(cpu::rbfEncodeOne(x, s), s);
        REQUIRE(std::fabs(double(y) - double(x)) <= 0.5 * s.eps * (1 + 1e-6));
      }
    }
  }
}

TEST_CASE("rbf: edge values follow the notes (zero, -0, denormals, Inf, NaN, saturation)",
          "[quant]") {
  const RbfSpec s = rbfSpec(10, 6, 0.5);
  const uint32_t cmax = rbfMaxCode(10), signBit = 1u << 9;
  auto rt = [&](float x) { return cpu::rbfDecodeOne(cpu::rbfEncodeOne(x, s), s); };
  REQUIRE(cpu::rbfEncodeOne(0.0f, s) == 0);
  REQUIRE(cpu::rbfEncodeOne(-0.0f, s) == signBit);
  REQUIRE(std::signbit(rt(-0.0f)));
  REQUIRE(rt(-0.0f) == 0.0f);
  const float denorm = std::numeric_limits<float>::denorm_min() * 3;
  REQUIRE(rt(denorm) == 0.0f);
  REQUIRE(rt(-denorm) == 0.0f);
  // Below eps/2 flushes to zero, eps/2 itself rounds up to eps.
  REQUIRE(rt(0.49f * s.eps) == 0.0f);
  REQUIRE(rt(0.5f * s.eps) == s.eps);
  // At or above vmax (and Inf) saturates to +-vmax.
  const float vmax = cpu::rbfDecodeOne(cmax, s);
  REQUIRE(cpu::rbfEncodeOne(0.5f, s) == cmax);
  REQUIRE(rt(7.0f) == vmax);
  REQUIRE(rt(-7.0f) == -vmax);
  REQUIRE(rt(INFINITY) == vmax);
  REQUIRE(rt(-INFINITY) == -vmax);
  REQUIRE(rt(FLT_MAX) == vmax);
  // NaN encodes as +0 (algorithms fall back to dense before encoding one).
  REQUIRE(cpu::rbfEncodeOne(std::nanf(""), s) == 0);
  // eps == 0 (an all-zero chunk): everything encodes to zero.
  RbfSpec zero = s;
  zero.eps = 0;
  REQUIRE(cpu::rbfDecodeOne(cpu::rbfEncodeOne(1.0f, zero), zero) == 0.0f);
}

TEST_CASE("rbf: packed streams round-trip and the decoder rejects set padding bits", "[quant]") {
  const RbfSpec s = rbfSpec(10, 6, 1.0);
  std::vector<float> x = {0.25f, -0.5f, 1.0f, 0.0f, -0.001f, 0.3f, 0.7f};
  std::vector<uint8_t> codes(packedBytes(x.size(), 10), 0xFF);  // writer must clear it
  REQUIRE(cpu::rbfEncode(x.data(), x.size(), s, codes.data(), nullptr).ok());
  std::vector<float> y(x.size(), 1.0f);
  REQUIRE(cpu::rbfDecode(codes.data(), x.size(), s, y.data(), false, -1).ok());
  for (size_t i = 0; i < x.size(); ++i)
    REQUIRE(y[i] == cpu::rbfDecodeOne(cpu::rbfEncodeOne(x[i], s), s));
  REQUIRE(cpu::rbfDecode(codes.data(), x.size(), s, y.data(), true, -1).ok());  // accumulate
  REQUIRE(y[1] == 2 * cpu::rbfDecodeOne(cpu::rbfEncodeOne(x[1], s), s));
  codes.back() |= 0x80;  // 70 bits used of 72
  Status st = cpu::rbfDecode(codes.data(), x.size(), s, y.data(), false, -1);
  REQUIRE(st.code() == Err::RemoteError);
  RbfSpec bad = s;
  bad.mantissa = 9;
  REQUIRE(cpu::rbfEncode(x.data(), x.size(), bad, codes.data(), nullptr).code() == Err::InvalidArgument);
}

TEST_CASE("bit streams: fields of every width round-trip at every offset", "[quant]") {
  for (int w = 1; w <= 16; ++w) {
    const size_t n = 37;
    std::vector<uint8_t> s(packedBytes(n, w), 0);
    for (size_t i = 0; i < n; ++i) cpu::putBits(s.data(), i, w, uint32_t(i * 2654435761u) & ((1u << w) - 1));
    for (size_t i = 0; i < n; ++i)
      REQUIRE(cpu::getBits(s.data(), i, w) == (uint32_t(i * 2654435761u) & ((1u << w) - 1)));
    REQUIRE(cpu::paddingClear(s.data(), n, w));
  }
}

TEST_CASE("maxmin: error < step, exact on constant buckets, reproducible per seed", "[quant]") {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> g(0, 1);
  for (int bits : {1, 2, 4, 8}) {
    for (size_t bucket : {size_t(1), size_t(7), size_t(64), size_t(512)}) {
      const size_t n = 1000;
      std::vector<float> x(n);
      for (auto& v : x) v = g(rng);
      for (size_t i = 100; i < 200; ++i) x[i] = 0.25f;  // constant run
      MaxMinSpec spec{bits, bucket, streamSeed(1, 2, 3, 1)};
      std::vector<float> meta(2 * maxMinBuckets(n, bucket));
      std::vector<uint8_t> codes(packedBytes(n, bits)), codes2(codes.size());
      REQUIRE(cpu::quantizeMaxMin(x.data(), n, spec, 0, meta.data(), codes.data(), nullptr).ok());
      REQUIRE(cpu::quantizeMaxMin(x.data(), n, spec, 0, meta.data(), codes2.data(), nullptr).ok());
      REQUIRE(codes == codes2);
      std::vector<float> y(n);
      REQUIRE(cpu::dequantizeMaxMin(meta.data(), codes.data(), n, spec, y.data(), false, -1).ok());
      for (size_t i = 0; i < n; ++i) {
        const size_t b = i / bucket;
        const double step = (double(meta[2 * b + 1]) - meta[2 * b]) / ((1 << bits) - 1);
        REQUIRE(meta[2 * b] <= x[i]);
        REQUIRE(x[i] <= meta[2 * b + 1]);
        // Analytic bound: one level, plus one fp32 rounding of the result.
        REQUIRE(std::fabs(double(y[i]) - x[i]) <= step + 0x1p-23 * std::fabs(double(x[i])));
        const bool constant = meta[2 * b] == meta[2 * b + 1];
        if (constant) REQUIRE(y[i] == x[i]);
      }
      if (bits >= 2) {  // another seed rounds some element differently
        MaxMinSpec other = spec;
        other.seed = streamSeed(1, 3, 3, 1);
        REQUIRE(cpu::quantizeMaxMin(x.data(), n, other, 0, meta.data(), codes2.data(), nullptr).ok());
        if (bucket > 1) REQUIRE(codes != codes2);
      }
    }
  }
}

TEST_CASE("maxmin: stochastic rounding is unbiased on average over seeds", "[quant]") {
  const size_t n = 64;
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = std::sin(0.37f * float(i)) * 3.0f;
  const int seeds = 4000;
  for (int bits : {1, 4}) {
    std::vector<double> mean(n, 0.0);
    double step = 0;
    for (int s = 0; s < seeds; ++s) {
      MaxMinSpec spec{bits, n, streamSeed(7, uint64_t(s), 0, 1)};
      std::vector<float> meta(2), y(n);
      std::vector<uint8_t> codes(packedBytes(n, bits));
      REQUIRE(cpu::quantizeMaxMin(x.data(), n, spec, 0, meta.data(), codes.data(), nullptr).ok());
      REQUIRE(cpu::dequantizeMaxMin(meta.data(), codes.data(), n, spec, y.data(), false, -1).ok());
      step = (double(meta[1]) - meta[0]) / ((1 << bits) - 1);
      for (size_t i = 0; i < n; ++i) mean[i] += y[i] / seeds;
    }
    // Per element the rounding has variance <= step^2/4: the mean of `seeds`
    // draws is within 5 standard deviations of x.
    const double sigma = step / (2 * std::sqrt(double(seeds)));
    for (size_t i = 0; i < n; ++i) REQUIRE(std::fabs(mean[i] - x[i]) <= 5 * sigma + 1e-6);
  }
}

TEST_CASE("maxmin: edge values and malformed payloads", "[quant]") {
  const float denorm = std::numeric_limits<float>::denorm_min();
  std::vector<float> x = {0.0f, -0.0f, denorm, -denorm, FLT_MAX, -FLT_MAX, 1.0f, INFINITY,
                          -INFINITY, std::nanf("")};
  const size_t n = x.size();
  MaxMinSpec spec{8, n, 3};
  std::vector<float> meta(2), y(n);
  std::vector<uint8_t> codes(packedBytes(n, 8));
  REQUIRE(cpu::quantizeMaxMin(x.data(), n, spec, 0, meta.data(), codes.data(), nullptr).ok());
  REQUIRE(meta[0] == -FLT_MAX);  // min/max over finite values only
  REQUIRE(meta[1] == FLT_MAX);
  REQUIRE(cpu::dequantizeMaxMin(meta.data(), codes.data(), n, spec, y.data(), false, -1).ok());
  for (float v : y) REQUIRE(std::isfinite(v));  // a range of 2*FLT_MAX does not overflow
  REQUIRE(y[4] == FLT_MAX);
  REQUIRE(y[5] == -FLT_MAX);
  REQUIRE(y[7] == FLT_MAX);    // +Inf -> top code
  REQUIRE(y[8] == -FLT_MAX);   // -Inf -> bottom code
  REQUIRE(y[9] == -FLT_MAX);   // NaN -> code 0
  // Tiny values in a tiny range: exact or one step away.
  std::vector<float> t = {0.0f, -0.0f, denorm, -denorm};
  std::vector<float> tm(2), ty(4);
  MaxMinSpec ts{2, 4, 9};
  REQUIRE(cpu::quantizeMaxMin(t.data(), 4, ts, 0, tm.data(), codes.data(), nullptr).ok());
  REQUIRE(cpu::dequantizeMaxMin(tm.data(), codes.data(), 4, ts, ty.data(), false, -1).ok());
  for (size_t i = 0; i < 4; ++i) REQUIRE(std::fabs(ty[i] - t[i]) <= 2 * denorm);

  std::vector<float> bad = meta;
  bad[0] = std::nanf("");
  REQUIRE(cpu::dequantizeMaxMin(bad.data(), codes.data(), n, spec, y.data(), false, -1).code() ==
          Err::RemoteError);
  bad = {2.0f, 1.0f};  // min > max
  REQUIRE(cpu::dequantizeMaxMin(bad.data(), codes.data(), n, spec, y.data(), false, -1).code() ==
          Err::RemoteError);
  MaxMinSpec four{4, n, 3};
  std::vector<uint8_t> c4(packedBytes(3, 4), 0);
  c4.back() = 0xF0;  // 3 codes of 4 bits use 12 of 16 bits
  REQUIRE(cpu::dequantizeMaxMin(meta.data(), c4.data(), 3, four, y.data(), false, -1).code() ==
          Err::RemoteError);
  MaxMinSpec three{3, n, 3};
  REQUIRE(cpu::quantizeMaxMin(x.data(), n, three, 0, meta.data(), codes.data(), nullptr).code() ==
          Err::InvalidArgument);
}

TEST_CASE("maxmin: a zero bound is written +0.0 and a step-0 bucket codes +Inf 0", "[quant]") {
  // The two points the CUDA quantizer once got wrong (a -0.0 bound kept, +Inf
  // given the top code in a constant bucket): pinned here on the CPU, which
  // the [gpu] tests compare bit for bit.
  auto bitsOf = [](float v) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    return u;
  };
  for (int bits : {1, 2, 4, 8}) {
    INFO("bits " << bits);
    std::vector<float> meta(4);
    std::vector<uint8_t> codes(packedBytes(16, bits), 0xAB);
    // Bucket 0: -0.0 is both min and max (constant); bucket 1: -0.0 then 1.
    std::vector<float> x = {-0.0f, -0.0f, -0.0f, -0.0f, -0.0f, 1.0f, -0.0f, 1.0f};
    const MaxMinSpec spec{bits, 4, 5};
    REQUIRE(cpu::quantizeMaxMin(x.data(), 8, spec, 0, meta.data(), codes.data(), nullptr).ok());
    CHECK(bitsOf(meta[0]) == 0u);
    CHECK(bitsOf(meta[1]) == 0u);
    CHECK(bitsOf(meta[2]) == 0u);
    CHECK(meta[3] == 1.0f);
    // Constant buckets, one of them all non-finite: every code 0, +Inf too.
    std::vector<float> c = {1.0f, 1.0f, INFINITY, 1.0f, INFINITY, -INFINITY, std::nanf(""),
                            INFINITY};
    std::vector<float> residual(8);
    REQUIRE(cpu::quantizeMaxMin(c.data(), 8, spec, 0, meta.data(), codes.data(),
                                residual.data()).ok());
    CHECK(meta[0] == 1.0f);
    CHECK(meta[1] == 1.0f);
    CHECK(bitsOf(meta[2]) == 0u);
    CHECK(bitsOf(meta[3]) == 0u);
    for (size_t i = 0; i < packedBytes(8, bits); ++i) CHECK(codes[i] == 0);
    CHECK(residual[2] == INFINITY);  // x - decoded, decoded = min
    CHECK(residual[0] == 0.0f);
  }
}

TEST_CASE("sign: votes, counts and majority with ties to -1", "[quant]") {
  std::vector<float> x = {1.0f, -1.0f, 0.0f, -0.0f, std::nanf(""), 1e-45f, INFINITY, -INFINITY, 2};
  std::vector<uint8_t> votes(packedBytes(x.size(), 1));
  REQUIRE(cpu::signPack(x.data(), x.size(), votes.data()).ok());
  const int expect[] = {1, 0, 0, 0, 0, 1, 1, 0, 1};
  for (size_t i = 0; i < x.size(); ++i) REQUIRE(cpu::getBits(votes.data(), i, 1) == uint32_t(expect[i]));

  // counts: 3 ranks so far (width 2) + this vote -> width 3.
  const size_t n = 4;
  std::vector<uint8_t> in(packedBytes(n, 2), 0), v(packedBytes(n, 1), 0), out(packedBytes(n, 3));
  const uint32_t c[] = {0, 1, 2, 3};
  for (size_t i = 0; i < n; ++i) cpu::putBits(in.data(), i, 2, c[i]);
  v[0] = 0b1010;
  REQUIRE(cpu::signCountAdd(in.data(), 2, 3, v.data(), n, out.data(), 3, -1).ok());
  const uint32_t sum[] = {0, 2, 2, 4};
  for (size_t i = 0; i < n; ++i) REQUIRE(cpu::getBits(out.data(), i, 3) == sum[i]);
  // A count above the ranks it covers is a malformed payload.
  REQUIRE(cpu::signCountAdd(in.data(), 2, 2, v.data(), n, out.data(), 3, -1).code() == Err::RemoteError);
  // Arguments are checked before the payload (as on CUDA): an output too
  // narrow for maxIn + 1 is InvalidArgument even with corrupt votes.
  std::vector<uint8_t> badVotes = {0xF0};  // 4 votes: bits 4..7 are padding
  REQUIRE(cpu::signCountAdd(in.data(), 2, 7, badVotes.data(), n, out.data(), 3, -1).code() ==
          Err::InvalidArgument);
  // A message names the source rank only when there is one (an earlier
  // call's " from rank 3" must not leak into a later message without one).
  std::vector<uint8_t> v5(packedBytes(3, 1), 0), in3(packedBytes(3, 2), 0x80);  // bit 7: padding
  const Status s3 = cpu::signCountAdd(in3.data(), 2, 3, v5.data(), 3, out.data(), 3, 3);
  REQUIRE(s3.code() == Err::RemoteError);
  CHECK(s3.message().find("sign counts from rank 3: padding") != std::string::npos);
  const Status sNone = cpu::signCountAdd(in3.data(), 2, 3, v5.data(), 3, out.data(), 3, -1);
  REQUIRE(sNone.code() == Err::RemoteError);
  CHECK(sNone.message().find("sign counts: padding") != std::string::npos);

  // Majority of 4: counts 0 1 2 3 4 -> 2 is a tie and goes to -1 (the
  // negative rule), or to the side the hash picks for its element index.
  std::vector<uint8_t> counts(packedBytes(5, 3), 0), dec(1);
  for (uint32_t i = 0; i < 5; ++i) cpu::putBits(counts.data(), i, 3, i);
  const SignTies negative{false, 0};
  REQUIRE(cpu::signMajority(counts.data(), 3, 5, 4, negative, 0, dec.data()).ok());
  REQUIRE(dec[0] == 0b11000);
  std::vector<uint8_t> hashed(1);
  int up = 0;
  for (uint64_t base = 0; base < 200; ++base) {  // the tie is element 2, index base + 2
    const SignTies hash{true, 12345};
    REQUIRE(cpu::signMajority(counts.data(), 3, 5, 4, hash, base, hashed.data()).ok());
    const bool tieUp = (hashed[0] >> 2) & 1;
    REQUIRE(tieUp == signTieUp(hash, base + 2));
    REQUIRE((hashed[0] & 0b11011) == 0b11000);  // the other elements as before
    up += tieUp;
  }
  CHECK(up > 70);  // about half of 200 ties go each way
  CHECK(up < 130);
  std::vector<uint8_t> scratch(1);
  REQUIRE(cpu::signMajority(counts.data(), 3, 5, 3, negative, 0, scratch.data()).code() ==
          Err::RemoteError);
  std::vector<float> y(5);
  REQUIRE(cpu::signExpand(dec.data(), 5, 0.5f, -0.5f, y.data(), -1).ok());
  REQUIRE(y == std::vector<float>{-0.5f, -0.5f, -0.5f, 0.5f, 0.5f});
  dec[0] |= 0x80;
  REQUIRE(cpu::signExpand(dec.data(), 5, 0.5f, -0.5f, y.data(), -1).code() == Err::RemoteError);
}
