// A CPU backend that checks memory provenance: every pointer an algorithm
// hands to a primitive must lie, with the extent the primitive's contract
// gives it, inside memory this backend allocated (Backend::allocate, i.e. a
// device::Buffer built on it) or a range the test allowed (the call's send
// and receive buffers). That is the property the CUDA executor relies on:
// there, allocate() returns mapped pinned memory the kernels can address,
// and any other host pointer handed to a kernel is an illegal access.
//
// Violations are recorded (primitive, argument, extent) and the primitive
// still runs on the CPU reference, so one run lists every offending site.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "device/backend.h"

namespace gradcomp::testing {

class CheckedBackend final : public device::Backend {
 public:
  const char* name() const override { return "checked-cpu"; }

  void* allocate(size_t bytes) override;
  void deallocate(void* p, size_t bytes) override;
  // [p, p + bytes) may be handed to primitives (the call's user buffers).
  void allow(const void* p, size_t bytes);
  void disallow(const void* p);

  std::vector<std::string> violations() const;
  size_t liveAllocations() const;
  uint64_t checkedPointers() const;

  Status add(void* dst, const void* a, const void* b, size_t n, DataType t) override;
  Status divide(void* buf, size_t n, DataType t, int divisor) override;
  Status copy(void* dst, const void* src, size_t bytes) override;
  Status convert(void* dst, DataType dstType, const void* src, DataType srcType,
                 size_t n) override;
  Status kthLargestAbs(const float* x, size_t n, size_t k, float* threshold) override;
  Status countAbove(const float* x, size_t n, float threshold, size_t* count) override;
  Status compactAbove(const float* x, size_t n, float threshold, size_t tieBudget,
                      uint64_t indexBase, uint64_t* idx, float* val, size_t capacity,
                      size_t* count) override;
  Status scatterAdd(float* dst, size_t n, uint64_t base, const uint64_t* idx, const float* val,
                    size_t count) override;
  Status scatterZero(float* dst, size_t n, uint64_t base, const uint64_t* idx,
                     size_t count) override;
  Status denseStreamSize(const uint64_t* idx, size_t count, int indexBytes, size_t* bytes,
                         size_t* blocks) override;
  Status denseStreamEncode(const uint64_t* idx, const float* val, size_t count, uint64_t base,
                           int indexBytes, void* out, size_t capacity, size_t* bytes) override;
  Status denseStreamDecode(const void* in, size_t bytes, size_t blocks, uint64_t n, uint64_t base,
                           int indexBytes, uint64_t* idx, float* val, size_t capacity,
                           size_t* count) override;
  Status absStats(const float* src, size_t n, device::AbsStats* out) override;
  Status quantizeMaxMin(const float* src, size_t n, const device::MaxMinSpec& spec,
                        uint64_t indexBase, float* meta, uint8_t* codes) override;
  Status dequantizeMaxMin(const float* meta, const uint8_t* codes, size_t n,
                          const device::MaxMinSpec& spec, float* dst, bool accumulate) override;
  Status rbfEncode(const float* src, size_t n, const device::RbfSpec& spec,
                   uint8_t* codes) override;
  Status rbfDecode(const uint8_t* codes, size_t n, const device::RbfSpec& spec, float* dst,
                   bool accumulate) override;
  Status signPack(const float* src, size_t n, uint8_t* bits) override;
  Status signCountAdd(const uint8_t* countsIn, int inBits, int maxIn, const uint8_t* signBits,
                      size_t n, uint8_t* countsOut, int outBits) override;
  Status signMajority(const uint8_t* counts, int bits, size_t n, int nranks,
                      uint8_t* decision) override;
  Status signExpand(const uint8_t* bits, size_t n, float pos, float neg, float* dst) override;
  Status fftForward(const float* src, size_t n, size_t chunk, float* spectrum) override;
  Status fftInverse(const float* spectrum, size_t n, size_t chunk, float* dst) override;
  Status fftSelectBins(const float* spectrum, size_t n, size_t chunk, double keep,
                       uint8_t* bitmap) override;
  Status gatherBins(const float* spectrum, const uint8_t* bitmap, size_t bins,
                    float* packed) override;
  Status scatterAddBins(const float* packed, const uint8_t* bitmap, size_t bins,
                        float* spectrum) override;

 private:
  // Records a violation unless [p, p + bytes) lies in one known range.
  void need(const char* primitive, const char* arg, const void* p, size_t bytes);

  device::Backend& cpu_ = device::cpuBackend();
  mutable std::mutex mu_;
  std::map<uintptr_t, size_t> allocated_;  // start -> bytes
  std::map<uintptr_t, size_t> allowed_;
  std::vector<std::string> violations_;
  uint64_t checked_ = 0;
};

}  // namespace gradcomp::testing
