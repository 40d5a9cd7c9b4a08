// Owning arrays in a backend's two memory spaces (device/backend.h):
//
// - DeviceArray<T>: device memory. Host code gets a pointer to hand to
//   primitives and never dereferences it: there is no operator[] and no
//   iterator. Growing keeps the old elements with a device copy (ordered
//   with the primitives, like the release of the old block); new elements
//   are undefined until a primitive writes them.
// - HostArray<T>: host memory for payloads and control words (pinned on a
//   GPU): host code reads and writes it like a vector, once the primitives
//   that write it have completed (Backend::sync). Growing keeps the old
//   elements; new ones are undefined too (payloads are written whole by
//   their encoder or a receive: zero-filling them cost the host a pass).
//
// Both are bound to one backend (the space never changes under a buffer);
// bind() moves an array kept across calls to the backend of the call,
// dropping its contents when that is another backend. Allocation failure
// throws std::bad_alloc, as std::vector does. Move-only.
#pragma once

#include <cstddef>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

#include "device/backend.h"

namespace gradcomp::device {

namespace detail {

// Common storage; Host selects the space.
template <class T, bool Host>
class Array {
  static_assert(std::is_trivially_copyable<T>::value, "backend arrays hold plain data");

 public:
  Array() = default;
  explicit Array(Backend& dev) : dev_(&dev) {}
  Array(Backend& dev, size_t n) : dev_(&dev) { resize(n); }
  ~Array() { release(); }
  Array(Array&& o) noexcept { take(o); }
  Array& operator=(Array&& o) noexcept {
    if (this != &o) {
      release();
      take(o);
    }
    return *this;
  }
  Array(const Array&) = delete;
  Array& operator=(const Array&) = delete;

  Backend* backend() const { return dev_; }
  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  size_t capacity() const { return cap_; }
  bool empty() const { return n_ == 0; }
  size_t bytes() const { return n_ * sizeof(T); }

  // Binds to dev (a no-op when already there; another backend's memory is
  // released and the array becomes empty).
  Array& bind(Backend& dev) {
    if (dev_ != &dev) {
      release();
      dev_ = &dev;
    }
    return *this;
  }
  void reserve(size_t n) {
    if (n <= cap_) return;
    if (n > size_t(-1) / sizeof(T)) throw std::bad_array_new_length();
    if (dev_ == nullptr) throw std::bad_alloc();
    size_t want = cap_ ? cap_ : 16;
    // Doubling stops where want * sizeof(T) would wrap (n itself fits).
    while (want < n) want = want > size_t(-1) / sizeof(T) / 2 ? n : want * 2;
    T* fresh = static_cast<T*>(Host ? dev_->allocateHost(want * sizeof(T))
                                    : dev_->allocate(want * sizeof(T)));
    if (fresh == nullptr) throw std::bad_alloc();
    if (n_) {
      if (Host) {
        std::memcpy(fresh, p_, n_ * sizeof(T));
      } else if (!dev_->copy(fresh, p_, n_ * sizeof(T)).ok()) {
        free(fresh, want);
        throw std::bad_alloc();  // a device copy that cannot be enqueued
      }
    }
    const size_t kept = n_;
    release();
    p_ = fresh;
    cap_ = want;
    n_ = kept;
  }
  // Elements [0, min(size, n)) are kept; new ones are undefined.
  void resize(size_t n) {
    reserve(n);
    n_ = n;
  }
  void clear() { n_ = 0; }

 protected:
  void release() {
    if (p_) free(p_, cap_);
    p_ = nullptr;
    n_ = cap_ = 0;
  }
  void free(T* p, size_t cap) {
    if (Host) dev_->deallocateHost(p, cap * sizeof(T));
    else dev_->deallocate(p, cap * sizeof(T));
  }
  void take(Array& o) {
    dev_ = o.dev_, p_ = o.p_, n_ = o.n_, cap_ = o.cap_;
    o.p_ = nullptr;
    o.n_ = o.cap_ = 0;
  }

  Backend* dev_ = nullptr;
  T* p_ = nullptr;
  size_t n_ = 0, cap_ = 0;
};

}  // namespace detail

template <class T>
class DeviceArray : public detail::Array<T, false> {
 public:
  using detail::Array<T, false>::Array;
  DeviceArray& bind(Backend& dev) {
    detail::Array<T, false>::bind(dev);
    return *this;
  }
  // *this = src[0..n) (device or host memory), by a device copy.
  Status assign(const T* src, size_t n) {
    this->resize(n);
    return n ? this->dev_->copy(this->p_, src, n * sizeof(T)) : Status::Ok();
  }
  Status assign(const DeviceArray& src) { return assign(src.data(), src.size()); }
  // n elements of +0.0 / 0.
  Status assignZero(size_t n) {
    this->resize(n);
    return n ? this->dev_->zero(this->p_, n * sizeof(T)) : Status::Ok();
  }
  // Host view for references and tests on a hostAccessible backend (the CPU
  // reference); nullptr elsewhere.
  const T* hostView() const {
    return this->dev_ && this->dev_->hostAccessible() ? this->p_ : nullptr;
  }
};

template <class T>
class HostArray : public detail::Array<T, true> {
 public:
  using detail::Array<T, true>::Array;
  HostArray& bind(Backend& dev) {
    detail::Array<T, true>::bind(dev);
    return *this;
  }
  T& operator[](size_t i) { return this->p_[i]; }
  const T& operator[](size_t i) const { return this->p_[i]; }
  T* begin() { return this->p_; }
  T* end() { return this->p_ + this->n_; }
  const T* begin() const { return this->p_; }
  const T* end() const { return this->p_ + this->n_; }
  void push_back(const T& v) {
    const size_t n = this->n_;
    this->resize(n + 1);
    this->p_[n] = v;
  }
  void assign(const T* src, size_t n) {
    this->resize(n);
    if (n) std::memcpy(this->p_, src, n * sizeof(T));
  }
  void append(const T* src, size_t n) {
    const size_t at = this->n_;
    this->resize(at + n);
    if (n) std::memcpy(this->p_ + at, src, n * sizeof(T));
  }
};

}  // namespace gradcomp::device
