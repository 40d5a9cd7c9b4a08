// A cache of freed memory blocks by power-of-two size class, for the CPU
// reference backend's allocate(): algorithms size their scratch per call
// (COO lists, decode buffers), and a fresh multi-megabyte heap block per call
// costs page faults on every call (glibc maps and unmaps large blocks). Like
// a stream-ordered device pool, blocks are reused by the next call of the
// same size class; at most `capBytes` stay cached. Thread-safe.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <vector>

namespace gradcomp::device::cpu {

class BlockCache {
 public:
  explicit BlockCache(size_t capBytes) : cap_(capBytes) {}
  ~BlockCache();
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  // 64-byte aligned; nullptr when out of memory.
  void* allocate(size_t bytes);
  void deallocate(void* p, size_t bytes);

 private:
  static size_t classOf(size_t bytes);
  const size_t cap_;
  std::mutex mu_;
  size_t cached_ = 0;
  std::map<size_t, std::vector<void*>> free_;
};

}  // namespace gradcomp::device::cpu
