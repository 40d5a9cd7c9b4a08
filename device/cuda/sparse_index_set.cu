// Index sets without values on the GPU (Backend::indexEncode / indexDecode;
// CPU reference: device/cpu/index_set.cc, same checks in the same order).
// Offsets: one thread per entry. Bitmap: built as 32-bit words in device
// scratch (one atomicOr per member) and copied out once; decoded by a
// reduce-then-scan over 64-bit words (popcounts give each member its slot).
#include "device/cuda/cuda_backend.h"
#include "device/cuda/kernel_common.cuh"

namespace gradcomp::device {
namespace {

using namespace cuda;

__device__ inline bool inSet(const uint64_t* idx, size_t i, uint64_t base, uint64_t n) {
  return idx[i] >= base && idx[i] - base < n && (i == 0 || idx[i] > idx[i - 1]);
}

__global__ void offsetsEncodeKernel(Ctl ctl, const uint64_t* idx, size_t count, uint64_t base,
                                    uint64_t n, int ib, uint8_t* out) {
  if (skipBlock(ctl)) return;
  const bool aligned = uintptr_t(out) % 8 == 0;
  GC_GRID_STRIDE(i, count) {
    if (!inSet(idx, i, base, n)) {
      fail(ctl, keyAt(i), idx[i]);
      continue;
    }
    const uint64_t off = idx[i] - base;
    if (aligned && ib == 8) reinterpret_cast<uint64_t*>(out)[i] = off;
    else if (aligned && ib == 4) reinterpret_cast<uint32_t*>(out)[i] = uint32_t(off);
    else putUint(out + i * size_t(ib), off, ib);
  }
}

__global__ void bitmapEncodeKernel(Ctl ctl, const uint64_t* idx, size_t count, uint64_t base,
                                   uint64_t n, uint32_t* words) {
  if (skipBlock(ctl)) return;
  GC_GRID_STRIDE(i, count) {
    if (!inSet(idx, i, base, n)) {
      fail(ctl, keyAt(i), idx[i]);
      continue;  // never write outside the bitmap
    }
    const uint64_t off = idx[i] - base;
    atomicOr(&words[off / 32], 1u << (off % 32));  // little-endian: byte off / 8, bit off % 8
  }
}

Status encodeFailure(const OpInfo& op, const FailureRecord& f) {
  return makeStatus(Err::Internal, "indexEncode: entry %llu (index %llu) outside [%llu, %llu) or out of order",
                    keyPos(f.key), f.a, op.p[0], op.p[0] + op.p[1]);
}

// Per entry, in the CPU's order: offset in range, then strictly ascending.
__global__ void offsetsDecodeKernel(Ctl ctl, const uint8_t* in, size_t count, uint64_t base,
                                    uint64_t n, int ib, uint64_t* idx) {
  if (skipBlock(ctl)) return;
  GC_GRID_STRIDE(i, count) {
    const uint64_t off = getUint(in + i * size_t(ib), ib);
    if (off >= n) fail(ctl, keyAt(i, 0), off);
    else if (i > 0 && !(off > getUint(in + (i - 1) * size_t(ib), ib))) fail(ctl, keyAt(i, 1));
    idx[i] = base + off;
  }
}

Status offsetsDecodeFailure(const OpInfo& op, const FailureRecord& f) {
  const std::string from = fromRank(op.source);
  if (keyKindOf(f.key) == 0)
    return makeStatus(Err::RemoteError, "index set%s: entry %llu has offset %llu outside a region of %llu",
                      from.c_str(), keyPos(f.key), f.a, op.p[0]);
  return makeStatus(Err::RemoteError, "index set%s: offsets not strictly ascending at entry %llu",
                    from.c_str(), keyPos(f.key));
}

// Word w of a bitmap of `bytes` bytes (little-endian; bytes past the end read 0).
__device__ inline uint64_t bitmapWord(const uint8_t* b, size_t bytes, size_t w) {
  uint64_t v = 0;
  for (size_t k = 0; k < 8 && 8 * w + k < bytes; ++k) v |= uint64_t(b[8 * w + k]) << (8 * k);
  return v;
}

struct Members {
  const uint8_t* bitmap;
  size_t bytes;
  __device__ Pair operator()(size_t w, const Ctl&) const {
    return {(unsigned long long)__popcll(bitmapWord(bitmap, bytes, w)), 0};
  }
};
// Padding first (the CPU checks it before counting), then the member count.
struct MembersTotal {
  const uint8_t* bitmap;
  size_t bytes;
  uint64_t n;
  size_t count;
  __device__ void operator()(const Pair& all, const Ctl& ctl) const {
    if (n % 8 != 0 && (bitmap[bytes - 1] >> (n % 8)) != 0) fail(ctl, keyKind(0));
    else if (all.a != count) fail(ctl, keyKind(1), all.a);
  }
};
struct MembersWrite {
  const uint8_t* bitmap;
  size_t bytes;
  uint64_t base;
  size_t count;
  uint64_t* idx;
  __device__ void operator()(size_t w, Pair before, Pair, const Ctl&) const {
    uint64_t word = bitmapWord(bitmap, bytes, w);
    for (unsigned long long pos = before.a; word != 0 && pos < count; ++pos) {
      idx[pos] = base + 64 * uint64_t(w) + uint64_t(__ffsll((long long)word) - 1);
      word &= word - 1;
    }
  }
};

Status bitmapDecodeFailure(const OpInfo& op, const FailureRecord& f) {
  const std::string from = fromRank(op.source);
  if (keyKindFirst(f.key) == 0)
    return makeStatus(Err::RemoteError, "index set%s: bitmap has bits set past its region of %llu",
                      from.c_str(), op.p[0]);
  if (f.a > op.p[1])
    return makeStatus(Err::RemoteError,
                      "index set%s: bitmap has more than the %llu members its header announces",
                      from.c_str(), op.p[1]);
  return makeStatus(Err::RemoteError, "index set%s: bitmap has %llu members, its header announces %llu",
                    from.c_str(), f.a, op.p[1]);
}

Status checkCoding(const char* what, int indexBytes) {
  GC_REQUIRE(indexBytes == 4 || indexBytes == 8 || indexBytes == Backend::kIndexBitmap,
             Err::InvalidArgument, "%s: indexBytes = %d (accepted: 4, 8, 0 = bitmap)", what,
             indexBytes);
  return Status::Ok();
}

}  // namespace

Status CudaBackend::indexEncode(const uint64_t* idx, size_t count, uint64_t base, uint64_t n,
                                int indexBytes, void* out) {
  Prim p(state(), "indexEncode");
  GC_CHECK(checkCoding("indexEncode", indexBytes));
  const size_t bytes = indexSetBytes(count, n, indexBytes);
  p.reads(idx, count * 8);
  p.writes(out, bytes);
  p.onFailure(-1, &encodeFailure, base, n);
  if (indexBytes != kIndexBitmap) {
    if (count == 0) return Status::Ok();
    offsetsEncodeKernel<<<blocksFor(count), kThreads, 0, p.stream()>>>(
        p.ctl(), idx, count, base, n, indexBytes, static_cast<uint8_t*>(out));
    return p.launched();
  }
  if (bytes == 0 && count == 0) return Status::Ok();
  // An empty region (n = 0) with entries still runs the kernel: it rejects
  // entry 0 as the CPU does, before any write to the (absent) words.
  uint32_t* words = nullptr;
  if (bytes > 0) {
    void* ws = nullptr;
    GC_CHECK(p.scratch(Carve::bytes<uint32_t>((bytes + 3) / 4), &ws));
    words = static_cast<uint32_t*>(ws);
    GC_CHECK(p.check(cudaMemsetAsync(words, 0, (bytes + 3) / 4 * 4, p.stream()),
                     "cudaMemsetAsync"));
  }
  if (count)
    bitmapEncodeKernel<<<blocksFor(count), kThreads, 0, p.stream()>>>(p.ctl(), idx, count, base, n,
                                                                      words);
  GC_CHECK(p.launched());
  if (bytes == 0) return Status::Ok();
  return p.check(cudaMemcpyAsync(out, words, bytes, cudaMemcpyDefault, p.stream()),
                 "cudaMemcpyAsync (the bitmap)");
}

Status CudaBackend::indexDecode(const void* in, size_t count, uint64_t base, uint64_t n,
                                int indexBytes, uint64_t* idx, int source) {
  Prim p(state(), "indexDecode");
  GC_CHECK(checkCoding("indexDecode", indexBytes));
  const size_t bytes = indexSetBytes(count, n, indexBytes);
  p.reads(in, bytes);
  p.writes(idx, count * 8);
  const uint8_t* body = static_cast<const uint8_t*>(in);
  if (indexBytes != kIndexBitmap) {
    if (count == 0) return Status::Ok();
    // Each offset is read twice (its entry and the next one's order check).
    void* ws = nullptr;
    GC_CHECK(p.scratch(p.stageBytes(in, bytes), &ws));
    Carve carve(ws);
    GC_CHECK(p.stage(body, bytes, carve, &body));
    p.onFailure(source, &offsetsDecodeFailure, n);
    offsetsDecodeKernel<<<blocksFor(count), kThreads, 0, p.stream()>>>(p.ctl(), body, count, base,
                                                                       n, indexBytes, idx);
    return p.launched();
  }
  if (bytes == 0) {  // n = 0: an empty bitmap, known here
    GC_REQUIRE(count == 0, Err::RemoteError,
               "index set%s: bitmap has 0 members, its header announces %zu",
               fromRank(source).c_str(), count);
    return Status::Ok();
  }
  const size_t words = (bytes + 7) / 8;
  void* ws = nullptr;
  GC_CHECK(p.scratch(p.stageBytes(in, bytes) + TileScratch::bytes(words), &ws));
  Carve carve(ws);
  GC_CHECK(p.stage(body, bytes, carve, &body));
  const TileScratch ts = TileScratch::take(carve, words);
  p.onFailure(source, &bitmapDecodeFailure, n, count);
  launchTileScan(p, ts, words, Members{body, bytes}, MembersTotal{body, bytes, n, count},
                 MembersWrite{body, bytes, base, count, idx});
  return p.launched();
}

}  // namespace gradcomp::device
