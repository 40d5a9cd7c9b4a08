// Top-k family on the GPU: exact k-th largest |x| by radix select on the
// magnitude bits, counting, ordered compaction to COO (optionally zeroing the
// selected entries: the error-feedback residual update, fused), scatters, and
// the gradient accumulation of error feedback for fp32/fp16/bf16 gradients.
// Semantics: device/cpu/sparse_select.cc, bit for bit.
#include "device/cuda/backend_internal.h"
#include "device/cuda/cuda_backend.h"
#include "device/cuda/element_ops.cuh"
#include "device/cuda/kernel_common.cuh"

namespace gradcomp::device {
namespace {

using namespace cuda;

// Radix-select key: |x| as its bit pattern (monotone for non-negative
// floats), NaN as +0. The CPU maps NaN to -1 and clamps the result at 0, so
// a NaN ranked k-th and a zero ranked k-th both give threshold 0: the same.
__device__ inline uint32_t selectKey(float v) {
  return isnan(v) ? 0u : (__float_as_uint(v) & 0x7FFFFFFFu);
}

struct RadixState {
  uint32_t prefix, mask;
  unsigned long long remaining;  // rank still to find among keys matching prefix
};

__global__ void radixHistogram(const float* x, size_t n, const RadixState* st, int shift,
                               unsigned long long* hist) {
  __shared__ unsigned int local[256];
  for (int b = threadIdx.x; b < 256; b += blockDim.x) local[b] = 0;
  __syncthreads();
  const uint32_t prefix = st->prefix, mask = st->mask;
  GC_GRID_STRIDE(i, n) {
    const uint32_t key = selectKey(x[i]);
    if ((key & mask) == prefix) atomicAdd(&local[(key >> shift) & 0xFF], 1u);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < 256; b += blockDim.x)
    if (local[b]) atomicAdd(&hist[b], (unsigned long long)local[b]);
}

// One thread: picks the digit holding the remaining rank (largest first),
// narrows the prefix, clears the histogram for the next pass.
__global__ void radixPick(RadixState* st, int shift, unsigned long long* hist, uint64_t* result) {
  unsigned long long above = 0;
  int digit = 0;
  for (int d = 255; d >= 0; --d) {
    if (above + hist[d] >= st->remaining) {
      digit = d;
      break;
    }
    above += hist[d];
  }
  st->remaining -= above;
  st->prefix |= uint32_t(digit) << shift;
  st->mask |= 0xFFu << shift;
  for (int d = 0; d < 256; ++d) hist[d] = 0;
  if (shift == 0) result[0] = st->prefix;
}

__global__ void initRadix(RadixState* st, unsigned long long* hist, uint64_t k) {
  st->prefix = 0;
  st->mask = 0;
  st->remaining = k;
  for (int d = 0; d < 256; ++d) hist[d] = 0;
}

__global__ void countAboveKernel(const float* x, size_t n, float threshold, uint64_t* count) {
  using Reduce = cub::BlockReduce<unsigned long long, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  unsigned long long c = 0;
  GC_GRID_STRIDE(i, n) c += magnitude(x[i]) > threshold;
  c = Reduce(tmp).Sum(c);
  if (threadIdx.x == 0 && c) atomicAdd(reinterpret_cast<unsigned long long*>(count), c);
}

// Per element: (above threshold, equal to it); ties only when threshold > 0.
struct SelectFlags {
  const float* x;
  float threshold;
  bool ties;
  __device__ Pair operator()(size_t i) const {
    const float m = magnitude(x[i]);
    return {m > threshold ? 1ull : 0ull, ties && m == threshold ? 1ull : 0ull};
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
  size_t capacity;
  bool zero;
  __device__ void operator()(size_t i, Pair before, Pair mine) const {
    const bool take = mine.a || (mine.b && before.b < budget);
    if (!take) return;
    const size_t pos = size_t(before.a + (before.b < budget ? before.b : budget));
    if (pos < capacity) {
      idx[pos] = indexBase + i;
      val[pos] = x[i];
    }
    if (zero) x[i] = 0.0f;
  }
};

// Range check of COO indexes: first entry outside [base, base + n), and
// whether the entries before it are strictly ascending (then no two share a
// destination and the adds may run in parallel, bit-exactly).
__global__ void scatterCheck(const uint64_t* idx, size_t count, size_t n, uint64_t base,
                             uint64_t* firstBad, uint64_t* firstUnordered) {
  GC_GRID_STRIDE(i, count) {
    if (!(idx[i] >= base && idx[i] - base < n)) reportFirst(firstBad, i);
    if (i > 0 && idx[i] <= idx[i - 1]) reportFirst(firstUnordered, i);
  }
}

__global__ void scatterParallel(float* dst, uint64_t base, const uint64_t* idx, const float* val,
                                size_t count) {
  GC_GRID_STRIDE(i, count) {
    float* d = dst + (idx[i] - base);
    *d = val ? __fadd_rn(*d, val[i]) : 0.0f;
  }
}

// Repeated indexes: the CPU's order of additions, on one thread.
__global__ void scatterSerial(float* dst, uint64_t base, const uint64_t* idx, const float* val,
                              size_t count) {
  for (size_t i = 0; i < count; ++i) {
    float* d = dst + (idx[i] - base);
    *d = val ? __fadd_rn(*d, val[i]) : 0.0f;
  }
}

template <class T>
__global__ void accumulateKernel(float* acc, const typename T::Storage* grad, size_t n) {
  GC_GRID_STRIDE(i, n) {
    if constexpr (std::is_same<T, F32>::value)
      acc[i] = __fadd_rn(acc[i], grad[i]);
    else
      acc[i] = __fadd_rn(acc[i], T::load(grad[i]));
  }
}

}  // namespace

Status CudaBackend::kthLargestAbs(const float* x, size_t n, size_t k, float* threshold) {
  GC_REQUIRE(k >= 1 && k <= n, Err::InvalidArgument,
             "kthLargestAbs: k = %zu must be in 1..n (n = %zu)", k, n);
  void* ws = nullptr;
  GC_CHECK(scratch(Carve::bytes<RadixState>(1) + Carve::bytes<unsigned long long>(256), &ws));
  Carve carve(ws);
  RadixState* st = carve.take<RadixState>(1);
  unsigned long long* hist = carve.take<unsigned long long>(256);
  GC_CHECK(resetResults());
  initRadix<<<1, 1, 0, stream_>>>(st, hist, k);
  for (int shift = 24; shift >= 0; shift -= 8) {
    radixHistogram<<<blocksFor(n, 8), kThreads, 0, stream_>>>(x, n, st, shift, hist);
    radixPick<<<1, 1, 0, stream_>>>(st, shift, hist, deviceResults());
  }
  GC_CHECK(launched("kthLargestAbs"));
  uint64_t res[kResultWords];
  GC_CHECK(fetchResults(res));
  const uint32_t bits = uint32_t(res[0]);
  float t;
  std::memcpy(&t, &bits, 4);
  *threshold = t;
  return Status::Ok();
}

Status CudaBackend::countAbove(const float* x, size_t n, float threshold, size_t* count) {
  GC_CHECK(resetResults());
  if (n) countAboveKernel<<<blocksFor(n, 8), kThreads, 0, stream_>>>(x, n, threshold, deviceResults());
  GC_CHECK(launched("countAbove"));
  uint64_t res[kResultWords];
  GC_CHECK(fetchResults(res));
  *count = size_t(res[0]);
  return Status::Ok();
}

Status CudaBackend::compact(float* x, size_t n, float threshold, size_t tieBudget,
                            uint64_t indexBase, uint64_t* idx, float* val, size_t capacity,
                            size_t* count, bool zero) {
  GC_REQUIRE(threshold >= 0.0f, Err::InvalidArgument,
             "compactAbove: threshold %g must be >= 0", double(threshold));
  *count = 0;
  if (n == 0) return Status::Ok();
  const bool ties = threshold > 0.0f && tieBudget > 0;
  const size_t tiles = tileCount(n);
  void* ws = nullptr;
  GC_CHECK(scratch(Carve::bytes<Pair>(tiles) + Carve::bytes<Pair>(1), &ws));
  Carve carve(ws);
  Pair* tileSum = carve.take<Pair>(tiles);
  Pair* total = carve.take<Pair>(1);
  const SelectFlags flags{x, threshold, ties};
  tileSums<<<tileBlocks(n), kThreads, 0, stream_>>>(flags, n, tileSum);
  launchScanTiles(tileSum, tiles, total, stream_);
  const unsigned long long budget = ties ? tieBudget : 0;
  tileApply<<<tileBlocks(n), kThreads, 0, stream_>>>(
      flags, CompactWrite{x, indexBase, budget, idx, val, capacity, zero}, n, tileSum);
  GC_CHECK(launched("compactAbove"));
  Pair host;
  GC_CHECK(cudaCall(cudaMemcpyAsync(&host, total, sizeof(Pair), cudaMemcpyDeviceToHost, stream_),
                    "compactAbove count copy"));
  GC_CHECK(synchronize());
  const size_t selected = size_t(host.a + std::min<unsigned long long>(host.b, budget));
  GC_REQUIRE(selected <= capacity, Err::Internal,
             "compactAbove: more than capacity = %zu selected elements", capacity);
  *count = selected;
  return Status::Ok();
}

Status CudaBackend::compactAbove(const float* x, size_t n, float threshold, size_t tieBudget,
                                 uint64_t indexBase, uint64_t* idx, float* val, size_t capacity,
                                 size_t* count) {
  return compact(const_cast<float*>(x), n, threshold, tieBudget, indexBase, idx, val, capacity,
                 count, false);
}

Status CudaBackend::compactAboveAndZero(float* x, size_t n, float threshold, size_t tieBudget,
                                        uint64_t indexBase, uint64_t* idx, float* val,
                                        size_t capacity, size_t* count) {
  return compact(x, n, threshold, tieBudget, indexBase, idx, val, capacity, count, true);
}

namespace {

Status scatterImpl(CudaBackend& be, const char* what, float* dst, size_t n, uint64_t base,
                   const uint64_t* idx, const float* val, size_t count) {
  if (count == 0) return Status::Ok();
  GC_CHECK(be.resetResults());
  uint64_t* res = be.deviceResults();
  scatterCheck<<<blocksFor(count), kThreads, 0, be.stream()>>>(idx, count, n, base,
                                                              res + kFirstBad, res + kFirstBad + 1);
  GC_CHECK(launched(what));
  uint64_t host[CudaBackend::kResultWords];
  GC_CHECK(be.fetchResults(host));
  const size_t firstBad = host[kFirstBad] == kNoneHost ? count : size_t(host[kFirstBad]);
  const bool ordered = host[kFirstBad + 1] == kNoneHost || host[kFirstBad + 1] >= firstBad;
  // Entries before a bad one are applied, as the CPU does.
  if (firstBad > 0) {
    if (ordered || val == nullptr)
      scatterParallel<<<blocksFor(firstBad), kThreads, 0, be.stream()>>>(dst, base, idx, val,
                                                                         firstBad);
    else
      scatterSerial<<<1, 1, 0, be.stream()>>>(dst, base, idx, val, firstBad);
    GC_CHECK(launched(what));
  }
  if (firstBad < count) {
    uint64_t bad = 0;
    GC_CHECK(cudaCall(cudaMemcpy(&bad, idx + firstBad, 8, cudaMemcpyDeviceToHost), what));
    return makeStatus(Err::InvalidArgument, "%s: index %llu (entry %zu) outside [%llu, %llu)",
                      what, (unsigned long long)bad, firstBad, (unsigned long long)base,
                      (unsigned long long)(base + n));
  }
  return Status::Ok();
}

}  // namespace

Status CudaBackend::scatterAdd(float* dst, size_t n, uint64_t base, const uint64_t* idx,
                               const float* val, size_t count) {
  return scatterImpl(*this, "scatterAdd", dst, n, base, idx, val, count);
}

Status CudaBackend::scatterZero(float* dst, size_t n, uint64_t base, const uint64_t* idx,
                                size_t count) {
  return scatterImpl(*this, "scatterZero", dst, n, base, idx, nullptr, count);
}

// The one instantiation point of the gradient-typed kernels: fp32, fp16, bf16.
Status CudaBackend::accumulateGradient(float* acc, const void* grad, DataType gradType, size_t n) {
  if (n == 0) return Status::Ok();
  const unsigned blocks = blocksFor(n, 4);
  switch (gradType) {
    case DataType::Float32:
      accumulateKernel<F32><<<blocks, kThreads, 0, stream_>>>(acc, static_cast<const float*>(grad), n);
      break;
    case DataType::Float16:
      accumulateKernel<F16><<<blocks, kThreads, 0, stream_>>>(acc, static_cast<const uint16_t*>(grad), n);
      break;
    case DataType::BFloat16:
      accumulateKernel<BF16><<<blocks, kThreads, 0, stream_>>>(acc, static_cast<const uint16_t*>(grad), n);
      break;
    default:
      return makeStatus(Err::InvalidArgument,
                        "accumulateGradient: gradient dtype %s (accepted: float32, float16, bfloat16)",
                        dtypeName(gradType));
  }
  return launched("accumulateGradient");
}

}  // namespace gradcomp::device
