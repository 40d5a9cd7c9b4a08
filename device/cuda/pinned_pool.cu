// PinnedPool (backend_impl.h): mapped pinned host memory for payloads,
// control words and scalar slots, as a SlabHeap (device/slab_heap.h) whose
// slabs come from cudaHostAlloc. A released block goes to its class's free
// list and is handed out again, so steady-state calls allocate nothing; a
// slab is asked of the driver only by reserve() (the calling thread, before
// the caller's stream is parked) or, against the proxy contract, mid-call
// (reported by unpark). The slabs are registered, which is how the backend
// tells host-memory arguments (PCIe traffic) from device memory.
#include <cuda_runtime.h>

#include "common/log.h"
#include "device/cuda/backend_impl.h"

namespace gradcomp::device::cuda {
namespace {

constexpr size_t kMinSlab = size_t(1) << 20;

void* hostSlab(size_t size) {
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, size, cudaHostAllocMapped | cudaHostAllocPortable);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: keep it from surfacing as a launch error
    GC_WARN("cuda backend: cudaHostAlloc of %zu bytes failed: %s", size, cudaGetErrorString(e));
    return nullptr;
  }
  // Kernels use the host address itself (unified addressing): check once per
  // slab that the device sees the same address.
  void* dev = nullptr;
  if (cudaHostGetDevicePointer(&dev, p, 0) != cudaSuccess || dev != p) {
    (void)cudaGetLastError();
    GC_WARN("cuda backend: pinned block %p has device address %p (no unified addressing)", p,
            dev);
    cudaFreeHost(p);  // a fresh block no kernel has seen: nothing to wait for
    return nullptr;
  }
  GC_TRACE(DEVICE, "cuda backend: pinned slab of %zu bytes", size);
  return p;
}

SlabHeap::Source hostSource() {
  SlabHeap::Source s;
  s.grow = hostSlab;
  s.free = [](void* p, size_t) { (void)cudaFreeHost(p); };
  return s;
}

}  // namespace

PinnedPool::PinnedPool() : heap_("cuda pinned host memory", hostSource(), kMinSlab) {}

void* PinnedPool::allocate(size_t bytes) {
  if (bytes >= (size_t(1) << 47)) return nullptr;  // a size no call can mean
  return heap_.allocate(bytes);
}

void PinnedPool::release(void* p, size_t bytes) {
  if (p == nullptr) return;
  heap_.release(p, bytes);
  std::lock_guard<std::mutex> lock(mu_);
  if (retired_ && heap_.live() == 0) heap_.releaseSlabs();
}

void PinnedPool::retire() {
  std::lock_guard<std::mutex> lock(mu_);
  retired_ = true;
  if (heap_.live() == 0) heap_.releaseSlabs();
}

void PinnedPool::abandon() {
  if (heap_.slabBytes())
    GC_WARN("cuda backend: leaving %zu bytes of pinned memory to the process (the device did "
            "not finish the work that may still use it)", heap_.slabBytes());
  heap_.abandon();
}

PinnedPool::~PinnedPool() = default;  // the heap gives its slabs back

}  // namespace gradcomp::device::cuda
