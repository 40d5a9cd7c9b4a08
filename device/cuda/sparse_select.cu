// Top-k selection on the GPU: the exact k-th largest |x| by radix select on
// the magnitude bits (4 passes of 8 bits; the last block of each pass picks
// the digit, so a pass is one launch), counting above a threshold, and the
// ordered compaction to COO with the residual update (selected entries
// zeroed) in the same pass. Semantics: device/cpu/sparse_select.cc, bit for bit.
#include "device/cuda/cuda_backend.h"
#include "device/cuda/kernel_common.cuh"

namespace gradcomp::device {
namespace {

using namespace cuda;

// Radix-select key: |x| as its bit pattern (monotone for non-negative
// floats), NaN as +0. The CPU maps NaN to -1 and clamps the result at 0, so
// a NaN ranked k-th and a zero ranked k-th both give threshold 0: the same.
// Keys above the threshold are exactly the |x| > threshold (NaN never is).
__device__ inline uint32_t selectKey(float v) {
  return isnan(v) ? 0u : (__float_as_uint(v) & 0x7FFFFFFFu);
}

// One pass over x for the digit at `shift` among the keys matching the
// prefix so far (pass 0: all). The last block to finish picks the digit that
// holds the k-th largest key, narrows the prefix, clears the histogram, and
// after the last pass writes the threshold and the count above it.
__global__ void radixPass(Ctl ctl, const float* x, size_t n, int shift, unsigned long long k,
                          RadixWords* r, float* threshold, size_t* above) {
  if (skipBlock(ctl)) return;
  __shared__ unsigned int local[256];
  __shared__ bool last;
  for (int b = threadIdx.x; b < 256; b += blockDim.x) local[b] = 0;
  __syncthreads();
  const bool first = shift == 24;
  const uint32_t prefix = first ? 0u : r->prefix, mask = first ? 0u : r->mask;
  GC_GRID_STRIDE(i, n) {
    const uint32_t key = selectKey(x[i]);
    const bool match = (key & mask) == prefix;
    const unsigned active = __activemask();
    const unsigned matching = __ballot_sync(active, match);
    if (match) {
      // Warp-aggregated: magnitudes cluster in a few exponents.
      const unsigned digit = (key >> shift) & 0xFFu;
      const unsigned peers = __match_any_sync(matching, digit);
      if ((threadIdx.x % 32) == unsigned(__ffs(peers) - 1)) atomicAdd(&local[digit], __popc(peers));
    }
  }
  __syncthreads();
  for (int b = threadIdx.x; b < 256; b += blockDim.x)
    if (local[b]) atomicAdd(&r->hist[b], (unsigned long long)local[b]);
  __threadfence();  // every thread's adds are visible device-wide before `done` counts the block
  __syncthreads();
  if (threadIdx.x == 0) last = lastBlockIn(&r->done);
  __syncthreads();
  if (!last) return;
  if (threadIdx.x == 0) {
    __threadfence();
    unsigned long long remaining = first ? k : r->remaining;
    unsigned long long higher = 0;
    int digit = 0;
    for (int d = 255; d >= 0; --d) {
      const unsigned long long h = loadVolatile(&r->hist[d]);
      if (higher + h >= remaining) {
        digit = d;
        break;
      }
      higher += h;
    }
    remaining -= higher;
    const uint32_t p = prefix | uint32_t(digit) << shift;
    r->prefix = p;
    r->mask = mask | 0xFFu << shift;
    r->remaining = remaining;
    r->done = 0;
    if (shift == 0) {
      *threshold = __uint_as_float(p);
      // remaining = the k-th key's rank among the keys equal to it.
      if (above) *above = size_t(k - remaining);
      r->prefix = r->mask = 0;
      r->remaining = 0;
    }
  }
  __syncthreads();
  for (int b = threadIdx.x; b < 256; b += blockDim.x) r->hist[b] = 0;
}

// One streamed pass (16-byte loads); per thread an integer count, the
// block's sum by CUB, one global add per block. Integer sums: the count is
// the CPU's whatever the order. Same test as the CPU: |x| > threshold (NaN
// compares false; fabsf(-0) = +0).
struct CountAboveOne {
  float threshold;
  unsigned long long c;
  __device__ void operator()(float v, size_t) { c += fabsf(v) > threshold; }
};

__global__ void __launch_bounds__(kThreads)
    countAboveKernel(Ctl ctl, const float* x, size_t n, float threshold, ReduceCell* cell,
                     size_t* count) {
  if (skipBlock(ctl)) return;
  using Reduce = cub::BlockReduce<unsigned long long, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  CountAboveOne one{threshold, 0};
  forEachStreamed(x, n, one);
  const unsigned long long c = Reduce(tmp).Sum(one.c);
  if (threadIdx.x == 0) {
    atomicAdd(&cell->u[0], c);
    if (lastBlockIn(&cell->done)) {
      *count = size_t(loadVolatile(&cell->u[0]));
      cell->u[0] = 0;
      cell->done = 0;
    }
  }
}

// Per element: (above threshold, equal to it); ties only when threshold > 0.
struct SelectFlags {
  const float* x;
  float threshold;
  bool ties;
  __device__ Pair operator()(size_t i, const Ctl&) const {
    const float m = magnitude(x[i]);
    return {m > threshold ? 1ull : 0ull, ties && m == threshold ? 1ull : 0ull};
  }
};

// Selected = aboves + min(ties, budget): more than capacity fails before
// anything is written.
struct CompactTotal {
  unsigned long long budget;
  size_t capacity;
  size_t* count;
  __device__ void operator()(const Pair& all, const Ctl& ctl) const {
    const unsigned long long selected = all.a + (all.b < budget ? all.b : budget);
    if (selected > capacity) fail(ctl, 0, selected);
    else if (count) *count = size_t(selected);
  }
};

// Element i is taken when above, or a tie whose rank among ties is below the
// budget. Its output slot = aboves before it + min(ties before it, budget).
struct CompactWrite {
  float* x;
  uint64_t indexBase;
  unsigned long long budget;
  uint64_t* idx;
  float* val;
  bool zero;
  __device__ void operator()(size_t i, Pair before, Pair mine, const Ctl&) const {
    const bool take = mine.a || (mine.b && before.b < budget);
    if (!take) return;
    const size_t pos = size_t(before.a + (before.b < budget ? before.b : budget));
    idx[pos] = indexBase + i;
    val[pos] = x[i];
    if (zero) x[i] = 0.0f;
  }
};

Status capacityFailure(const OpInfo& op, const FailureRecord&) {
  return makeStatus(Err::Internal, "compactAbove: more than capacity = %llu selected elements",
                    op.p[0]);
}

}  // namespace

Status CudaBackend::kthLargestAbs(const float* x, size_t n, size_t k, float* threshold,
                                  size_t* above) {
  Prim p(state(), "kthLargestAbs");
  GC_REQUIRE(k >= 1 && k <= n, Err::InvalidArgument,
             "kthLargestAbs: k = %zu must be in 1..n (n = %zu)", k, n);
  float* th = nullptr;
  size_t* ab = nullptr;
  GC_CHECK(p.result(threshold, &th));
  if (above) GC_CHECK(p.result(above, &ab));
  p.reads(x, n * 4, 4 * n * 4);
  RadixWords* r = &p.control()->radix;
  // 1024 blocks fill the device; more would only add histogram atomics.
  const unsigned grid = std::min(blocksFor(n, 8), 1024u);
  for (int shift = 24; shift >= 0; shift -= 8)
    radixPass<<<grid, kThreads, 0, p.stream()>>>(p.ctl(), x, n, shift, k, r, th, ab);
  return p.launched();
}

Status CudaBackend::countAbove(const float* x, size_t n, float threshold, size_t* count) {
  Prim p(state(), "countAbove");
  if (n == 0) return p.resultValue(count, size_t(0));
  size_t* slot = nullptr;
  GC_CHECK(p.result(count, &slot));
  p.reads(x, n * 4);
  countAboveKernel<<<streamBlocks(n), kThreads, 0, p.stream()>>>(p.ctl(), x, n, threshold,
                                                                &p.control()->cell, slot);
  return p.launched();
}

Status CudaBackend::compactAbove(float* x, size_t n, float threshold, size_t tieBudget,
                                 uint64_t indexBase, uint64_t* idx, float* val, size_t capacity,
                                 size_t* count, bool zeroSelected) {
  Prim p(state(), "compactAbove");
  GC_REQUIRE(threshold >= 0.0f, Err::InvalidArgument,
             "compactAbove: threshold %g must be >= 0", double(threshold));
  size_t* slot = nullptr;
  if (count) GC_CHECK(p.result(count, &slot));
  const bool ties = threshold > 0.0f && tieBudget > 0;  // exact zeros are never selected
  const unsigned long long budget = ties ? tieBudget : 0;
  void* ws = nullptr;
  GC_CHECK(p.scratch(TileScratch::bytes(n), &ws));
  Carve carve(ws);
  const TileScratch ts = TileScratch::take(carve, n);
  p.reads(x, n * 4, 2 * n * 4);
  if (zeroSelected) p.writes(x, n * 4, capacity * 4);
  p.writes(idx, capacity * 8);
  p.writes(val, capacity * 4);
  p.onFailure(-1, &capacityFailure, capacity);
  launchTileScan(p, ts, n, SelectFlags{x, threshold, ties},
                 CompactTotal{budget, capacity, slot},
                 CompactWrite{x, indexBase, budget, idx, val, zeroSelected});
  return p.launched();
}

}  // namespace gradcomp::device
