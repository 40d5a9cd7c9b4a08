// CPU reference implementations of the sparse primitives declared in
// device/backend.h (contracts there). Free functions so that the backend
// class and tests call the same code.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"

namespace gradcomp::device::cpu {

Status kthLargestAbs(const float* x, size_t n, size_t k, float* threshold);
Status countAbove(const float* x, size_t n, float threshold, size_t* count);
Status compactAbove(const float* x, size_t n, float threshold, size_t tieBudget,
                    uint64_t indexBase, uint64_t* idx, float* val, size_t capacity,
                    size_t* count);
Status scatterAdd(float* dst, size_t n, uint64_t base, const uint64_t* idx, const float* val,
                  size_t count);
Status scatterZero(float* dst, size_t n, uint64_t base, const uint64_t* idx, size_t count);

// T = floor(2 * I / K) with K = 4-byte values: 2 for 4-byte indexes, 4 for 8.
inline size_t denseStreamMaxZeroRun(int indexBytes) { return size_t(2 * indexBytes / 4); }
Status denseStreamSize(const uint64_t* idx, size_t count, int indexBytes, size_t* bytes,
                       size_t* blocks);
Status denseStreamEncode(const uint64_t* idx, const float* val, size_t count, uint64_t base,
                         int indexBytes, void* out, size_t capacity, size_t* bytes);
Status denseStreamDecode(const void* in, size_t bytes, size_t blocks, uint64_t n, uint64_t base,
                         int indexBytes, uint64_t* idx, float* val, size_t capacity,
                         size_t* count);

}  // namespace gradcomp::device::cpu
