// CudaSignals: see stream_signals.h.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "common/log.h"
#include "device/cuda/stream_signals.h"

namespace gradcomp::device::exec {
namespace {

// System-scope store of a flag the host (or another stream) polls; the
// fence orders every earlier write of this stream's work before it.
__global__ void signalKernel(uint64_t* flag, uint64_t value) {
  __threadfence_system();
  *reinterpret_cast<volatile uint64_t*>(flag) = value;
  __threadfence_system();
}

// Fallback wait when stream memory operations are unavailable: holds one
// block of one SM until the proxy's done flag arrives (the proxy always
// writes it, also on error and timeout), then writes released.
__global__ void waitKernel(Slot* slot, uint64_t value) {
  const volatile uint64_t* done = &slot->done;
  while (*done < value) __nanosleep(2000);
  __threadfence_system();
  *reinterpret_cast<volatile uint64_t*>(&slot->released) = value;
  __threadfence_system();
}

Status cudaOk(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  (void)cudaGetLastError();
  return makeStatus(Err::SystemError, "CUDA executor: %s failed: %s", what, cudaGetErrorString(e));
}

template <class Fn>
bool entryPoint(const char* name, Fn* out) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess || fn == nullptr) {
    (void)cudaGetLastError();
    return false;
  }
  *out = reinterpret_cast<Fn>(fn);
  return true;
}

}  // namespace

Status CudaSignals::create(int depth, std::unique_ptr<CudaSignals>* out) {
  GC_REQUIRE(depth >= 1, Err::InvalidArgument, "CUDA executor: depth %d must be >= 1", depth);
  std::unique_ptr<CudaSignals> st(new CudaSignals());
  st->depth_ = depth;
  void* p = nullptr;
  GC_CHECK(cudaOk(cudaHostAlloc(&p, sizeof(Slot) * size_t(depth),
                                cudaHostAllocMapped | cudaHostAllocPortable),
                  "cudaHostAlloc of the slots"));
  st->slots_ = static_cast<Slot*>(p);
  std::fill_n(reinterpret_cast<char*>(p), sizeof(Slot) * size_t(depth), 0);
  void* dp = nullptr;
  GC_CHECK(cudaOk(cudaHostGetDevicePointer(&dp, p, 0), "cudaHostGetDevicePointer of the slots"));
  st->slotsDev_ = static_cast<Slot*>(dp);

  // 64-bit stream memory operations (CUDA 12+: enabled by default on
  // supported devices; queried, never assumed).
  int dev = 0, can = 0;
  GC_CHECK(cudaOk(cudaGetDevice(&dev), "cudaGetDevice"));
  CUresult (*attr)(int*, CUdevice_attribute, CUdevice) = nullptr;
  decltype(st->waitValue64_) wait = nullptr, write = nullptr;
  if (entryPoint("cuDeviceGetAttribute", &attr) && entryPoint("cuStreamWaitValue64", &wait) &&
      entryPoint("cuStreamWriteValue64", &write) &&
      attr(&can, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev) == CUDA_SUCCESS && can) {
    st->waitValue64_ = wait;
    st->writeValue64_ = write;
  }
  GC_INFO(DEVICE, "CUDA executor: %d slots on device %d, the stream waits with %s", depth, dev,
          st->waitValue64_ ? "cuStreamWaitValue64" : "a polling kernel");
  *out = std::move(st);
  return Status::Ok();
}

CudaSignals::~CudaSignals() {
  if (slots_) cudaFreeHost(slots_);
}

Status CudaSignals::enqueueReady(int i, uint64_t seq, CUstream_st* stream) {
  uint64_t* flag = &slotsDev_[i].ready;
  if (writeValue64_) {
    const int rc = writeValue64_(stream, reinterpret_cast<unsigned long long>(flag), seq + 1,
                                 CU_STREAM_WRITE_VALUE_DEFAULT);
    GC_REQUIRE(rc == CUDA_SUCCESS, Err::SystemError,
               "CUDA executor: cuStreamWriteValue64 (ready) failed with CUresult %d", rc);
    return Status::Ok();
  }
  signalKernel<<<1, 1, 0, stream>>>(flag, seq + 1);
  return cudaOk(cudaGetLastError(), "ready signal launch");
}

Status CudaSignals::enqueueWaitDone(int i, uint64_t seq, CUstream_st* stream) {
  if (waitValue64_) {
    int rc = waitValue64_(stream, reinterpret_cast<unsigned long long>(&slotsDev_[i].done),
                          seq + 1, CU_STREAM_WAIT_VALUE_GEQ);
    GC_REQUIRE(rc == CUDA_SUCCESS, Err::SystemError,
               "CUDA executor: cuStreamWaitValue64 failed with CUresult %d", rc);
    rc = writeValue64_(stream, reinterpret_cast<unsigned long long>(&slotsDev_[i].released),
                       seq + 1, CU_STREAM_WRITE_VALUE_DEFAULT);
    GC_REQUIRE(rc == CUDA_SUCCESS, Err::SystemError,
               "CUDA executor: cuStreamWriteValue64 (released) failed with CUresult %d", rc);
    return Status::Ok();
  }
  waitKernel<<<1, 1, 0, stream>>>(slotsDev_ + i, seq + 1);
  return cudaOk(cudaGetLastError(), "done wait launch");
}

}  // namespace gradcomp::device::exec
