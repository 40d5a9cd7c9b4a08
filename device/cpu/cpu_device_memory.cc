// cpu-device memory (cpu_device_memory.h): the arena, its fault handler, the
// two SlabHeaps and the proxy contract's bookkeeping.
#include "device/cpu/cpu_device_memory.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>

#include "common/log.h"

namespace gradcomp::device {
namespace {

// Virtual address space reserved per backend (PROT_NONE, MAP_NORESERVE: no
// memory is committed until used).
constexpr size_t kArenaBytes = size_t(64) << 30;

// ---- Fault reporting: every live arena, readable from a signal handler ----
constexpr int kMaxArenas = 64;
std::atomic<uintptr_t> gArenaBase[kMaxArenas];
struct sigaction gPreviousSegv;
std::once_flag gHandlerOnce;

void onSegv(int sig, siginfo_t* info, void* uctx) {
  const uintptr_t a = uintptr_t(info->si_addr);
  for (int i = 0; i < kMaxArenas; ++i) {
    const uintptr_t base = gArenaBase[i].load(std::memory_order_relaxed);
    if (base && a >= base && a < base + kArenaBytes) {
      char msg[200];
      const int len = std::snprintf(
          msg, sizeof msg,
          "gradcomp cpu-device: host code touched device memory at %p (outside a primitive): "
          "an algorithm reads or writes an O(n) buffer on the host\n",
          info->si_addr);
      if (len > 0) (void)!write(2, msg, size_t(len));
      break;
    }
  }
  // Hand the fault on (default action: core dump / death by SIGSEGV).
  if (gPreviousSegv.sa_flags & SA_SIGINFO) {
    if (gPreviousSegv.sa_sigaction) gPreviousSegv.sa_sigaction(sig, info, uctx);
    return;
  }
  if (gPreviousSegv.sa_handler != SIG_DFL && gPreviousSegv.sa_handler != SIG_IGN) {
    gPreviousSegv.sa_handler(sig);
    return;
  }
  signal(SIGSEGV, SIG_DFL);
  raise(SIGSEGV);
}

void installHandler() {
  std::call_once(gHandlerOnce, [] {
    struct sigaction sa;
    std::memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = onSegv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &gPreviousSegv);
  });
}

bool inside(const std::map<uintptr_t, size_t>& ranges, uintptr_t p, size_t bytes) {
  auto it = ranges.upper_bound(p);
  if (it == ranges.begin()) return false;
  --it;
  return p >= it->first && p + bytes <= it->first + it->second;
}

// Slabs of at least 1 MiB: steady-state calls draw from their free blocks.
constexpr size_t kMinSlab = size_t(1) << 20;

}  // namespace

CpuDeviceMemory::CpuDeviceMemory() {
  void* p = mmap(nullptr, kArenaBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) {
    GC_WARN("cpu-device backend: cannot reserve %zu GiB of address space: %s", kArenaBytes >> 30,
            std::strerror(errno));
  } else {
    base_ = static_cast<char*>(p);
    installHandler();
    for (int i = 0; i < kMaxArenas; ++i) {
      uintptr_t expected = 0;
      if (gArenaBase[i].compare_exchange_strong(expected, uintptr_t(base_))) {
        slot_ = i;
        break;
      }
    }
  }
  // The arena grows by bumping (mprotect covers [base, used)); slabs never
  // go back before the arena is unmapped.
  SlabHeap::Source dev;
  // The heap calls its source without its lock (slab_heap.h): two threads
  // may bump at once.
  dev.grow = [this](size_t bytes) -> void* {
    size_t at = used_.load();
    do {
      if (!base_ || bytes > kArenaBytes - at) return nullptr;
    } while (!used_.compare_exchange_weak(at, at + bytes));
    return base_ + at;
  };
  deviceHeap_ = std::make_unique<SlabHeap>("cpu-device device memory", std::move(dev), kMinSlab);
  SlabHeap::Source host;
  host.grow = [](size_t bytes) {
    return ::operator new(bytes, std::align_val_t(64), std::nothrow);
  };
  host.free = [](void* slab, size_t) { ::operator delete(slab, std::align_val_t(64)); };
  hostHeap_ = std::make_unique<SlabHeap>("cpu-device host memory", std::move(host), kMinSlab);
}

CpuDeviceMemory::~CpuDeviceMemory() {
  deviceHeap_.reset();
  hostHeap_.reset();
  if (slot_ >= 0) gArenaBase[slot_].store(0);
  if (base_) munmap(base_, kArenaBytes);
}

void* CpuDeviceMemory::allocateDevice(size_t bytes) {
  void* p = deviceHeap_->allocate(bytes ? bytes : 1);
  if (p) {
    std::lock_guard<std::mutex> lock(mu_);
    device_[uintptr_t(p)] = bytes;
  }
  return p;
}

void* CpuDeviceMemory::allocateHost(size_t bytes) {
  void* p = hostHeap_->allocate(bytes ? bytes : 1);
  if (p) {
    std::lock_guard<std::mutex> lock(mu_);
    host_[uintptr_t(p)] = bytes;
  }
  return p;
}

Status CpuDeviceMemory::releaseDevice(void* p, size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = device_.find(uintptr_t(p));
    GC_REQUIRE(it != device_.end() && it->second == bytes, Err::Internal,
               "cpu-device deallocate: %p (%zu bytes) is not a live device allocation", p, bytes);
    device_.erase(it);
  }
  deviceHeap_->release(p, bytes ? bytes : 1);
  return Status::Ok();
}

Status CpuDeviceMemory::releaseHost(void* p, size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = host_.find(uintptr_t(p));
    GC_REQUIRE(it != host_.end() && it->second == bytes, Err::Internal,
               "cpu-device deallocateHost: %p (%zu bytes) is not a live host allocation", p,
               bytes);
    host_.erase(it);
  }
  hostHeap_->release(p, bytes ? bytes : 1);
  return Status::Ok();
}

bool CpuDeviceMemory::isDevice(const void* p, size_t bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  return inside(device_, uintptr_t(p), bytes);
}

bool CpuDeviceMemory::isHost(const void* p, size_t bytes) const {
  std::lock_guard<std::mutex> lock(mu_);
  return inside(host_, uintptr_t(p), bytes);
}

void CpuDeviceMemory::setOpen(bool open) {
  const size_t used = used_.load();
  if (base_ && used) mprotect(base_, used, open ? PROT_READ | PROT_WRITE : PROT_NONE);
}

Status CpuDeviceMemory::reserve(const Backend::Reservation& r) {
  GC_REQUIRE(deviceHeap_->reserve(r.deviceBytes), Err::SystemError,
             "cpu-device: cannot reserve %zu bytes of device memory", r.deviceBytes);
  GC_REQUIRE(hostHeap_->reserve(r.hostBytes), Err::SystemError,
             "cpu-device: cannot reserve %zu bytes of host memory", r.hostBytes);
  return Status::Ok();
}

bool CpuDeviceMemory::reserveWouldGrow(const Backend::Reservation& r) const {
  return deviceHeap_->wouldGrow(r.deviceBytes) || hostHeap_->wouldGrow(r.hostBytes);
}

Status CpuDeviceMemory::prepareFft(size_t n, size_t chunk) {
  std::lock_guard<std::mutex> lock(mu_);
  plans_.insert({n, chunk});
  return Status::Ok();
}

Status CpuDeviceMemory::planFft(size_t n, size_t chunk) {
  std::lock_guard<std::mutex> lock(mu_);
  if (plans_.count({n, chunk})) return Status::Ok();
  if (parked_) {
    char msg[160];
    std::snprintf(msg, sizeof msg, "an FFT plan for %zu values in chunks of %zu made", n, chunk);
    planViolations_.push_back(std::string(msg) + " while the caller's stream was parked on " +
                              what_);
    GC_REQUIRE(!strict_, Err::Internal,
               "proxy contract: %s while the caller's stream was parked on %s (plans are made "
               "by Backend::prepareFft on the calling thread)",
               msg, what_.c_str());
  }
  plans_.insert({n, chunk});
  return Status::Ok();
}

void CpuDeviceMemory::park(const std::string& what, bool strict) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    parked_ = true;
    strict_ = strict;
    what_ = what;
  }
  deviceHeap_->park(what, strict);
  hostHeap_->park(what, strict);
}

Status CpuDeviceMemory::unpark(const Backend::Reservation& promised,
                               Backend::Reservation* drawn) {
  Backend::Reservation used;
  std::vector<std::string> bad = deviceHeap_->unpark(promised.deviceBytes, &used.deviceBytes);
  for (std::string& v : hostHeap_->unpark(promised.hostBytes, &used.hostBytes))
    bad.push_back(std::move(v));
  {
    std::lock_guard<std::mutex> lock(mu_);
    parked_ = false;
    for (std::string& v : planViolations_) bad.push_back(std::move(v));
    planViolations_.clear();
  }
  if (drawn) *drawn = used;
  if (bad.empty()) return Status::Ok();
  std::string all;
  for (const std::string& v : bad) all += (all.empty() ? "" : "; ") + v;
  return makeStatus(Err::Internal, "proxy contract broken: %s", all.c_str());
}

}  // namespace gradcomp::device
