// DenseStream bodies on the GPU (format: device/backend.h, algorithms.md
// section 4; CPU reference: device/cpu/sparse_densestream.cc).
//
// Encode is fully parallel: an entry starts a block when the zero run before
// it exceeds T; with S(i) = blocks started up to i and G(i) = zeros skipped
// at block starts up to i (one reduce-then-scan), entry i's value lands at
// byte 2*I*S(i) + 4*(idx[i] - idx[0] - G(i)). Decode walks the block headers
// on one thread (each header's position depends on every earlier length:
// the format is sequential there), then expands the values one warp per
// block, in order.
#include "device/cuda/backend_internal.h"
#include "device/cuda/cuda_backend.h"
#include "device/cuda/kernel_common.cuh"

namespace gradcomp::device {
namespace {

using namespace cuda;

__device__ inline void putUint(uint8_t* p, uint64_t v, int bytes) {
  for (int b = 0; b < bytes; ++b) p[b] = uint8_t(v >> (8 * b));
}
__device__ inline uint64_t getUint(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int b = 0; b < bytes; ++b) v |= uint64_t(p[b]) << (8 * b);
  return v;
}

// (block start?, zeros skipped there) per entry; entry 0 starts block 0.
struct BlockStarts {
  const uint64_t* idx;
  uint64_t maxRun;
  __device__ Pair operator()(size_t i) const {
    if (i == 0) return {1, 0};
    const uint64_t gap = idx[i] - idx[i - 1] - 1;  // callers checked ascending
    return gap > maxRun ? Pair{1, gap} : Pair{0, 0};
  }
};

// Checks that run before any size is trusted: ascending (InvalidArgument at
// the first offender) and, for encode, values and offsets.
__global__ void checkEntries(const uint64_t* idx, const float* val, size_t count, uint64_t base,
                             uint64_t maxRel, uint64_t* firstUnordered, uint64_t* firstBadValue) {
  GC_GRID_STRIDE(i, count) {
    if (i > 0 && idx[i] <= idx[i - 1]) reportFirst(firstUnordered, i);
    if (val && (isPlusZero(val[i]) || idx[i] < base || idx[i] - base > maxRel))
      reportFirst(firstBadValue, i);
  }
}

struct EncodeWrite {
  const uint64_t* idx;
  const float* val;
  uint64_t base;
  int indexBytes;
  uint64_t maxRun;
  size_t count;
  uint8_t* out;
  __device__ void operator()(size_t i, Pair before, Pair mine) const {
    const uint64_t block = before.a + mine.a - 1;  // started blocks up to i, minus 1
    const uint64_t skipped = before.b + mine.b;
    const uint64_t slot = idx[i] - idx[0] - skipped;  // value slots before entry i
    const size_t header = 2 * size_t(indexBytes);
    uint32_t bits = __float_as_uint(val[i]);
    putUint(out + header * (block + 1) + 4 * slot, bits, 4);
    // The start entry writes the header's start; LengthWrite the length.
    if (mine.a) putUint(out + header * block + 4 * slot, idx[i] - base, indexBytes);
  }
};

// Lengths: the last entry of each block knows its slot; the block's first
// slot is recorded by the start entry in firstSlot[block].
struct FirstSlots {
  const uint64_t* idx;
  uint64_t* firstSlot;
  __device__ void operator()(size_t i, Pair before, Pair mine) const {
    if (!mine.a) return;
    firstSlot[before.a] = idx[i] - idx[0] - (before.b + mine.b);
  }
};
struct LengthWrite {
  const uint64_t* idx;
  const uint64_t* firstSlot;
  int indexBytes;
  uint64_t maxRun;
  size_t count;
  uint8_t* out;
  __device__ void operator()(size_t i, Pair before, Pair mine) const {
    const bool last = i + 1 == count || idx[i + 1] - idx[i] - 1 > maxRun;
    if (!last) return;
    const uint64_t block = before.a + mine.a - 1;
    const uint64_t slot = idx[i] - idx[0] - (before.b + mine.b);
    const uint64_t first = firstSlot[block];
    const size_t header = 2 * size_t(indexBytes);
    putUint(out + header * block + 4 * first + indexBytes, slot - first + 1, indexBytes);
  }
};

struct DecodedBlock {
  uint64_t pos;    // byte offset of the block's first value
  uint64_t start;  // offset of its first element in the region
  uint64_t len;
};

// Walks and validates every header (one thread). res[kFirstBad] gets the
// failing block number (or `blocks` for a trailing-bytes mismatch).
__global__ void walkHeaders(const uint8_t* p, size_t bytes, size_t blocks, uint64_t n,
                            int indexBytes, uint64_t maxRun, DecodedBlock* out, uint64_t* res) {
  size_t pos = 0;
  uint64_t prevEnd = 0;
  for (size_t b = 0; b < blocks; ++b) {
    bool ok = bytes - pos >= 2 * size_t(indexBytes);
    uint64_t start = 0, len = 0;
    if (ok) {
      start = getUint(p + pos, indexBytes);
      len = getUint(p + pos + indexBytes, indexBytes);
      pos += 2 * indexBytes;
      ok = len >= 1 && start < n && len <= n - start &&
           (b == 0 || (start >= prevEnd && start - prevEnd > maxRun)) && len <= (bytes - pos) / 4;
    }
    if (!ok) {
      res[kFirstBad] = b;
      return;
    }
    out[b] = DecodedBlock{pos, start, len};
    pos += 4 * len;
    prevEnd = start + len;
  }
  if (pos != bytes) res[kFirstBad] = blocks;
}

__device__ inline float loadValue(const uint8_t* p) { return __uint_as_float(uint32_t(getUint(p, 4))); }

// One warp per block: non-zero count (into nz[b]) and structure (blocks
// start and end non-zero, inner zero runs <= T).
__global__ void blockCounts(const uint8_t* p, const DecodedBlock* blk, size_t blocks,
                            uint64_t maxRun, uint64_t* nz, uint64_t* res) {
  const size_t warp = (blockIdx.x * size_t(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  const size_t warps = size_t(gridDim.x) * blockDim.x / 32;
  for (size_t b = warp; b < blocks; b += warps) {
    const DecodedBlock d = blk[b];
    unsigned long long c = 0;
    for (uint64_t j = lane; j < d.len; j += 32) {
      if (!isPlusZero(loadValue(p + d.pos + 4 * j))) {
        ++c;
        continue;
      }
      // A zero: never first or last; check its run once, at the run's start.
      bool bad = j == 0 || j == d.len - 1;
      if (!bad && !isPlusZero(loadValue(p + d.pos + 4 * (j - 1)))) {
        uint64_t run = 0;
        while (j + run < d.len && run <= maxRun && isPlusZero(loadValue(p + d.pos + 4 * (j + run))))
          ++run;
        bad = run > maxRun;
      }
      if (bad) reportFirst(res + kFirstBad + 1, b);
    }
    for (int o = 16; o; o /= 2) c += __shfl_down_sync(0xFFFFFFFFu, c, o);
    if (lane == 0) nz[b] = c;
  }
}

struct NzCount {
  const uint64_t* nz;
  __device__ Pair operator()(size_t b) const { return {nz[b], 0}; }
};
struct NzOffset {
  uint64_t* offset;
  __device__ void operator()(size_t b, Pair before, Pair) const { offset[b] = before.a; }
};

// One warp per block: ordered compaction of its non-zeros (ballot + popc).
__global__ void blockExpand(const uint8_t* p, const DecodedBlock* blk, size_t blocks,
                            const uint64_t* offset, uint64_t base, uint64_t* idx, float* val,
                            size_t capacity) {
  const size_t warp = (blockIdx.x * size_t(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  const size_t warps = size_t(gridDim.x) * blockDim.x / 32;
  for (size_t b = warp; b < blocks; b += warps) {
    const DecodedBlock d = blk[b];
    uint64_t out = offset[b];
    for (uint64_t j0 = 0; j0 < d.len; j0 += 32) {
      const uint64_t j = j0 + lane;
      const float v = j < d.len ? loadValue(p + d.pos + 4 * j) : 0.0f;
      const bool keep = j < d.len && !isPlusZero(v);
      const unsigned mask = __ballot_sync(0xFFFFFFFFu, keep);
      const uint64_t at = out + __popc(mask & ((1u << lane) - 1));
      if (keep && at < capacity) {
        idx[at] = base + d.start + j;
        val[at] = v;
      }
      out += __popc(mask);
    }
  }
}

Status checkIndexBytes(const char* what, int indexBytes) {
  GC_REQUIRE(indexBytes == 4 || indexBytes == 8, Err::InvalidArgument,
             "%s: indexBytes = %d (accepted: 4, 8)", what, indexBytes);
  return Status::Ok();
}

uint64_t maxZeroRun(int indexBytes) { return uint64_t(2 * indexBytes / 4); }

}  // namespace

Status CudaBackend::denseStreamSize(const uint64_t* idx, size_t count, int indexBytes,
                                    size_t* bytes, size_t* blocks) {
  GC_CHECK(checkIndexBytes("denseStreamSize", indexBytes));
  *bytes = 0;
  *blocks = 0;
  if (count == 0) return Status::Ok();
  GC_CHECK(resetResults());
  uint64_t* res = deviceResults();
  checkEntries<<<blocksFor(count), kThreads, 0, stream_>>>(idx, nullptr, count, 0, 0,
                                                          res + kFirstBad, res + kFirstBad + 1);
  const size_t tiles = tileCount(count);
  void* ws = nullptr;
  GC_CHECK(scratch(Carve::bytes<Pair>(tiles) + Carve::bytes<Pair>(1), &ws));
  Carve carve(ws);
  Pair* tileSum = carve.take<Pair>(tiles);
  Pair* total = carve.take<Pair>(1);
  tileSums<<<tileBlocks(count), kThreads, 0, stream_>>>(BlockStarts{idx, maxZeroRun(indexBytes)},
                                                        count, tileSum);
  launchScanTiles(tileSum, tiles, total, stream_);
  GC_CHECK(launched("denseStreamSize"));
  Pair t;
  uint64_t first = 0, last = 0;
  GC_CHECK(cudaCall(cudaMemcpyAsync(&t, total, sizeof(t), cudaMemcpyDeviceToHost, stream_), "copy"));
  GC_CHECK(cudaCall(cudaMemcpyAsync(&first, idx, 8, cudaMemcpyDeviceToHost, stream_), "copy"));
  GC_CHECK(cudaCall(cudaMemcpyAsync(&last, idx + count - 1, 8, cudaMemcpyDeviceToHost, stream_),
                    "copy"));
  uint64_t host[kResultWords];
  GC_CHECK(fetchResults(host));  // synchronizes the copies above too
  GC_REQUIRE(host[kFirstBad] == kNoneHost, Err::InvalidArgument,
             "denseStreamSize: COO indexes not strictly ascending at entry %llu",
             (unsigned long long)host[kFirstBad]);
  *blocks = size_t(t.a);
  *bytes = size_t(2 * uint64_t(indexBytes) * t.a + 4 * (last - first + 1 - t.b));
  return Status::Ok();
}

Status CudaBackend::denseStreamEncode(const uint64_t* idx, const float* val, size_t count,
                                      uint64_t base, int indexBytes, void* out, size_t capacity,
                                      size_t* bytes) {
  GC_CHECK(checkIndexBytes("denseStreamEncode", indexBytes));
  size_t need = 0, nblocks = 0;
  GC_CHECK(denseStreamSize(idx, count, indexBytes, &need, &nblocks));
  GC_REQUIRE(need <= capacity, Err::InvalidArgument,
             "denseStreamEncode: needs %zu bytes, capacity is %zu", need, capacity);
  if (count == 0) {
    *bytes = 0;
    return Status::Ok();
  }
  const uint64_t maxRel = indexBytes == 4 ? 0xFFFFFFFFull : ~0ull;
  GC_CHECK(resetResults());
  uint64_t* res = deviceResults();
  checkEntries<<<blocksFor(count), kThreads, 0, stream_>>>(idx, val, count, base, maxRel,
                                                          res + kFirstBad, res + kFirstBad + 1);
  uint64_t host[kResultWords];
  GC_CHECK(fetchResults(host));
  GC_REQUIRE(host[kFirstBad + 1] == kNoneHost, Err::InvalidArgument,
             "denseStreamEncode: entry %llu holds +0.0 or an index outside base %llu with "
             "%d-byte offsets", (unsigned long long)host[kFirstBad + 1],
             (unsigned long long)base, indexBytes);

  const size_t tiles = tileCount(count);
  void* ws = nullptr;
  GC_CHECK(scratch(Carve::bytes<Pair>(tiles) + Carve::bytes<Pair>(1) + Carve::bytes<uint64_t>(nblocks),
                   &ws));
  Carve carve(ws);
  Pair* tileSum = carve.take<Pair>(tiles);
  Pair* total = carve.take<Pair>(1);
  uint64_t* firstSlot = carve.take<uint64_t>(nblocks);
  const uint64_t maxRun = maxZeroRun(indexBytes);
  const BlockStarts starts{idx, maxRun};
  uint8_t* o = static_cast<uint8_t*>(out);
  GC_CHECK(cudaCall(cudaMemsetAsync(o, 0, need, stream_), "denseStreamEncode zero fill"));
  tileSums<<<tileBlocks(count), kThreads, 0, stream_>>>(starts, count, tileSum);
  launchScanTiles(tileSum, tiles, total, stream_);
  tileApply<<<tileBlocks(count), kThreads, 0, stream_>>>(
      starts, EncodeWrite{idx, val, base, indexBytes, maxRun, count, o}, count, tileSum);
  tileApply<<<tileBlocks(count), kThreads, 0, stream_>>>(starts, FirstSlots{idx, firstSlot}, count,
                                                         tileSum);
  tileApply<<<tileBlocks(count), kThreads, 0, stream_>>>(
      starts, LengthWrite{idx, firstSlot, indexBytes, maxRun, count, o}, count, tileSum);
  GC_CHECK(launched("denseStreamEncode"));
  *bytes = need;
  return Status::Ok();
}

Status CudaBackend::denseStreamDecode(const void* in, size_t bytes, size_t blocks, uint64_t n,
                                      uint64_t base, int indexBytes, uint64_t* idx, float* val,
                                      size_t capacity, size_t* count) {
  *count = 0;
  GC_CHECK(checkIndexBytes("denseStreamDecode", indexBytes));
  // Every block needs a header and one value: more blocks than that cannot
  // fit (and would make the walk's arrays unbounded).
  GC_REQUIRE(blocks <= bytes / (2 * size_t(indexBytes) + 4), Err::RemoteError,
             "DenseStream: %zu blocks cannot fit a %zu-byte body", blocks, bytes);
  if (blocks == 0) {
    GC_REQUIRE(bytes == 0, Err::RemoteError,
               "DenseStream: 0 blocks end at byte 0 of a %zu-byte body", bytes);
    return Status::Ok();
  }
  const uint8_t* p = static_cast<const uint8_t*>(in);
  const size_t tiles = tileCount(blocks);
  void* ws = nullptr;
  GC_CHECK(scratch(Carve::bytes<DecodedBlock>(blocks) + 2 * Carve::bytes<uint64_t>(blocks) +
                       Carve::bytes<Pair>(tiles) + Carve::bytes<Pair>(1),
                   &ws));
  Carve carve(ws);
  DecodedBlock* blk = carve.take<DecodedBlock>(blocks);
  uint64_t* nz = carve.take<uint64_t>(blocks);
  uint64_t* offset = carve.take<uint64_t>(blocks);
  Pair* tileSum = carve.take<Pair>(tiles);
  Pair* total = carve.take<Pair>(1);
  const uint64_t maxRun = maxZeroRun(indexBytes);
  GC_CHECK(resetResults());
  uint64_t* res = deviceResults();
  walkHeaders<<<1, 1, 0, stream_>>>(p, bytes, blocks, n, indexBytes, maxRun, blk, res);
  uint64_t host[kResultWords];
  GC_CHECK(fetchResults(host));
  GC_REQUIRE(host[kFirstBad] == kNoneHost, Err::RemoteError,
             "DenseStream: block %llu breaks the header rules (length, range, order, or the "
             "body's %zu bytes)", (unsigned long long)host[kFirstBad], bytes);
  const unsigned warpBlocks = blocksFor(blocks * 32);
  blockCounts<<<warpBlocks, kThreads, 0, stream_>>>(p, blk, blocks, maxRun, nz, res);
  tileSums<<<tileBlocks(blocks), kThreads, 0, stream_>>>(NzCount{nz}, blocks, tileSum);
  launchScanTiles(tileSum, tiles, total, stream_);
  tileApply<<<tileBlocks(blocks), kThreads, 0, stream_>>>(NzCount{nz}, NzOffset{offset}, blocks,
                                                          tileSum);
  blockExpand<<<warpBlocks, kThreads, 0, stream_>>>(p, blk, blocks, offset, base, idx, val,
                                                    capacity);
  GC_CHECK(launched("denseStreamDecode"));
  Pair t;
  GC_CHECK(cudaCall(cudaMemcpyAsync(&t, total, sizeof(t), cudaMemcpyDeviceToHost, stream_), "copy"));
  GC_CHECK(fetchResults(host));
  GC_REQUIRE(host[kFirstBad + 1] == kNoneHost, Err::RemoteError,
             "DenseStream: block %llu breaks the structure (blocks start and end non-zero, "
             "inner zero runs <= %llu)", (unsigned long long)host[kFirstBad + 1],
             (unsigned long long)maxRun);
  GC_REQUIRE(t.a <= capacity, Err::RemoteError,
             "DenseStream: more than the %zu non-zeros the receiver allows", capacity);
  *count = size_t(t.a);
  return Status::Ok();
}

}  // namespace gradcomp::device
