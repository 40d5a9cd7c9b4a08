// Ok-Topk split_and_reduce (Algorithm 1 line 8, Figure 2): rank i sends the
// entries it selected in region j to rank j; rank j sums what it receives.
// Destination rotation (step s: send to me+s, receive from me-s) spreads the
// load; at most min(4, P-1) steps are in flight and the arrivals of one bucket
// are reduced while the next bucket is on the wire. No count exchange is
// needed: a receive is posted with the bound of its message (at most k
// entries over the region, wire_format.h), and the transport reports the
// length. Tag step 0x10000.
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
                      size_t k, device::Buffer<float>* region) {
  const int P = ctx.net.size(), me = ctx.net.rank();
  const uint64_t lo = bounds[me], len = bounds[me + 1] - lo;
  const uint64_t tag = transport::makeTag(ctx.callSeq, kStepSplit);
  device::bound(*region, ctx.dev).assign(len, 0.0f);

  // Own entries first (step 0 of the reduce order).
  size_t first = 0, last = 0;
  rangeOf(local, lo, lo + len, &first, &last);
  GC_CHECK(ctx.dev.scatterAdd(region->data(), len, lo, local.idx.data() + first,
                              local.val.data() + first, last - first));
  if (P == 1) return Status::Ok();

  // Outgoing pieces, one message per destination (possibly empty).
  std::vector<Bytes> out = bytesOn(ctx.dev, P), in = bytesOn(ctx.dev, P);
  std::vector<size_t> got(P, 0);
  const size_t maxIn = size_t(std::min<uint64_t>(k, len));
  for (int s = 1; s < P; ++s) {
    const int dst = (me + s) % P;
    rangeOf(local, bounds[dst], bounds[dst + 1], &first, &last);
    GC_CHECK(encodeSparse(ctx.dev, local.idx.data() + first, local.val.data() + first,
                          last - first, bounds[dst], bounds[dst + 1] - bounds[dst], &out[s]));
    in[s].resize(wireBound(len, maxIn));
  }

  const int bucket = std::min(kMaxInFlight, P - 1);
  auto post = [&](int firstStep, std::unique_ptr<RequestSet>* req) -> Status {
    req->reset(new RequestSet(ctx.net));
    for (int s = firstStep; s < std::min(firstStep + bucket, P); ++s) {
      GC_CHECK((*req)->recv((me - s + P) % P, tag, in[s].data(), in[s].size(), &got[s]));
      GC_CHECK((*req)->send((me + s) % P, tag, out[s].data(), out[s].size()));
    }
    return Status::Ok();
  };
  Coo piece(ctx.dev);
  piece.idx.resize(std::max<size_t>(maxIn, 1));
  piece.val.resize(std::max<size_t>(maxIn, 1));
  std::unique_ptr<RequestSet> current, next;
  GC_CHECK(post(1, &current));
  for (int b = 1; b < P; b += bucket) {
    if (b + bucket < P) GC_CHECK(post(b + bucket, &next));
    GC_CHECK(current->waitAll());
    for (int s = b; s < std::min(b + bucket, P); ++s) {
      const int src = (me - s + P) % P;
      size_t nnz = 0, used = 0;
      GC_CHECK(decodeSparse(ctx.dev, in[s].data(), got[s], lo, len, piece.idx.data(),
                            piece.val.data(), maxIn, &nnz, &used));
      GC_REQUIRE(used == got[s], Err::RemoteError,
                 "oktopk split: rank %d's message has %zu bytes after its end", src, got[s] - used);
      GC_CHECK(ctx.dev.scatterAdd(region->data(), len, lo, piece.idx.data(), piece.val.data(), nnz));
    }
    current = std::move(next);
  }
  return Status::Ok();
}

}  // namespace gradcomp::algo::sparse::oktopk
