// Ring allreduce (reduce-scatter, then allgather), see dense.h.
//
// Reduce-scatter step s (0 <= s < P-1): rank r sends chunk (r - s) to r+1 and
// receives chunk (r - s - 1) from r-1, adding it to its own copy; afterwards
// rank r holds chunk (r + 1) fully reduced. Allgather step s: rank r forwards
// chunk (r + 1 - s) and receives chunk (r - s). Every chunk is reduced by one
// rank only, so all ranks end with bit-identical results.
//
// Staging: in the reduce-scatter the outgoing chunk is copied to host memory
// (it holds the adds of the step before, so each step syncs once before
// sending) and arrivals land in one of two host chunk buffers, alternating,
// whose adds the next step's sync completes before the buffer is reused. In
// the allgather every chunk passes through one host buffer of the whole
// size: the own reduced chunk is copied there once, each arrival is forwarded
// from there as received and copied into buf, and one sync ends the call.
#include <algorithm>

#include "algorithms/dense/dense.h"
#include "algorithms/shared/requests.h"
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

Status ringAllreduce(Context& ctx, void* buf, size_t count, DataType t, Staging* stage) {
  transport::Transport& net = ctx.net;
  device::Backend& dev = ctx.dev;
  const int P = net.size(), r = net.rank();
  const int right = mod(r + 1, P), left = mod(r - 1, P);
  const size_t esz = dtypeSize(t);
  char* base = static_cast<char*>(buf);
  const size_t maxChunk = chunkOf(count, P, 0).size;  // chunk 0 is never smaller
  stage->bind(dev);
  if (stage->recv.size() < 2 * maxChunk * esz) stage->recv.resize(2 * maxChunk * esz);
  if (stage->send.size() < count * esz) stage->send.resize(count * esz);
  auto tag = [&](int step, size_t seg) {
    return transport::makeTag(ctx.callSeq, uint64_t(step) * kMaxSegments + seg);
  };

  for (int s = 0; s < P - 1; ++s) {
    const Chunk out = chunkOf(count, P, mod(r - s, P));
    const Chunk in = chunkOf(count, P, mod(r - s - 1, P));
    const size_t outSegs = segmentsFor(out.size * esz), inSegs = segmentsFor(in.size * esz);
    char* sendHost = stage->send.data();
    char* recvHost = stage->recv.data() + size_t(s % 2) * maxChunk * esz;
    // The chunk leaves as this step's primitives (the adds of the step
    // before) left it.
    if (out.size) GC_CHECK(dev.copy(sendHost, base + out.begin * esz, out.size * esz));
    GC_CHECK(dev.sync());
    shared::RequestSet req(net, "dense allreduce");
    std::vector<size_t> recvSlot(inSegs);
    for (size_t g = 0; g < inSegs; ++g) {
      const Chunk sg = segmentOf(in.size, inSegs, g);
      if (sg.size)
        GC_CHECK(req.irecv(left, tag(s, g), recvHost + sg.begin * esz, sg.size * esz, &recvSlot[g]));
    }
    for (size_t g = 0; g < outSegs; ++g) {
      const Chunk sg = segmentOf(out.size, outSegs, g);
      if (sg.size) GC_CHECK(req.isend(right, tag(s, g), sendHost + sg.begin * esz, sg.size * esz));
    }
    for (size_t g = 0; g < inSegs; ++g) {
      const Chunk sg = segmentOf(in.size, inSegs, g);
      if (!sg.size) continue;
      GC_CHECK(req.wait(recvSlot[g]));
      char* mine = base + (in.begin + sg.begin) * esz;
      GC_CHECK(dev.add(mine, mine, recvHost + sg.begin * esz, sg.size, t));
    }
    GC_CHECK(req.waitAll());
  }

  // Allgather through the host buffer: slot c of `all` holds chunk c.
  char* all = stage->send.data();
  const Chunk own = chunkOf(count, P, mod(r + 1, P));
  if (own.size) GC_CHECK(dev.copy(all + own.begin * esz, base + own.begin * esz, own.size * esz));
  GC_CHECK(dev.sync());
  for (int s = 0; s < P - 1; ++s) {
    const int step = P - 1 + s;
    const Chunk out = chunkOf(count, P, mod(r + 1 - s, P));
    const Chunk in = chunkOf(count, P, mod(r - s, P));
    shared::RequestSet req(net, "dense allreduce");
    if (in.size) GC_CHECK(req.irecv(left, tag(step, 0), all + in.begin * esz, in.size * esz));
    if (out.size) GC_CHECK(req.isend(right, tag(step, 0), all + out.begin * esz, out.size * esz));
    GC_CHECK(req.waitAll());
    if (in.size) GC_CHECK(dev.copy(base + in.begin * esz, all + in.begin * esz, in.size * esz));
  }
  GC_TRACE(ALGO, "dense ring: %zu x %s over %d ranks, chunk %zu", count, dtypeName(t), P, maxChunk);
  return dev.sync();
}

}  // namespace gradcomp::algo::dense
