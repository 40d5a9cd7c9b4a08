// Selection, compaction and scatter primitives of the CPU backend.
#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "device/cpu/sparse_ops.h"

namespace gradcomp::device::cpu {
namespace {

// |v| with NaN mapped below every number (-1), so NaN never wins a selection.
inline float magnitude(float v) { return std::isnan(v) ? -1.0f : std::fabs(v); }

}  // namespace

Status kthLargestAbs(const float* x, size_t n, size_t k, float* threshold) {
  GC_REQUIRE(k >= 1 && k <= n, Err::InvalidArgument,
             "kthLargestAbs: k = %zu must be in 1..n (n = %zu)", k, n);
  // Per-thread scratch that only grows: a fresh n-sized vector per call spent
  // more time zero-filling and page-faulting than selecting (perf, 100 MiB).
  thread_local std::vector<float> mag;
  mag.resize(n);
  for (size_t i = 0; i < n; ++i) mag[i] = magnitude(x[i]);
  // Quickselect (introselect): O(n) on average, no full sort.
  std::nth_element(mag.begin(), mag.begin() + (k - 1), mag.end(), std::greater<float>());
  // An all-NaN tail yields -1: no number qualifies, select nothing non-zero.
  *threshold = std::max(mag[k - 1], 0.0f);
  return Status::Ok();
}

Status countAbove(const float* x, size_t n, float threshold, size_t* count) {
  size_t c = 0;
  for (size_t i = 0; i < n; ++i) c += magnitude(x[i]) > threshold;
  *count = c;
  return Status::Ok();
}

Status compactAbove(const float* x, size_t n, float threshold, size_t tieBudget,
                    uint64_t indexBase, uint64_t* idx, float* val, size_t capacity,
                    size_t* count) {
  GC_REQUIRE(threshold >= 0.0f, Err::InvalidArgument,
             "compactAbove: threshold %g must be >= 0", double(threshold));
  if (threshold == 0.0f) tieBudget = 0;  // exact zeros are never selected
  size_t c = 0;
  for (size_t i = 0; i < n; ++i) {
    const float m = magnitude(x[i]);
    const bool take = m > threshold || (m == threshold && tieBudget > 0 && tieBudget--);
    if (!take) continue;
    GC_REQUIRE(c < capacity, Err::Internal,
               "compactAbove: more than capacity = %zu selected elements", capacity);
    idx[c] = indexBase + i;
    val[c] = x[i];
    ++c;
  }
  *count = c;
  return Status::Ok();
}

Status scatterAdd(float* dst, size_t n, uint64_t base, const uint64_t* idx, const float* val,
                  size_t count) {
  for (size_t i = 0; i < count; ++i) {
    GC_REQUIRE(idx[i] >= base && idx[i] - base < n, Err::InvalidArgument,
               "scatterAdd: index %llu (entry %zu) outside [%llu, %llu)",
               (unsigned long long)idx[i], i, (unsigned long long)base,
               (unsigned long long)(base + n));
    dst[idx[i] - base] += val[i];
  }
  return Status::Ok();
}

Status scatterZero(float* dst, size_t n, uint64_t base, const uint64_t* idx, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    GC_REQUIRE(idx[i] >= base && idx[i] - base < n, Err::InvalidArgument,
               "scatterZero: index %llu (entry %zu) outside [%llu, %llu)",
               (unsigned long long)idx[i], i, (unsigned long long)base,
               (unsigned long long)(base + n));
    dst[idx[i] - base] = 0.0f;
  }
  return Status::Ok();
}

}  // namespace gradcomp::device::cpu
