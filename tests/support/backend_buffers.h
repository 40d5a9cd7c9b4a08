// Buffers in a backend's memory spaces for tests that compare backends
// (the [gpu] tests: CUDA against the CPU reference). Data moves only through
// the backend's own copies and sync(), as an algorithm's would, so the same
// test code runs on any backend.
#pragma once

#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "device/arrays.h"
#include "device/backend.h"

namespace gradcomp::testing {

// n elements of device memory (contents undefined until written).
template <class T>
class DevBuf {
 public:
  DevBuf(device::Backend& be, size_t n) : be_(be), a_(be, n ? n : 1), n_(n) {}
  DevBuf(device::Backend& be, const std::vector<T>& host) : DevBuf(be, host.size()) { put(host); }
  T* ptr() { return a_.data(); }
  const T* ptr() const { return a_.data(); }
  size_t size() const { return n_; }
  // Device <- host (enqueued and completed).
  void put(const std::vector<T>& host) {
    REQUIRE(host.size() <= a_.size());
    if (host.empty()) return;
    device::HostArray<T> h(be_, host.size());
    std::memcpy(h.data(), host.data(), host.size() * sizeof(T));
    REQUIRE(be_.copy(a_.data(), h.data(), host.size() * sizeof(T)).ok());
    REQUIRE(be_.sync().ok());
  }
  // The first `count` elements (enqueued copy, then sync: Ok required).
  std::vector<T> get(size_t count) const {
    std::vector<T> out(count);
    if (count == 0) return out;
    device::HostArray<T> h(be_, count);
    REQUIRE(be_.copy(h.data(), a_.data(), count * sizeof(T)).ok());
    const Status s = be_.sync();
    INFO(s.toString());
    REQUIRE(s.ok());
    std::memcpy(out.data(), h.data(), count * sizeof(T));
    return out;
  }
  std::vector<T> get() const { return get(n_); }

 private:
  device::Backend& be_;
  device::DeviceArray<T> a_;
  size_t n_;
};

// n elements of host memory of the backend (payloads), filled from `host`.
template <class T>
device::HostArray<T> hostCopy(device::Backend& be, const std::vector<T>& host) {
  device::HostArray<T> h(be, host.size());
  if (!host.empty()) std::memcpy(h.data(), host.data(), host.size() * sizeof(T));
  return h;
}

}  // namespace gradcomp::testing
