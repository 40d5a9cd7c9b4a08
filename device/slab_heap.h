// One memory space of a backend under the proxy contract (docs/design.md,
// "Who may call what, and when"): while a caller's stream is parked on a call,
// the threads running that call draw memory only from what was reserved
// before; the driver (cudaHostAlloc, stream-ordered pool growth) is called
// only by reserve(), on the calling thread, before the wait is enqueued.
//
// Blocks come in size classes (4 per power of two from 256 bytes: at most 25%
// rounding), carved from slabs the Source provides. A freed block goes to its
// class's free list and is handed out again (the owner orders the release
// after the work that used it, as cudaFreeAsync would). Slabs go back to the
// Source only at destruction.
//
//   allocate(): a free block of the class, else carved from a slab's headroom,
//     else a new slab. A new slab while parked breaks the contract: it is
//     recorded (unpark() reports it) and, in strict mode, refused (nullptr).
//   reserve(b): promises b more bytes to the next call: the largest headroom
//     then covers every byte promised to calls not yet finished.
//   wouldGrow(b): whether reserve(b) would ask the source for a slab now (the
//     CUDA executor then lets earlier calls finish first: CallBudget::plan).
//   park(what) / unpark(promise): bracket one call (one at a time per heap).
//
// Plain C++, thread-safe; shared by the CUDA backend (device and pinned
// spaces) and cpu-device, so CI runs the very accounting a GPU relies on.
// The heap's lock guards its bookkeeping only: the source (cudaHostAlloc,
// pool growth: driver calls that may wait for a parked stream) is called with
// it released, so a reserve() growing on the calling thread never holds up
// the proxy's allocate()/release()/unpark() (docs/design.md, the lock rule).
// Two threads growing at once may each add a slab: a little memory, no harm.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace gradcomp::device {

class SlabHeap {
 public:
  struct Source {
    std::function<void*(size_t bytes)> grow;         // nullptr: no memory
    std::function<void(void* p, size_t bytes)> free;  // at destruction
  };
  // minSlab: the smallest slab asked of the source.
  SlabHeap(std::string name, Source source, size_t minSlab)
      : name_(std::move(name)), source_(std::move(source)), minSlab_(minSlab) {}
  ~SlabHeap() { releaseSlabs(); }
  SlabHeap(const SlabHeap&) = delete;
  SlabHeap& operator=(const SlabHeap&) = delete;

  // No request above this is served (nullptr): far beyond any device, and
  // the class arithmetic below stays clear of overflow.
  static constexpr size_t kMaxBytes = size_t(1) << 48;
  static size_t classBytes(size_t bytes) {
    if (bytes <= 256) return 256;
    size_t base = 256;
    while (base < bytes / 2 + bytes % 2) base *= 2;  // base < bytes <= 2 * base
    const size_t step = base / 4;
    return base + (bytes - base + step - 1) / step * step;
  }

  void* allocate(size_t bytes) {
    if (bytes > kMaxBytes) return nullptr;
    const size_t cls = classBytes(bytes ? bytes : 1);
    std::unique_lock<std::mutex> lock(mu_);
    auto& list = free_[cls];
    if (!list.empty()) {
      void* p = list.back();
      list.pop_back();
      ++live_;
      return p;
    }
    if (void* p = carveLocked(cls)) {
      ++live_;
      return p;
    }
    if (parked_) {
      violations_.push_back(name_ + ": " + std::to_string(cls) + " bytes beyond the " +
                            std::to_string(headroomLocked()) + " reserved, while the caller's "
                            "stream was parked on " + what_);
      if (strict_) return nullptr;
    }
    if (!grow(lock, cls)) return nullptr;
    void* p = carveLocked(cls);
    if (p) ++live_;
    return p;
  }
  void release(void* p, size_t bytes) {
    if (p == nullptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    free_[classBytes(bytes ? bytes : 1)].push_back(p);
    if (live_) --live_;
  }

  // Calling thread: false when the source has no memory for it (the promise
  // is then withdrawn).
  bool reserve(size_t bytes) {
    if (bytes > kMaxBytes) return false;
    std::unique_lock<std::mutex> lock(mu_);
    promised_ += bytes;
    if (largestHeadroomLocked() >= promised_) return true;
    if (grow(lock, promised_)) return true;
    promised_ -= bytes < promised_ ? bytes : promised_;
    return false;
  }
  // Whether reserve(bytes) would grow the heap now. Between this answer and
  // the reserve() of the same thread, other threads only carve what was
  // promised, give back promises (unpark) or add slabs: a "no" stays a "no";
  // a "yes" may turn into a "no".
  bool wouldGrow(size_t bytes) const {
    if (bytes > kMaxBytes) return true;
    std::lock_guard<std::mutex> lock(mu_);
    return largestHeadroomLocked() < promised_ + bytes;
  }
  // strict: refuse growth while parked (GRADCOMP_PROXY_CHECK=error).
  void park(const std::string& what, bool strict) {
    std::lock_guard<std::mutex> lock(mu_);
    parked_ = true;
    strict_ = strict;
    what_ = what;
    carvedInCall_ = 0;
  }
  // Ends the call that was promised `promise` bytes: what it did not carve is
  // no longer held for it. *carved: bytes it carved; returns the contract
  // violations it made (empty: none).
  std::vector<std::string> unpark(size_t promise, size_t* carved) {
    std::lock_guard<std::mutex> lock(mu_);
    parked_ = false;
    const size_t unused = promise > carvedInCall_ ? promise - carvedInCall_ : 0;
    promised_ -= unused < promised_ ? unused : promised_;
    if (carved) *carved = carvedInCall_;
    std::vector<std::string> out;
    out.swap(violations_);
    return out;
  }

  // True when [p, p + bytes) lies inside one slab.
  bool contains(const void* p, size_t bytes) const {
    if (p == nullptr) return false;
    const uintptr_t a = uintptr_t(p);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = slabs_.upper_bound(a);
    if (it == slabs_.begin()) return false;
    --it;
    return a >= it->first && a - it->first + bytes <= it->second.size;
  }
  size_t slabBytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return total_;
  }
  // Blocks handed out and not yet released.
  size_t live() const {
    std::lock_guard<std::mutex> lock(mu_);
    return live_;
  }
  size_t headroom() const {
    std::lock_guard<std::mutex> lock(mu_);
    return headroomLocked();
  }
  // Gives every slab back to the source now (nothing may use them any more).
  void releaseSlabs() {
    std::lock_guard<std::mutex> lock(mu_);
    if (source_.free)
      for (auto& kv : slabs_) source_.free(reinterpret_cast<void*>(kv.first), kv.second.size);
    slabs_.clear();
    free_.clear();
    total_ = 0;
  }
  // Forgets every slab without giving it back (the device may still use it).
  void abandon() {
    std::lock_guard<std::mutex> lock(mu_);
    slabs_.clear();
    free_.clear();
    total_ = 0;
  }

 private:
  struct Slab {
    size_t size;
    size_t used;
  };
  // Best fit over the slabs' headroom: small blocks use up old tails and keep
  // the largest headroom for what was promised.
  void* carveLocked(size_t cls) {
    Slab* best = nullptr;
    uintptr_t bestBase = 0;
    for (auto& kv : slabs_) {
      Slab& s = kv.second;
      if (s.size - s.used < cls) continue;
      if (!best || s.size - s.used < best->size - best->used) {
        best = &s;
        bestBase = kv.first;
      }
    }
    if (!best) return nullptr;
    void* p = reinterpret_cast<void*>(bestBase + best->used);
    best->used += cls;
    carvedInCall_ += cls;
    promised_ -= cls < promised_ ? cls : promised_;
    return p;
  }
  // A new slab of at least `atLeast` bytes. `lock` (held on entry and on
  // return) is released while the source runs: it may be the driver waiting
  // for the device.
  bool grow(std::unique_lock<std::mutex>& lock, size_t atLeast) {
    const size_t size = (std::max(atLeast, minSlab_) + minSlab_ - 1) / minSlab_ * minSlab_;
    if (!source_.grow) return false;
    lock.unlock();
    void* p = source_.grow(size);
    lock.lock();
    if (p == nullptr) return false;
    slabs_[uintptr_t(p)] = Slab{size, 0};
    total_ += size;
    return true;
  }
  size_t largestHeadroomLocked() const {
    size_t m = 0;
    for (const auto& kv : slabs_) m = std::max(m, kv.second.size - kv.second.used);
    return m;
  }
  size_t headroomLocked() const {
    size_t h = 0;
    for (const auto& kv : slabs_) h += kv.second.size - kv.second.used;
    return h;
  }

  const std::string name_;
  const Source source_;
  const size_t minSlab_;
  mutable std::mutex mu_;
  std::map<uintptr_t, Slab> slabs_;
  std::map<size_t, std::vector<void*>> free_;  // class bytes -> blocks
  size_t total_ = 0;
  size_t live_ = 0;
  size_t promised_ = 0;  // bytes promised to calls not yet finished, not yet carved
  bool parked_ = false;
  bool strict_ = false;
  std::string what_;
  size_t carvedInCall_ = 0;
  std::vector<std::string> violations_;
};

}  // namespace gradcomp::device
