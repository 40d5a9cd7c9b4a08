// Recursive doubling allreduce for any P, see dense.h.
//
// With P2 the largest power of two <= P and E = P - P2 extra ranks: ranks
// 2i and 2i+1 (i < E) pair up first; the even one sends its buffer to the odd
// one and sits out. The P2 remaining ranks are renumbered 0..P2-1 and exchange
// full buffers with partner (new ^ mask) for mask = 1, 2, .., P2/2, adding
// each time. Finally every odd rank of a pair sends the result to its even
// partner. Pairs add x + y on one side and y + x on the other; IEEE addition
// is commutative, so all ranks end bit-identical.
//
// Staging: each exchange copies buf to host memory (after the adds of the
// round before: one sync per round) and adds the partner's buffer from host
// memory; the next round's sync completes that add before the receive buffer
// is reused.
#include "algorithms/dense/dense.h"
#include "algorithms/shared/requests.h"
#include "common/log.h"

namespace gradcomp::algo::dense {

Status recursiveDoublingAllreduce(Context& ctx, void* buf, size_t count, DataType t,
                                  Staging* stage) {
  transport::Transport& net = ctx.net;
  device::Backend& dev = ctx.dev;
  const int P = net.size(), r = net.rank();
  const size_t bytes = count * dtypeSize(t);
  int p2 = 1;
  while (p2 * 2 <= P) p2 *= 2;
  const int extra = P - p2;
  // Tag steps: 0 fold-in, 1..log2(P2) exchanges, 63 fold-out.
  const uint64_t kFoldIn = 0, kFoldOut = 63;
  stage->bind(dev);
  if (stage->send.size() < bytes) stage->send.resize(bytes);
  if (stage->recv.size() < bytes) stage->recv.resize(bytes);
  char* out = stage->send.data();
  char* in = stage->recv.data();
  // buf as the primitives so far leave it, in `out`.
  auto stageOut = [&]() -> Status {
    GC_CHECK(dev.copy(out, buf, bytes));
    return dev.sync();
  };

  if (r < 2 * extra && r % 2 == 0) {  // sits out: hand over, get the result back
    GC_CHECK(stageOut());
    shared::RequestSet req(net, "dense allreduce");
    GC_CHECK(req.irecv(r + 1, transport::makeTag(ctx.callSeq, kFoldOut), in, bytes));
    GC_CHECK(req.isend(r + 1, transport::makeTag(ctx.callSeq, kFoldIn), out, bytes));
    GC_CHECK(req.waitAll());
    GC_CHECK(dev.copy(buf, in, bytes));
    return dev.sync();
  }

  if (r < 2 * extra) {  // odd rank of a pair: absorb the partner's data
    shared::RequestSet req(net, "dense allreduce");
    size_t slot = 0;
    GC_CHECK(req.irecv(r - 1, transport::makeTag(ctx.callSeq, kFoldIn), in, bytes, &slot));
    GC_CHECK(req.wait(slot));
    GC_CHECK(dev.add(buf, buf, in, count, t));
  }

  const int self = r < 2 * extra ? r / 2 : r - extra;
  auto realRank = [&](int v) { return v < extra ? 2 * v + 1 : v + extra; };
  uint64_t step = 1;
  for (int mask = 1; mask < p2; mask <<= 1, ++step) {
    const int peer = realRank(self ^ mask);
    GC_CHECK(stageOut());  // also completes the add that read `in`
    shared::RequestSet req(net, "dense allreduce");
    size_t slot = 0;
    GC_CHECK(req.irecv(peer, transport::makeTag(ctx.callSeq, step), in, bytes, &slot));
    GC_CHECK(req.isend(peer, transport::makeTag(ctx.callSeq, step), out, bytes));
    GC_CHECK(req.wait(slot));
    GC_CHECK(req.waitAll());
    GC_CHECK(dev.add(buf, buf, in, count, t));
  }

  if (r < 2 * extra) {
    GC_CHECK(stageOut());
    shared::RequestSet req(net, "dense allreduce");
    GC_CHECK(req.isend(r - 1, transport::makeTag(ctx.callSeq, kFoldOut), out, bytes));
    GC_CHECK(req.waitAll());
  }
  GC_TRACE(ALGO, "dense recursive doubling: %zu x %s over %d ranks (%d folded)", count,
           dtypeName(t), P, extra);
  return dev.sync();
}

}  // namespace gradcomp::algo::dense
