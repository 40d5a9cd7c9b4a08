// DenseStream decode on the GPU (format: device/backend.h, algorithms.md
// section 4; CPU reference: device/cpu/sparse_densestream.cc).
//
// The headers cannot be walked in order on one thread (the chain of header
// positions is sequential: 100k blocks would take tens of ms), so the chain
// is found by pointer jumping: every 4-byte position p gets
// next(p) = p + 2I + 4 * length read at p, position 0 is on the chain, and
// round r marks next^(2^r) of every marked position, so ceil(log2(blocks))
// rounds mark the first `blocks` headers. A scan of the marks numbers them;
// one warp per block then checks its header and values (the CPU's rules, the
// first failing block and offset win), a scan of the non-zero counts places
// each block's entries, and one warp per block writes them in order. A body
// in host memory is copied over once first (it is read three times).
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

constexpr uint32_t kExactEnd = 0xFFFFFFFEu;  // the block ends exactly at the body's end
constexpr uint32_t kBadEnd = 0xFFFFFFFFu;    // the header or its values run past the body
__device__ inline bool terminal(uint32_t q) { return q >= kExactEnd; }

// next(q) for the header that would start at byte 4q.
__global__ void nextKernel(Ctl ctl, const uint8_t* body, size_t bytes, int ib, size_t words,
                           uint32_t* next, uint8_t* on) {
  if (skipBlock(ctl)) return;
  GC_GRID_STRIDE(q, words) {
    const size_t pos = 4 * q;
    uint32_t nx = kBadEnd;
    if (bytes - pos >= 2 * size_t(ib)) {
      const uint64_t len = getUint(body + pos + ib, ib);
      if (len <= (bytes - pos - 2 * size_t(ib)) / 4) {
        const size_t np = pos + 2 * size_t(ib) + 4 * size_t(len);
        nx = np == bytes ? kExactEnd : uint32_t(np / 4);
      }
    }
    next[q] = nx;
    on[q] = q == 0;
  }
}

// One doubling round: marked positions mark their 2^r-th successor;
// successors double. Marks only ever land on the chain.
__global__ void markKernel(Ctl ctl, const uint32_t* in, uint32_t* out, uint8_t* on, size_t words) {
  if (skipBlock(ctl)) return;
  GC_GRID_STRIDE(q, words) {
    const uint32_t nx = in[q];
    if (terminal(nx)) {
      out[q] = nx;
      continue;
    }
    if (on[q]) on[nx] = 1;
    out[q] = in[nx];
  }
}

struct Marked {
  const uint8_t* on;
  __device__ Pair operator()(size_t q, const Ctl&) const { return {on[q] ? 1ull : 0ull, 0}; }
};
struct ChainTotal {
  unsigned long long* chain;
  __device__ void operator()(const Pair& all, const Ctl&) const { *chain = all.a; }
};
struct ChainWrite {
  size_t blocks;
  uint64_t* start;  // byte position of block b's header
  __device__ void operator()(size_t q, Pair before, Pair mine, const Ctl&) const {
    if (mine.a && before.a < blocks) start[before.a] = 4 * uint64_t(q);
  }
};

// Kinds, in the CPU's order for one block (the key orders blocks first).
enum DecodeKind : unsigned {
  kHeaderPast = 0,   // a: -
  kOutside = 1,      // a: start, b: length
  kOrder = 2,        // a: start, b: previous end
  kValuesPast = 3,   // a: length
  kStructure = 4,    // a: offset in the block
  kEndAt = 5,        // (block = blocks) a: end position
  kTooMany = 6,      // (block = blocks)
  kTooFew = 7,       // (block = blocks) a: non-zeros found
};

struct DecodeArgs {
  const uint8_t* body;
  size_t bytes, blocks;
  uint64_t n, maxRun;
  int ib;
};

// One warp per block: header rules, value structure, non-zero count.
__global__ void blockCheck(Ctl ctl, DecodeArgs d, const unsigned long long* chain,
                           const uint64_t* start, uint64_t* nz) {
  if (skipBlock(ctl)) return;
  const size_t warp = (blockIdx.x * size_t(blockDim.x) + threadIdx.x) / 32;
  const unsigned lane = threadIdx.x % 32;
  const size_t warps = size_t(gridDim.x) * blockDim.x / 32;
  const size_t header = 2 * size_t(d.ib);
  const size_t avail = *chain < d.blocks ? size_t(*chain) : d.blocks;
  for (size_t b = warp; b < d.blocks; b += warps) {
    if (lane == 0) nz[b] = 0;
    if (b >= avail) {
      // The chain stopped before block b: either block b - 1 itself runs past
      // the body (it reports that), or it ends exactly at the body's end and
      // block b's header has no room.
      if (b == avail && lane == 0) {
        const size_t p = size_t(start[b - 1]);
        // Block b - 1's length is read only when its header is inside the
        // body (else that block reports it, and the read would run past).
        if (d.bytes - p >= header) {
          const size_t end = p + header + 4 * size_t(getUint(d.body + p + d.ib, d.ib));
          if (end == d.bytes) fail(ctl, keyAt(b, kHeaderPast));
        }
      }
      continue;
    }
    const size_t pos = size_t(start[b]);
    // nextKernel put a block on the chain only when its header and values
    // fit the body: the past-the-end kinds come from the last chain block.
    if (d.bytes - pos < header) {
      if (lane == 0) fail(ctl, keyAt(b, kHeaderPast));
      continue;
    }
    const uint64_t s = getUint(d.body + pos, d.ib), len = getUint(d.body + pos + d.ib, d.ib);
    bool bad = false;
    if (!(len >= 1 && s < d.n && len <= d.n - s)) {
      if (lane == 0) fail(ctl, keyAt(b, kOutside), s, len);
      bad = true;
    } else if (b > 0) {
      const size_t pp = size_t(start[b - 1]);
      const uint64_t prevEnd = getUint(d.body + pp, d.ib) + getUint(d.body + pp + d.ib, d.ib);
      if (!(s >= prevEnd && s - prevEnd > d.maxRun)) {
        if (lane == 0) fail(ctl, keyAt(b, kOrder), s, prevEnd);
        bad = true;
      }
    }
    if (!bad && len > (d.bytes - pos - header) / 4) {
      if (lane == 0) fail(ctl, keyAt(b, kValuesPast), len);
      bad = true;
    }
    if (bad) continue;
    const uint8_t* v = d.body + pos + header;
    unsigned long long count = 0, firstBad = ~0ull;
    for (uint64_t j = lane; j < len; j += 32) {
      if (!isPlusZero(getFloat(v + 4 * j))) {
        ++count;
        continue;
      }
      // A zero breaks the block when it is first or last, or ends a run of
      // more than T zeros (its T predecessors are zeros too).
      bool breaks = j == 0 || j == len - 1;
      if (!breaks && j >= d.maxRun) {
        breaks = true;
        for (uint64_t r = 1; r <= d.maxRun && breaks; ++r) breaks = isPlusZero(getFloat(v + 4 * (j - r)));
      }
      if (breaks && j < firstBad) firstBad = j;
    }
    for (int o = 16; o; o /= 2) {
      count += __shfl_down_sync(0xFFFFFFFFu, count, o);
      const unsigned long long other = __shfl_down_sync(0xFFFFFFFFu, firstBad, o);
      firstBad = other < firstBad ? other : firstBad;
    }
    if (lane == 0) {
      nz[b] = count;
      if (firstBad != ~0ull) fail(ctl, keyAt(b, kStructure), firstBad);
      if (b + 1 == d.blocks && pos + header + 4 * len != d.bytes)
        fail(ctl, keyAt(d.blocks, kEndAt), pos + header + 4 * len);
    }
  }
}

struct NzCount {
  const uint64_t* nz;
  __device__ Pair operator()(size_t b, const Ctl&) const { return {nz[b], 0}; }
};
struct NzTotal {
  size_t blocks, nnz;
  __device__ void operator()(const Pair& all, const Ctl& ctl) const {
    if (all.a > nnz) fail(ctl, keyAt(blocks, kTooMany), all.a, nnz);
    else if (all.a < nnz) fail(ctl, keyAt(blocks, kTooFew), all.a, nnz);
  }
};
struct NzOffset {
  uint64_t* offset;
  __device__ void operator()(size_t b, Pair before, Pair, const Ctl&) const { offset[b] = before.a; }
};

// One warp per block: ordered compaction of its non-zeros (ballot + popc).
__global__ void blockExpand(Ctl ctl, DecodeArgs d, const uint64_t* start, const uint64_t* offset,
                            uint64_t base, uint64_t* idx, float* val) {
  if (skipBlock(ctl)) return;
  const size_t warp = (blockIdx.x * size_t(blockDim.x) + threadIdx.x) / 32;
  const unsigned lane = threadIdx.x % 32;
  const size_t warps = size_t(gridDim.x) * blockDim.x / 32;
  const size_t header = 2 * size_t(d.ib);
  for (size_t b = warp; b < d.blocks; b += warps) {
    const size_t pos = size_t(start[b]);
    const uint64_t s = getUint(d.body + pos, d.ib), len = getUint(d.body + pos + d.ib, d.ib);
    const uint8_t* v = d.body + pos + header;
    uint64_t out = offset[b];
    for (uint64_t j0 = 0; j0 < len; j0 += 32) {
      const uint64_t j = j0 + lane;
      const float x = j < len ? getFloat(v + 4 * j) : 0.0f;
      const bool keep = j < len && !isPlusZero(x);
      const unsigned mask = __ballot_sync(0xFFFFFFFFu, keep);
      if (keep) {
        const uint64_t at = out + __popc(mask & ((1u << lane) - 1));
        idx[at] = base + s + j;
        val[at] = x;
      }
      out += __popc(mask);
    }
  }
}

Status decodeFailure(const OpInfo& op, const FailureRecord& f) {
  const std::string from = fromRank(op.source);
  const char* src = from.c_str();
  const unsigned long long b = keyPos(f.key);
  const unsigned long long bytes = op.p[0], blocks = op.p[1], maxRun = op.p[2], n = op.p[3];
  switch (keyKindOf(f.key)) {
    case kHeaderPast:
      return makeStatus(Err::RemoteError,
                        "DenseStream%s: block %llu header runs past the %llu-byte body", src, b,
                        bytes);
    case kOutside:
      return makeStatus(Err::RemoteError,
                        "DenseStream%s: block %llu [start %llu, length %llu] outside a region of "
                        "%llu",
                        src, b, f.a, f.b, n);
    case kOrder:
      return makeStatus(Err::RemoteError,
                        "DenseStream%s: block %llu starts at %llu, not more than T = %llu zeros "
                        "after the previous block's end %llu",
                        src, b, f.a, maxRun, f.b);
    case kValuesPast:
      return makeStatus(Err::RemoteError,
                        "DenseStream%s: block %llu of length %llu runs past the %llu-byte body",
                        src, b, f.a, bytes);
    case kStructure:
      return makeStatus(Err::RemoteError,
                        "DenseStream%s: block %llu breaks the structure at offset %llu (blocks "
                        "start and end non-zero, inner zero runs <= %llu)",
                        src, b, f.a, maxRun);
    case kEndAt:
      return makeStatus(Err::RemoteError,
                        "DenseStream%s: %llu blocks end at byte %llu of a %llu-byte body", src,
                        blocks, f.a, bytes);
    case kTooMany:
      return makeStatus(Err::RemoteError,
                        "DenseStream%s: more than the %llu non-zeros the header announces", src,
                        f.b);
    default:
      return makeStatus(Err::RemoteError,
                        "DenseStream%s: body holds %llu non-zeros, header says %llu", src, f.a,
                        f.b);
  }
}

}  // namespace

Status CudaBackend::denseStreamDecode(const void* in, size_t bytes, size_t blocks, uint64_t n,
                                      uint64_t base, int indexBytes, size_t nnz, uint64_t* idx,
                                      float* val, int source) {
  Prim p(state(), "denseStreamDecode");
  GC_CHECK(checkIndexBytes("denseStreamDecode", indexBytes));
  const std::string from = fromRank(source);
  const size_t header = 2 * size_t(indexBytes);
  // What the header alone decides, at the call.
  if (blocks == 0) {
    GC_REQUIRE(bytes == 0, Err::RemoteError,
               "DenseStream%s: 0 blocks end at byte 0 of a %zu-byte body", from.c_str(), bytes);
    GC_REQUIRE(nnz == 0, Err::RemoteError, "DenseStream%s: body holds 0 non-zeros, header says %zu",
               from.c_str(), nnz);
    return Status::Ok();
  }
  GC_REQUIRE(blocks <= bytes / (header + 4), Err::RemoteError,
             "DenseStream%s: %zu blocks cannot fit a %zu-byte body (a block takes at least %zu "
             "bytes)",
             from.c_str(), blocks, bytes, header + 4);
  GC_REQUIRE(bytes / 4 < size_t(kExactEnd), Err::RemoteError,
             "DenseStream%s: a %zu-byte body is beyond the decoder's 16 GiB", from.c_str(), bytes);
  const size_t words = (bytes + 3) / 4;
  const bool direct = !p.isHost(in, bytes);  // read three times: host bodies come over once
  void* ws = nullptr;
  GC_CHECK(p.scratch((direct ? 0 : Carve::bytes<uint8_t>(bytes)) +
                         2 * Carve::bytes<uint32_t>(words) + Carve::bytes<uint8_t>(words) +
                         TileScratch::bytes(words) + Carve::bytes<unsigned long long>(1) +
                         3 * Carve::bytes<uint64_t>(blocks) + TileScratch::bytes(blocks),
                     &ws));
  Carve carve(ws);
  const uint8_t* body = static_cast<const uint8_t*>(in);
  if (!direct) {
    uint8_t* copy = carve.take<uint8_t>(bytes);
    GC_CHECK(p.check(cudaMemcpyAsync(copy, in, bytes, cudaMemcpyDefault, p.stream()),
                     "cudaMemcpyAsync"));
    body = copy;
  }
  uint32_t* nxA = carve.take<uint32_t>(words);
  uint32_t* nxB = carve.take<uint32_t>(words);
  uint8_t* on = carve.take<uint8_t>(words);
  const TileScratch chainScan = TileScratch::take(carve, words);
  unsigned long long* chain = carve.take<unsigned long long>(1);
  uint64_t* start = carve.take<uint64_t>(blocks);
  uint64_t* nz = carve.take<uint64_t>(blocks);
  uint64_t* offset = carve.take<uint64_t>(blocks);
  const TileScratch nzScan = TileScratch::take(carve, blocks);
  p.reads(in, bytes);
  p.writes(idx, nnz * 8);
  p.writes(val, nnz * 4);
  const uint64_t maxRun = maxZeroRun(indexBytes);
  p.onFailure(source, &decodeFailure, bytes, blocks, maxRun, n);

  nextKernel<<<blocksFor(words, 4), kThreads, 0, p.stream()>>>(p.ctl(), body, bytes, indexBytes,
                                                               words, nxA, on);
  for (size_t reach = 1; reach < blocks; reach *= 2) {
    markKernel<<<blocksFor(words, 4), kThreads, 0, p.stream()>>>(p.ctl(), nxA, nxB, on, words);
    std::swap(nxA, nxB);
  }
  launchTileScan(p, chainScan, words, Marked{on}, ChainTotal{chain}, ChainWrite{blocks, start});
  const DecodeArgs d{body, bytes, blocks, n, maxRun, indexBytes};
  const unsigned warpBlocks = blocksFor(blocks * 32);
  blockCheck<<<warpBlocks, kThreads, 0, p.stream()>>>(p.ctl(), d, chain, start, nz);
  launchTileScan(p, nzScan, blocks, NzCount{nz}, NzTotal{blocks, nnz}, NzOffset{offset});
  blockExpand<<<warpBlocks, kThreads, 0, p.stream()>>>(p.ctl(), d, start, offset, base, idx, val);
  return p.launched();
}

}  // namespace gradcomp::device
