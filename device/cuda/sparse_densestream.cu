// DenseStream bodies on the GPU, size and encode (format: device/backend.h,
// algorithms.md section 4; CPU reference: device/cpu/sparse_densestream.cc).
// Decode: sparse_densestream_decode.cu.
//
// Size and encode are one reduce-then-scan over the COO entries: an entry
// starts a block when the zero run before it exceeds T; with S(i) = blocks
// started up to i and G(i) = zeros skipped at block starts up to i, entry i's
// value lands in value slot idx[i] - idx[0] - G(i) of block S(i) - 1. Each
// entry writes its value and the zeros of the run before it (so every byte is
// written once); the block's first and last slots give its length.
#include "device/cuda/cuda_backend.h"
#include "device/cuda/kernel_common.cuh"

namespace gradcomp::device {
namespace {

using namespace cuda;

uint64_t maxZeroRun(int indexBytes) { return uint64_t(2 * indexBytes / 4); }

Status checkIndexBytes(const char* what, int indexBytes) {
  GC_REQUIRE(indexBytes == 4 || indexBytes == 8, Err::InvalidArgument,
             "%s: indexBytes = %d (accepted: 4, 8)", what, indexBytes);
  return Status::Ok();
}

// ---- size and encode ----------------------------------------------------------

// (block start?, zeros skipped there) per entry; entry 0 starts block 0. A
// list that is not strictly ascending fails (kind 0, before anything else).
struct BlockStarts {
  const uint64_t* idx;
  uint64_t maxRun;
  __device__ Pair operator()(size_t i, const Ctl& ctl) const {
    if (i == 0) return {1, 0};
    if (idx[i] <= idx[i - 1]) {
      fail(ctl, keyKind(0, i));
      return {0, 0};
    }
    const uint64_t gap = idx[i] - idx[i - 1] - 1;
    return gap > maxRun ? Pair{1, gap} : Pair{0, 0};
  }
};

struct SizeTotal {
  const uint64_t* idx;
  size_t count;
  int ib;
  size_t* bytes;   // scalar slots (size), or nullptr (encode)
  size_t* blocks;
  size_t expect;   // encode: the caller's size
  __device__ void operator()(const Pair& all, const Ctl& ctl) const {
    const unsigned long long need =
        2ull * ib * all.a + 4ull * (idx[count - 1] - idx[0] + 1 - all.b);
    if (bytes) {
      *bytes = size_t(need);
      *blocks = size_t(all.a);
    } else if (need != expect) {
      fail(ctl, keyKind(1), need);
    }
  }
};

// Entry checks (kind 2, entry then check), value and inner zeros, the start
// field of a block's header, and the block's first and last value slots.
struct EncodeWrite {
  const uint64_t* idx;
  const float* val;
  size_t count;
  uint64_t base, maxRel, maxRun;
  int ib;
  uint8_t* out;
  uint64_t* firstSlot;
  uint64_t* lastSlot;
  __device__ void operator()(size_t i, Pair before, Pair mine, const Ctl& ctl) const {
    const uint64_t v = idx[i];
    if (isPlusZero(val[i])) fail(ctl, keyKind(2, 2 * i));
    else if (!(v >= base && v - base <= maxRel)) fail(ctl, keyKind(2, 2 * i + 1), v);
    const uint64_t block = before.a + mine.a - 1;
    const uint64_t slot = v - idx[0] - (before.b + mine.b);
    const size_t header = 2 * size_t(ib);
    uint8_t* values = out + header * (block + 1);
    putFloat(values + 4 * slot, val[i]);
    if (mine.a) {
      putUint(out + header * block + 4 * slot, v - base, ib);
      firstSlot[block] = slot;
    } else {
      const uint64_t gap = v - idx[i - 1] - 1;  // <= T inside a block
      for (uint64_t z = 1; z <= gap; ++z) putFloat(values + 4 * (slot - z), 0.0f);
    }
    if (i + 1 == count || idx[i + 1] - v - 1 > maxRun) lastSlot[block] = slot;
  }
};

__global__ void lengthsKernel(Ctl ctl, const Pair* total, const uint64_t* firstSlot,
                              const uint64_t* lastSlot, int ib, uint8_t* out) {
  if (skipBlock(ctl)) return;
  const size_t blocks = size_t(total->a);
  GC_GRID_STRIDE(b, blocks)
    putUint(out + 2 * size_t(ib) * b + 4 * firstSlot[b] + ib, lastSlot[b] - firstSlot[b] + 1, ib);
}

Status encodeFailure(const OpInfo& op, const FailureRecord& f) {
  const unsigned long long pos = keyKindPos(f.key);
  switch (keyKindFirst(f.key)) {
    case 0:
      return makeStatus(Err::InvalidArgument,
                        "denseStreamSize: COO indexes not strictly ascending at entry %llu", pos);
    case 1:
      return makeStatus(Err::Internal,
                        "denseStreamEncode: the encoding takes %llu bytes, the caller sized %llu",
                        f.a, op.p[0]);
    default:
      if (pos % 2 == 0)
        return makeStatus(Err::Internal,
                          "denseStreamEncode: entry %llu holds +0.0 (COO inputs carry non-zeros "
                          "only)",
                          pos / 2);
      return makeStatus(Err::Internal,
                        "denseStreamEncode: index %llu does not fit base %llu with %d-byte offsets",
                        f.a, op.p[1], int(op.p[2]));
  }
}

}  // namespace

Status CudaBackend::denseStreamSize(const uint64_t* idx, size_t count, int indexBytes,
                                    size_t* bytes, size_t* blocks) {
  Prim p(state(), "denseStreamSize");
  GC_CHECK(checkIndexBytes("denseStreamSize", indexBytes));
  if (count == 0) {
    GC_CHECK(p.resultValue(bytes, size_t(0)));
    return p.resultValue(blocks, size_t(0));
  }
  size_t *bs = nullptr, *bl = nullptr;
  GC_CHECK(p.result(bytes, &bs));
  GC_CHECK(p.result(blocks, &bl));
  void* ws = nullptr;
  GC_CHECK(p.scratch(TileScratch::bytes(count), &ws));
  Carve carve(ws);
  const TileScratch ts = TileScratch::take(carve, count);
  p.reads(idx, count * 8);
  p.onFailure(-1, &encodeFailure);
  const BlockStarts starts{idx, maxZeroRun(indexBytes)};
  tileSums<<<tileBlocks(count), kThreads, 0, p.stream()>>>(p.ctl(), starts, count, ts.tiles);
  scanTiles<<<1, kScanThreads, 0, p.stream()>>>(p.ctl(), ts.tiles, tileCount(count), ts.total,
                                                SizeTotal{idx, count, indexBytes, bs, bl, 0});
  return p.launched();
}

Status CudaBackend::denseStreamEncode(const uint64_t* idx, const float* val, size_t count,
                                      uint64_t base, int indexBytes, void* out, size_t bytes) {
  Prim p(state(), "denseStreamEncode");
  GC_CHECK(checkIndexBytes("denseStreamEncode", indexBytes));
  if (count == 0) {
    GC_REQUIRE(bytes == 0, Err::Internal,
               "denseStreamEncode: the encoding takes 0 bytes, the caller sized %zu", bytes);
    return Status::Ok();
  }
  // Built in device memory when the payload is host memory, then one copy.
  const bool direct = !p.isHost(out, bytes);
  void* ws = nullptr;
  GC_CHECK(p.scratch(TileScratch::bytes(count) + 2 * Carve::bytes<uint64_t>(count) +
                         (direct ? 0 : Carve::bytes<uint8_t>(bytes)),
                     &ws));
  Carve carve(ws);
  const TileScratch ts = TileScratch::take(carve, count);
  uint64_t* firstSlot = carve.take<uint64_t>(count);
  uint64_t* lastSlot = carve.take<uint64_t>(count);
  uint8_t* body = direct ? static_cast<uint8_t*>(out) : carve.take<uint8_t>(bytes);
  p.reads(idx, count * 8);
  p.reads(val, count * 4);
  p.writes(out, bytes);
  const uint64_t maxRun = maxZeroRun(indexBytes);
  p.onFailure(-1, &encodeFailure, bytes, base, uint64_t(indexBytes));
  const BlockStarts starts{idx, maxRun};
  const uint64_t maxRel = indexBytes == 4 ? 0xFFFFFFFFull : ~0ull;
  launchTileScan(p, ts, count, starts, SizeTotal{idx, count, indexBytes, nullptr, nullptr, bytes},
                 EncodeWrite{idx, val, count, base, maxRel, maxRun, indexBytes, body, firstSlot,
                             lastSlot});
  lengthsKernel<<<blocksFor(count), kThreads, 0, p.stream()>>>(p.ctl(), ts.total, firstSlot,
                                                               lastSlot, indexBytes, body);
  GC_CHECK(p.launched());
  if (!direct)
    GC_CHECK(p.check(cudaMemcpyAsync(out, body, bytes, cudaMemcpyDefault, p.stream()),
                     "cudaMemcpyAsync"));
  return Status::Ok();
}

}  // namespace gradcomp::device
