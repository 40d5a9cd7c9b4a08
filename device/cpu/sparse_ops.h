// CPU reference implementations of the sparse primitives declared in
// device/backend.h (contracts there). Free functions so that the backend
// class and tests call the same code. All run synchronously; "deferred"
// errors of the contract are returned directly.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"

namespace gradcomp::device::cpu {

// " from rank N" for error messages, written to buf (empty when source < 0)
// and returned.
const char* sourceText(int source, char (&buf)[32]);

Status kthLargestAbs(const float* x, size_t n, size_t k, float* threshold, size_t* above);
Status countAbove(const float* x, size_t n, float threshold, size_t* count);
Status compactAbove(float* x, size_t n, float threshold, size_t tieBudget, uint64_t indexBase,
                    uint64_t* idx, float* val, size_t capacity, size_t* count, bool zeroSelected);
// compactAbove(x, n, threshold >= 0, tieBudget 0, ...) for a caller that
// counted the entries and made room for them all: no checks, no zeroing;
// returns how many it wrote. accumulateCompact's per-block compaction.
size_t compactAboveCounted(const float* x, size_t n, float threshold, uint64_t indexBase,
                           uint64_t* idx, float* val);
Status scatterAdd(float* dst, size_t n, uint64_t base, const uint64_t* idx, const float* val,
                  size_t count);
Status scatterZero(float* dst, size_t n, uint64_t base, const uint64_t* idx, size_t count);
Status countAboveMany(const float* x, size_t n, const float* thresholds, size_t m,
                      size_t* counts);
Status moments(const float* x, size_t n, double* sum, double* sumSquares);
Status gatherValues(float* dst, const float* x, size_t n, const uint64_t* idx, size_t count);
Status gather(uint64_t* dst, const uint64_t* src, size_t srcCount, const uint64_t* pos,
              size_t count);
Status lowerBound(const uint64_t* sorted, size_t n, const uint64_t* keys, size_t nkeys,
                  uint64_t* pos);
Status zeroIntersection(float* x, size_t n, uint64_t base, const uint64_t* a, size_t na,
                        const uint64_t* b, size_t nb);
Status mergeAdd(const uint64_t* aIdx, const float* aVal, size_t na, const uint64_t* bIdx,
                const float* bVal, size_t nb, uint64_t* outIdx, float* outVal, size_t capacity,
                size_t* count);
Status intersect(const uint64_t* a, size_t na, const uint64_t* b, size_t nb, uint64_t* out,
                 size_t capacity, size_t* count);
Status checkSubset(const uint64_t* sub, size_t nsub, const uint64_t* set, size_t nset, int source);
Status checkAscending(const uint64_t* idx, size_t n, int source);

// Wire bodies (sparse_wire.cc).
Status cooEncode(const uint64_t* idx, const float* val, size_t nnz, uint64_t base, uint64_t count,
                 int indexBytes, void* out);
Status cooDecode(const void* in, size_t nnz, uint64_t base, uint64_t count, int indexBytes,
                 uint64_t* idx, float* val, int source);
Status denseEncode(const uint64_t* idx, const float* val, size_t nnz, uint64_t base,
                   uint64_t count, void* out);
Status denseDecode(const void* in, uint64_t count, uint64_t base, size_t nnz, uint64_t* idx,
                   float* val, int source);
Status indexEncode(const uint64_t* idx, size_t count, uint64_t base, uint64_t n, int indexBytes,
                   void* out);
Status indexDecode(const void* in, size_t count, uint64_t base, uint64_t n, int indexBytes,
                   uint64_t* idx, int source);

// T = floor(2 * I / K) with K = 4-byte values: 2 for 4-byte indexes, 4 for 8.
inline size_t denseStreamMaxZeroRun(int indexBytes) { return size_t(2 * indexBytes / 4); }
Status denseStreamSize(const uint64_t* idx, size_t count, int indexBytes, size_t* bytes,
                       size_t* blocks);
Status denseStreamEncode(const uint64_t* idx, const float* val, size_t count, uint64_t base,
                         int indexBytes, void* out, size_t bytes);
Status denseStreamDecode(const void* in, size_t bytes, size_t blocks, uint64_t n, uint64_t base,
                         int indexBytes, size_t nnz, uint64_t* idx, float* val, int source);

}  // namespace gradcomp::device::cpu
