// PinnedPool (backend_impl.h): mapped pinned host memory for payloads,
// control words and scalar slots. Blocks come in power-of-two classes from
// 256 bytes; a released block goes to its class's free list and is handed out
// again, so steady-state calls allocate nothing. Every block is registered,
// which is how the backend tells host-memory arguments (PCIe traffic) from
// device memory. Blocks go back to the driver only when the pool is destroyed.
#include <cuda_runtime.h>

#include "common/log.h"
#include "device/cuda/backend_impl.h"

namespace gradcomp::device::cuda {
namespace {

int classOf(size_t bytes) {
  int c = 8;  // 256 bytes
  while (c < 63 && (size_t(1) << c) < bytes) ++c;
  return c;
}

}  // namespace

void* PinnedPool::allocate(size_t bytes) {
  const int c = classOf(bytes);
  if (c >= 48) return nullptr;  // 256 TiB: a size no call can mean
  std::lock_guard<std::mutex> lock(mu_);
  auto& list = free_[c];
  if (!list.empty()) {
    void* p = list.back();
    list.pop_back();
    return p;
  }
  void* p = nullptr;
  const size_t size = size_t(1) << c;
  const cudaError_t e = cudaHostAlloc(&p, size, cudaHostAllocMapped | cudaHostAllocPortable);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: keep it from surfacing as a launch error
    GC_WARN("cuda backend: cudaHostAlloc of %zu bytes failed: %s", size, cudaGetErrorString(e));
    return nullptr;
  }
  // Kernels use the host address itself (unified addressing): check once per
  // block that the device sees the same address.
  void* dev = nullptr;
  if (cudaHostGetDevicePointer(&dev, p, 0) != cudaSuccess || dev != p) {
    (void)cudaGetLastError();
    GC_WARN("cuda backend: pinned block %p has device address %p (no unified addressing)", p,
            dev);
    cudaFreeHost(p);  // a fresh block no kernel has seen: nothing to wait for
    return nullptr;
  }
  blocks_[uintptr_t(p)] = size;
  bytes_ += size;
  GC_TRACE(DEVICE, "cuda backend: pinned pool grew by %zu to %zu bytes", size, bytes_);
  return p;
}

void PinnedPool::release(void* p, size_t bytes) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (retired_) {
    auto it = blocks_.find(uintptr_t(p));
    if (it != blocks_.end()) {
      bytes_ -= it->second;
      blocks_.erase(it);
      cudaFreeHost(p);
    }
    return;
  }
  free_[classOf(bytes)].push_back(p);
}

void PinnedPool::retire() {
  std::lock_guard<std::mutex> lock(mu_);
  retired_ = true;
  for (auto& kv : free_)
    for (void* p : kv.second) {
      auto it = blocks_.find(uintptr_t(p));
      if (it == blocks_.end()) continue;
      bytes_ -= it->second;
      blocks_.erase(it);
      cudaFreeHost(p);
    }
  free_.clear();
}

bool PinnedPool::contains(const void* p, size_t bytes) const {
  if (p == nullptr) return false;
  const uintptr_t a = uintptr_t(p);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.upper_bound(a);
  if (it == blocks_.begin()) return false;
  --it;
  return a >= it->first && a - it->first + bytes <= it->second;
}

size_t PinnedPool::reservedBytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

void PinnedPool::abandon() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!blocks_.empty())
    GC_WARN("cuda backend: leaving %zu bytes of pinned memory to the process (the device did "
            "not finish the work that may still use it)", bytes_);
  blocks_.clear();
  free_.clear();
}

PinnedPool::~PinnedPool() {
  for (auto& kv : blocks_) cudaFreeHost(reinterpret_cast<void*>(kv.first));
}

}  // namespace gradcomp::device::cuda
