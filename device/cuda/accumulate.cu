// The fused error-feedback load (Backend::accumulate): acc = (add ? acc : 0)
// + fp32(in) in one pass, with the frame's statistics (largest finite |acc|,
// non-finite count, count above a threshold) reduced in the same pass. Vector
// loads (16 bytes of acc, 4 input elements) when both buffers allow them;
// the reduction is a block reduce folded into a cell whose last block
// publishes the scalar result. Semantics: device/cpu/accumulate.cc (max and
// counts do not depend on order, so results are bit-identical).
#include <cfloat>

#include "device/cuda/cuda_backend.h"
#include "device/cuda/element_ops.cuh"
#include "device/cuda/kernel_common.cuh"

namespace gradcomp::device {
namespace {

using namespace cuda;

// fp32 of one input element, one rounding at most (convertOne<F32, T>).
template <class T>
__device__ inline float toF32(typename T::Storage v) {
  if constexpr (std::is_same<T, F32>::value) return v;
  else if constexpr (std::is_same<T, F16>::value || std::is_same<T, BF16>::value) return T::load(v);
  else if constexpr (std::is_same<T, F64>::value) return __double2float_rn(v);
  else return __ll2float_rn((long long)v);
}

// Elements 4g .. 4g + 3 of `in` (16-byte or, for 16-bit types, 8-byte aligned).
template <class T>
__device__ inline void load4(const typename T::Storage* in, size_t g, float v[4]) {
  using S = typename T::Storage;
  if constexpr (sizeof(S) == 2) {
    const uint2 w = reinterpret_cast<const uint2*>(in)[g];
    v[0] = toF32<T>(S(w.x & 0xFFFFu));
    v[1] = toF32<T>(S(w.x >> 16));
    v[2] = toF32<T>(S(w.y & 0xFFFFu));
    v[3] = toF32<T>(S(w.y >> 16));
  } else if constexpr (sizeof(S) == 4) {
    const uint4 w = reinterpret_cast<const uint4*>(in)[g];
    const uint32_t u[4] = {w.x, w.y, w.z, w.w};
    for (int k = 0; k < 4; ++k) {
      S s;
      memcpy(&s, &u[k], 4);
      v[k] = toF32<T>(s);
    }
  } else {
    const ulonglong2 lo = reinterpret_cast<const ulonglong2*>(in)[2 * g];
    const ulonglong2 hi = reinterpret_cast<const ulonglong2*>(in)[2 * g + 1];
    const unsigned long long u[4] = {lo.x, lo.y, hi.x, hi.y};
    for (int k = 0; k < 4; ++k) {
      S s;
      memcpy(&s, &u[k], 8);
      v[k] = toF32<T>(s);
    }
  }
}

struct Stats {
  float max;
  unsigned long long bad, above;
};
struct StatsFold {
  __device__ Stats operator()(const Stats& a, const Stats& b) const {
    return {a.max > b.max ? a.max : b.max, a.bad + b.bad, a.above + b.above};
  }
};

template <class T, bool Vec>
__global__ void accumulateKernel(Ctl ctl, float* acc, const typename T::Storage* in, size_t n,
                                 bool add, float th, bool countAbove, ReduceCell* cell,
                                 AccumulateStats* out) {
  if (skipBlock(ctl)) return;
  Stats s{0.0f, 0, 0};
  auto one = [&](float prior, float x) {
    const float v = __fadd_rn(prior, x);  // 0 + x when !add: -0.0 becomes +0.0, as on the CPU
    const float m = fabsf(v);
    const bool finite = m <= FLT_MAX;  // false for NaN and Inf
    s.bad += !finite;
    s.max = finite && m > s.max ? m : s.max;
    s.above += m > th;  // NaN compares false
    return v;
  };
  size_t done = 0;
  if constexpr (Vec) {
    const size_t groups = n / 4;
    float4* acc4 = reinterpret_cast<float4*>(acc);
    GC_GRID_STRIDE(g, groups) {
      float x[4];
      load4<T>(in, g, x);
      float4 a = add ? acc4[g] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      a.x = one(a.x, x[0]);
      a.y = one(a.y, x[1]);
      a.z = one(a.z, x[2]);
      a.w = one(a.w, x[3]);
      acc4[g] = a;
    }
    done = groups * 4;
  }
  GC_GRID_STRIDE(t, n - done) {
    const size_t i = done + t;
    acc[i] = one(add ? acc[i] : 0.0f, toF32<T>(in[i]));
  }
  using Reduce = cub::BlockReduce<Stats, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  s = Reduce(tmp).Reduce(s, StatsFold());
  if (threadIdx.x == 0) {
    atomicMax(&cell->u[0], (unsigned long long)__float_as_uint(s.max));  // >= 0: bits order
    atomicAdd(&cell->u[1], s.bad);
    atomicAdd(&cell->u[2], s.above);
    if (lastBlockIn(&cell->done)) {
      out->maxAbs = double(__uint_as_float(uint32_t(loadVolatile(&cell->u[0]))));
      out->nonFinite = loadVolatile(&cell->u[1]);
      out->above = countAbove ? loadVolatile(&cell->u[2]) : 0;
      cell->u[0] = cell->u[1] = cell->u[2] = 0;
      cell->done = 0;
    }
  }
}

template <class T>
void launch(Prim& p, float* acc, const void* in, size_t n, bool add, float threshold,
            AccumulateStats* slot) {
  using S = typename T::Storage;
  const S* src = static_cast<const S*>(in);
  const size_t inAlign = sizeof(S) == 2 ? 8 : 16;
  const bool vec = uintptr_t(acc) % 16 == 0 && uintptr_t(in) % inAlign == 0;
  const float th = threshold >= 0 ? threshold : FLT_MAX;  // |x| > FLT_MAX never holds
  ReduceCell* cell = &p.control()->cell;
  if (vec)
    accumulateKernel<T, true><<<blocksFor(n, 16), kThreads, 0, p.stream()>>>(
        p.ctl(), acc, src, n, add, th, threshold >= 0, cell, slot);
  else
    accumulateKernel<T, false><<<blocksFor(n, 4), kThreads, 0, p.stream()>>>(
        p.ctl(), acc, src, n, add, th, threshold >= 0, cell, slot);
}

}  // namespace

Status CudaBackend::accumulate(float* acc, const void* in, DataType inType, size_t n, bool add,
                               float countThreshold, AccumulateStats* stats) {
  Prim p(state(), "accumulate");
  GC_REQUIRE(dtypeSize(inType) != 0, Err::InvalidArgument,
             "cuda accumulate: dtype value %d is not a DataType", int(inType));
  if (n == 0) return p.resultValue(stats, AccumulateStats{});
  AccumulateStats* slot = nullptr;
  GC_CHECK(p.result(stats, &slot));
  p.reads(in, n * dtypeSize(inType));
  if (add) p.reads(acc, n * 4);
  p.writes(acc, n * 4);
  dispatchType(inType, [&](auto traits) {
    launch<decltype(traits)>(p, acc, in, n, add, countThreshold, slot);
  });
  return p.launched();
}

}  // namespace gradcomp::device
