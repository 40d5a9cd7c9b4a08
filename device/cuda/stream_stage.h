// The device side of the CUDA executor's slot protocol (exec_slots.h): slots
// and staging buffers in mapped pinned host memory, and the operations the
// calling thread enqueues on the caller's stream. Host header (g++, no CUDA
// include path needed).
//
// On the stream, per call:
//   stage-in:  cudaMemcpyAsync(staging <- src), then a one-thread kernel
//              writes deviceWords[kStagedBytes] and ready (system-scope
//              fence first, so the proxy sees the bytes before the flag).
//   stage-out: wait until done >= seq + 1 -- cuStreamWaitValue64 on the
//              mapped flag when the device supports 64-bit stream memory
//              operations (no SM is held while waiting), else a one-thread
//              kernel polling it with __nanosleep; then a copy kernel that
//              reads status and proxyWords[kOutBytes] from the slot (data-
//              dependent length; nothing copied on error); then released.
// Nothing here blocks the calling thread on the GPU: allocation is
// cudaHostAlloc (no stream sync) and buffers replaced by a larger one are
// freed only at destruction (cudaFreeHost may synchronize the device).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "device/cuda/exec_slots.h"

struct CUstream_st;

namespace gradcomp::device::exec {

class CudaStage {
 public:
  // depth slots; fails when no CUDA device is usable.
  static Status create(int depth, std::unique_ptr<CudaStage>* out);
  ~CudaStage();
  CudaStage(const CudaStage&) = delete;
  CudaStage& operator=(const CudaStage&) = delete;

  int depth() const { return depth_; }
  Slot* slot(int i) { return slots_ + i; }
  void* staging(int i) { return staging_[size_t(i)].ptr; }
  // Grows slot i's buffer (geometrically, 2 MiB granules); slot must be idle.
  Status reserve(int i, size_t bytes);
  Status enqueueStageIn(int i, uint64_t seq, const void* src, size_t bytes, CUstream_st* stream);
  Status enqueueStageOut(int i, uint64_t seq, void* dst, CUstream_st* stream);
  // True when stage-out waits with cuStreamWaitValue64 (else a polling kernel).
  bool usesStreamMemOps() const { return waitValue64_ != nullptr; }

 private:
  CudaStage() = default;
  struct Buffer {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  int depth_ = 0;
  Slot* slots_ = nullptr;  // cudaHostAlloc(Mapped | Portable), zeroed
  Slot* slotsDev_ = nullptr;  // the same memory as the device addresses it
  std::vector<Buffer> staging_;
  std::vector<void*> retired_;  // replaced buffers, freed in the destructor
  // cuStreamWaitValue64 from the driver entry point; nullptr: polling kernel.
  int (*waitValue64_)(CUstream_st*, unsigned long long, uint64_t, unsigned) = nullptr;
};

}  // namespace gradcomp::device::exec
