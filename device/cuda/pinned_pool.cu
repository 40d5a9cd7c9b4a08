// CudaBackend::allocate/deallocate: algorithm scratch in mapped pinned host
// memory. Blocks come in power-of-two classes from 256 bytes; a freed block
// goes to its class's free list and is handed out again, so steady-state
// calls allocate nothing. Everything is returned to the driver when the
// backend is destroyed.
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <vector>

#include "common/log.h"
#include "device/cuda/cuda_backend.h"

namespace gradcomp::device {
namespace {

struct PinnedPool {
  std::mutex mu;
  std::map<int, std::vector<void*>> free;  // class -> blocks
  std::vector<void*> all;
  size_t bytes = 0;
};

int classOf(size_t bytes) {
  int c = 8;  // 256 bytes
  while ((size_t(1) << c) < bytes) ++c;
  return c;
}

std::mutex poolCreation;

}  // namespace

void* CudaBackend::allocate(size_t bytes) {
  PinnedPool* pool;
  {
    std::lock_guard<std::mutex> lock(poolCreation);
    if (pinnedPool_ == nullptr) pinnedPool_ = new PinnedPool;
    pool = static_cast<PinnedPool*>(pinnedPool_);
  }
  const int c = classOf(bytes);
  if (c >= 63) return nullptr;
  std::lock_guard<std::mutex> lock(pool->mu);
  auto& list = pool->free[c];
  if (!list.empty()) {
    void* p = list.back();
    list.pop_back();
    return p;
  }
  void* p = nullptr;
  const size_t size = size_t(1) << c;
  const cudaError_t e = cudaHostAlloc(&p, size, cudaHostAllocMapped | cudaHostAllocPortable);
  if (e != cudaSuccess) {
    GC_WARN("cuda backend: cudaHostAlloc of %zu bytes failed: %s", size, cudaGetErrorString(e));
    return nullptr;
  }
  // Kernels use the host address itself (unified addressing): check once
  // per block that the device sees the same address.
  void* dev = nullptr;
  if (cudaHostGetDevicePointer(&dev, p, 0) != cudaSuccess || dev != p) {
    GC_WARN("cuda backend: pinned block %p has device address %p (no unified addressing)", p, dev);
    cudaFreeHost(p);
    return nullptr;
  }
  pool->all.push_back(p);
  pool->bytes += size;
  GC_TRACE(DEVICE, "cuda backend: pinned pool grew by %zu to %zu bytes", size, pool->bytes);
  return p;
}

void CudaBackend::deallocate(void* p, size_t bytes) {
  if (p == nullptr) return;
  auto* pool = static_cast<PinnedPool*>(pinnedPool_);
  std::lock_guard<std::mutex> lock(pool->mu);
  pool->free[classOf(bytes)].push_back(p);
}

void destroyPinnedPool(void* pool) {
  auto* p = static_cast<PinnedPool*>(pool);
  for (void* block : p->all) cudaFreeHost(block);
  delete p;
}

}  // namespace gradcomp::device
