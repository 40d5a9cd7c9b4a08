// Host helpers shared by the CUDA backend's kernel files (compiled by nvcc).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/status.h"

namespace gradcomp::device::cuda {

inline Status cudaCall(cudaError_t e, const char* what) {
  GC_REQUIRE(e == cudaSuccess, Err::SystemError, "cuda %s failed: %s", what,
             cudaGetErrorString(e));
  return Status::Ok();
}
// After a launch: reports a bad configuration or a sticky error.
inline Status launched(const char* what) { return cudaCall(cudaGetLastError(), what); }

// Carves 256-byte aligned arrays out of one workspace.
class Carve {
 public:
  explicit Carve(void* base) : p_(static_cast<char*>(base)) {}
  template <class T>
  T* take(size_t count) {
    T* out = reinterpret_cast<T*>(p_ + used_);
    used_ += (count * sizeof(T) + 255) / 256 * 256;
    return out;
  }
  // Bytes an identical sequence of take() calls needs.
  template <class T>
  static size_t bytes(size_t count) { return (count * sizeof(T) + 255) / 256 * 256; }

 private:
  char* p_;
  size_t used_ = 0;
};

// Results words (CudaBackend::resetResults): counters 0..7, first-bad 8..15.
constexpr int kFirstBad = 8;
constexpr uint64_t kNoneHost = ~0ull;

}  // namespace gradcomp::device::cuda
