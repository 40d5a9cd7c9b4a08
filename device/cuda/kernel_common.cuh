// Device helpers shared by the CUDA backend's kernel families: launch shape,
// the counter-based hash of device/quant_types.h (bit-identical twin), packed
// bit streams, and a reduce-then-scan over fixed tiles (ordered compaction
// and data-dependent offsets without a sort or global atomics in order).
// Every fp64 operation whose rounding is part of a contract uses the _rn
// intrinsics so nvcc never contracts a*b+c into an FMA the CPU does not do.
#pragma once

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace gradcomp::device::cuda {

constexpr int kThreads = 256;
constexpr size_t kMaxBlocks = 4096;

inline unsigned blocksFor(size_t n, size_t perThread = 1) {
  const size_t threads = (n + perThread - 1) / perThread;
  return unsigned(std::max<size_t>(1, std::min<size_t>((threads + kThreads - 1) / kThreads, kMaxBlocks)));
}

#define GC_GRID_STRIDE(i, n)                                                     \
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < size_t(n); \
       i += size_t(gridDim.x) * blockDim.x)

// |v| with NaN below every number (-1), as device/cpu/sparse_select.cc.
__device__ inline float magnitude(float v) { return isnan(v) ? -1.0f : fabsf(v); }

__device__ inline bool isPlusZero(float v) { return __float_as_uint(v) == 0u; }

// ---- device/quant_types.h twins (integer only: bit-identical) -------------
__device__ inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
__device__ inline double counterUniform(uint64_t stream, uint64_t index) {
  return __dmul_rn(double(mix64(stream ^ mix64(index)) >> 11), 0x1.0p-53);
}

// ---- packed bit streams (layout: device/quant_types.h) --------------------
__device__ inline uint32_t getBits(const uint8_t* s, size_t index, int width) {
  const size_t bit = index * size_t(width);
  const uint8_t* p = s + bit / 8;
  const int span = int((bit % 8) + size_t(width) + 7) / 8;
  uint32_t v = 0;
  for (int b = 0; b < span; ++b) v |= uint32_t(p[b]) << (8 * b);
  return (v >> (bit % 8)) & ((uint32_t(1) << width) - 1);
}
// Byte `byteIndex` of a stream of n fields of `width` bits, field(i) giving
// field i's value: one thread per output byte, so no two threads write one
// byte and the padding bits come out zero.
template <class Field>
__device__ inline uint8_t packByte(size_t byteIndex, size_t n, int width, const Field& field) {
  const size_t firstBit = byteIndex * 8;
  size_t f = firstBit / size_t(width);
  const size_t end = (firstBit + 8 + size_t(width) - 1) / size_t(width);
  const size_t last = end < n ? end : n;
  uint32_t out = 0;
  for (; f < last; ++f) {
    const int64_t shift = int64_t(f * size_t(width)) - int64_t(firstBit);
    const uint32_t v = field(f);
    out |= shift >= 0 ? v << shift : v >> -shift;
  }
  return uint8_t(out);
}
__device__ inline bool paddingClear(const uint8_t* s, size_t n, int width) {
  const size_t used = n * size_t(width);
  return used % 8 == 0 || (s[used / 8] >> (used % 8)) == 0;
}

// ---- results words: kernels report counts and the first bad position ------
// A small device array the backend zeroes before and reads after a family;
// "first bad" slots start at ~0 and take atomicMin.
constexpr uint64_t kNone = ~0ull;
__device__ inline void reportFirst(uint64_t* word, uint64_t position) {
  atomicMin(reinterpret_cast<unsigned long long*>(word), (unsigned long long)position);
}

// ---- reduce-then-scan over tiles ------------------------------------------
// A functor F gives every element i two counters (Pair); tileSums totals them
// per tile of kTile elements, scanTiles turns the totals into exclusive tile
// offsets (one block; deterministic), tileApply calls out(i, before, mine)
// with the exclusive prefix `before` of element i over the whole range.
struct Pair {
  unsigned long long a, b;
};
struct PairSum {
  __device__ Pair operator()(const Pair& x, const Pair& y) const { return {x.a + y.a, x.b + y.b}; }
};
constexpr int kItems = 8;
constexpr size_t kTile = size_t(kThreads) * kItems;
__host__ __device__ inline size_t tileCount(size_t n) { return (n + kTile - 1) / kTile; }

template <class F>
__global__ void tileSums(F f, size_t n, Pair* tiles) {
  using Reduce = cub::BlockReduce<Pair, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  for (size_t t = blockIdx.x; t < tileCount(n); t += gridDim.x) {
    Pair mine{0, 0};
    const size_t begin = t * kTile;
    for (int k = 0; k < kItems; ++k) {
      const size_t i = begin + size_t(threadIdx.x) * kItems + k;
      if (i < n) {
        const Pair p = f(i);
        mine.a += p.a;
        mine.b += p.b;
      }
    }
    const Pair total = Reduce(tmp).Reduce(mine, PairSum());
    if (threadIdx.x == 0) tiles[t] = total;
    __syncthreads();
  }
}

// tiles[] (device) becomes its exclusive scan and *total (device) its sum:
// one block, so the result never depends on scheduling (tile_scan.cu).
void launchScanTiles(Pair* tiles, size_t count, Pair* total, cudaStream_t stream);

template <class F, class Out>
__global__ void tileApply(F f, Out out, size_t n, const Pair* tileOffsets) {
  using Scan = cub::BlockScan<Pair, kThreads>;
  __shared__ typename Scan::TempStorage tmp;
  for (size_t t = blockIdx.x; t < tileCount(n); t += gridDim.x) {
    const size_t begin = t * kTile + size_t(threadIdx.x) * kItems;
    Pair item[kItems];
    Pair mine{0, 0};
    for (int k = 0; k < kItems; ++k) {
      item[k] = begin + k < n ? f(begin + k) : Pair{0, 0};
      mine.a += item[k].a;
      mine.b += item[k].b;
    }
    Pair before;
    Scan(tmp).ExclusiveScan(mine, before, Pair{0, 0}, PairSum());
    before.a += tileOffsets[t].a;
    before.b += tileOffsets[t].b;
    for (int k = 0; k < kItems && begin + k < n; ++k) {
      out(begin + k, before, item[k]);
      before.a += item[k].a;
      before.b += item[k].b;
    }
    __syncthreads();
  }
}

inline unsigned tileBlocks(size_t n) {
  return unsigned(std::max<size_t>(1, std::min<size_t>(tileCount(n), kMaxBlocks)));
}

}  // namespace gradcomp::device::cuda
