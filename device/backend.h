// The compute interface algorithms use: element-wise work on buffers in the
// backend's memory space. device/cpu is the reference every other backend is
// checked against; device/cuda implements the same primitives as kernels.
// Later families (sparse, quantized, sign, FFT) add their primitives here, kept
// few and kernel-shaped.
//
// Arithmetic contract (the reference semantics):
// - float16/bfloat16 are computed in fp32 and rounded to nearest even once per
//   primitive; float32 in fp32; float64 in fp64.
// - divide() computes x / d in fp64 and rounds once to the element type (ncclAvg).
// - NaN and Inf propagate as IEEE arithmetic does; nothing is flushed to zero.
#pragma once

#include <cstddef>

#include "common/dtype.h"
#include "common/status.h"

namespace gradcomp::device {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // dst[i] = a[i] + b[i]; dst may alias a or b.
  virtual Status add(void* dst, const void* a, const void* b, size_t n, DataType t) = 0;
  // buf[i] = buf[i] / divisor.
  virtual Status divide(void* buf, size_t n, DataType t, int divisor) = 0;
  virtual Status copy(void* dst, const void* src, size_t bytes) = 0;
  // Element conversion between any two DataTypes (float ones round to nearest even).
  virtual Status convert(void* dst, DataType dstType, const void* src, DataType srcType,
                         size_t n) = 0;
};

// The process-wide CPU reference backend (stateless, thread-safe).
Backend& cpuBackend();

}  // namespace gradcomp::device
