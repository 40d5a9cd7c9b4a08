// Ring allreduce (reduce-scatter, then allgather), see dense.h.
//
// Reduce-scatter step s (0 <= s < P-1): rank r sends chunk (r - s) to r+1 and
// receives chunk (r - s - 1) from r-1, adding it to its own copy; afterwards
// rank r holds chunk (r + 1) fully reduced. Allgather step s: rank r forwards
// chunk (r + 1 - s) and receives chunk (r - s) in place. Every chunk is reduced
// by one rank only, so all ranks end with bit-identical results.
#include <algorithm>

#include "algorithms/dense/dense.h"
#include "common/log.h"

namespace gradcomp::algo::dense {
namespace {

// Segments per chunk transfer: enough to overlap adds with arrivals, few
// enough that per-message overhead stays small. Both ends derive the same
// split from the chunk size alone.
constexpr size_t kMaxSegments = 4;
constexpr size_t kMinSegmentBytes = 64 * 1024;

size_t segmentsFor(size_t bytes) {
  return std::clamp<size_t>(bytes / kMinSegmentBytes, 1, kMaxSegments);
}

// Element range of segment `seg` within a chunk of `n` elements.
Chunk segmentOf(size_t n, size_t segments, size_t seg) {
  return chunkOf(n, int(segments), int(seg));
}

int mod(int a, int P) { return ((a % P) + P) % P; }

}  // namespace

Status ringAllreduce(Context& ctx, void* buf, size_t count, DataType t,
                     device::Buffer<char>* scratch) {
  transport::Transport& net = ctx.net;
  const int P = net.size(), r = net.rank();
  const int right = mod(r + 1, P), left = mod(r - 1, P);
  const size_t esz = dtypeSize(t);
  char* base = static_cast<char*>(buf);
  const size_t maxChunk = chunkOf(count, P, 0).size;  // chunk 0 is never smaller
  device::bound(*scratch, ctx.dev);
  if (scratch->size() < maxChunk * esz) scratch->resize(maxChunk * esz);
  char* tmp = scratch->data();
  auto tag = [&](int step, size_t seg) {
    return transport::makeTag(ctx.callSeq, uint64_t(step) * kMaxSegments + seg);
  };

  for (int s = 0; s < P - 1; ++s) {
    const Chunk out = chunkOf(count, P, mod(r - s, P));
    const Chunk in = chunkOf(count, P, mod(r - s - 1, P));
    const size_t outSegs = segmentsFor(out.size * esz), inSegs = segmentsFor(in.size * esz);
    Requests req(net);
    std::vector<size_t> recvSlot(inSegs);
    for (size_t g = 0; g < inSegs; ++g) {
      const Chunk sg = segmentOf(in.size, inSegs, g);
      if (sg.size) GC_CHECK(req.irecv(left, tag(s, g), tmp + sg.begin * esz, sg.size * esz, &recvSlot[g]));
    }
    for (size_t g = 0; g < outSegs; ++g) {
      const Chunk sg = segmentOf(out.size, outSegs, g);
      if (sg.size)
        GC_CHECK(req.isend(right, tag(s, g), base + (out.begin + sg.begin) * esz, sg.size * esz));
    }
    for (size_t g = 0; g < inSegs; ++g) {
      const Chunk sg = segmentOf(in.size, inSegs, g);
      if (!sg.size) continue;
      GC_CHECK(req.wait(recvSlot[g]));
      char* mine = base + (in.begin + sg.begin) * esz;
      GC_CHECK(ctx.dev.add(mine, mine, tmp + sg.begin * esz, sg.size, t));
    }
    GC_CHECK(req.waitAll());
  }

  for (int s = 0; s < P - 1; ++s) {
    const int step = P - 1 + s;
    const Chunk out = chunkOf(count, P, mod(r + 1 - s, P));
    const Chunk in = chunkOf(count, P, mod(r - s, P));
    Requests req(net);
    if (in.size) GC_CHECK(req.irecv(left, tag(step, 0), base + in.begin * esz, in.size * esz));
    if (out.size) GC_CHECK(req.isend(right, tag(step, 0), base + out.begin * esz, out.size * esz));
    GC_CHECK(req.waitAll());
  }
  GC_TRACE(ALGO, "dense ring: %zu x %s over %d ranks, chunk %zu", count, dtypeName(t), P, maxChunk);
  return Status::Ok();
}

}  // namespace gradcomp::algo::dense
