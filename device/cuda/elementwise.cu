// Element-wise primitives: grid-stride kernels templated on the element
// traits of element_ops.cuh, and their one instantiation point, the dispatch
// below (6 add + 6 divide + 4 scale + 36 convert kernels); copies and fills
// of device memory go to the copy engines.
#include <cuda_runtime.h>

#include "device/cuda/cuda_backend.h"
#include "device/cuda/element_ops.cuh"
#include "device/cuda/kernel_common.cuh"

namespace gradcomp::device {
namespace {

using namespace cuda;

template <class T>
__global__ void addKernel(Ctl ctl, typename T::Storage* dst, const typename T::Storage* a,
                          const typename T::Storage* b, size_t n) {
  if (skipBlock(ctl)) return;
  GC_GRID_STRIDE(i, n) dst[i] = T::add(a[i], b[i]);
}

// Floating: fp64 division, one rounding. Integers truncate (like the CPU).
template <class T>
__global__ void divideKernel(Ctl ctl, typename T::Storage* buf, size_t n, int divisor) {
  if (skipBlock(ctl)) return;
  using S = typename T::Storage;
  GC_GRID_STRIDE(i, n) {
    if constexpr (T::kFloating)
      buf[i] = T::fromDouble(__ddiv_rn(T::toDouble(buf[i]), double(divisor)));
    else
      buf[i] = S(buf[i] / S(divisor));
  }
}

template <class T>
__global__ void scaleKernel(Ctl ctl, typename T::Storage* buf, size_t n, double factor) {
  if (skipBlock(ctl)) return;
  GC_GRID_STRIDE(i, n) buf[i] = T::fromDouble(__dmul_rn(T::toDouble(buf[i]), factor));
}

template <class Dst, class Src>
__global__ void convertKernel(Ctl ctl, typename Dst::Storage* dst,
                              const typename Src::Storage* src, size_t n) {
  if (skipBlock(ctl)) return;
  GC_GRID_STRIDE(i, n) dst[i] = convertOne<Dst, Src>(src[i]);
}

__global__ void subtractKernel(Ctl ctl, float* dst, const float* a, const float* b, size_t n) {
  if (skipBlock(ctl)) return;
  GC_GRID_STRIDE(i, n) dst[i] = __fsub_rn(a[i], b[i]);
}

// Zero-fill of host memory (the copy engines' memset is for device memory).
__global__ void fillZeroKernel(Ctl ctl, uint8_t* dst, size_t bytes) {
  if (skipBlock(ctl)) return;
  const size_t head = (16 - uintptr_t(dst) % 16) % 16 < bytes ? (16 - uintptr_t(dst) % 16) % 16 : bytes;
  const size_t words = (bytes - head) / 16;
  uint4* body = reinterpret_cast<uint4*>(dst + head);
  GC_GRID_STRIDE(i, words) body[i] = make_uint4(0, 0, 0, 0);
  const size_t tail = head + words * 16;
  GC_GRID_STRIDE(i, head) dst[i] = 0;
  GC_GRID_STRIDE(i, bytes - tail) dst[tail + i] = 0;
}

__global__ void checkFiniteKernel(Ctl ctl, const float* x, size_t n) {
  if (skipBlock(ctl)) return;
  GC_GRID_STRIDE(i, n)
    if (!isfinite(x[i])) fail(ctl, keyAt(i), __float_as_uint(x[i]));
}

Status checkFiniteFailure(const OpInfo& op, const FailureRecord& f) {
  return makeStatus(Err::RemoteError, "payload%s: value %llu is not finite (%g)",
                    fromRank(op.source).c_str(), keyPos(f.key),
                    floatOfBits(f.a));
}

Status unknownType(const char* what, DataType t) {
  return makeStatus(Err::InvalidArgument,
                    "cuda %s: dtype value %d is not a DataType (expected int32=2, int64=4, "
                    "float16=6, float32=7, float64=8, bfloat16=9)",
                    what, int(t));
}

}  // namespace

Status CudaBackend::add(void* dst, const void* a, const void* b, size_t n, DataType t) {
  Prim p(state(), "add");
  if (dtypeSize(t) == 0) return unknownType("add", t);
  if (n == 0) return Status::Ok();
  const size_t bytes = n * dtypeSize(t);
  p.reads(a, bytes);
  p.reads(b, bytes);
  p.writes(dst, bytes);
  dispatchType(t, [&](auto traits) {
    using T = decltype(traits);
    using S = typename T::Storage;
    addKernel<T><<<blocksFor(n, 4), kThreads, 0, p.stream()>>>(
        p.ctl(), static_cast<S*>(dst), static_cast<const S*>(a), static_cast<const S*>(b), n);
  });
  return p.launched();
}

Status CudaBackend::divide(void* buf, size_t n, DataType t, int divisor) {
  Prim p(state(), "divide");
  GC_REQUIRE(divisor > 0, Err::InvalidArgument, "cuda divide: divisor %d must be >= 1", divisor);
  if (dtypeSize(t) == 0) return unknownType("divide", t);
  if (n == 0) return Status::Ok();
  p.reads(buf, n * dtypeSize(t));
  p.writes(buf, n * dtypeSize(t));
  dispatchType(t, [&](auto traits) {
    using T = decltype(traits);
    divideKernel<T><<<blocksFor(n, 4), kThreads, 0, p.stream()>>>(
        p.ctl(), static_cast<typename T::Storage*>(buf), n, divisor);
  });
  return p.launched();
}

Status CudaBackend::scale(void* buf, size_t n, DataType t, double factor) {
  Prim p(state(), "scale");
  GC_REQUIRE(isFloating(t), Err::InvalidArgument, "cuda scale: dtype %s is not floating",
             dtypeName(t));
  if (n == 0) return Status::Ok();
  p.reads(buf, n * dtypeSize(t));
  p.writes(buf, n * dtypeSize(t));
  dispatchType(t, [&](auto traits) {
    using T = decltype(traits);
    if constexpr (T::kFloating)
      scaleKernel<T><<<blocksFor(n, 4), kThreads, 0, p.stream()>>>(
          p.ctl(), static_cast<typename T::Storage*>(buf), n, factor);
  });
  return p.launched();
}

Status CudaBackend::copy(void* dst, const void* src, size_t bytes) {
  Prim p(state(), "copy");
  if (bytes == 0 || dst == src) return Status::Ok();
  p.reads(src, bytes);
  p.writes(dst, bytes);
  return p.check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, p.stream()),
                 "cudaMemcpyAsync");
}

Status CudaBackend::zero(void* dst, size_t bytes) {
  Prim p(state(), "zero");
  if (bytes == 0) return Status::Ok();
  p.writes(dst, bytes);
  if (!p.isHost(dst, bytes))
    return p.check(cudaMemsetAsync(dst, 0, bytes, p.stream()), "cudaMemsetAsync");
  fillZeroKernel<<<blocksFor(bytes, 64), kThreads, 0, p.stream()>>>(
      p.ctl(), static_cast<uint8_t*>(dst), bytes);
  return p.launched();
}

Status CudaBackend::convert(void* dst, DataType dstType, const void* src, DataType srcType,
                            size_t n) {
  if (dtypeSize(srcType) == 0) return unknownType("convert (source)", srcType);
  if (dtypeSize(dstType) == 0) return unknownType("convert (destination)", dstType);
  if (dstType == srcType) return copy(dst, src, n * dtypeSize(srcType));
  Prim p(state(), "convert");
  if (n == 0) return Status::Ok();
  p.reads(src, n * dtypeSize(srcType));
  p.writes(dst, n * dtypeSize(dstType));
  dispatchType(srcType, [&](auto srcTraits) {
    using Src = decltype(srcTraits);
    dispatchType(dstType, [&](auto dstTraits) {
      using Dst = decltype(dstTraits);
      convertKernel<Dst, Src><<<blocksFor(n, 4), kThreads, 0, p.stream()>>>(
          p.ctl(), static_cast<typename Dst::Storage*>(dst),
          static_cast<const typename Src::Storage*>(src), n);
    });
  });
  return p.launched();
}

Status CudaBackend::subtract(float* dst, const float* a, const float* b, size_t n) {
  Prim p(state(), "subtract");
  if (n == 0) return Status::Ok();
  p.reads(a, n * 4);
  p.reads(b, n * 4);
  p.writes(dst, n * 4);
  subtractKernel<<<blocksFor(n, 4), kThreads, 0, p.stream()>>>(p.ctl(), dst, a, b, n);
  return p.launched();
}

Status CudaBackend::checkFinite(const float* x, size_t n, int source) {
  Prim p(state(), "checkFinite");
  if (n == 0) return Status::Ok();
  p.reads(x, n * 4);
  p.onFailure(source, &checkFiniteFailure);
  checkFiniteKernel<<<blocksFor(n, 4), kThreads, 0, p.stream()>>>(p.ctl(), x, n);
  return p.launched();
}

}  // namespace gradcomp::device
