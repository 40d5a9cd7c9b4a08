// The flag words the CUDA executor's three parties share: the caller's CUDA
// stream (device side), the proxy thread (runs the collective), and the
// calling thread (enqueues). One Slot per in-flight call, in mapped pinned
// host memory on a GPU (plain memory when a host thread stands in for the
// stream in tests). Plain C++: compiles with g++ and needs no CUDA.
//
// The algorithm works on the caller's buffers in device memory directly (no
// staging): the stream only tells the proxy when the call's inputs are
// ready and waits until the proxy's kernels have written the result.
// Protocol for call `seq` in slot seq % depth (every flag holds seq + 1, so a
// reused slot never shows a stale value as current and nothing wraps):
//   1. stream:  after the work enqueued before the call   ready    = seq + 1
//   2. proxy:   wait ready, run the algorithm on the caller's buffers (its
//               own stream), wait for its kernels, write status, then
//                                                          done     = seq + 1
//   3. stream:  wait done, then                            released = seq + 1
//               (work the caller enqueues after the call runs after this)
//   4. caller:  reuses the slot for seq + depth once released == seq + 1
// Each writer publishes its words before its flag (release order); each
// reader reads the flag before the words (acquire order). The proxy always
// writes done, on success, error, timeout or shutdown, so a stream waiting
// on a slot never hangs.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gradcomp::device::exec {

// 128 bytes: one slot per PCIe/cache line pair, no false sharing between slots.
struct alignas(128) Slot {
  uint64_t ready;     // stream -> proxy
  uint64_t done;      // proxy -> stream
  uint64_t released;  // stream -> caller
  uint64_t status;    // proxy -> anyone: 0 ok, else the gradcomp::Err value
  uint64_t reserved[12];
};
static_assert(sizeof(Slot) == 128, "Slot must stay one 128-byte line");

// Host-side accessors: the GPU writes these words over PCIe (stream memory
// operations or a kernel's system-scope stores), so host code reads them
// with acquire loads on plain memory, never through a cached copy.
inline uint64_t loadAcquire(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
inline void storeRelease(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

}  // namespace gradcomp::device::exec
