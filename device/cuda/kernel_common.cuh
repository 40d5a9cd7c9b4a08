// Device helpers shared by the CUDA backend's kernel families: launch shape,
// the failure protocol (backend_impl.h), reduction cells, the counter-based
// hash of device/quant_types.h (bit-identical twin), packed bit streams,
// little-endian fields, and a reduce-then-scan over fixed tiles (ordered
// compaction and data-dependent offsets without a sort).
// Every operation whose rounding is part of a contract uses the _rn
// intrinsics, and the library is compiled with --fmad=false, so nvcc never
// contracts a*b+c into an FMA the CPU does not do.
#pragma once

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "device/cuda/backend_impl.h"

namespace gradcomp::device::cuda {

constexpr int kThreads = 256;
// Enough blocks to fill an H100/H200 several times over; grid-stride loops
// cover the rest.
constexpr size_t kMaxBlocks = 4096;

inline unsigned blocksFor(size_t n, size_t perThread = 1) {
  const size_t threads = (n + perThread - 1) / perThread;
  return unsigned(
      std::max<size_t>(1, std::min<size_t>((threads + kThreads - 1) / kThreads, kMaxBlocks)));
}

#define GC_GRID_STRIDE(i, n)                                                     \
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < size_t(n); \
       i += size_t(gridDim.x) * blockDim.x)

// ---- Failure protocol --------------------------------------------------------
// Called by every thread of a block at kernel start: true when an earlier
// launch of the stream failed (the whole block returns, so no barrier later
// in the kernel is left waiting).
__device__ inline bool skipBlock(const Ctl& c) {
  __shared__ int skip;
  if (threadIdx.x == 0) {
    const unsigned long long f =
        *reinterpret_cast<volatile unsigned long long*>(&c.cb->failedLaunch);
    skip = f != 0 && f != c.launch;
  }
  __syncthreads();
  return skip != 0;
}

// Keys: the smallest wins. Position first (the CPU reports the first bad
// entry), then the kind of check in the CPU's order for one entry.
__device__ __host__ inline unsigned long long keyAt(unsigned long long pos, unsigned kind = 0) {
  return pos << 4 | kind;
}
// Kind first: checks the CPU runs over the whole input before the next one.
__device__ __host__ inline unsigned long long keyKind(unsigned kind, unsigned long long pos = 0) {
  return (unsigned long long)kind << 56 | pos;
}
__host__ inline unsigned long long keyPos(unsigned long long key) { return key >> 4; }
__host__ inline unsigned keyKindOf(unsigned long long key) { return unsigned(key & 15); }
__host__ inline unsigned keyKindFirst(unsigned long long key) { return unsigned(key >> 56); }
__host__ inline unsigned long long keyKindPos(unsigned long long key) {
  return key & ((1ull << 56) - 1);
}

// Records a data error of this launch: the smallest key keeps its details.
// Later launches of the stream skip; the launch itself runs to its end.
__device__ inline void fail(const Ctl& c, unsigned long long key, unsigned long long a = 0,
                            unsigned long long b = 0) {
  FailureWords* f = &c.cb->failure;
  const unsigned long long old = atomicMin(&f->key, key);
  // A smaller key is already recorded (with everything below): nothing to
  // add, and no PCIe write per bad element on a payload full of them.
  if (key >= old) return;
  // The writer of the final (smallest) key writes last: it takes the lock
  // after lowering the key, and no larger key writes once it holds.
  while (atomicCAS(&f->lock, 0, 1) != 0) {
  }
  if (*reinterpret_cast<volatile unsigned long long*>(&f->key) == key) {
    *reinterpret_cast<volatile unsigned long long*>(&f->a) = a;
    *reinterpret_cast<volatile unsigned long long*>(&f->b) = b;
  }
  __threadfence();
  atomicExch(&f->lock, 0);
  *reinterpret_cast<volatile unsigned int*>(&f->op) = c.op;
  atomicExch(&c.cb->failedLaunch, c.launch);
  *reinterpret_cast<volatile unsigned int*>(c.hostFailed) = 1u;
}

// Thread 0 of a block, after folding the block's partials into a cell whose
// counter is `done`: true in the block that finishes last (it then reads the
// totals with volatile loads, publishes them and clears the cell).
__device__ inline bool lastBlockIn(unsigned int* done) {
  __threadfence();
  return atomicAdd(done, 1u) == gridDim.x - 1;
}
__device__ inline unsigned long long loadVolatile(const unsigned long long* p) {
  return *reinterpret_cast<const volatile unsigned long long*>(p);
}

// ---- Streaming reads -----------------------------------------------------------
// Calls f(v, i) with v = x[i] exactly once for every i in [0, n), spread
// over all threads of the grid in no fixed order: only for results that do
// not depend on the order (integer counts, max/min). The 16-byte aligned
// body goes in float4 loads, kStreamUnroll of them issued before f runs on
// any, so each thread keeps 64 bytes in flight; the unaligned head (< 4
// elements: x is 4-byte aligned) and the tail go one element per thread.
constexpr int kStreamUnroll = 4;

template <class F>
__device__ inline void forEachStreamed(const float* x, size_t n, F& f) {
  const size_t tid = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  const size_t threads = size_t(gridDim.x) * blockDim.x;
  const size_t lead = (16 - uintptr_t(x) % 16) % 16 / 4;
  const size_t head = lead < n ? lead : n;
  for (size_t i = tid; i < head; i += threads) f(x[i], i);
  const float4* body = reinterpret_cast<const float4*>(x + head);
  const size_t quads = (n - head) / 4;
  size_t q = tid;
  for (; q + (kStreamUnroll - 1) * threads < quads; q += kStreamUnroll * threads) {
    float4 v[kStreamUnroll];
#pragma unroll
    for (int u = 0; u < kStreamUnroll; ++u) v[u] = body[q + u * threads];
#pragma unroll
    for (int u = 0; u < kStreamUnroll; ++u) {
      const size_t i = head + 4 * (q + u * threads);
      f(v[u].x, i);
      f(v[u].y, i + 1);
      f(v[u].z, i + 2);
      f(v[u].w, i + 3);
    }
  }
  for (; q < quads; q += threads) {
    const float4 v = body[q];
    const size_t i = head + 4 * q;
    f(v.x, i);
    f(v.y, i + 1);
    f(v.z, i + 2);
    f(v.w, i + 3);
  }
  const size_t tail = head + 4 * quads;
  for (size_t i = tail + tid; i < n; i += threads) f(x[i], i);
}

// Grid for forEachStreamed: 16 elements per thread per round, at most
// kMaxBlocks blocks of kThreads (the rounds cover the rest).
inline unsigned streamBlocks(size_t n) { return blocksFor(n, 4 * kStreamUnroll); }

// ---- Values ------------------------------------------------------------------
// |v| with NaN below every number (-1), as device/cpu/sparse_select.cc.
__device__ inline float magnitude(float v) { return isnan(v) ? -1.0f : fabsf(v); }
__device__ inline bool isPlusZero(float v) { return __float_as_uint(v) == 0u; }

// First i in [0, n) with sorted[i] >= key (n when none).
__device__ inline size_t lowerBoundOf(const uint64_t* sorted, size_t n, uint64_t key) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (sorted[mid] < key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// ---- device/quant_types.h twins (integer only: bit-identical) -----------------
__device__ inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
__device__ inline double counterUniform(uint64_t stream, uint64_t index) {
  return __dmul_rn(double(mix64(stream ^ mix64(index)) >> 11), 0x1.0p-53);
}

// ---- Little-endian fields (wire bodies may sit at any byte offset) ----------
__device__ inline void putUint(uint8_t* p, uint64_t v, int bytes) {
  for (int b = 0; b < bytes; ++b) p[b] = uint8_t(v >> (8 * b));
}
__device__ inline uint64_t getUint(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int b = 0; b < bytes; ++b) v |= uint64_t(p[b]) << (8 * b);
  return v;
}
__device__ inline float getFloat(const uint8_t* p) { return __uint_as_float(uint32_t(getUint(p, 4))); }
__device__ inline void putFloat(uint8_t* p, float v) { putUint(p, __float_as_uint(v), 4); }

// ---- Packed bit streams (layout: device/quant_types.h) ------------------------
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
// byte and the padding bits come out zero. field(i, first) is told whether
// this byte holds field i's first bit (side effects happen once per field).
template <class Field>
__device__ inline uint8_t packByte(size_t byteIndex, size_t n, int width, const Field& field) {
  const size_t firstBit = byteIndex * 8;
  size_t f = firstBit / size_t(width);
  const size_t end = (firstBit + 8 + size_t(width) - 1) / size_t(width);
  const size_t last = end < n ? end : n;
  uint32_t out = 0;
  for (; f < last; ++f) {
    const int64_t shift = int64_t(f * size_t(width)) - int64_t(firstBit);
    const uint32_t v = field(f, shift >= 0);
    out |= shift >= 0 ? v << shift : v >> -shift;
  }
  return uint8_t(out);
}
// Group g of 8 fields (fields 8g .. 8g + 7) fills exactly `width` bytes
// (8 * width bits), so one thread per group writes whole bytes and computes
// each field once: code(i) may have side effects (residuals written in place
// of the input). Bytes past packedBytes(n, width) are not written; padding
// bits of the last byte come out zero.
template <class Code>
__device__ inline void packGroup(size_t g, size_t n, int width, uint8_t* out, const Code& code) {
  uint64_t lo = 0, hi = 0;
  for (int k = 0; k < 8; ++k) {
    const size_t i = 8 * g + k;
    if (i >= n) break;
    const uint64_t c = code(i);
    const int off = k * width;
    if (off < 64) {
      lo |= c << off;
      if (off + width > 64) hi |= c >> (64 - off);
    } else {
      hi |= c << (off - 64);
    }
  }
  const size_t first = size_t(width) * g;
  const size_t total = (n * size_t(width) + 7) / 8;
  for (int b = 0; b < width && first + b < total; ++b)
    out[first + b] = uint8_t(b < 8 ? lo >> (8 * b) : hi >> (8 * (b - 8)));
}
__device__ __host__ inline size_t groupCount(size_t n) { return (n + 7) / 8; }

__device__ inline bool paddingClear(const uint8_t* s, size_t n, int width) {
  const size_t used = n * size_t(width);
  return used % 8 == 0 || (s[used / 8] >> (used % 8)) == 0;
}

// ---- Reduce-then-scan over tiles ---------------------------------------------
// A functor F gives every element i two counters (Pair) through f(i, ctl);
// tileSums totals them per tile of kTile elements, scanTiles turns the totals
// into exclusive tile offsets (one block: deterministic) and hands the grand
// total to a finisher, tileApply calls out(i, before, mine, ctl) with the
// exclusive prefix `before` of element i over the whole range.
struct Pair {
  unsigned long long a, b;
};
struct PairSum {
  __device__ Pair operator()(const Pair& x, const Pair& y) const { return {x.a + y.a, x.b + y.b}; }
};
constexpr int kItems = 8;
constexpr size_t kTile = size_t(kThreads) * kItems;
__host__ __device__ inline size_t tileCount(size_t n) { return (n + kTile - 1) / kTile; }
inline unsigned tileBlocks(size_t n) {
  return unsigned(std::max<size_t>(1, std::min<size_t>(tileCount(n), kMaxBlocks)));
}

template <class F>
__global__ void __launch_bounds__(kThreads) tileSums(Ctl ctl, F f, size_t n, Pair* tiles) {
  if (skipBlock(ctl)) return;
  using Reduce = cub::BlockReduce<Pair, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  for (size_t t = blockIdx.x; t < tileCount(n); t += gridDim.x) {
    Pair mine{0, 0};
    const size_t begin = t * kTile;
    // Coalesced: consecutive threads read consecutive elements.
    for (int k = 0; k < kItems; ++k) {
      const size_t i = begin + size_t(k) * kThreads + threadIdx.x;
      if (i < n) {
        const Pair p = f(i, ctl);
        mine.a += p.a;
        mine.b += p.b;
      }
    }
    const Pair total = Reduce(tmp).Reduce(mine, PairSum());
    if (threadIdx.x == 0) tiles[t] = total;
    __syncthreads();
  }
}

// 256 threads: the scan of 16-byte pairs takes ~150 registers per thread,
// more than a 1024-thread block can have (64); launch bounds make ptxas
// fit whatever it compiles to the launch.
constexpr int kScanThreads = 256;

// tiles[0..count) becomes its exclusive scan, *total its sum, and thread 0
// then calls fin(total, ctl) (scalar results, capacity checks).
template <class Fin>
__global__ void __launch_bounds__(kScanThreads) scanTiles(Ctl ctl, Pair* tiles, size_t count,
                                                          Pair* total, Fin fin) {
  if (skipBlock(ctl)) return;
  using Scan = cub::BlockScan<Pair, kScanThreads>;
  __shared__ typename Scan::TempStorage tmp;
  const size_t per = (count + kScanThreads - 1) / kScanThreads;
  const size_t first = size_t(threadIdx.x) * per;
  const size_t begin = first < count ? first : count;
  const size_t end = begin + per < count ? begin + per : count;
  Pair mine{0, 0};
  for (size_t t = begin; t < end; ++t) mine = PairSum()(mine, tiles[t]);
  Pair before, all;
  Scan(tmp).ExclusiveScan(mine, before, Pair{0, 0}, PairSum(), all);
  for (size_t t = begin; t < end; ++t) {
    const Pair v = tiles[t];
    tiles[t] = before;
    before = PairSum()(before, v);
  }
  if (threadIdx.x == 0) {
    *total = all;
    fin(all, ctl);
  }
}

// A finisher that does nothing.
struct NoFinish {
  __device__ void operator()(const Pair&, const Ctl&) const {}
};

template <class F, class Out>
__global__ void __launch_bounds__(kThreads) tileApply(Ctl ctl, F f, Out out, size_t n,
                                                      const Pair* tileOffsets) {
  if (skipBlock(ctl)) return;
  using Scan = cub::BlockScan<Pair, kThreads>;
  __shared__ typename Scan::TempStorage tmp;
  for (size_t t = blockIdx.x; t < tileCount(n); t += gridDim.x) {
    // Blocked: thread j owns elements [j * kItems, (j + 1) * kItems) of the
    // tile, so its exclusive prefix is the scan of the per-thread sums.
    const size_t begin = t * kTile + size_t(threadIdx.x) * kItems;
    Pair item[kItems];
    Pair mine{0, 0};
    for (int k = 0; k < kItems; ++k) {
      item[k] = begin + k < n ? f(begin + k, ctl) : Pair{0, 0};
      mine.a += item[k].a;
      mine.b += item[k].b;
    }
    Pair before;
    Scan(tmp).ExclusiveScan(mine, before, Pair{0, 0}, PairSum());
    before.a += tileOffsets[t].a;
    before.b += tileOffsets[t].b;
    for (int k = 0; k < kItems && begin + k < n; ++k) {
      out(begin + k, before, item[k], ctl);
      before.a += item[k].a;
      before.b += item[k].b;
    }
    __syncthreads();
  }
}

// Scratch of one reduce-then-scan over n elements: tile offsets and the total.
struct TileScratch {
  Pair* tiles;
  Pair* total;
  static size_t bytes(size_t n) { return Carve::bytes<Pair>(tileCount(n)) + Carve::bytes<Pair>(1); }
  static TileScratch take(Carve& c, size_t n) {
    TileScratch s;
    s.tiles = c.take<Pair>(tileCount(n));
    s.total = c.take<Pair>(1);
    return s;
  }
};

// Enqueues the three kernels of one reduce-then-scan on p's stream.
template <class F, class Fin, class Out>
void launchTileScan(Prim& p, const TileScratch& s, size_t n, F f, Fin fin, Out out) {
  tileSums<<<tileBlocks(n), kThreads, 0, p.stream()>>>(p.ctl(), f, n, s.tiles);
  scanTiles<<<1, kScanThreads, 0, p.stream()>>>(p.ctl(), s.tiles, tileCount(n), s.total, fin);
  tileApply<<<tileBlocks(n), kThreads, 0, p.stream()>>>(p.ctl(), f, out, n, s.tiles);
}

}  // namespace gradcomp::device::cuda
