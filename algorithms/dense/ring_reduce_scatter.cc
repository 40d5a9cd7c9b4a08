// Ring reduce-scatter (dense.h). Each step's outgoing running sum is made on
// the device (own input chunk + the arrival of the step before, which is in
// host memory), copied to host staging and sent after one sync; arrivals
// land in host memory in one of two buffers, alternating, and the add that
// reads one completes at the next step's sync, before the buffer is reused.
// The final add writes the owned chunk straight into recv.
#include <algorithm>
#include <vector>

#include "algorithms/dense/dense.h"
#include "algorithms/shared/requests.h"
#include "common/log.h"

namespace gradcomp::algo::dense {
namespace {

int mod(int a, int P) { return ((a % P) + P) % P; }

// Whole chunks per message below this, else split so adds overlap arrivals.
constexpr size_t kMaxSegments = 4;
constexpr size_t kMinSegmentBytes = 64 * 1024;

size_t segmentsFor(size_t bytes) {
  return std::clamp<size_t>(bytes / kMinSegmentBytes, 1, kMaxSegments);
}

}  // namespace

Status ringReduceScatter(Context& ctx, const void* send, void* recv, size_t recvCount, DataType t,
                         Staging* stage) {
  transport::Transport& net = ctx.net;
  device::Backend& dev = ctx.dev;
  const int P = net.size(), r = net.rank();
  const int right = mod(r + 1, P), left = mod(r - 1, P);
  const size_t esz = dtypeSize(t), chunkBytes = recvCount * esz;
  const char* in = static_cast<const char*>(send);
  if (recvCount == 0) return Status::Ok();
  if (P == 1) {
    if (recv != send) GC_CHECK(dev.copy(recv, send, chunkBytes));
    return dev.sync();
  }
  stage->bind(dev);
  if (stage->recv.size() < 2 * chunkBytes) stage->recv.resize(2 * chunkBytes);
  if (stage->send.size() < chunkBytes) stage->send.resize(chunkBytes);
  if (stage->partial.size() < chunkBytes) stage->partial.resize(chunkBytes);
  const size_t segs = segmentsFor(chunkBytes);  // every chunk has one size
  auto tag = [&](int step, size_t seg) {
    return transport::makeTag(ctx.callSeq, uint64_t(step) * kMaxSegments + seg);
  };
  const char* arrived = nullptr;  // host: the running sum received at the step before
  for (int s = 0; s < P - 1; ++s) {
    const size_t outChunk = size_t(mod(r - s - 1, P));
    const char* own = in + outChunk * chunkBytes;
    if (arrived == nullptr) {
      GC_CHECK(dev.copy(stage->send.data(), own, chunkBytes));
    } else {
      GC_CHECK(dev.add(stage->partial.data(), own, arrived, recvCount, t));
      GC_CHECK(dev.copy(stage->send.data(), stage->partial.data(), chunkBytes));
    }
    GC_CHECK(dev.sync());
    char* landing = stage->recv.data() + size_t(s % 2) * chunkBytes;
    shared::RequestSet req(net, "dense reduce-scatter");
    std::vector<size_t> slot(segs);
    for (size_t g = 0; g < segs; ++g) {
      const Chunk sg = chunkOf(recvCount, int(segs), int(g));
      if (sg.size)
        GC_CHECK(req.irecv(left, tag(s, g), landing + sg.begin * esz, sg.size * esz, &slot[g]));
    }
    for (size_t g = 0; g < segs; ++g) {
      const Chunk sg = chunkOf(recvCount, int(segs), int(g));
      if (sg.size)
        GC_CHECK(req.isend(right, tag(s, g), stage->send.data() + sg.begin * esz, sg.size * esz));
    }
    GC_CHECK(req.waitAll());
    arrived = landing;
  }
  // The last arrival is chunk r's sum over every other rank.
  GC_CHECK(dev.add(recv, in + size_t(r) * chunkBytes, arrived, recvCount, t));
  GC_TRACE(ALGO, "dense ring reduce-scatter: %zu x %s per rank over %d ranks", recvCount,
           dtypeName(t), P);
  return dev.sync();
}

}  // namespace gradcomp::algo::dense
