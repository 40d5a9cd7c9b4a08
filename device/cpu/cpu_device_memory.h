// The memory of a cpu-device backend (cpu_device_backend.h): its two spaces
// and the proxy contract (device/backend.h, docs/design.md) enforced as a GPU
// needs it, so CI finds any schedule that allocates or plans mid-call.
//
// - Device space: slabs carved from one address-space arena that is
//   PROT_NONE except while primitives run (setOpen); a fault inside it is
//   reported as host code touching device memory.
// - Host space: slabs from the heap.
// - Both spaces are SlabHeaps (device/slab_heap.h), the allocator the CUDA
//   backend uses: reserve() before a call, park()/unpark() around it; a slab
//   grown or an FFT plan made while parked is a violation, refused in strict
//   mode.
// - Live allocations are registered so primitives can check that every
//   argument lies inside memory of this backend.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "device/backend.h"
#include "device/slab_heap.h"

namespace gradcomp::device {

class CpuDeviceMemory {
 public:
  CpuDeviceMemory();
  ~CpuDeviceMemory();
  CpuDeviceMemory(const CpuDeviceMemory&) = delete;
  CpuDeviceMemory& operator=(const CpuDeviceMemory&) = delete;

  void* allocateDevice(size_t bytes);
  void* allocateHost(size_t bytes);
  // Ordered by the caller (inside sync, after the primitives before).
  Status releaseDevice(void* p, size_t bytes);
  Status releaseHost(void* p, size_t bytes);
  // [p, p + bytes) inside one live allocation of the space.
  bool isDevice(const void* p, size_t bytes) const;
  bool isHost(const void* p, size_t bytes) const;
  // Opens the device arena to the primitives (sync) or closes it again.
  void setOpen(bool open);

  Status reserve(const Backend::Reservation& r);
  bool reserveWouldGrow(const Backend::Reservation& r) const;
  Status prepareFft(size_t n, size_t chunk);
  // A transform about to be recorded: a plan that prepareFft did not make is
  // made now, which while parked is a violation (strict: refused).
  Status planFft(size_t n, size_t chunk);
  void park(const std::string& what, bool strict);
  Status unpark(const Backend::Reservation& promised, Backend::Reservation* drawn);

 private:
  char* base_ = nullptr;  // the arena
  int slot_ = -1;         // in the fault handler's table
  mutable std::mutex mu_;
  std::atomic<size_t> used_{0};  // arena bytes handed to the device heap
  std::map<uintptr_t, size_t> device_, host_;
  std::set<std::pair<size_t, size_t>> plans_;  // (n, chunk)
  bool parked_ = false, strict_ = false;
  std::string what_;
  std::vector<std::string> planViolations_;
  std::unique_ptr<SlabHeap> deviceHeap_, hostHeap_;
};

}  // namespace gradcomp::device
