// Statistics and gathers of the sparse family on the GPU (CPU reference:
// device/cpu/sparse_select.cc, bit for bit): counts above many thresholds in
// one pass (Gaussiank's candidates), fp64 moments in the contract's fixed
// order, and values gathered at an index list (cltk).
#include "device/cuda/cuda_backend.h"
#include "device/cuda/kernel_common.cuh"

namespace gradcomp::device {
namespace {

using namespace cuda;

// ---- countAboveMany ------------------------------------------------------------
// Every block sorts the thresholds (rank sort, m <= 256 threads; NaN as +inf,
// ties by position) and pads them with +inf to a power of two, `width`. Each
// |x| (16-byte loads, forEachStreamed) finds by the CPU's branchless lower
// bound how many thresholds lie below it (q; NaN: 0) and, when q > 0, adds 1
// to its warp's histogram of q in shared memory (no cross-warp contention).
// Blocks add the sum of their warps' histograms into `hist` (device scratch,
// zeroed before): one global add per block and nonzero q. The last block
// turns it into suffix sums, i.e. the count above each threshold, in the
// caller's order. Integer counts: the CPU's, whatever the order of the adds.
constexpr int kManyWarps = kThreads / 32;
constexpr int kManyMax = int(Backend::kCountAboveManyMax);

__device__ inline float thresholdKey(float t) { return isnan(t) ? __int_as_float(0x7f800000) : t; }

struct ManyBin {
  const float* sorted;  // width entries, ascending, +inf padded
  int width;
  float lowest;         // sorted[0]
  unsigned int* hist;   // this warp's histogram of q, q in 1..m
  __device__ void operator()(float v, size_t) const {
    const float a = fabsf(v);
    if (!(lowest < a)) return;  // q = 0 (also NaN): counts nowhere
    int pos = 0;
    for (int step = width >> 1; step > 0; step >>= 1) pos += sorted[pos + step - 1] < a ? step : 0;
    pos += sorted[pos] < a ? 1 : 0;
    atomicAdd(&hist[pos], 1u);
  }
};

// 8 blocks per SM (<= 32 registers): the grid's 1024 blocks are resident at once.
__global__ void __launch_bounds__(kThreads, 8)
    countAboveManyKernel(Ctl ctl, const float* x, size_t n, const float* thresholds, int m,
                         unsigned long long* hist, unsigned int* done, size_t* counts) {
  if (skipBlock(ctl)) return;
  __shared__ float sorted[kManyMax];
  __shared__ int rankOf[kManyMax];
  __shared__ unsigned int local[kManyWarps][kManyMax + 1];
  __shared__ bool last;
  const int t = threadIdx.x;
  int width = 1;
  while (width < m) width <<= 1;
  if (t < m) {
    const float mine = thresholdKey(thresholds[t]);
    int r = 0;
    for (int j = 0; j < m; ++j) {
      const float other = thresholdKey(thresholds[j]);
      r += other < mine || (other == mine && j < t);
    }
    sorted[r] = mine;
    rankOf[t] = r;
  } else if (t < width) {
    sorted[t] = __int_as_float(0x7f800000);
  }
  for (int q = t; q < kManyWarps * (kManyMax + 1); q += blockDim.x) (&local[0][0])[q] = 0;
  __syncthreads();
  ManyBin bin{sorted, width, sorted[0], local[t / 32]};
  forEachStreamed(x, n, bin);
  __syncthreads();
  for (int q = t + 1; q <= m; q += blockDim.x) {
    unsigned long long c = 0;
    for (int w = 0; w < kManyWarps; ++w) c += local[w][q];
    if (c) atomicAdd(&hist[q], c);
  }
  __threadfence();
  __syncthreads();
  if (t == 0) last = lastBlockIn(done);
  __syncthreads();
  if (!last || t != 0) return;
  __threadfence();
  // Count above sorted[j] = elements exceeding more than j thresholds.
  unsigned long long above = 0;
  for (int e = m; e > 0; --e) {
    above += loadVolatile(&hist[e]);
    hist[e] = above;   // now: count above sorted[e - 1]
  }
  for (int j = 0; j < m; ++j) counts[j] = size_t(loadVolatile(&hist[rankOf[j] + 1]));
}

// ---- moments -------------------------------------------------------------------
// One 256-thread block per 4096-element block (grid-stride over them): lane l
// adds elements l, l + 256, ... in turn, lanes then pairwise (l += l + s for
// s = 128 .. 1); the last block adds the block results in block order.
// Only the schedule is the GPU's: a full block's 16 loads per lane are issued
// before its adds, the pairwise steps s = 16 .. 1 run as shuffles in warp 0
// (lane l still adds lane l + s to itself), and the in-order sum reads the
// block results through shared memory, 256 at a time, so one thread's chain
// of adds waits on shared loads, not on global ones.
constexpr size_t kMomentBlock = 4096;
constexpr int kMomentLanes = 256;
constexpr int kMomentPerLane = int(kMomentBlock) / kMomentLanes;

__device__ inline void addMoment(double v, double& a, double& c) {
  if (!isfinite(v)) return;
  a = __dadd_rn(a, v);
  c = __dadd_rn(c, __dmul_rn(v, v));
}

__global__ void __launch_bounds__(kMomentLanes)
    momentsKernel(Ctl ctl, const float* x, size_t n, double2* partial, unsigned int* done,
                  double* sum, double* sumSquares) {
  if (skipBlock(ctl)) return;
  __shared__ double ls[kMomentLanes], lq[kMomentLanes];
  __shared__ bool last;
  const size_t blocks = (n + kMomentBlock - 1) / kMomentBlock;
  const int l = threadIdx.x;
  for (size_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const size_t begin = b * kMomentBlock;
    const size_t len = n - begin < kMomentBlock ? n - begin : kMomentBlock;
    double a = 0, c = 0;
    if (len == kMomentBlock) {
      float v[kMomentPerLane];
#pragma unroll
      for (int k = 0; k < kMomentPerLane; ++k) v[k] = x[begin + size_t(l + k * kMomentLanes)];
#pragma unroll
      for (int k = 0; k < kMomentPerLane; ++k) addMoment(double(v[k]), a, c);
    } else {
      for (size_t i = size_t(l); i < len; i += kMomentLanes) addMoment(double(x[begin + i]), a, c);
    }
    ls[l] = a;
    lq[l] = c;
    __syncthreads();
    for (int s = kMomentLanes / 2; s >= 32; s /= 2) {
      if (l < s) {
        ls[l] = __dadd_rn(ls[l], ls[l + s]);
        lq[l] = __dadd_rn(lq[l], lq[l + s]);
      }
      __syncthreads();
    }
    if (l < 32) {
      double ta = ls[l], tc = lq[l];
      for (int s = 16; s >= 1; s /= 2) {
        const double oa = __shfl_down_sync(0xFFFFFFFFu, ta, s);
        const double oc = __shfl_down_sync(0xFFFFFFFFu, tc, s);
        ta = __dadd_rn(ta, oa);  // meaningful in lanes l < s, as the shared-memory steps
        tc = __dadd_rn(tc, oc);
      }
      if (l == 0) partial[b] = make_double2(ta, tc);
    }
    __syncthreads();  // ls, lq are rewritten for the next block
  }
  __threadfence();
  if (l == 0) last = lastBlockIn(done);
  __syncthreads();
  if (!last) return;
  __threadfence();
  double s = 0, q = 0;
  const volatile double2* p = partial;
  for (size_t base = 0; base < blocks; base += kMomentLanes) {
    const size_t count = blocks - base < size_t(kMomentLanes) ? blocks - base : kMomentLanes;
    if (size_t(l) < count) {
      ls[l] = p[base + l].x;
      lq[l] = p[base + l].y;
    }
    __syncthreads();
    if (l == 0)
      for (size_t j = 0; j < count; ++j) {
        s = __dadd_rn(s, ls[j]);
        q = __dadd_rn(q, lq[j]);
      }
    __syncthreads();
  }
  if (l != 0) return;
  *sum = s;
  *sumSquares = q;
  *done = 0;
}

// ---- gatherValues --------------------------------------------------------------
__global__ void gatherValuesKernel(Ctl ctl, float* dst, const float* x, size_t n,
                                   const uint64_t* idx, size_t count) {
  if (skipBlock(ctl)) return;
  GC_GRID_STRIDE(i, count) {
    const uint64_t at = idx[i];
    if (at >= n) fail(ctl, keyAt(i), at);
    else dst[i] = x[at];
  }
}

Status gatherValuesFailure(const OpInfo& op, const FailureRecord& f) {
  return makeStatus(Err::InvalidArgument, "gatherValues: index %llu (entry %llu) outside [0, %llu)",
                    f.a, keyPos(f.key), op.p[0]);
}

}  // namespace

Status CudaBackend::countAboveMany(const float* x, size_t n, const float* thresholds, size_t m,
                                   size_t* counts) {
  Prim p(state(), "countAboveMany");
  GC_REQUIRE(m <= kCountAboveManyMax, Err::InvalidArgument,
             "countAboveMany: %zu thresholds (at most %zu)", m, kCountAboveManyMax);
  if (m == 0) return Status::Ok();
  size_t* slot = nullptr;
  GC_CHECK(p.resultArray(counts, m, &slot));
  if (n == 0) {
    for (size_t j = 0; j < m; ++j) slot[j] = 0;  // pinned: delivered at sync()
    return Status::Ok();
  }
  p.reads(x, n * 4);
  p.reads(thresholds, m * 4);
  const size_t histBytes = (m + 1) * sizeof(unsigned long long);
  void* ws = nullptr;
  GC_CHECK(p.scratch(p.stageBytes(thresholds, m * 4) + Carve::bytes<uint8_t>(histBytes + 8), &ws));
  Carve carve(ws);
  GC_CHECK(p.stage(thresholds, m * 4, carve, &thresholds));
  auto* hist = carve.take<unsigned long long>(m + 2);  // m + 1 counters, then `done`
  auto* done = reinterpret_cast<unsigned int*>(hist + m + 1);
  GC_CHECK(p.check(cudaMemsetAsync(hist, 0, histBytes + 8, p.stream()), "cudaMemsetAsync"));
  // 1024 blocks of 256 fill an H200 (132 SMs, 2048 threads each) about once.
  countAboveManyKernel<<<std::min(streamBlocks(n), 1024u), kThreads, 0, p.stream()>>>(
      p.ctl(), x, n, thresholds, int(m), hist, done, slot);
  return p.launched();
}

Status CudaBackend::moments(const float* x, size_t n, double* sum, double* sumSquares) {
  Prim p(state(), "moments");
  if (n == 0) {
    GC_CHECK(p.resultValue(sum, 0.0));
    return p.resultValue(sumSquares, 0.0);
  }
  double *s = nullptr, *q = nullptr;
  GC_CHECK(p.result(sum, &s));
  GC_CHECK(p.result(sumSquares, &q));
  p.reads(x, n * 4);
  const size_t blocks = (n + kMomentBlock - 1) / kMomentBlock;
  void* ws = nullptr;
  GC_CHECK(p.scratch(Carve::bytes<double2>(blocks), &ws));
  Carve carve(ws);
  double2* partial = carve.take<double2>(blocks);
  const unsigned grid = unsigned(std::min<size_t>(blocks, 2048));
  momentsKernel<<<grid, kMomentLanes, 0, p.stream()>>>(p.ctl(), x, n, partial,
                                                       &p.control()->cell.done, s, q);
  return p.launched();
}

Status CudaBackend::gatherValues(float* dst, const float* x, size_t n, const uint64_t* idx,
                                 size_t count) {
  Prim p(state(), "gatherValues");
  if (count == 0) return Status::Ok();
  p.reads(idx, count * 8);
  p.reads(x, n * 4, count * 4);
  p.writes(dst, count * 4);
  p.onFailure(-1, &gatherValuesFailure, n);
  gatherValuesKernel<<<blocksFor(count, 4), kThreads, 0, p.stream()>>>(p.ctl(), dst, x, n, idx,
                                                                       count);
  return p.launched();
}

}  // namespace gradcomp::device
