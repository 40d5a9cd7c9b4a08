// The hierarchical schedule (hierarchical.h): host reduce-scatter, inner
// algorithm on the rail, host allgather; for a reduce-scatter, host
// reduce-scatter of the rails' portions, then the inner reduce-scatter; for
// an allgather, the inner allgather on the rail, then a host allgather of
// the rail's decoded shards.
//
// Host exchanges are direct (every local rank sends each other one its
// shard): L-1 messages per rank and phase, the same bytes as a ring, and a
// summation order that does not depend on the ring position. Staging as in
// dense/ring.cc: outgoing shards are copied to host memory and synced before
// sending; arrivals land in host memory and primitives read them from there;
// the sync at the top of the next phase completes those reads before the
// staging is reused.
#include "algorithms/hierarchy/hierarchical.h"

#include <algorithm>

#include "algorithms/dense/dense.h"
#include "algorithms/shared/requests.h"
#include "common/log.h"
#include "transport/group_view.h"

namespace gradcomp::algo::hierarchy {
namespace {

// Steps far above any schedule's (tags pass through the views unchanged).
constexpr uint64_t kStepReduceScatter = 0xFFF00;
constexpr uint64_t kStepAllgather = 0xFFF01;
constexpr uint64_t kStepPortions = 0xFFF02;
constexpr uint64_t kStepRailShards = 0xFFF03;

class Hierarchical final : public Algorithm {
 public:
  Hierarchical(std::unique_ptr<Algorithm> inner, std::vector<std::vector<int>> hostRanks)
      : inner_(std::move(inner)), hostRanks_(std::move(hostRanks)) {
    setInfo(inner_->info());  // its name and its reduce-scatter form are the inner's
  }

  Status runAllreduce(Context& ctx, const AllreduceArgs& a) override {
    GC_CHECK(bind(ctx.net));
    const size_t esz = dtypeSize(a.dtype);
    char* buf = static_cast<char*>(a.recvBuf);
    if (a.count && a.sendBuf != a.recvBuf) GC_CHECK(ctx.dev.copy(buf, a.sendBuf, a.count * esz));
    stage_.bind(ctx.dev);
    const int l = host_->rank();
    const dense::Chunk mine = dense::chunkOf(a.count, host_->size(), l);
    GC_CHECK(hostReduceScatter(ctx, buf, a.count, a.dtype));

    AllreduceArgs in;
    in.sendBuf = in.recvBuf = buf + mine.begin * esz;
    in.count = mine.size;
    in.dtype = a.dtype;
    in.op = RedOp::Sum;
    in.bufferKey = shardKey(a.bufferKey, l);
    in.localKey = shardKey(residualKey(a), l);
    Context railCtx{*rail_, ctx.dev, ctx.config, ctx.callSeq, ctx.errorFeedback};
    GC_CHECK(inner_->allreduce(railCtx, in));

    GC_CHECK(allgather(ctx, buf, a.count, a.dtype));
    if (a.op == RedOp::Avg && a.count)
      GC_CHECK(ctx.dev.divide(buf, a.count, a.dtype, ctx.net.size()));
    return Status::Ok();
  }

  // hierarchical.h: host reduce-scatter of the portions, then the inner
  // reduce-scatter of this rank's portion over its rail.
  Status runReduceScatter(Context& ctx, const AllreduceArgs& a) override {
    GC_CHECK(bind(ctx.net));
    if (a.count == 0) return Status::Ok();
    const int l = host_->rank();
    const size_t esz = dtypeSize(a.dtype), rc = recvCountOf(a, ctx.net.size());
    const size_t portion = size_t(rail_->size()) * rc;
    stage_.bind(ctx.dev);
    portion_.bind(ctx.dev).resize(portion * esz);
    GC_CHECK(reducePortions(ctx, a, rc, portion_.data()));

    AllreduceArgs in;
    in.sendBuf = portion_.data();
    in.recvBuf = a.recvBuf;
    in.count = portion;
    in.dtype = a.dtype;
    in.op = RedOp::Sum;
    in.coll = Collective::ReduceScatter;
    in.bufferKey = shardKey(a.bufferKey, l);
    in.localKey = shardKey(residualKey(a), l);
    Context railCtx{*rail_, ctx.dev, ctx.config, ctx.callSeq, ctx.errorFeedback};
    GC_CHECK(inner_->reduceScatter(railCtx, in));
    if (a.op == RedOp::Avg && rc) GC_CHECK(ctx.dev.divide(a.recvBuf, rc, a.dtype, ctx.net.size()));
    return Status::Ok();
  }

  // hierarchical.h: the inner allgather of the rail's H shards into a
  // contiguous buffer (rail rank h: shard hostRanks_[h][l]), copied to their
  // slots; then every local rank sends the others its rail's H decoded
  // shards (direct, like the host exchanges above) and writes theirs.
  Status runAllgather(Context& ctx, const AllreduceArgs& a) override {
    GC_CHECK(bind(ctx.net));
    const int L = host_->size(), l = host_->rank(), H = rail_->size();
    const size_t m = a.count / size_t(ctx.net.size()), shardBytes = m * dtypeSize(a.dtype);
    const size_t railBytes = size_t(H) * shardBytes;
    if (m == 0) return Status::Ok();
    char* out = static_cast<char*>(a.recvBuf);
    auto slot = [&](int h, int j) {
      return out + size_t(hostRanks_[size_t(h)][size_t(j)]) * shardBytes;
    };
    portion_.bind(ctx.dev).resize(railBytes);
    AllreduceArgs in;
    in.sendBuf = a.sendBuf;  // in place: read (encoded) before its slot is written below
    in.recvBuf = portion_.data();
    in.count = size_t(H) * m;
    in.dtype = a.dtype;
    in.coll = Collective::AllGather;
    Context railCtx{*rail_, ctx.dev, ctx.config, ctx.callSeq, nullptr};
    GC_CHECK(inner_->allgather(railCtx, in));
    for (int h = 0; h < H; ++h)
      GC_CHECK(ctx.dev.copy(slot(h, l), portion_.data() + size_t(h) * shardBytes, shardBytes));
    if (L == 1) return ctx.dev.sync();
    stage_.bind(ctx.dev);
    if (stage_.send.size() < railBytes) stage_.send.resize(railBytes);
    if (stage_.recv.size() < size_t(L) * railBytes) stage_.recv.resize(size_t(L) * railBytes);
    GC_CHECK(ctx.dev.copy(stage_.send.data(), portion_.data(), railBytes));
    GC_CHECK(ctx.dev.sync());
    const uint64_t tag = transport::makeTag(ctx.callSeq, kStepRailShards);
    shared::RequestSet reqs(*host_, "hierarchy host allgather");
    for (int j = 0; j < L; ++j) {
      if (j == l) continue;
      GC_CHECK(reqs.irecv(j, tag, stage_.recv.data() + size_t(j) * railBytes, railBytes));
      GC_CHECK(reqs.isend(j, tag, stage_.send.data(), railBytes));
    }
    GC_CHECK(reqs.waitAll());
    for (int j = 0; j < L; ++j)
      for (int h = 0; h < H && j != l; ++h)
        GC_CHECK(ctx.dev.copy(slot(h, j),
                              stage_.recv.data() + size_t(j) * railBytes + size_t(h) * shardBytes,
                              shardBytes));
    return ctx.dev.sync();  // the staging is free for the next call
  }

  // The inner algorithm prepares for this rank's shard or portion (found
  // from the host groups, not the views the calls bind: this runs beside
  // them).
  Status prepare(Context& ctx, const AllreduceArgs& a) override {
    for (const std::vector<int>& host : hostRanks_)
      for (size_t l = 0; l < host.size(); ++l) {
        if (host[l] != ctx.net.rank()) continue;
        AllreduceArgs in = a;
        // A reduce-scatter's portion and an allgather's rail output are
        // both H = P / L shards.
        in.count = a.coll != Collective::AllReduce
                       ? a.count / host.size()
                       : dense::chunkOf(a.count, int(host.size()), int(l)).size;
        in.op = RedOp::Sum;
        return inner_->prepare(ctx, in);
      }
    return Status::Ok();
  }
  bool choosesPerCall() const override { return inner_->choosesPerCall(); }
  device::Backend::Reservation extraFirstCall(const AllreduceArgs& a) const override {
    return inner_->extraFirstCall(a);  // the whole tensor: at least the shard's
  }

 private:
  // Views over the communicator's transport (rebuilt if it changes).
  Status bind(transport::Transport& net) {
    if (parent_ == &net) return Status::Ok();
    int host = -1, local = -1;
    for (size_t h = 0; h < hostRanks_.size(); ++h)
      for (size_t i = 0; i < hostRanks_[h].size(); ++i)
        if (hostRanks_[h][i] == net.rank()) host = int(h), local = int(i);
    GC_REQUIRE(host >= 0, Err::Internal, "hierarchy: rank %d is in no host", net.rank());
    std::vector<int> rail;
    for (const auto& ranks : hostRanks_) {
      GC_REQUIRE(ranks.size() == hostRanks_[0].size(), Err::Internal,
                 "hierarchy: hosts of uneven size");
      rail.push_back(ranks[size_t(local)]);
    }
    GC_CHECK(transport::makeGroupView(net, hostRanks_[size_t(host)], &host_));
    GC_CHECK(transport::makeGroupView(net, rail, &rail_));
    parent_ = &net;
    return Status::Ok();
  }

  Status hostReduceScatter(Context& ctx, char* buf, size_t count, DataType t) {
    const int L = host_->size(), l = host_->rank();
    if (L == 1 || count == 0) return Status::Ok();
    const size_t esz = dtypeSize(t);
    const dense::Chunk mine = dense::chunkOf(count, L, l);
    if (stage_.send.size() < count * esz) stage_.send.resize(count * esz);
    const size_t shardBytes = mine.size * esz;
    if (stage_.recv.size() < size_t(L) * shardBytes) stage_.recv.resize(size_t(L) * shardBytes);
    auto slot = [&](int j) { return stage_.recv.data() + size_t(j) * shardBytes; };
    // Everything but the own shard goes out.
    if (mine.begin) GC_CHECK(ctx.dev.copy(stage_.send.data(), buf, mine.begin * esz));
    const size_t end = mine.begin + mine.size;
    if (end < count)
      GC_CHECK(ctx.dev.copy(stage_.send.data() + end * esz, buf + end * esz, (count - end) * esz));
    GC_CHECK(ctx.dev.sync());
    const uint64_t tag = transport::makeTag(ctx.callSeq, kStepReduceScatter);
    shared::RequestSet reqs(*host_, "hierarchy host exchange");
    for (int j = 0; j < L; ++j) {
      if (j == l) continue;
      GC_CHECK(reqs.irecv(j, tag, slot(j), shardBytes));
      const dense::Chunk c = dense::chunkOf(count, L, j);
      GC_CHECK(reqs.isend(j, tag, stage_.send.data() + c.begin * esz, c.size * esz));
    }
    GC_CHECK(reqs.waitAll());
    char* own = buf + mine.begin * esz;
    for (int j = 0; j < L; ++j)
      if (j != l && mine.size)
        GC_CHECK(ctx.dev.add(own, own, slot(j), mine.size, t));
    return Status::Ok();
  }

  // dst (device, H recvcounts) = this rank's portion summed over its host:
  // slot h holds shard hostRanks_[h][l]; x_l first, then the other local
  // ranks ascending (the allreduce's order). Peers' portions travel through
  // host staging as in hostReduceScatter().
  Status reducePortions(Context& ctx, const AllreduceArgs& a, size_t rc, char* dst) {
    const int L = host_->size(), l = host_->rank(), H = rail_->size();
    const size_t esz = dtypeSize(a.dtype), shardBytes = rc * esz, portionBytes = H * shardBytes;
    const char* in = static_cast<const char*>(a.sendBuf);
    auto shard = [&](int h, int j) {
      return in + size_t(hostRanks_[size_t(h)][size_t(j)]) * shardBytes;
    };
    for (int h = 0; h < H; ++h)
      GC_CHECK(ctx.dev.copy(dst + h * shardBytes, shard(h, l), shardBytes));
    if (L == 1) return Status::Ok();
    if (stage_.send.size() < L * portionBytes) stage_.send.resize(L * portionBytes);
    if (stage_.recv.size() < L * portionBytes) stage_.recv.resize(L * portionBytes);
    for (int j = 0; j < L; ++j)
      for (int h = 0; h < H && j != l; ++h)
        GC_CHECK(ctx.dev.copy(stage_.send.data() + j * portionBytes + h * shardBytes, shard(h, j),
                              shardBytes));
    GC_CHECK(ctx.dev.sync());
    const uint64_t tag = transport::makeTag(ctx.callSeq, kStepPortions);
    shared::RequestSet reqs(*host_, "hierarchy host exchange");
    for (int j = 0; j < L; ++j) {
      if (j == l) continue;
      GC_CHECK(reqs.irecv(j, tag, stage_.recv.data() + j * portionBytes, portionBytes));
      GC_CHECK(reqs.isend(j, tag, stage_.send.data() + j * portionBytes, portionBytes));
    }
    GC_CHECK(reqs.waitAll());
    for (int j = 0; j < L; ++j)
      if (j != l)
        GC_CHECK(ctx.dev.add(dst, dst, stage_.recv.data() + j * portionBytes, H * rc, a.dtype));
    return Status::Ok();
  }

  Status allgather(Context& ctx, char* buf, size_t count, DataType t) {
    const int L = host_->size(), l = host_->rank();
    if (L == 1 || count == 0) return Status::Ok();
    const size_t esz = dtypeSize(t);
    const dense::Chunk mine = dense::chunkOf(count, L, l);
    if (stage_.recv.size() < count * esz) stage_.recv.resize(count * esz);
    char* out = stage_.send.data() + mine.begin * esz;
    if (mine.size) GC_CHECK(ctx.dev.copy(out, buf + mine.begin * esz, mine.size * esz));
    GC_CHECK(ctx.dev.sync());  // also completes the reduce-scatter's adds from recv
    const uint64_t tag = transport::makeTag(ctx.callSeq, kStepAllgather);
    shared::RequestSet reqs(*host_, "hierarchy host exchange");
    for (int j = 0; j < L; ++j) {
      if (j == l) continue;
      const dense::Chunk c = dense::chunkOf(count, L, j);
      GC_CHECK(reqs.irecv(j, tag, stage_.recv.data() + c.begin * esz, c.size * esz));
      GC_CHECK(reqs.isend(j, tag, out, mine.size * esz));
    }
    GC_CHECK(reqs.waitAll());
    for (int j = 0; j < L; ++j) {
      const dense::Chunk c = dense::chunkOf(count, L, j);
      if (j != l && c.size)
        GC_CHECK(ctx.dev.copy(buf + c.begin * esz, stage_.recv.data() + c.begin * esz,
                              c.size * esz));
    }
    return Status::Ok();
  }

  std::unique_ptr<Algorithm> inner_;
  std::vector<std::vector<int>> hostRanks_;
  transport::Transport* parent_ = nullptr;
  std::unique_ptr<transport::Transport> host_, rail_;
  dense::Staging stage_;
  // Reduce-scatter: this rank's portion, host-summed; allgather: its rail's shards.
  device::DeviceArray<char> portion_;
};

}  // namespace

bool supportsHierarchy(const AlgorithmInfo& info) { return !info.selector && info.name != "wagma"; }

uint64_t shardKey(uint64_t key, int localRank) {
  if (!key) return 0;
  // splitmix64 of (key, shard), kept nonzero.
  uint64_t x = key ^ (0x6869657261726368ull + uint64_t(localRank) * 0x9E3779B97F4A7C15ull);
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x ? x : 1;
}

std::unique_ptr<Algorithm> makeHierarchical(std::unique_ptr<Algorithm> inner,
                                            std::vector<std::vector<int>> hostRanks) {
  return std::make_unique<Hierarchical>(std::move(inner), std::move(hostRanks));
}

}  // namespace gradcomp::algo::hierarchy
