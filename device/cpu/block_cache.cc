#include "device/cpu/block_cache.h"

#include <new>

namespace gradcomp::device::cpu {
namespace {
constexpr size_t kMinCached = 64 * 1024;  // smaller blocks: the heap is fast enough
}

size_t BlockCache::classOf(size_t bytes) {
  size_t c = kMinCached;
  while (c < bytes) c *= 2;
  return c;
}

BlockCache::~BlockCache() {
  for (auto& [cls, list] : free_)
    for (void* p : list) ::operator delete(p, std::align_val_t(64));
}

void* BlockCache::allocate(size_t bytes) {
  if (bytes < kMinCached) return ::operator new(bytes ? bytes : 1, std::align_val_t(64), std::nothrow);
  const size_t cls = classOf(bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(cls);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      cached_ -= cls;
      return p;
    }
  }
  return ::operator new(cls, std::align_val_t(64), std::nothrow);
}

void BlockCache::deallocate(void* p, size_t bytes) {
  if (p == nullptr) return;
  if (bytes >= kMinCached) {
    const size_t cls = classOf(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    if (cached_ + cls <= cap_) {
      free_[cls].push_back(p);
      cached_ += cls;
      return;
    }
  }
  ::operator delete(p, std::align_val_t(64));
}

}  // namespace gradcomp::device::cpu
