// device::Buffer<T>: a std::vector whose memory comes from a Backend
// (Backend::allocate), so the algorithms' scratch is memory the backend's
// primitives accept, host code can read and the transport can send. On the
// CPU backend that is the heap; under the CUDA executor it is mapped pinned
// memory the kernels address directly.
//
// The memory space is fixed when a buffer is constructed and never changes:
// assignment copies elements into the destination's space. A buffer built
// without a backend (Buffer<T>{}) lives on the heap: fine for host-only code
// (references, tests); an algorithm that hands such memory to a primitive is
// caught by the checked backend test (tests/test_backend_memory.cc).
#pragma once

#include <cstddef>
#include <new>
#include <type_traits>
#include <vector>

#include "device/backend.h"

namespace gradcomp::device {

template <class T>
class BackendAllocator {
 public:
  using value_type = T;
  using propagate_on_container_copy_assignment = std::false_type;
  using propagate_on_container_move_assignment = std::false_type;
  using propagate_on_container_swap = std::true_type;  // swap of unequal spaces is UB otherwise
  using is_always_equal = std::false_type;

  BackendAllocator() = default;  // the heap
  explicit BackendAllocator(Backend& dev) : dev_(&dev) {}
  template <class U>
  BackendAllocator(const BackendAllocator<U>& other) : dev_(other.backend()) {}

  T* allocate(size_t n) {
    if (n > size_t(-1) / sizeof(T)) throw std::bad_array_new_length();
    void* p = dev_ ? dev_->allocate(n * sizeof(T))
                   : ::operator new(n * sizeof(T), std::align_val_t(64), std::nothrow);
    if (p == nullptr) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) {
    if (dev_)
      dev_->deallocate(p, n * sizeof(T));
    else
      ::operator delete(p, std::align_val_t(64));
  }
  Backend* backend() const { return dev_; }

  template <class U>
  bool operator==(const BackendAllocator<U>& o) const { return dev_ == o.backend(); }
  template <class U>
  bool operator!=(const BackendAllocator<U>& o) const { return dev_ != o.backend(); }

 private:
  Backend* dev_ = nullptr;
};

template <class T>
using Buffer = std::vector<T, BackendAllocator<T>>;

// An empty (or n value-initialized elements) buffer in dev's memory.
template <class T>
Buffer<T> makeBuffer(Backend& dev, size_t n = 0) {
  return Buffer<T>(n, BackendAllocator<T>(dev));
}

// b, moved into dev's memory if it lives elsewhere (contents kept): for
// buffers an algorithm object keeps across calls, bound on each use to the
// backend of the call. A no-op (a pointer compare) once bound.
template <class T>
Buffer<T>& bound(Buffer<T>& b, Backend& dev) {
  if (b.get_allocator().backend() != &dev) {
    Buffer<T> fresh(b.begin(), b.end(), BackendAllocator<T>(dev));
    b.swap(fresh);  // swaps the allocators too (propagate_on_container_swap)
  }
  return b;
}

}  // namespace gradcomp::device
