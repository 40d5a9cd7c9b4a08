// CudaBackend: the kernels (grid-stride loops templated on the element traits
// of element_ops.cuh) and their one instantiation point, the dispatch below:
// 6 add + 6 divide + 36 convert kernels.
#include <cuda_runtime.h>

#include <algorithm>

#include "common/log.h"

#include "device/cuda/cuda_backend.h"
#include "device/cuda/element_ops.cuh"

namespace gradcomp::device {
namespace {

using namespace cuda;

template <class T>
__global__ void addKernel(typename T::Storage* dst, const typename T::Storage* a,
                          const typename T::Storage* b, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    dst[i] = T::add(a[i], b[i]);
}

// Floating: fp64 division, one rounding. Integers truncate (like the CPU).
template <class T>
__global__ void divideKernel(typename T::Storage* buf, size_t n, int divisor) {
  using S = typename T::Storage;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    if constexpr (T::kFloating)
      buf[i] = T::fromDouble(__ddiv_rn(T::toDouble(buf[i]), double(divisor)));
    else
      buf[i] = S(buf[i] / S(divisor));
  }
}

template <class Dst, class Src>
__global__ void convertKernel(typename Dst::Storage* dst, const typename Src::Storage* src,
                              size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    dst[i] = convertOne<Dst, Src>(src[i]);
}

constexpr int kThreads = 256;
// Enough blocks to fill an H100/H200 several times over; the grid-stride loop
// covers the rest.
constexpr size_t kMaxBlocks = 4096;

unsigned blocksFor(size_t n) {
  return unsigned(std::min<size_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

Status launched(const char* what) {
  const cudaError_t e = cudaGetLastError();
  GC_REQUIRE(e == cudaSuccess, Err::SystemError, "cuda %s: kernel launch failed: %s", what,
             cudaGetErrorString(e));
  return Status::Ok();
}

Status unknownType(const char* what, DataType t) {
  return makeStatus(Err::InvalidArgument, "cuda %s: dtype value %d is not a DataType", what, int(t));
}

}  // namespace

Status CudaBackend::add(void* dst, const void* a, const void* b, size_t n, DataType t) {
  if (dtypeSize(t) == 0) return unknownType("add", t);
  if (n == 0) return Status::Ok();
  const bool known = dispatchType(t, [&](auto traits) {
    using T = decltype(traits);
    using S = typename T::Storage;
    addKernel<T><<<blocksFor(n), kThreads, 0, stream_>>>(
        static_cast<S*>(dst), static_cast<const S*>(a), static_cast<const S*>(b), n);
  });
  if (!known) return unknownType("add", t);
  return launched("add");
}

Status CudaBackend::divide(void* buf, size_t n, DataType t, int divisor) {
  GC_REQUIRE(divisor > 0, Err::InvalidArgument, "cuda divide: divisor %d must be >= 1", divisor);
  if (dtypeSize(t) == 0) return unknownType("divide", t);
  if (n == 0) return Status::Ok();
  const bool known = dispatchType(t, [&](auto traits) {
    using T = decltype(traits);
    divideKernel<T><<<blocksFor(n), kThreads, 0, stream_>>>(
        static_cast<typename T::Storage*>(buf), n, divisor);
  });
  if (!known) return unknownType("divide", t);
  return launched("divide");
}

Status CudaBackend::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return Status::Ok();
  const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_);
  GC_REQUIRE(e == cudaSuccess, Err::SystemError, "cuda copy of %zu bytes failed: %s", bytes,
             cudaGetErrorString(e));
  return Status::Ok();
}

Status CudaBackend::convert(void* dst, DataType dstType, const void* src, DataType srcType,
                            size_t n) {
  if (dtypeSize(srcType) == 0) return unknownType("convert (source)", srcType);
  if (dtypeSize(dstType) == 0) return unknownType("convert (destination)", dstType);
  if (dstType == srcType) return copy(dst, src, n * dtypeSize(srcType));
  if (n == 0) return Status::Ok();
  bool dstKnown = false;
  const bool srcKnown = dispatchType(srcType, [&](auto srcTraits) {
    using Src = decltype(srcTraits);
    dstKnown = dispatchType(dstType, [&](auto dstTraits) {
      using Dst = decltype(dstTraits);
      convertKernel<Dst, Src><<<blocksFor(n), kThreads, 0, stream_>>>(
          static_cast<typename Dst::Storage*>(dst), static_cast<const typename Src::Storage*>(src),
          n);
    });
  });
  if (!srcKnown) return unknownType("convert (source)", srcType);
  if (!dstKnown) return unknownType("convert (destination)", dstType);
  return launched("convert");
}

CudaBackend::~CudaBackend() {
  if (fftPlans_) destroyFftPlans(fftPlans_);
  if (pinnedPool_) destroyPinnedPool(pinnedPool_);
  if (ws_) cudaFree(ws_);
  if (dres_) cudaFree(dres_);
  if (hres_) cudaFreeHost(hres_);
}

size_t CudaBackend::workspaceBytes(KernelFamily family, size_t n) {
  // Tile totals of the reduce-then-scan (kernel_common.cuh) plus the family's
  // own arrays; 256-byte alignment slack per array.
  const size_t tiles = (n + 2047) / 2048 + 1;
  const size_t slack = 8 * 256;
  switch (family) {
    case KernelFamily::Select: return tiles * 16 + 256 * 8 * 2 + slack;
    case KernelFamily::Scatter: return slack;
    case KernelFamily::DenseStream: return tiles * 16 + n * 24 + slack;
    case KernelFamily::Quant: return 4096 * 24 + slack;
    case KernelFamily::Fft: return tiles * 16 + n * 12 + slack;  // flags + spectrum copy
  }
  return slack;
}

Status CudaBackend::reserve(size_t n) {
  size_t most = 0;
  for (KernelFamily f : {KernelFamily::Select, KernelFamily::Scatter, KernelFamily::DenseStream,
                         KernelFamily::Quant, KernelFamily::Fft})
    most = std::max(most, workspaceBytes(f, n));
  void* p = nullptr;
  return scratch(most, &p);
}

Status CudaBackend::scratch(size_t bytes, void** out) {
  if (bytes > wsBytes_) {
    // Grows rarely (the largest call so far); freeing waits for work that may
    // still use the old buffer, which only this backend's stream enqueues.
    if (ws_) {
      GC_CHECK(synchronize());
      cudaFree(ws_);
      ws_ = nullptr;
      wsBytes_ = 0;
    }
    const size_t want = std::max(bytes + bytes / 4, size_t(1) << 20);
    const cudaError_t e = cudaMalloc(&ws_, want);
    GC_REQUIRE(e == cudaSuccess, Err::SystemError, "cuda workspace of %zu bytes: %s", want,
               cudaGetErrorString(e));
    wsBytes_ = want;
    GC_INFO(DEVICE, "cuda backend workspace: %zu bytes", want);
  }
  *out = ws_;
  return Status::Ok();
}

Status CudaBackend::resetResults() {
  if (dres_ == nullptr) {
    cudaError_t e = cudaMalloc(&dres_, kResultWords * sizeof(uint64_t));
    if (e == cudaSuccess) e = cudaHostAlloc(&hres_, kResultWords * sizeof(uint64_t), 0);
    GC_REQUIRE(e == cudaSuccess, Err::SystemError, "cuda results words: %s", cudaGetErrorString(e));
  }
  // Words 0..7 are counters (0), 8..15 first-bad positions (~0).
  cudaError_t e = cudaMemsetAsync(dres_, 0, 8 * sizeof(uint64_t), stream_);
  if (e == cudaSuccess) e = cudaMemsetAsync(dres_ + 8, 0xFF, 8 * sizeof(uint64_t), stream_);
  GC_REQUIRE(e == cudaSuccess, Err::SystemError, "cuda results reset: %s", cudaGetErrorString(e));
  return Status::Ok();
}

Status CudaBackend::fetchResults(uint64_t* host) {
  const cudaError_t e = cudaMemcpyAsync(hres_, dres_, kResultWords * sizeof(uint64_t),
                                        cudaMemcpyDeviceToHost, stream_);
  GC_REQUIRE(e == cudaSuccess, Err::SystemError, "cuda results copy: %s", cudaGetErrorString(e));
  GC_CHECK(synchronize());
  std::copy(hres_, hres_ + kResultWords, host);
  return Status::Ok();
}

Status CudaBackend::synchronize() {
  const cudaError_t e = cudaStreamSynchronize(stream_);
  GC_REQUIRE(e == cudaSuccess, Err::SystemError, "cuda stream synchronize failed: %s",
             cudaGetErrorString(e));
  return Status::Ok();
}

int cudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

}  // namespace gradcomp::device
