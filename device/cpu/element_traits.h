// Per-DataType element traits for the CPU reference backend: storage type,
// the arithmetic of one add, and exact loads / single-rounding stores used by
// divide and convert. Shared by cpu_backend.cc and tests that need the same
// scalar semantics.
//
// Conversion semantics (one rounding from the exact source value):
// - floating sources load as double (exact), integer sources as int64 (exact);
// - to float16/bfloat16/float32/float64: round to nearest even, once;
// - to int32/int64 from floating: round to nearest even, saturate at the
//   type's range, NaN -> 0; int64 -> int32 saturates.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "common/dtype.h"
#include "device/cpu/float16.h"

namespace gradcomp::device::cpu {

template <class Int>
inline Int saturateFromDouble(double d) {
  if (std::isnan(d)) return 0;
  const double r = std::nearbyint(d);  // default rounding mode: nearest even
  // 2^31 / 2^63 are exact doubles; compare before converting (UB otherwise).
  const double hi = -double(std::numeric_limits<Int>::min());
  if (r >= hi) return std::numeric_limits<Int>::max();
  if (r < -hi) return std::numeric_limits<Int>::min();
  return Int(r);
}

struct F32 {
  using Storage = float;
  static constexpr DataType kType = DataType::Float32;
  static constexpr bool kFloating = true;
  static Storage add(Storage a, Storage b) { return a + b; }
  static double toDouble(Storage v) { return v; }
  static Storage fromDouble(double d) { return float(d); }
  static Storage fromInt64(int64_t v) { return float(v); }  // one rounding (cvtsi2ss)
};

struct F64 {
  using Storage = double;
  static constexpr DataType kType = DataType::Float64;
  static constexpr bool kFloating = true;
  static Storage add(Storage a, Storage b) { return a + b; }
  static double toDouble(Storage v) { return v; }
  static Storage fromDouble(double d) { return d; }
  static Storage fromInt64(int64_t v) { return double(v); }
};

// 16-bit formats: the sum of two values is computed in fp32 and rounded once.
// fp32 has 24 >= 2*11 + 2 significand bits, so by the double-rounding theorem
// (Figueroa) the fp32 sum rounded to half (or bf16) equals the exactly rounded
// sum: computing in fp32 loses nothing.
struct F16 {
  using Storage = uint16_t;
  static constexpr DataType kType = DataType::Float16;
  static constexpr bool kFloating = true;
  static Storage add(Storage a, Storage b) { return floatToHalf(halfToFloat(a) + halfToFloat(b)); }
  static double toDouble(Storage v) { return halfToFloat(v); }
  static Storage fromDouble(double d) { return doubleToHalf(d); }
  static Storage fromFloat(float f) { return floatToHalf(f); }  // same result, faster
  static Storage fromInt64(int64_t v) { return int64ToHalf(v); }
};

struct BF16 {
  using Storage = uint16_t;
  static constexpr DataType kType = DataType::BFloat16;
  static constexpr bool kFloating = true;
  static Storage add(Storage a, Storage b) { return floatToBf16(bf16ToFloat(a) + bf16ToFloat(b)); }
  static double toDouble(Storage v) { return bf16ToFloat(v); }
  static Storage fromDouble(double d) { return doubleToBf16(d); }
  static Storage fromFloat(float f) { return floatToBf16(f); }  // same result, faster
  static Storage fromInt64(int64_t v) { return int64ToBf16(v); }
};

// Integers add with two's complement wraparound (done in unsigned: no UB),
// like NCCL's integer sum.
struct I32 {
  using Storage = int32_t;
  static constexpr DataType kType = DataType::Int32;
  static constexpr bool kFloating = false;
  static Storage add(Storage a, Storage b) { return Storage(uint32_t(a) + uint32_t(b)); }
  static int64_t toInt64(Storage v) { return v; }
  static Storage fromDouble(double d) { return saturateFromDouble<int32_t>(d); }
  static Storage fromInt64(int64_t v) {
    return v > INT32_MAX ? INT32_MAX : v < INT32_MIN ? INT32_MIN : Storage(v);
  }
};

struct I64 {
  using Storage = int64_t;
  static constexpr DataType kType = DataType::Int64;
  static constexpr bool kFloating = false;
  static Storage add(Storage a, Storage b) { return Storage(uint64_t(a) + uint64_t(b)); }
  static int64_t toInt64(Storage v) { return v; }
  static Storage fromDouble(double d) { return saturateFromDouble<int64_t>(d); }
  static Storage fromInt64(int64_t v) { return v; }
};

// Calls f(Traits{}) for t; returns false for a value outside DataType.
template <class F>
bool dispatchType(DataType t, F&& f) {
  switch (t) {
    case DataType::Float32: f(F32{}); return true;
    case DataType::Float64: f(F64{}); return true;
    case DataType::Float16: f(F16{}); return true;
    case DataType::BFloat16: f(BF16{}); return true;
    case DataType::Int32: f(I32{}); return true;
    case DataType::Int64: f(I64{}); return true;
  }
  return false;
}

// One element of Src converted to Dst with a single rounding.
template <class Dst, class Src>
inline typename Dst::Storage convertOne(typename Src::Storage v) {
  if constexpr (Src::kType == DataType::Float32 &&
                (Dst::kType == DataType::Float16 || Dst::kType == DataType::BFloat16))
    return Dst::fromFloat(v);
  else if constexpr (Src::kFloating)
    return Dst::fromDouble(Src::toDouble(v));
  else
    return Dst::fromInt64(Src::toInt64(v));
}

}  // namespace gradcomp::device::cpu
