// Scalar 16-bit conversions (device/cpu/float16.h) and the CPU backend's
// convert/add/divide contract.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "device/backend.h"
#include "device/cpu/element_traits.h"
#include "device/cpu/float16.h"

using namespace gradcomp;
using namespace gradcomp::device;

namespace {

double halfValue(uint16_t h) { return halfToFloat(h); }
double bf16Value(uint16_t b) { return bf16ToFloat(b); }
bool isNaN16(uint16_t bits, int mantBits) {
  const uint16_t expMask = uint16_t(((1u << (15 - mantBits)) - 1) << mantBits);
  return (bits & expMask) == expMask && (bits & ((1u << mantBits) - 1));
}

// Slow reference: the finite 16-bit value nearest to d, ties to the even bit
// pattern, by scanning all patterns of that sign. Overflow per IEEE RNE: Inf
// when |d| >= max + ulp(max)/2.
uint16_t slowNearest(double d, double (*value)(uint16_t), uint16_t maxFinite, double overflowAt) {
  const uint16_t sign = std::signbit(d) ? 0x8000 : 0;
  const double a = std::fabs(d);
  if (a >= overflowAt) return sign | uint16_t(maxFinite + 1);  // Inf follows max finite
  uint16_t best = 0;
  double bestErr = std::numeric_limits<double>::infinity();
  for (uint32_t b = 0; b <= maxFinite; ++b) {
    const double err = std::fabs(value(uint16_t(b)) - a);
    if (err < bestErr || (err == bestErr && (b & 1) == 0)) {
      best = uint16_t(b);
      bestErr = err;
    }
  }
  return sign | best;
}

}  // namespace

TEST_CASE("half: exhaustive round trip half -> float -> half", "[dtype]") {
  size_t nans = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t h = uint16_t(b);
    const float f = halfToFloat(h);
    if (isNaN16(h, 10)) {
      ++nans;
      REQUIRE(std::isnan(f));
      const uint16_t back = floatToHalf(f);
      REQUIRE(isNaN16(back, 10));
      REQUIRE((back & 0x0200) != 0);               // quiet
      REQUIRE((back & 0x8000) == (h & 0x8000));    // sign kept
      REQUIRE(isNaN16(doubleToHalf(double(f)), 10));
      continue;
    }
    REQUIRE(floatToHalf(f) == h);
    REQUIRE(doubleToHalf(double(f)) == h);
  }
  REQUIRE(nans == 2 * 1023);
}

TEST_CASE("bfloat16: exhaustive round trip bf16 -> float -> bf16", "[dtype]") {
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t h = uint16_t(b);
    const float f = bf16ToFloat(h);
    if (isNaN16(h, 7)) {
      REQUIRE(std::isnan(f));
      REQUIRE(isNaN16(floatToBf16(f), 7));
      REQUIRE((floatToBf16(f) & 0x0040) != 0);
      REQUIRE(isNaN16(doubleToBf16(double(f)), 7));
      continue;
    }
    REQUIRE(floatToBf16(f) == h);
    REQUIRE(doubleToBf16(double(f)) == h);
  }
}

TEST_CASE("half: rounding edge cases", "[dtype]") {
  // Ties between 1 (0x3C00) and 1 + 2^-10 (0x3C01) go to the even pattern.
  CHECK(floatToHalf(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);
  CHECK(floatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3C02);  // 0x3C01 is odd: up
  CHECK(floatToHalf(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)) == 0x3C01);
  CHECK(floatToHalf(-(1.0f + 3 * std::ldexp(1.0f, -11))) == 0xBC02);
  // Largest finite 65504; 65519.99 stays, 65520 (the tie) and above overflow.
  CHECK(floatToHalf(65504.0f) == 0x7BFF);
  CHECK(doubleToHalf(65519.999) == 0x7BFF);
  CHECK(floatToHalf(65520.0f) == 0x7C00);
  CHECK(floatToHalf(-65520.0f) == 0xFC00);
  CHECK(doubleToHalf(1e300) == 0x7C00);
  CHECK(floatToHalf(std::numeric_limits<float>::infinity()) == 0x7C00);
  CHECK(floatToHalf(-std::numeric_limits<float>::infinity()) == 0xFC00);
  // Zeros keep their sign; subnormals are exact; half the smallest rounds to 0.
  CHECK(floatToHalf(0.0f) == 0x0000);
  CHECK(floatToHalf(-0.0f) == 0x8000);
  CHECK(floatToHalf(std::ldexp(1.0f, -24)) == 0x0001);
  CHECK(floatToHalf(std::ldexp(1.0f, -25)) == 0x0000);              // tie -> even (0)
  CHECK(floatToHalf(std::ldexp(3.0f, -25)) == 0x0002);              // 1.5 units: tie -> 2
  CHECK(floatToHalf(std::ldexp(1.0f, -25) * 1.0001f) == 0x0001);
  CHECK(floatToHalf(-std::ldexp(1.0f, -26)) == 0x8000);
  CHECK(floatToHalf(std::ldexp(1023.0f, -24)) == 0x03FF);           // largest subnormal
  CHECK(floatToHalf(std::ldexp(1023.5f, -24)) == 0x0400);           // tie rounds up into normal
  CHECK(halfToFloat(0x0001) == std::ldexp(1.0f, -24));
  CHECK(std::signbit(halfToFloat(0x8000)));
  CHECK(std::isnan(halfToFloat(0x7C01)));
  CHECK(floatToHalf(std::numeric_limits<float>::quiet_NaN()) == 0x7E00);
  CHECK(isNaN16(floatToHalf(-std::numeric_limits<float>::signaling_NaN()), 10));
  CHECK(int64ToHalf(65519) == 0x7BFF);
  CHECK(int64ToHalf(65520) == 0x7C00);
  CHECK(int64ToHalf(INT64_MIN) == 0xFC00);
  CHECK(int64ToHalf(-2049) == 0xE800);  // -2048: 2049 is a tie between 2048 and 2050
  CHECK(int64ToHalf(2051) == 0x6802);   // tie between 2050 and 2052 -> 2052
}

TEST_CASE("bfloat16: rounding edge cases", "[dtype]") {
  CHECK(floatToBf16(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);       // tie -> even
  CHECK(floatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3F82);
  CHECK(floatToBf16(-0.0f) == 0x8000);
  CHECK(floatToBf16(std::numeric_limits<float>::max()) == 0x7F80);  // rounds up to Inf
  CHECK(floatToBf16(std::numeric_limits<float>::denorm_min()) == 0x0000);
  CHECK(floatToBf16(std::ldexp(1.0f, -133)) == 0x0001);            // smallest bf16 subnormal
  CHECK(doubleToBf16(std::ldexp(1.0, -134)) == 0x0000);             // tie -> 0
  CHECK(doubleToBf16(std::ldexp(1.0, -134) * (1 + 1e-12)) == 0x0001);
  CHECK(doubleToBf16(1e300) == 0x7F80);
  CHECK(doubleToBf16(-1e300) == 0xFF80);
  CHECK(floatToBf16(std::numeric_limits<float>::quiet_NaN()) == 0x7FC0);
  CHECK(isNaN16(doubleToBf16(std::nan("")), 7));
  // Direct from int64: 2^62 + 2^54 + 1 is just above a tie; via double it would
  // first round to the tie and then to even (down).
  const int64_t v = (int64_t(1) << 62) + (int64_t(1) << 54) + 1;
  CHECK(int64ToBf16(v) == uint16_t(floatToBf16(std::ldexp(1.0f, 62)) + 1));
}

TEST_CASE("double -> half/bf16 is one rounding (matches a slow nearest search)", "[dtype]") {
  std::mt19937_64 rng(7);
  std::vector<double> inputs;
  // Just above/below every tie of a sample of patterns: a double-rounding
  // implementation (double -> float -> half) fails these.
  for (uint32_t b = 0; b < 0x7BFF; b += 37) {
    const double mid = (halfValue(uint16_t(b)) + halfValue(uint16_t(b + 1))) / 2;
    inputs.push_back(mid);
    inputs.push_back(std::nextafter(mid, 0.0));
    inputs.push_back(std::nextafter(mid, 1e9));
    inputs.push_back(mid + std::ldexp(mid, -40));
  }
  std::uniform_real_distribution<double> mant(1, 2);
  std::uniform_int_distribution<int> ex(-27, 17);
  for (int i = 0; i < 400; ++i) inputs.push_back(std::ldexp(mant(rng), ex(rng)));
  for (double d : inputs) {
    INFO("d = " << d);
    REQUIRE(doubleToHalf(d) == slowNearest(d, halfValue, 0x7BFF, 65520.0));
    REQUIRE(doubleToHalf(-d) == slowNearest(-d, halfValue, 0x7BFF, 65520.0));
  }
  // One case where going through float rounds twice: a half tie plus 2^-30.
  const double tricky = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -30);
  CHECK(floatToHalf(float(tricky)) == 0x3C00);  // float already rounded onto the tie
  CHECK(doubleToHalf(tricky) == 0x3C01);
  // bf16 against its slow reference on random doubles.
  const double bfOverflow = std::ldexp(2.0 - std::ldexp(1.0, -8), 127);
  for (int i = 0; i < 40; ++i) {
    const double d = std::ldexp(mant(rng), ex(rng));
    REQUIRE(doubleToBf16(d) == slowNearest(d, bf16Value, 0x7F7F, bfOverflow));
  }
}

TEST_CASE("bfloat16: fast float path equals the generic rounding", "[dtype]") {
  std::mt19937 rng(11);
  for (int i = 0; i < 2000000; ++i) {
    const uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, 4);
    if (std::isnan(f)) continue;
    REQUIRE(floatToBf16(f) == doubleToBf16(double(f)));
  }
}

TEST_CASE("cpu backend: convert between every dtype pair", "[dtype]") {
  Backend& cpu = cpuBackend();
  const DataType all[] = {DataType::Int32, DataType::Int64, DataType::Float16,
                          DataType::Float32, DataType::Float64, DataType::BFloat16};
  // Small integers survive every conversion exactly.
  const double values[] = {0, 1, -1, 2, -7, 100, -255, 256};
  for (DataType src : all)
    for (DataType dst : all) {
      std::vector<char> in(8 * sizeof(values)), mid(8 * sizeof(values));
      REQUIRE(cpu.convert(in.data(), src, values, DataType::Float64, 8).ok());
      REQUIRE(cpu.convert(mid.data(), dst, in.data(), src, 8).ok());
      std::vector<double> back(8);
      REQUIRE(cpu.convert(back.data(), DataType::Float64, mid.data(), dst, 8).ok());
      for (int i = 0; i < 8; ++i) REQUIRE(back[i] == values[i]);
    }
  // float -> int: nearest even, saturation, NaN -> 0.
  const double special[] = {2.5, -2.5, 3.5, 1e20, -1e20, std::nan("")};
  int32_t i32[6];
  REQUIRE(cpu.convert(i32, DataType::Int32, special, DataType::Float64, 6).ok());
  CHECK(i32[0] == 2);
  CHECK(i32[1] == -2);
  CHECK(i32[2] == 4);
  CHECK(i32[3] == INT32_MAX);
  CHECK(i32[4] == INT32_MIN);
  CHECK(i32[5] == 0);
  const int64_t big[] = {INT64_MAX, INT64_MIN};
  REQUIRE(cpu.convert(i32, DataType::Int32, big, DataType::Int64, 2).ok());
  CHECK(i32[0] == INT32_MAX);
  CHECK(i32[1] == INT32_MIN);
  CHECK_FALSE(cpu.convert(i32, DataType(3), big, DataType::Int64, 2).ok());
}

TEST_CASE("cpu backend: add and divide round once", "[dtype]") {
  Backend& cpu = cpuBackend();
  // half: 2048 + 1 is a tie -> 2048; 2048 + 3 -> 2052 (even).
  const uint16_t a[] = {floatToHalf(2048), floatToHalf(2048), floatToHalf(65504), 0x8000};
  const uint16_t b[] = {floatToHalf(1), floatToHalf(3), floatToHalf(16), 0x8000};
  uint16_t out[4];
  REQUIRE(cpu.add(out, a, b, 4, DataType::Float16).ok());
  CHECK(halfToFloat(out[0]) == 2048);
  CHECK(halfToFloat(out[1]) == 2052);
  CHECK(out[2] == 0x7C00);  // 65504 + 16 = 65520, the overflow tie: IEEE RNE gives Inf
  CHECK(out[3] == 0x8000);  // -0 + -0 = -0
  // divide in fp64: 1/3 in float equals the double quotient rounded once.
  float f[] = {1.0f, 7.0f, -0.0f};
  REQUIRE(cpu.divide(f, 3, DataType::Float32, 3).ok());
  CHECK(f[0] == float(1.0 / 3.0));
  CHECK(f[1] == float(7.0 / 3.0));
  CHECK(std::signbit(f[2]));
  int32_t n[] = {7, -7};
  REQUIRE(cpu.divide(n, 2, DataType::Int32, 2).ok());
  CHECK(n[0] == 3);
  CHECK(n[1] == -3);
  int32_t w[] = {INT32_MAX};
  const int32_t one[] = {1};
  REQUIRE(cpu.add(w, w, one, 1, DataType::Int32).ok());
  CHECK(w[0] == INT32_MIN);  // wraps like NCCL
  CHECK_FALSE(cpu.divide(f, 3, DataType::Float32, 0).ok());
}

TEST_CASE("half: fast float path equals the generic rounding", "[dtype]") {
  std::mt19937 rng(13);
  for (int i = 0; i < 2000000; ++i) {
    uint32_t bits = rng();
    if (i % 2) bits = (bits & 0x80FFFFFFu) | ((100u + bits % 50u) << 23);  // near the half range
    float f;
    std::memcpy(&f, &bits, 4);
    if (std::isnan(f)) continue;
    REQUIRE(floatToHalf(f) == doubleToHalf(double(f)));
  }
}
