// Device-side element traits: the CUDA twin of device/cpu/element_traits.h,
// with the same contract (see there). Rounding uses the _rn intrinsics so no
// contraction or mode ever changes a result.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/dtype.h"

namespace gradcomp::device::cuda {

template <class Int>
__device__ inline Int saturateFromDouble(double d, Int lo, Int hi) {
  if (isnan(d)) return 0;
  const double r = rint(d);        // nearest even
  const double top = -double(lo);  // 2^31 or 2^63, exact
  if (r >= top) return hi;
  if (r < -top) return lo;
  return Int(r);
}

struct F32 {
  using Storage = float;
  static constexpr bool kFloating = true;
  __device__ static Storage add(Storage a, Storage b) { return __fadd_rn(a, b); }
  __device__ static double toDouble(Storage v) { return v; }
  __device__ static Storage fromDouble(double d) { return __double2float_rn(d); }
  __device__ static Storage fromInt64(int64_t v) { return __ll2float_rn(v); }
};

struct F64 {
  using Storage = double;
  static constexpr bool kFloating = true;
  __device__ static Storage add(Storage a, Storage b) { return __dadd_rn(a, b); }
  __device__ static double toDouble(Storage v) { return v; }
  __device__ static Storage fromDouble(double d) { return d; }
  __device__ static Storage fromInt64(int64_t v) { return __ll2double_rn(v); }
};

// 16-bit floats travel as raw uint16_t; arithmetic in fp32, one rounding.
struct F16 {
  using Storage = uint16_t;
  static constexpr bool kFloating = true;
  __device__ static float load(Storage v) {
    __half_raw r;
    r.x = v;
    return __half2float(__half(r));
  }
  __device__ static Storage raw(__half h) { return __half_raw(h).x; }
  __device__ static Storage add(Storage a, Storage b) {
    return raw(__float2half_rn(__fadd_rn(load(a), load(b))));
  }
  __device__ static double toDouble(Storage v) { return load(v); }
  __device__ static Storage fromDouble(double d) { return raw(__double2half(d)); }
  __device__ static Storage fromInt64(int64_t v) { return raw(__ll2half_rn(v)); }
};

struct BF16 {
  using Storage = uint16_t;
  static constexpr bool kFloating = true;
  __device__ static float load(Storage v) {
    __nv_bfloat16_raw r;
    r.x = v;
    return __bfloat162float(__nv_bfloat16(r));
  }
  __device__ static Storage raw(__nv_bfloat16 h) { return __nv_bfloat16_raw(h).x; }
  __device__ static Storage add(Storage a, Storage b) {
    return raw(__float2bfloat16_rn(__fadd_rn(load(a), load(b))));
  }
  __device__ static double toDouble(Storage v) { return load(v); }
  __device__ static Storage fromDouble(double d) { return raw(__double2bfloat16(d)); }
  __device__ static Storage fromInt64(int64_t v) { return raw(__ll2bfloat16_rn(v)); }
};

struct I32 {
  using Storage = int32_t;
  static constexpr bool kFloating = false;
  __device__ static Storage add(Storage a, Storage b) { return Storage(uint32_t(a) + uint32_t(b)); }
  __device__ static int64_t toInt64(Storage v) { return v; }
  __device__ static Storage fromDouble(double d) {
    return saturateFromDouble<int32_t>(d, INT32_MIN, INT32_MAX);
  }
  __device__ static Storage fromInt64(int64_t v) {
    return v > INT32_MAX ? INT32_MAX : v < INT32_MIN ? INT32_MIN : Storage(v);
  }
};

struct I64 {
  using Storage = int64_t;
  static constexpr bool kFloating = false;
  __device__ static Storage add(Storage a, Storage b) { return Storage(uint64_t(a) + uint64_t(b)); }
  __device__ static int64_t toInt64(Storage v) { return v; }
  __device__ static Storage fromDouble(double d) {
    return saturateFromDouble<int64_t>(d, INT64_MIN, INT64_MAX);
  }
  __device__ static Storage fromInt64(int64_t v) { return v; }
};

template <class Dst, class Src>
__device__ inline typename Dst::Storage convertOne(typename Src::Storage v) {
  if constexpr (Src::kFloating)
    return Dst::fromDouble(Src::toDouble(v));
  else
    return Dst::fromInt64(Src::toInt64(v));
}

// Host-side dispatch on the runtime DataType; false for an unknown value.
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

}  // namespace gradcomp::device::cuda
