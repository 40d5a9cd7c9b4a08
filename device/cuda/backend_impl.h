// Internals of CudaBackend shared by its kernel files (compiled by nvcc; the
// host parts also compile with g++ given the CUDA include path).
//
// Every primitive runs as:
//   Prim p(state, "name");            // locks the backend, makes its device current
//   GC_REQUIRE(... argument checks ...);   // Status at the call
//   p.reads(x, bytes); p.writes(...);      // traffic of host-memory arguments
//   p.result(outPtr, &slot);               // scalar result: a mapped pinned slot
//   p.onFailure(source, &formatter, ...);  // how sync() words a data error
//   kernel<<<grid, block, 0, p.stream()>>>(p.ctl(), ...);  // one ctl() per launch
//   return p.launched();
// Kernels begin with `if (skipBlock(ctl)) return;` (kernel_common.cuh): a block
// of a launch after a failed one returns at once. Kernels that find bad data
// call fail(ctl, key, a, b): the smallest key of the failing launch wins (keys
// order positions, so the report names the first bad entry as the CPU does).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "device/backend.h"
#include "device/slab_heap.h"

namespace gradcomp::device::cuda {

// ---- Device-side control words (device memory, one block per backend) ----
// The failure of the epoch (since the last sync): at most one primitive fails,
// since every later launch skips.
struct FailureWords {
  unsigned long long key;  // ~0: none; else the smallest key reported
  unsigned long long a, b; // details that go with `key`
  unsigned int op;         // primitive ordinal (in the epoch) that failed
  int lock;                // guards a/b while keys race
};
// A reduction cell: partial results of the blocks of one launch; the block
// that finishes last publishes them and clears the cell for the next launch.
struct ReduceCell {
  unsigned long long u[4];
  unsigned int done;
  unsigned int pad;
};
// Radix selection state (kthLargestAbs): kept zero between calls.
struct RadixWords {
  unsigned int prefix, mask;
  unsigned long long remaining;
  unsigned int done, pad;
  unsigned long long hist[256];
};
struct ControlBlock {
  FailureWords failure;
  unsigned long long failedLaunch;  // launch ordinal of the failing kernel; 0 none
  unsigned long long flagLaunch;    // a launch-tagged flag one kernel leaves the next
  ReduceCell cell;
  RadixWords radix;
};

// Passed by value to every kernel launch.
struct Ctl {
  ControlBlock* cb;
  unsigned int* hostFailed;  // mapped pinned: becomes 1 when a kernel fails
  unsigned long long launch; // this launch's ordinal (unique, from 1)
  unsigned int op;           // the primitive's ordinal in the epoch
};

// ---- Host bookkeeping ------------------------------------------------------
// Formats a data error found by primitive `op` (sync()).
struct FailureRecord {
  unsigned long long key, a, b;
  unsigned int op;
};
struct OpInfo;
using Formatter = Status (*)(const OpInfo& op, const FailureRecord& f);
struct OpInfo {
  unsigned int op;
  const char* name;
  int source;
  Formatter format;
  unsigned long long p[4];  // the primitive's parameters its messages need
};
// " from rank N" (empty for source < 0), as the CPU messages say it.
std::string fromRank(int source);
// The float whose bits a failure record carries.
inline double floatOfBits(unsigned long long bits) {
  const uint32_t b = uint32_t(bits);
  float f;
  std::memcpy(&f, &b, sizeof f);
  return double(f);
}

// Mapped pinned host memory (pinned_pool.cu): a SlabHeap over cudaHostAlloc,
// kept for the backend's life; its slabs tell host memory from device memory.
class PinnedPool {
 public:
  PinnedPool();
  ~PinnedPool();  // cudaFreeHost of every slab: only at backend destruction
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;
  void* allocate(size_t bytes);
  void release(void* p, size_t bytes);  // back to the free list (caller orders it)
  // True when [p, p + bytes) lies inside one slab of this pool.
  bool contains(const void* p, size_t bytes) const { return heap_.contains(p, bytes); }
  size_t reservedBytes() const { return heap_.slabBytes(); }
  // No kernel uses the blocks any more: the slabs go back to the driver once
  // every block has been released.
  void retire();
  // Forgets every slab without freeing it (the device may still use them:
  // a backend destroyed after a sync that timed out leaks rather than crash).
  void abandon();
  SlabHeap& heap() { return heap_; }

 private:
  SlabHeap heap_;
  std::mutex mu_;
  bool retired_ = false;
};

struct ScalarCopy {
  const void* slot;
  void* dst;
  unsigned int bytes;
  unsigned int op;
};

// The lock rule (docs/design.md, "Who may call what, and when"): `mu` guards
// data, never a wait. No thread holds it across a wait for the device (an
// event) or a driver call that may wait for a stream parked on the proxy
// (slab growth: the heaps call their sources without any lock of ours).
// sync() records its event under `mu`, sets `syncing`, waits without `mu`,
// then finishes under it. While `syncing`, primitives (Prim) and other
// syncs wait on `synced`, so the epoch sync() delivers is exactly what was
// enqueued before its event, and nothing but sync() touches it: on the CUDA
// executor the proxy is the one thread that enqueues and syncs; WAGMA's
// progress thread, which shares the backend, waits as it would for `mu`.
// What the calling thread does -- reserve(), allocate(), park()/unpark(),
// deallocation, traffic() -- never waits for a sync in flight.
struct BackendState {
  // Backend::setRefusal: checked by every primitive before it enqueues.
  std::function<Status()> refusal;
  int device = 0;
  cudaStream_t stream = nullptr;
  cudaEvent_t event = nullptr;
  cudaMemPool_t pool = nullptr;
  double timeoutS = 60;

  std::mutex mu;  // everything below
  bool syncing = false;             // a sync() waits for its event without mu
  std::condition_variable synced;   // syncing went false
  ControlBlock* control = nullptr;      // device memory
  unsigned int* hostFailed = nullptr;   // pinned
  FailureWords* mirror = nullptr;       // pinned: the failure, read back on the error path
  void* scratch = nullptr;              // device memory from `device`, grows
  size_t scratchBytes = 0;
  // Device memory: slabs from the pool (cudaMallocFromPoolAsync on `stream`),
  // blocks reused in stream order (every user is on `stream`).
  std::unique_ptr<SlabHeap> deviceHeap;
  // The proxy contract (cuda_backend.h park/unpark): FFT plans made mid-call.
  bool parked = false, strict = false;
  std::string parkedWhat;
  std::vector<std::string> violations;
  std::atomic<const char*> lastPrimitive{nullptr};

  // The epoch: what was enqueued since the last sync.
  bool pending = false;
  unsigned int ops = 0;
  unsigned long long launches = 0;  // never reset (launch ordinals are unique)
  std::vector<OpInfo> validating;
  std::vector<ScalarCopy> scalars;
  std::vector<std::pair<void*, size_t>> hostFrees;
  std::vector<char*> slotChunks;  // pinned, kSlotChunk bytes each
  size_t slotUsed = 0;            // bytes used over slotChunks

  bool retired = false;  // CudaBackend::retire()
  Traffic traffic;
  PinnedPool pinned;
  void* fftPlans = nullptr;  // fft_cufft.cu's plan cache
};

constexpr size_t kSlotChunk = 4096;

// Carves 256-byte aligned arrays out of one scratch area.
class Carve {
 public:
  explicit Carve(void* base) : p_(static_cast<char*>(base)) {}
  template <class T>
  T* take(size_t count) {
    T* out = reinterpret_cast<T*>(p_ + used_);
    used_ += bytes<T>(count);
    return out;
  }
  template <class T>
  static size_t bytes(size_t count) { return (count * sizeof(T) + 255) / 256 * 256; }

 private:
  char* p_;
  size_t used_ = 0;
};

// Makes the backend's device current for a scope (restores the previous one).
class DeviceScope {
 public:
  explicit DeviceScope(int device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  cudaError_t error() const { return error_; }

 private:
  int previous_ = -1;
  cudaError_t error_ = cudaSuccess;
};

// One primitive's enqueueing: holds the backend's lock for its scope, taken
// once no sync() is waiting for the device (BackendState, the lock rule).
// A primitive that fails at the call (any error through these methods:
// scratch, a slot, a copy, a launch) has its scalar results unregistered when
// it ends: its caller returns at once and the destinations (often locals)
// are gone, so the next sync() must not write them.
class Prim {
 public:
  Prim(BackendState& s, const char* name);
  ~Prim();
  Prim(const Prim&) = delete;
  Prim& operator=(const Prim&) = delete;

  cudaStream_t stream() const { return s_.stream; }
  ControlBlock* control() const { return s_.control; }
  const char* name() const { return name_; }
  // The control words of the next kernel launch.
  Ctl ctl();
  // The ordinal of the launch ctl() returned last.
  unsigned long long lastLaunch() const { return s_.launches; }
  // Host-memory arguments move over PCIe: count them (device memory is free).
  // `touched` (default all) is what a sparse access moves.
  void reads(const void* p, size_t bytes, size_t touched = SIZE_MAX);
  void writes(const void* p, size_t bytes, size_t touched = SIZE_MAX);
  bool isHost(const void* p, size_t bytes) const { return s_.pinned.contains(p, bytes); }
  // A pinned slot for a scalar result copied to *dst at sync().
  template <class T>
  Status result(T* dst, T** slot) {
    void* p = nullptr;
    GC_CHECK(slotFor(sizeof(T), &p));
    s_.scalars.push_back(ScalarCopy{p, dst, unsigned(sizeof(T)), op_});
    s_.traffic.d2hBytes += sizeof(T);
    *slot = static_cast<T*>(p);
    return Status::Ok();
  }
  // `count` scalar results in one slot, copied to dst[0..count) at sync()
  // (at most kSlotChunk bytes).
  template <class T>
  Status resultArray(T* dst, size_t count, T** slot) {
    if (count * sizeof(T) > kSlotChunk) failedAtCall_ = true;
    GC_REQUIRE(count * sizeof(T) <= kSlotChunk, Err::Internal,
               "cuda %s: %zu scalar results exceed a slot chunk", name_, count);
    void* p = nullptr;
    GC_CHECK(slotFor(count * sizeof(T), &p));
    s_.scalars.push_back(ScalarCopy{p, dst, unsigned(count * sizeof(T)), op_});
    s_.traffic.d2hBytes += count * sizeof(T);
    *slot = static_cast<T*>(p);
    return Status::Ok();
  }
  // A result known on the host (empty inputs): delivered at sync() as well.
  template <class T>
  Status resultValue(T* dst, const T& value) {
    T* slot = nullptr;
    GC_CHECK(result(dst, &slot));
    *slot = value;
    return Status::Ok();
  }
  // Registers how sync() words this primitive's data errors.
  void onFailure(int source, Formatter format, unsigned long long p0 = 0,
                 unsigned long long p1 = 0, unsigned long long p2 = 0,
                 unsigned long long p3 = 0);
  // Device scratch of at least `bytes` for this primitive's kernels (grows
  // with stream-ordered allocations; contents undefined).
  Status scratch(size_t bytes, void** out);
  // Scratch bytes stage() takes for [p, p + bytes) (0 for device memory).
  size_t stageBytes(const void* p, size_t bytes) const;
  // A kernel input that lies in host memory and is read more than once (or
  // in small pieces) is copied to device scratch first: one DMA instead of
  // repeated PCIe reads. *out = p itself for device memory.
  template <class T>
  Status stage(const T* p, size_t bytes, Carve& carve, const T** out) {
    const void* staged = nullptr;
    GC_CHECK(stageRaw(p, bytes, carve, &staged));
    *out = static_cast<const T*>(staged);
    return Status::Ok();
  }
  // An output in host memory that kernels write in scattered small pieces
  // (packed streams, a few bytes per thread) is built in device scratch and
  // copied over once: land() after the kernels. *out itself otherwise.
  template <class T>
  T* landing(T* out, size_t bytes, Carve& carve) {
    return bytes && isHost(out, bytes) ? reinterpret_cast<T*>(carve.take<uint8_t>(bytes)) : out;
  }
  Status land(void* out, const void* landing, size_t bytes);
  // After the launches: a launch error (bad configuration, sticky error).
  Status launched();
  // A CUDA runtime call's result, as the primitive's error.
  Status check(cudaError_t e, const char* what);

 private:
  Status slotFor(size_t bytes, void** out);
  Status stageRaw(const void* p, size_t bytes, Carve& carve, const void** out);
  static std::unique_lock<std::mutex> enqueueLock(BackendState& s);
  BackendState& s_;
  std::unique_lock<std::mutex> lock_;
  DeviceScope device_;
  const char* name_;
  unsigned int op_;
  bool failedAtCall_ = false;
};

// Releases the plan cache of fft_cufft.cu (backend destruction).
void destroyFftPlans(void* plans);

}  // namespace gradcomp::device::cuda
