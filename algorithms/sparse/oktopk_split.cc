// Ok-Topk split_and_reduce (Algorithm 1 line 8, Figure 2): rank i sends the
// entries it selected in region j to rank j; rank j sums what it receives.
// Destination rotation (step s: send to me+s, receive from me-s) spreads the
// load; at most min(4, P-1) steps are in flight and the arrivals of one bucket
// are reduced while the next bucket is on the wire. No count exchange is
// needed: a receive is posted with the bound of its message (at most k
// entries over the region, wire_format.h), and the transport reports the
// length. Tag step 0x10000.
//
// Data path: the local selection stays in device memory; its P - 1 pieces
// are encoded straight into host messages (one sync for their sizes, one
// before sending), arrivals are decoded from host memory into one device
// COO buffer and scatter-added into the region in the rotated order.
#include <algorithm>
#include <memory>

#include "algorithms/sparse/collectives.h"
#include "algorithms/sparse/oktopk.h"
#include "algorithms/sparse/wire_format.h"

namespace gradcomp::algo::sparse::oktopk {
namespace {
constexpr uint64_t kStepSplit = 0x10000;
constexpr int kMaxInFlight = 4;
}  // namespace

Status splitAndReduce(Context& ctx, const Coo& local, const std::vector<uint64_t>& bounds,
                      size_t k, device::DeviceArray<float>* region) {
  const int me = ctx.net.rank();
  GC_CHECK(region->bind(ctx.dev).assignZero(bounds[me + 1] - bounds[me]));
  return splitAndReduce(ctx, local, bounds, k, region->data());
}

Status splitAndReduce(Context& ctx, const Coo& local, const std::vector<uint64_t>& bounds,
                      size_t k, float* regionData, const std::function<Status()>& whileInFlight) {
  device::Backend& dev = ctx.dev;
  const int P = ctx.net.size(), me = ctx.net.rank();
  const uint64_t lo = bounds[me], len = bounds[me + 1] - lo;
  const uint64_t tag = transport::makeTag(ctx.callSeq, kStepSplit);

  // Where each destination's entries start in the sorted selection.
  std::vector<size_t> starts;
  GC_CHECK(rangesOf(dev, local, bounds, &starts));
  // Own entries first (step 0 of the reduce order), once the first messages
  // are on their way.
  auto addOwn = [&]() -> Status {
    GC_CHECK(dev.scatterAdd(regionData, len, lo, local.idx.data() + starts[me],
                            local.val.data() + starts[me], starts[me + 1] - starts[me]));
    return whileInFlight ? whileInFlight() : Status::Ok();
  };
  if (P == 1) return addOwn();

  // Outgoing pieces, one message per destination (possibly empty).
  std::vector<Bytes> out = bytesOn(dev, P), in = bytesOn(dev, P);
  std::vector<SparsePiece> pieces;
  std::vector<Bytes*> outs;
  std::vector<size_t> got(P, 0);
  const size_t maxIn = size_t(std::min<uint64_t>(k, len));
  for (int s = 1; s < P; ++s) {
    const int dst = (me + s) % P;
    pieces.push_back({&local, starts[dst], starts[dst + 1] - starts[dst], bounds[dst],
                      bounds[dst + 1] - bounds[dst]});
    outs.push_back(&out[s]);
    in[s].resize(wireBound(len, maxIn));
  }
  GC_CHECK(encodeSparse(dev, pieces, outs));
  GC_CHECK(dev.sync());  // the message bodies

  const int bucket = std::min(kMaxInFlight, P - 1);
  auto post = [&](int firstStep, std::unique_ptr<RequestSet>* req) -> Status {
    req->reset(new RequestSet(ctx.net));
    for (int s = firstStep; s < std::min(firstStep + bucket, P); ++s) {
      GC_CHECK((*req)->irecvUpTo((me - s + P) % P, tag, in[s].data(), in[s].size(), &got[s]));
      GC_CHECK((*req)->isend((me + s) % P, tag, out[s].data(), out[s].size()));
    }
    return Status::Ok();
  };
  // One decode buffer: each decode follows the scatter of the one before on
  // the stream, so reusing it is safe.
  Coo piece(dev);
  piece.resize(std::max<size_t>(maxIn, 1));
  std::unique_ptr<RequestSet> current, next;
  GC_CHECK(post(1, &current));
  GC_CHECK(addOwn());
  for (int b = 1; b < P; b += bucket) {
    if (b + bucket < P) GC_CHECK(post(b + bucket, &next));
    GC_CHECK(current->waitAll());
    for (int s = b; s < std::min(b + bucket, P); ++s) {
      const int src = (me - s + P) % P;
      size_t nnz = 0, used = 0;
      GC_CHECK(decodeSparse(dev, in[s].data(), got[s], lo, len, piece.idx.data(),
                            piece.val.data(), maxIn, src, &nnz, &used));
      GC_REQUIRE(used == got[s], Err::RemoteError,
                 "oktopk split: rank %d's message has %zu bytes after its end", src, got[s] - used);
      GC_CHECK(dev.scatterAdd(regionData, len, lo, piece.idx.data(), piece.val.data(), nnz));
    }
    current = std::move(next);
  }
  // The received messages are read by pending decodes: complete them before
  // `in` goes away.
  return dev.sync();
}

}  // namespace gradcomp::algo::sparse::oktopk
