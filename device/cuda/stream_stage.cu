// CudaStage: see stream_stage.h.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "common/log.h"
#include "device/cuda/stream_stage.h"

namespace gradcomp::device::exec {
namespace {

// System-scope store of a flag the host (or the stream) polls; the fence
// orders every earlier write of this stream's work before it.
__global__ void signalKernel(Slot* slot, int which, uint64_t value, uint64_t stagedBytes) {
  if (which == 0) slot->deviceWords[kStagedBytes] = stagedBytes;
  __threadfence_system();
  volatile uint64_t* flag = which == 0 ? &slot->ready : &slot->released;
  *flag = value;
  __threadfence_system();
}

// Fallback wait when stream memory operations are unavailable: holds one
// block of one SM until the proxy's done flag arrives (the proxy always
// writes it, also on error and timeout).
__global__ void waitKernel(const Slot* slot, uint64_t value) {
  const volatile uint64_t* flag = &slot->done;
  while (*flag < value) __nanosleep(2000);
  __threadfence_system();
}

// Copies proxyWords[kOutBytes] bytes when status == 0; the length and status
// are read from mapped memory at run time (data-dependent, set by the proxy).
__global__ void stageOutKernel(const Slot* slot, const uint8_t* staging, uint8_t* dst) {
  const volatile Slot* s = slot;
  if (s->status != 0) return;
  const size_t bytes = size_t(s->proxyWords[kOutBytes]);
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  const size_t tid = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  const bool vec = ((uintptr_t(staging) | uintptr_t(dst)) % 16) == 0;
  size_t done = 0;
  if (vec) {
    const size_t words = bytes / 16;
    const uint4* in = reinterpret_cast<const uint4*>(staging);
    uint4* out = reinterpret_cast<uint4*>(dst);
    for (size_t i = tid; i < words; i += stride) out[i] = in[i];
    done = words * 16;
  }
  for (size_t i = done + tid; i < bytes; i += stride) dst[i] = staging[i];
}

Status cudaOk(cudaError_t e, const char* what) {
  GC_REQUIRE(e == cudaSuccess, Err::SystemError, "CUDA executor: %s failed: %s", what,
             cudaGetErrorString(e));
  return Status::Ok();
}

constexpr size_t kGranule = size_t(2) << 20;

}  // namespace

Status CudaStage::create(int depth, std::unique_ptr<CudaStage>* out) {
  GC_REQUIRE(depth >= 1, Err::InvalidArgument, "CUDA executor: depth %d must be >= 1", depth);
  std::unique_ptr<CudaStage> st(new CudaStage());
  st->depth_ = depth;
  st->staging_.resize(size_t(depth));
  void* p = nullptr;
  GC_CHECK(cudaOk(cudaHostAlloc(&p, sizeof(Slot) * size_t(depth),
                                cudaHostAllocMapped | cudaHostAllocPortable),
                  "cudaHostAlloc of the slots"));
  st->slots_ = static_cast<Slot*>(p);
  void* dp = nullptr;
  GC_CHECK(cudaOk(cudaHostGetDevicePointer(&dp, p, 0), "cudaHostGetDevicePointer of the slots"));
  st->slotsDev_ = static_cast<Slot*>(dp);
  std::fill_n(reinterpret_cast<char*>(p), sizeof(Slot) * size_t(depth), 0);

  // 64-bit stream memory operations (CUDA 12+: enabled by default on
  // supported devices; queried, never assumed).
  int dev = 0, can = 0;
  GC_CHECK(cudaOk(cudaGetDevice(&dev), "cudaGetDevice"));
  void* getAttr = nullptr;
  void* wait = nullptr;
  cudaDriverEntryPointQueryResult q1, q2;
  if (cudaGetDriverEntryPointByVersion("cuDeviceGetAttribute", &getAttr, 12000, cudaEnableDefault,
                                       &q1) == cudaSuccess &&
      q1 == cudaDriverEntryPointSuccess &&
      cudaGetDriverEntryPointByVersion("cuStreamWaitValue64", &wait, 12000, cudaEnableDefault,
                                       &q2) == cudaSuccess &&
      q2 == cudaDriverEntryPointSuccess) {
    auto attr = reinterpret_cast<CUresult (*)(int*, CUdevice_attribute, CUdevice)>(getAttr);
    if (attr(&can, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev) == CUDA_SUCCESS && can)
      st->waitValue64_ = reinterpret_cast<decltype(st->waitValue64_)>(wait);
  }
  (void)cudaGetLastError();
  GC_INFO(DEVICE, "CUDA executor: %d slots, stage-out waits with %s", depth,
          st->waitValue64_ ? "cuStreamWaitValue64" : "a polling kernel");
  *out = std::move(st);
  return Status::Ok();
}

CudaStage::~CudaStage() {
  for (void* p : retired_) cudaFreeHost(p);
  for (Buffer& b : staging_)
    if (b.ptr) cudaFreeHost(b.ptr);
  if (slots_) cudaFreeHost(slots_);
}

Status CudaStage::reserve(int i, size_t bytes) {
  Buffer& b = staging_[size_t(i)];
  if (b.bytes >= bytes && b.ptr) return Status::Ok();
  size_t want = std::max(bytes + bytes / 2, kGranule);
  want = (want + kGranule - 1) / kGranule * kGranule;
  void* p = nullptr;
  GC_CHECK(cudaOk(cudaHostAlloc(&p, want, cudaHostAllocMapped | cudaHostAllocPortable),
                  "cudaHostAlloc of a staging buffer"));
  if (b.ptr) retired_.push_back(b.ptr);
  b.ptr = p;
  b.bytes = want;
  return Status::Ok();
}

Status CudaStage::enqueueStageIn(int i, uint64_t seq, const void* src, size_t bytes,
                                 CUstream_st* stream) {
  if (bytes)
    GC_CHECK(cudaOk(cudaMemcpyAsync(staging(i), src, bytes, cudaMemcpyDefault, stream),
                    "stage-in copy"));
  signalKernel<<<1, 1, 0, stream>>>(slotsDev_ + i, 0, seq + 1, bytes);
  return cudaOk(cudaGetLastError(), "stage-in signal launch");
}

Status CudaStage::enqueueStageOut(int i, uint64_t seq, void* dst, CUstream_st* stream) {
  if (waitValue64_) {
    const int rc = waitValue64_(stream, reinterpret_cast<unsigned long long>(&slotsDev_[i].done),
                                seq + 1, CU_STREAM_WAIT_VALUE_GEQ);
    GC_REQUIRE(rc == CUDA_SUCCESS, Err::SystemError,
               "CUDA executor: cuStreamWaitValue64 failed with CUresult %d", rc);
  } else {
    waitKernel<<<1, 1, 0, stream>>>(slotsDev_ + i, seq + 1);
    GC_CHECK(cudaOk(cudaGetLastError(), "stage-out wait launch"));
  }
  // The length is only known at run time: enough blocks for the largest
  // possible copy (the staging size), the kernel reads the real one.
  const size_t cap = staging_[size_t(i)].bytes;
  const unsigned blocks = unsigned(std::min<size_t>((cap / 16 + 255) / 256 + 1, 1024));
  stageOutKernel<<<blocks, 256, 0, stream>>>(slotsDev_ + i, static_cast<const uint8_t*>(staging(i)),
                                             static_cast<uint8_t*>(dst));
  GC_CHECK(cudaOk(cudaGetLastError(), "stage-out copy launch"));
  signalKernel<<<1, 1, 0, stream>>>(slotsDev_ + i, 1, seq + 1, 0);
  return cudaOk(cudaGetLastError(), "stage-out signal launch");
}

}  // namespace gradcomp::device::exec
