// Small collectives for the sparse schedules (see collectives.h).
#include "algorithms/sparse/collectives.h"

#include <cstring>

namespace gradcomp::algo::sparse {

using transport::makeTag;

RequestSet::~RequestSet() {
  for (transport::Handle h : handles_)
    if (h) net_.cancel(h);
}

Status RequestSet::send(int peer, uint64_t tag, const void* data, size_t bytes) {
  transport::Handle h = 0;
  GC_CHECK(net_.isend(peer, tag, data, bytes, &h));
  handles_.push_back(h);
  lengths_.push_back(nullptr);
  return Status::Ok();
}

Status RequestSet::recv(int peer, uint64_t tag, void* data, size_t capacity, size_t* got) {
  transport::Handle h = 0;
  GC_CHECK(net_.irecv(peer, tag, data, capacity, &h));
  handles_.push_back(h);
  lengths_.push_back(got);
  return Status::Ok();
}

Status RequestSet::waitAll() {
  std::vector<size_t> bytes(handles_.size());
  const Status s = net_.waitAll(handles_.data(), handles_.size(), bytes.data());
  // waitAll releases every handle, on success and on error.
  for (size_t i = 0; i < handles_.size(); ++i)
    if (s.ok() && lengths_[i]) *lengths_[i] = bytes[i];
  handles_.clear();
  lengths_.clear();
  return s;
}

Status anyRank(Context& ctx, uint64_t step, bool mine, bool* any) {
  const int P = ctx.net.size(), me = ctx.net.rank();
  uint32_t flag = mine ? 1 : 0;
  int round = 0;
  for (int d = 1; d < P; d *= 2, ++round) {
    uint32_t in = 0;
    size_t got = 0;
    RequestSet req(ctx.net);
    GC_CHECK(req.recv((me - d + P) % P, makeTag(ctx.callSeq, step + round), &in, sizeof in, &got));
    GC_CHECK(req.send((me + d) % P, makeTag(ctx.callSeq, step + round), &flag, sizeof flag));
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
                     std::vector<std::vector<uint8_t>>* blocks) {
  const int P = ctx.net.size(), me = ctx.net.rank();
  const int next = (me + 1) % P, prev = (me - 1 + P) % P;
  for (int s = 0; s < P - 1; ++s) {
    const int sendBlock = (me - s + P) % P, recvBlock = (me - s - 1 + 2 * P) % P;
    auto& in = (*blocks)[recvBlock];
    in.resize(caps[recvBlock] + 1);  // never a zero-size buffer
    size_t got = 0;
    RequestSet req(ctx.net);
    GC_CHECK(req.recv(prev, makeTag(ctx.callSeq, step + s), in.data(), in.size(), &got));
    const auto& out = (*blocks)[sendBlock];
    GC_CHECK(req.send(next, makeTag(ctx.callSeq, step + s), out.data(), out.size()));
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
                         std::vector<std::vector<uint8_t>>* blocks) {
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
    GC_CHECK(req.recv(peer, makeTag(ctx.callSeq, step + round), in.data(), in.size(), &got));
    GC_CHECK(req.send(peer, makeTag(ctx.callSeq, step + round), out.data(), out.size()));
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
      (*blocks)[peerFirst + i].assign(in.begin() + pos, in.begin() + pos + len);
      pos += len;
    }
    GC_REQUIRE(pos == got, Err::RemoteError, "allgather: rank %d sent %zu bytes, blocks cover %zu",
               peer, got, pos);
  }
  return Status::Ok();
}

}  // namespace

Status allgatherBlocks(Context& ctx, uint64_t step, const std::vector<size_t>& caps,
                       std::vector<std::vector<uint8_t>>* blocks) {
  const int P = ctx.net.size();
  GC_REQUIRE(int(caps.size()) == P && int(blocks->size()) == P, Err::Internal,
             "allgatherBlocks: %zu caps / %zu blocks for %d ranks", caps.size(), blocks->size(), P);
  if ((P & (P - 1)) == 0) return doublingAllgather(ctx, step, caps, blocks);
  return ringAllgather(ctx, step, caps, blocks);
}

Status allgatherWords(Context& ctx, uint64_t step, const std::vector<uint64_t>& mine,
                      std::vector<uint64_t>* all) {
  const int P = ctx.net.size(), me = ctx.net.rank();
  const size_t bytes = mine.size() * 8;
  std::vector<std::vector<uint8_t>> blocks(P);
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

}  // namespace gradcomp::algo::sparse
