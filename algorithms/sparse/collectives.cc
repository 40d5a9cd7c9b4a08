// Small collectives for the sparse schedules (see collectives.h).
#include "algorithms/sparse/collectives.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace gradcomp::algo::sparse {

using transport::makeTag;

Status anyRank(Context& ctx, uint64_t step, bool mine, bool* any) {
  const int P = ctx.net.size(), me = ctx.net.rank();
  uint32_t flag = mine ? 1 : 0;
  int round = 0;
  for (int d = 1; d < P; d *= 2, ++round) {
    uint32_t in = 0;
    size_t got = 0;
    RequestSet req(ctx.net);
    GC_CHECK(req.irecvUpTo((me - d + P) % P, makeTag(ctx.callSeq, step + round), &in, sizeof in, &got));
    GC_CHECK(req.isend((me + d) % P, makeTag(ctx.callSeq, step + round), &flag, sizeof flag));
    GC_CHECK(req.waitAll());
    GC_REQUIRE(got == sizeof in, Err::RemoteError, "flag exchange: rank %d sent %zu bytes, not %zu",
               (me - d + P) % P, got, sizeof in);
    flag |= in;
  }
  *any = flag != 0;
  return Status::Ok();
}

namespace {

Status ringAllgather(Context& ctx, uint64_t step, const std::vector<size_t>& caps,
                     std::vector<device::HostArray<uint8_t>>* blocks) {
  const int P = ctx.net.size(), me = ctx.net.rank();
  const int next = (me + 1) % P, prev = (me - 1 + P) % P;
  for (int s = 0; s < P - 1; ++s) {
    const int sendBlock = (me - s + P) % P, recvBlock = (me - s - 1 + 2 * P) % P;
    auto& in = (*blocks)[recvBlock];
    in.resize(caps[recvBlock] + 1);  // never a zero-size buffer
    size_t got = 0;
    RequestSet req(ctx.net);
    GC_CHECK(req.irecvUpTo(prev, makeTag(ctx.callSeq, step + s), in.data(), in.size(), &got));
    const auto& out = (*blocks)[sendBlock];
    GC_CHECK(req.isend(next, makeTag(ctx.callSeq, step + s), out.data(), out.size()));
    GC_CHECK(req.waitAll());
    GC_REQUIRE(got <= caps[recvBlock], Err::RemoteError,
               "allgather: rank %d sent a %zu-byte block for rank %d (limit %zu)", prev, got,
               recvBlock, caps[recvBlock]);
    in.resize(got);
  }
  return Status::Ok();
}

// Recursive doubling: after round r this rank holds the blocks of the 2^(r+1)
// ranks sharing its rank's high bits. A message is u64 lengths of the
// sender's 2^r blocks followed by their bytes.
Status doublingAllgather(Context& ctx, uint64_t step, const std::vector<size_t>& caps,
                         std::vector<device::HostArray<uint8_t>>* blocks) {
  const int P = ctx.net.size(), me = ctx.net.rank();
  std::vector<uint8_t> out, in;
  int round = 0;
  for (int d = 1; d < P; d *= 2, ++round) {
    const int peer = me ^ d, myFirst = me & ~(d - 1), peerFirst = peer & ~(d - 1);
    out.assign(8 * size_t(d), 0);
    for (int i = 0; i < d; ++i) {
      const auto& b = (*blocks)[myFirst + i];
      const uint64_t len = b.size();
      std::memcpy(out.data() + 8 * i, &len, 8);
      out.insert(out.end(), b.begin(), b.end());
    }
    size_t cap = 8 * size_t(d), got = 0;
    for (int i = 0; i < d; ++i) cap += caps[peerFirst + i];
    in.resize(cap);
    RequestSet req(ctx.net);
    GC_CHECK(req.irecvUpTo(peer, makeTag(ctx.callSeq, step + round), in.data(), in.size(), &got));
    GC_CHECK(req.isend(peer, makeTag(ctx.callSeq, step + round), out.data(), out.size()));
    GC_CHECK(req.waitAll());
    GC_REQUIRE(got >= 8 * size_t(d), Err::RemoteError,
               "allgather: rank %d sent %zu bytes, shorter than its %d block lengths", peer, got, d);
    size_t pos = 8 * size_t(d);
    for (int i = 0; i < d; ++i) {
      uint64_t len;
      std::memcpy(&len, in.data() + 8 * i, 8);
      GC_REQUIRE(len <= caps[peerFirst + i] && len <= got - pos, Err::RemoteError,
                 "allgather: rank %d announced a %llu-byte block for rank %d (limit %zu, %zu "
                 "bytes left)", peer, (unsigned long long)len, peerFirst + i,
                 caps[peerFirst + i], got - pos);
      (*blocks)[peerFirst + i].assign(in.data() + pos, size_t(len));
      pos += len;
    }
    GC_REQUIRE(pos == got, Err::RemoteError, "allgather: rank %d sent %zu bytes, blocks cover %zu",
               peer, got, pos);
  }
  return Status::Ok();
}

}  // namespace

Status allgatherBlocks(Context& ctx, uint64_t step, const std::vector<size_t>& caps,
                       std::vector<device::HostArray<uint8_t>>* blocks) {
  const int P = ctx.net.size();
  GC_REQUIRE(int(caps.size()) == P && int(blocks->size()) == P, Err::Internal,
             "allgatherBlocks: %zu caps / %zu blocks for %d ranks", caps.size(), blocks->size(), P);
  for (auto& b : *blocks) b.bind(ctx.dev);  // receivers decode them with primitives
  GC_CHECK(ctx.dev.sync());
  if ((P & (P - 1)) == 0) return doublingAllgather(ctx, step, caps, blocks);
  return ringAllgather(ctx, step, caps, blocks);
}

Status broadcastBlock(Context& ctx, uint64_t step, int root, size_t cap,
                      device::HostArray<uint8_t>* block) {
  const int P = ctx.net.size(), me = ctx.net.rank();
  block->bind(ctx.dev);
  GC_CHECK(ctx.dev.sync());
  const int v = (me - root + P) % P;  // rank relative to the root
  int mask = 1, round = 0;
  while (mask < P) {  // the round in which v receives: its lowest set bit
    if (v & mask) {
      const int from = (v - mask + root) % P;
      block->resize(cap + 1);  // never a zero-size buffer
      size_t got = 0;
      RequestSet req(ctx.net);
      GC_CHECK(req.irecvUpTo(from, makeTag(ctx.callSeq, step + round), block->data(), block->size(),
                        &got));
      GC_CHECK(req.waitAll());
      GC_REQUIRE(got <= cap, Err::RemoteError,
                 "broadcast: rank %d sent a %zu-byte block (limit %zu)", from, got, cap);
      block->resize(got);
      break;
    }
    mask <<= 1;
    ++round;
  }
  // Forward to the ranks below in the tree: v + mask/2, v + mask/4, ...
  RequestSet req(ctx.net);
  for (mask >>= 1, --round; mask > 0; mask >>= 1, --round)
    if (v + mask < P)
      GC_CHECK(req.isend((v + mask + root) % P, makeTag(ctx.callSeq, step + round), block->data(),
                        block->size()));
  return req.waitAll();
}

Status allgatherWords(Context& ctx, uint64_t step, const std::vector<uint64_t>& mine,
                      std::vector<uint64_t>* all) {
  const int P = ctx.net.size(), me = ctx.net.rank();
  const size_t bytes = mine.size() * 8;
  std::vector<device::HostArray<uint8_t>> blocks;
  for (int r = 0; r < P; ++r) blocks.emplace_back(ctx.dev);
  blocks[me].resize(bytes);
  if (bytes) std::memcpy(blocks[me].data(), mine.data(), bytes);
  GC_CHECK(allgatherBlocks(ctx, step, std::vector<size_t>(P, bytes), &blocks));
  all->assign(mine.size() * P, 0);
  for (int r = 0; r < P; ++r) {
    GC_REQUIRE(blocks[r].size() == bytes, Err::RemoteError,
               "allgather: rank %d contributed %zu bytes, expected %zu", r, blocks[r].size(), bytes);
    if (bytes) std::memcpy(all->data() + mine.size() * r, blocks[r].data(), bytes);
  }
  return Status::Ok();
}

namespace {

// Sends `count` words to `to` and receives exactly `expect` words from `from`
// into (*in)[0, expect) (-1: no such transfer) in one round.
Status exchangeWords(Context& ctx, uint64_t step, int to, const uint64_t* out, size_t count,
                     int from, size_t expect, std::vector<uint64_t>* in) {
  const uint64_t tag = makeTag(ctx.callSeq, step);
  in->resize(expect + 1);  // never a zero-size buffer
  size_t got = 0;
  RequestSet req(ctx.net);
  if (from >= 0) GC_CHECK(req.irecvUpTo(from, tag, in->data(), 8 * expect, &got));
  if (to >= 0) GC_CHECK(req.isend(to, tag, out, 8 * count));
  GC_CHECK(req.waitAll());
  GC_REQUIRE(from < 0 || got == 8 * expect, Err::RemoteError,
             "allreduce: rank %d sent %zu bytes, expected %zu", from, got, 8 * expect);
  return Status::Ok();
}

}  // namespace

Status allreduceSumWords(Context& ctx, uint64_t step, std::vector<uint64_t>* words) {
  const int P = ctx.net.size(), me = ctx.net.rank();
  const size_t m = words->size();
  if (m == 0 || P == 1) return Status::Ok();
  uint64_t* w = words->data();
  int P2 = 1;
  while (2 * P2 <= P) P2 *= 2;
  std::vector<uint64_t> in;
  if (me >= P2) {  // fold into me - P2 (step), get the sum back (step + 1)
    GC_CHECK(exchangeWords(ctx, step, me - P2, w, m, -1, 0, &in));
    GC_CHECK(exchangeWords(ctx, step + 1, -1, nullptr, 0, me - P2, m, &in));
    std::copy(in.begin(), in.begin() + m, w);
    return Status::Ok();
  }
  const int extra = me + P2 < P ? me + P2 : -1;
  if (extra >= 0) {
    GC_CHECK(exchangeWords(ctx, step, -1, nullptr, 0, extra, m, &in));
    for (size_t i = 0; i < m; ++i) w[i] += in[i];
  }
  // Reduce-scatter: at mask the pair (me, me ^ mask) splits [lo, hi) at its
  // middle; the rank without the mask bit keeps the lower half.
  uint64_t round = 2;
  size_t lo = 0, hi = m;
  std::vector<std::pair<size_t, size_t>> outer;  // [lo, hi) before each halving
  for (int mask = P2 / 2; mask >= 1; mask /= 2, ++round) {
    const size_t mid = lo + (hi - lo) / 2;
    const bool lower = (me & mask) == 0;
    const size_t keepLo = lower ? lo : mid, keepHi = lower ? mid : hi;
    const size_t sendLo = lower ? mid : lo, sendHi = lower ? hi : mid;
    GC_CHECK(exchangeWords(ctx, step + round, me ^ mask, w + sendLo, sendHi - sendLo, me ^ mask,
                           keepHi - keepLo, &in));
    for (size_t i = keepLo; i < keepHi; ++i) w[i] += in[i - keepLo];
    outer.emplace_back(lo, hi);
    lo = keepLo;
    hi = keepHi;
  }
  // Allgather: retrace the halvings, each pair swapping its reduced halves.
  for (int mask = 1; mask < P2; mask *= 2, ++round) {
    const auto [plo, phi] = outer.back();
    outer.pop_back();
    const size_t mid = plo + (phi - plo) / 2;
    const bool lower = (me & mask) == 0;
    const size_t otherLo = lower ? mid : plo, otherHi = lower ? phi : mid;
    GC_CHECK(exchangeWords(ctx, step + round, me ^ mask, w + lo, hi - lo, me ^ mask,
                           otherHi - otherLo, &in));
    std::copy(in.begin(), in.begin() + (otherHi - otherLo), w + otherLo);
    lo = plo;
    hi = phi;
  }
  if (extra >= 0) GC_CHECK(exchangeWords(ctx, step + 1, extra, w, m, -1, 0, &in));
  return Status::Ok();
}

}  // namespace gradcomp::algo::sparse
