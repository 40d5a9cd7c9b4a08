// Recursive doubling allreduce for any P, see dense.h.
//
// With P2 the largest power of two <= P and E = P - P2 extra ranks: ranks
// 2i and 2i+1 (i < E) pair up first; the even one sends its buffer to the odd
// one and sits out. The P2 remaining ranks are renumbered 0..P2-1 and exchange
// full buffers with partner (new ^ mask) for mask = 1, 2, .., P2/2, adding
// each time. Finally every odd rank of a pair sends the result to its even
// partner. Pairs add x + y on one side and y + x on the other; IEEE addition
// is commutative, so all ranks end bit-identical.
#include "algorithms/dense/dense.h"
#include "common/log.h"

namespace gradcomp::algo::dense {

Status recursiveDoublingAllreduce(Context& ctx, void* buf, size_t count, DataType t,
                                  device::Buffer<char>* scratch) {
  transport::Transport& net = ctx.net;
  const int P = net.size(), r = net.rank();
  const size_t bytes = count * dtypeSize(t);
  int p2 = 1;
  while (p2 * 2 <= P) p2 *= 2;
  const int extra = P - p2;
  // Tag steps: 0 fold-in, 1..log2(P2) exchanges, 63 fold-out.
  const uint64_t kFoldIn = 0, kFoldOut = 63;

  if (r < 2 * extra && r % 2 == 0) {  // sits out: hand over, get the result back
    Requests req(net);
    GC_CHECK(req.irecv(r + 1, transport::makeTag(ctx.callSeq, kFoldOut), buf, bytes));
    GC_CHECK(req.isend(r + 1, transport::makeTag(ctx.callSeq, kFoldIn), buf, bytes));
    // The receive cannot complete before the partner has our data, and our
    // send buffer is only overwritten by that receive.
    return req.waitAll();
  }

  device::bound(*scratch, ctx.dev);
  if (scratch->size() < bytes) scratch->resize(bytes);
  char* tmp = scratch->data();
  if (r < 2 * extra) {  // odd rank of a pair: absorb the partner's data
    Requests req(net);
    size_t slot = 0;
    GC_CHECK(req.irecv(r - 1, transport::makeTag(ctx.callSeq, kFoldIn), tmp, bytes, &slot));
    GC_CHECK(req.wait(slot));
    GC_CHECK(ctx.dev.add(buf, buf, tmp, count, t));
  }

  const int self = r < 2 * extra ? r / 2 : r - extra;
  auto realRank = [&](int v) { return v < extra ? 2 * v + 1 : v + extra; };
  uint64_t step = 1;
  for (int mask = 1; mask < p2; mask <<= 1, ++step) {
    const int peer = realRank(self ^ mask);
    Requests req(net);
    size_t slot = 0;
    GC_CHECK(req.irecv(peer, transport::makeTag(ctx.callSeq, step), tmp, bytes, &slot));
    GC_CHECK(req.isend(peer, transport::makeTag(ctx.callSeq, step), buf, bytes));
    GC_CHECK(req.wait(slot));
    GC_CHECK(req.waitAll());  // our send must finish before buf changes
    GC_CHECK(ctx.dev.add(buf, buf, tmp, count, t));
  }

  if (r < 2 * extra) {
    Requests req(net);
    GC_CHECK(req.isend(r - 1, transport::makeTag(ctx.callSeq, kFoldOut), buf, bytes));
    GC_CHECK(req.waitAll());
  }
  GC_TRACE(ALGO, "dense recursive doubling: %zu x %s over %d ranks (%d folded)", count,
           dtypeName(t), P, extra);
  return Status::Ok();
}

}  // namespace gradcomp::algo::dense
