// The device side of the CUDA executor's slot protocol (exec_slots.h): slots
// in mapped pinned host memory and the two operations the calling thread
// enqueues on the caller's stream per call. Host header (g++, no CUDA
// include path needed).
//
//   enqueueReady:    ready = seq + 1, ordered after the work enqueued before
//                    (cuStreamWriteValue64, whose default flags put a memory
//                    barrier before the write; else a one-thread kernel with
//                    a system-scope fence).
//   enqueueWaitDone: wait until done >= seq + 1 -- cuStreamWaitValue64 on the
//                    mapped flag when the device supports 64-bit stream memory
//                    operations (no SM is held while waiting), else a
//                    one-thread kernel polling it with __nanosleep -- then
//                    released = seq + 1.
// Nothing here blocks the calling thread on the GPU.
#pragma once

#include <cstdint>
#include <memory>

#include "common/status.h"
#include "device/cuda/exec_slots.h"

struct CUstream_st;

namespace gradcomp::device::exec {

class CudaSignals {
 public:
  // depth slots, allocated with the calling thread's current device (the
  // caller makes the communicator's device current).
  static Status create(int depth, std::unique_ptr<CudaSignals>* out);
  ~CudaSignals();  // frees the slots: only once no stream waits on them
  CudaSignals(const CudaSignals&) = delete;
  CudaSignals& operator=(const CudaSignals&) = delete;

  int depth() const { return depth_; }
  Slot* slot(int i) { return slots_ + i; }
  Status enqueueReady(int i, uint64_t seq, CUstream_st* stream);
  Status enqueueWaitDone(int i, uint64_t seq, CUstream_st* stream);
  // True when the stream waits and writes with 64-bit stream memory
  // operations (else with one-thread kernels).
  bool usesStreamMemOps() const { return waitValue64_ != nullptr; }

 private:
  CudaSignals() = default;
  int depth_ = 0;
  Slot* slots_ = nullptr;     // cudaHostAlloc(Mapped | Portable), zeroed
  Slot* slotsDev_ = nullptr;  // the same memory as the device addresses it
  // cuStreamWaitValue64 / cuStreamWriteValue64 from the driver entry points;
  // nullptr: one-thread kernels instead.
  int (*waitValue64_)(CUstream_st*, unsigned long long, uint64_t, unsigned) = nullptr;
  int (*writeValue64_)(CUstream_st*, unsigned long long, uint64_t, unsigned) = nullptr;
};

}  // namespace gradcomp::device::exec
