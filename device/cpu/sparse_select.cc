// Selection, compaction, scatter and sorted-list primitives of the CPU backend.
#include <algorithm>
#include <limits>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

#include "device/cpu/multiversion.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include "device/backend.h"
#include "device/cpu/sparse_ops.h"

namespace gradcomp::device::cpu {
namespace {

// |v| with NaN mapped below every number (-1), so NaN never wins a selection.
inline float magnitude(float v) { return std::isnan(v) ? -1.0f : std::fabs(v); }

}  // namespace

const char* sourceText(int source, char (&buf)[32]) {
  buf[0] = '\0';  // callers may print buf itself, not the returned pointer
  if (source < 0) return buf;
  std::snprintf(buf, sizeof buf, " from rank %d", source);
  return buf;
}

namespace {

// |x| as its bit pattern (sign cleared). For numbers these order like the
// magnitudes; NaN patterns lie above the Inf pattern.
inline uint32_t magBits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b & 0x7fffffffu;
}
constexpr uint32_t kInfBits = 0x7f800000u;
constexpr int kHistShift = 19;  // 4096 buckets over the 31-bit magnitude patterns
constexpr size_t kBuckets = size_t(1) << (31 - kHistShift);

GC_CPU_CLONES void magnitudeHistogram(const float* x, size_t n, uint32_t* hist) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t m = magBits(x[i]);
    if (m <= kInfBits) ++hist[m >> kHistShift];  // NaN: below every number, not counted
  }
}

}  // namespace

Status kthLargestAbs(const float* x, size_t n, size_t k, float* threshold, size_t* above) {
  GC_REQUIRE(k >= 1 && k <= n, Err::InvalidArgument,
             "kthLargestAbs: k = %zu must be in 1..n (n = %zu)", k, n);
  // Radix select: a histogram of the top bits of |x| finds the bucket that
  // holds the k-th largest, one more pass collects that bucket, and a
  // selection inside it gives the exact value: two passes over x instead of
  // a copy and an introselect of all n (perf, 100 MiB: 300 ms -> ~30 ms).
  thread_local std::vector<uint32_t> hist, bucket;
  hist.assign(kBuckets, 0);
  magnitudeHistogram(x, n, hist.data());
  size_t larger = 0;  // numbers in buckets above the current one
  size_t b = kBuckets;
  while (b > 0 && larger + hist[b - 1] < k) larger += hist[--b];
  if (b == 0) {
    // Fewer than k numbers (NaN counts below every number): the k-th is NaN,
    // so no number qualifies and the threshold is 0.
    *threshold = 0.0f;
    if (above) {
      size_t c = 0;
      for (size_t i = 0; i < n; ++i) c += magBits(x[i]) - 1u < kInfBits;  // in (0, Inf]
      *above = c;
    }
    return Status::Ok();
  }
  const uint32_t target = uint32_t(b - 1);
  bucket.clear();
  for (size_t i = 0; i < n; ++i) {
    const uint32_t m = magBits(x[i]);
    if (m <= kInfBits && (m >> kHistShift) == target) bucket.push_back(m);
  }
  const size_t want = k - larger;  // 1-based rank inside the bucket, from the top
  std::nth_element(bucket.begin(), bucket.begin() + (want - 1), bucket.end(),
                   std::greater<uint32_t>());
  const uint32_t th = bucket[want - 1];
  float value;
  std::memcpy(&value, &th, 4);
  *threshold = value;
  if (above) {
    size_t c = larger;
    for (size_t i = 0; i + 1 < want; ++i) c += bucket[i] > th;  // nth_element put them first
    *above = c;
  }
  return Status::Ok();
}

Status countAbove(const float* x, size_t n, float threshold, size_t* count) {
  size_t c = 0;
  for (size_t i = 0; i < n; ++i) c += std::fabs(x[i]) > threshold;  // NaN compares false
  *count = c;
  return Status::Ok();
}

namespace {

// masks[g] bit j = |x[16g + j]| reaches `floor` (> when strict, >= otherwise;
// NaN never), for the n / 16 whole groups: one pass that lets the exact scan
// below visit only the selected elements (about 1% for a top-k).
void maskGroupsGeneric(const float* x, size_t groups, uint32_t fb, bool strict, uint16_t* masks) {
  for (size_t g = 0; g < groups; ++g) {
    uint32_t m16 = 0;
    for (uint32_t j = 0; j < 16; ++j) {
      const uint32_t m = magBits(x[16 * g + j]);
      m16 |= uint32_t(m <= kInfBits && (strict ? m > fb : m >= fb)) << j;
    }
    masks[g] = uint16_t(m16);
  }
}

#if GC_HAVE_AVX512DQ_PATH
__attribute__((target("avx512f"))) void maskGroupsAvx512(const float* x, size_t groups,
                                                         uint32_t fb, bool strict,
                                                         uint16_t* masks) {
  const __m512i sign = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(int(kInfBits));
  const __m512i floor = _mm512_set1_epi32(int(fb));
  for (size_t g = 0; g < groups; ++g) {
    const __m512i v = _mm512_and_si512(_mm512_loadu_si512(x + 16 * g), sign);
    const __mmask16 number = _mm512_cmple_epu32_mask(v, inf);
    const __mmask16 hit =
        strict ? _mm512_cmpgt_epu32_mask(v, floor) : _mm512_cmpge_epu32_mask(v, floor);
    masks[g] = uint16_t(number & hit);
  }
}
#endif

void maskGroups(const float* x, size_t groups, uint32_t fb, bool strict, uint16_t* masks) {
#if GC_HAVE_AVX512DQ_PATH
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) return maskGroupsAvx512(x, groups, fb, strict, masks);
#endif
  maskGroupsGeneric(x, groups, fb, strict, masks);
}

}  // namespace

size_t compactAboveCounted(const float* x, size_t n, float threshold, uint64_t indexBase,
                           uint64_t* idx, float* val) {
  constexpr size_t kGroups = 256;  // 4096 elements per mask pass (the masks on the stack)
  const uint32_t fb = magBits(threshold);
  size_t c = 0;
  for (size_t b = 0; b + 16 <= n; b += 16 * kGroups) {
    const size_t groups = std::min(kGroups, (n - b) / 16);
    alignas(8) uint16_t masks[kGroups + 4] = {};
    maskGroups(x + b, groups, fb, true, masks);
    for (size_t g = 0; g < groups; g += 4) {  // 64 elements per word, lowest index first
      uint64_t word;
      std::memcpy(&word, masks + g, 8);
      while (word != 0) {
        const size_t i = b + 16 * g + size_t(__builtin_ctzll(word));
        word &= word - 1;
        idx[c] = indexBase + i;
        val[c] = x[i];
        ++c;
      }
    }
  }
  for (size_t i = n / 16 * 16; i < n; ++i) {  // the tail
    const uint32_t m = magBits(x[i]);
    if (m <= kInfBits && m > fb) idx[c] = indexBase + i, val[c] = x[i], ++c;
  }
  return c;
}

Status compactAbove(float* x, size_t n, float threshold, size_t tieBudget, uint64_t indexBase,
                    uint64_t* idx, float* val, size_t capacity, size_t* count,
                    bool zeroSelected) {
  GC_REQUIRE(threshold >= 0.0f, Err::InvalidArgument,
             "compactAbove: threshold %g must be >= 0", double(threshold));
  if (threshold == 0.0f) tieBudget = 0;  // exact zeros are never selected
  const size_t groups = n / 16;
  thread_local std::vector<uint16_t> masks;
  masks.resize(groups + 4);
  std::memset(masks.data() + groups, 0, 4 * sizeof(uint16_t));  // whole 64-bit words below
  maskGroups(x, groups, magBits(threshold), tieBudget == 0, masks.data());
  size_t c = 0;
  auto visit = [&](size_t i) -> Status {
    const float m = magnitude(x[i]);
    const bool take = m > threshold || (m == threshold && tieBudget > 0 && tieBudget--);
    if (!take) return Status::Ok();
    GC_REQUIRE(c < capacity, Err::Internal,
               "compactAbove: more than capacity = %zu selected elements", capacity);
    idx[c] = indexBase + i;
    val[c] = x[i];
    if (zeroSelected) x[i] = 0.0f;
    ++c;
    return Status::Ok();
  };
  for (size_t g = 0; g < groups; g += 4) {  // 64 elements per word, lowest index first
    uint64_t word;
    std::memcpy(&word, masks.data() + g, 8);
    while (word != 0) {
      const size_t i = 16 * g + size_t(__builtin_ctzll(word));
      word &= word - 1;
      GC_CHECK(visit(i));
    }
  }
  for (size_t i = 16 * groups; i < n; ++i) GC_CHECK(visit(i));  // the tail, exactly
  if (count) *count = c;
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

Status countAboveMany(const float* x, size_t n, const float* thresholds, size_t m,
                      size_t* counts) {
  // One pass: each |x| finds, by binary search over the thresholds sorted
  // ascending, how many of them it exceeds; a histogram of that number
  // gives every count (a suffix sum).
  GC_REQUIRE(m <= Backend::kCountAboveManyMax, Err::InvalidArgument,
             "countAboveMany: %zu thresholds (at most %zu)", m, Backend::kCountAboveManyMax);
  // A NaN threshold is exceeded by nothing, like +inf: sorted as +inf.
  auto key = [&](uint32_t j) {
    return std::isnan(thresholds[j]) ? std::numeric_limits<float>::infinity() : thresholds[j];
  };
  std::vector<uint32_t> order(m);
  for (size_t j = 0; j < m; ++j) order[j] = uint32_t(j);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return key(a) < key(b); });
  // Padded with +inf to a power of two: the search below is branchless (a
  // data-dependent branch per level mispredicts half the time, and this runs
  // over every element of the buffer).
  size_t width = 1;
  while (width < m) width <<= 1;
  std::vector<float> sorted(width, std::numeric_limits<float>::infinity());
  for (size_t j = 0; j < m; ++j) sorted[j] = key(order[j]);
  std::vector<size_t> exceeds(m + 1, 0);  // exceeds[e]: elements above exactly e thresholds
  const float* t = sorted.data();
  for (size_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (std::isnan(a)) continue;  // above nothing
    // pos = how many thresholds are below a (lower_bound over t[0..width)).
    size_t pos = 0;
    for (size_t step = width >> 1; step > 0; step >>= 1) pos += t[pos + step - 1] < a ? step : 0;
    pos += t[pos] < a ? 1 : 0;
    ++exceeds[pos];
  }
  // counts for sorted[j]: elements above more than j thresholds.
  size_t above = 0;
  for (size_t e = m; e > 0; --e) {
    above += exceeds[e];
    counts[order[e - 1]] = above;
  }
  return Status::Ok();
}

Status moments(const float* x, size_t n, double* sum, double* sumSquares) {
  constexpr size_t kBlock = 4096, kLanes = 256;
  double s = 0, q = 0;
  double ls[kLanes], lq[kLanes];
  for (size_t b = 0; b < n; b += kBlock) {
    const size_t len = std::min(kBlock, n - b);
    for (size_t l = 0; l < kLanes; ++l) {
      double a = 0, c = 0;
      for (size_t i = l; i < len; i += kLanes) {
        const double v = double(x[b + i]);
        if (!std::isfinite(v)) continue;
        a += v;
        c += v * v;
      }
      ls[l] = a, lq[l] = c;
    }
    for (size_t st = kLanes / 2; st >= 1; st /= 2)
      for (size_t l = 0; l < st; ++l) ls[l] += ls[l + st], lq[l] += lq[l + st];
    s += ls[0];
    q += lq[0];
  }
  *sum = s;
  *sumSquares = q;
  return Status::Ok();
}

Status gatherValues(float* dst, const float* x, size_t n, const uint64_t* idx, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    GC_REQUIRE(idx[i] < n, Err::InvalidArgument,
               "gatherValues: index %llu (entry %zu) outside [0, %zu)", (unsigned long long)idx[i],
               i, n);
    dst[i] = x[idx[i]];
  }
  return Status::Ok();
}

Status gather(uint64_t* dst, const uint64_t* src, size_t srcCount, const uint64_t* pos,
              size_t count) {
  for (size_t i = 0; i < count; ++i) {
    GC_REQUIRE(pos[i] < srcCount, Err::Internal,
               "gather: position %llu (entry %zu) outside a list of %zu",
               (unsigned long long)pos[i], i, srcCount);
    dst[i] = src[pos[i]];
  }
  return Status::Ok();
}

Status lowerBound(const uint64_t* sorted, size_t n, const uint64_t* keys, size_t nkeys,
                  uint64_t* pos) {
  for (size_t j = 0; j < nkeys; ++j)
    pos[j] = uint64_t(std::lower_bound(sorted, sorted + n, keys[j]) - sorted);
  return Status::Ok();
}

Status zeroIntersection(float* x, size_t n, uint64_t base, const uint64_t* a, size_t na,
                        const uint64_t* b, size_t nb) {
  size_t i = 0, j = 0;
  while (i < na && j < nb) {
    if (a[i] < b[j]) {
      ++i;
    } else if (b[j] < a[i]) {
      ++j;
    } else {
      GC_REQUIRE(a[i] >= base && a[i] - base < n, Err::InvalidArgument,
                 "zeroIntersection: index %llu outside [%llu, %llu)", (unsigned long long)a[i],
                 (unsigned long long)base, (unsigned long long)(base + n));
      x[a[i] - base] = 0.0f;
      ++i, ++j;
    }
  }
  return Status::Ok();
}

Status mergeAdd(const uint64_t* aIdx, const float* aVal, size_t na, const uint64_t* bIdx,
                const float* bVal, size_t nb, uint64_t* outIdx, float* outVal, size_t capacity,
                size_t* count) {
  size_t i = 0, j = 0, c = 0;
  while (i < na || j < nb) {
    GC_REQUIRE(c < capacity, Err::Internal, "mergeAdd: more than capacity = %zu entries",
               capacity);
    if (j == nb || (i < na && aIdx[i] < bIdx[j])) {
      outIdx[c] = aIdx[i], outVal[c] = aVal[i++];
    } else if (i == na || bIdx[j] < aIdx[i]) {
      outIdx[c] = bIdx[j], outVal[c] = bVal[j++];
    } else {
      outIdx[c] = aIdx[i], outVal[c] = aVal[i++] + bVal[j++];
    }
    ++c;
  }
  *count = c;
  return Status::Ok();
}

Status intersect(const uint64_t* a, size_t na, const uint64_t* b, size_t nb, uint64_t* out,
                 size_t capacity, size_t* count) {
  size_t i = 0, j = 0, c = 0;
  while (i < na && j < nb) {
    if (a[i] < b[j]) {
      ++i;
    } else if (b[j] < a[i]) {
      ++j;
    } else {
      GC_REQUIRE(c < capacity, Err::Internal, "intersect: more than capacity = %zu entries",
                 capacity);
      out[c++] = a[i];
      ++i, ++j;
    }
  }
  *count = c;
  return Status::Ok();
}

Status checkAscending(const uint64_t* idx, size_t n, int source) {
  char buf[32];
  for (size_t i = 1; i < n; ++i)
    GC_REQUIRE(idx[i] > idx[i - 1], Err::RemoteError,
               "sparse data%s: indexes not strictly ascending at entry %zu (%llu after %llu)",
               sourceText(source, buf), i, (unsigned long long)idx[i],
               (unsigned long long)idx[i - 1]);
  return Status::Ok();
}

Status checkSubset(const uint64_t* sub, size_t nsub, const uint64_t* set, size_t nset,
                   int source) {
  GC_CHECK(checkAscending(sub, nsub, source));
  char buf[32];
  size_t j = 0;
  for (size_t i = 0; i < nsub; ++i) {
    while (j < nset && set[j] < sub[i]) ++j;
    GC_REQUIRE(j < nset && set[j] == sub[i], Err::RemoteError,
               "sparse data%s: index %llu (entry %zu) is not in the expected set",
               sourceText(source, buf), (unsigned long long)sub[i], i);
  }
  return Status::Ok();
}

}  // namespace gradcomp::device::cpu
