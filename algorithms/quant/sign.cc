// "sign": all-reducible signSGD (seed 004, notes section 8). Votes are the
// signs of acc (bit = acc > 0; 0, -0 and NaN vote negative). Counts of
// positive votes travel around a ring reduce-scatter: at step i (1-based) the
// forwarded counts cover i ranks and use ceil(log2(i+1)) bits per element;
// the owner decides d = +1 iff count > P/2 and a ring allgather spreads the
// 1-bit decisions. A tie (2:2 at even P) goes to -1 with
// GRADCOMP_SIGN_TIES=negative (the paper's rule), and by default (hash) to
// the side a hash of (call, element) picks, alike on every rank
// (device/quant_types.h signTieUp): no extra bits, no bias.
//
// Output scale, per block of B = GRADCOMP_SIGN_BLOCK elements (the
// projection of the exact result onto d): once every rank holds d in
// {+1,-1}^n, rank r computes for each block b its share
//   s_rb = <acc_r, d>_b / |b|     (fp64, index order, sent as fp32)
// and one more small exchange gives every rank every share:
//   T_b = sum_r s_rb (fp64, rank order);  S_b = max(T_b, 0) for sum,
//   max(T_b, 0) / P for avg, rounded to fp32 once;  out_i = S_b * d_i.
// S_b d_b is the multiple of d_b closest (L2) to the exact result on block b,
// so |out_b| = <exact_b, d_b> / sqrt|b| <= |exact_b|: a block never moves
// further than the exact sum would move it, and coordinates where the votes
// cancel (ties, noise, all-zero gradients) add nothing to S_b. The earlier
// scale, mean|acc| of all ranks on every element, gave every coordinate the
// same step whatever the votes agreed on and diverged in training
// (docs/results/quantized.md). T_b <= 0 (d_b useless) gives S_b = 0.
// Shares are block dot products on the device (Backend::blockDot, one fixed
// summation order on every backend, so ranks and the reference agree bit
// for bit); only the per-block shares and scales cross to the host.
//
// EF-signSGD (GRADCOMP_SIGN_EF, default on): rank r's contribution on block
// b is s_rb * d_b (0 when T_b <= 0), so the contributions add up to the
// sum's output and the residual acc_r - s_rb d_b is orthogonal to d_b. It is
// measured against the agreed decision, not the rank's own vote: what the
// majority and its tie rule got wrong comes back in the next call (a 2:2 tie
// decided -1 leaves +s_rb in every rank's residual). At P = 1 with one
// block, d = sign(acc) and s = |acc|_1 / n: EF-signSGD (Karimireddy et al.).
//
// Reduce-scatter form (NCCL's layout): the same schedule, whose ring chunks
// are then NCCL's shards (P divides n), so each shard's votes are counted
// and decided at its owner; the rank returns its shard of the allreduce's
// result, bit for bit (its Reference is the allreduce's, read per shard),
// with the same error feedback. The 1-bit decision allgather and the share
// exchange stay: every rank's scale share <acc_r, d>_b and its residual
// acc_r - s_rb d_b need the decisions on every block. Wire bytes: as the
// allreduce's below (it saves the output, not the wire).
//
// Wire bytes per rank (chunk c holds n_c elements, chunks split n evenly):
//   16 (P-1)                                    stats exchange
// + sum_{i=1}^{P-1} ceil(n_{(r-i) mod P} * ceil(log2(i+1)) / 8)   counts
// + sum_{s=0}^{P-2} ceil(n_{(r-s) mod P} / 8)                     decisions
// + 4 ceil(n / B) (P-1)                         scale shares
// about n/8 * (sum_i ceil(log2(i+1)) + P - 1) / P bytes: for P = 2^k that is
// the paper's log2 P-type growth instead of 2 * 4n (P-1)/P for dense; the
// shares add 32 (P-1) / B bits per element (P = 4, B = 1024: +4.7%).
#include <algorithm>
#include <cmath>
#include <memory>

#include "algorithms/quant/code_exchange.h"
#include "algorithms/quant/quant_algorithms.h"
#include "algorithms/quant/quant_frame.h"

namespace gradcomp::algo::quant {
namespace {

constexpr const char* kName = "sign";

// Bits of a count that covers `ranks` ranks: ceil(log2(ranks + 1)).
int countBits(int ranks) {
  int b = 0;
  while ((1 << b) <= ranks) ++b;
  return b;
}

int mod(int a, int P) { return ((a % P) + P) % P; }

Status readEf(const param::Overrides& config, bool* ef) {
  return config.getBool(param::Id::SIGN_EF, ef);
}

// Blocks of the decision vector that get their own scale.
size_t blockCount(size_t n, size_t block) { return (n + block - 1) / block; }

// all[r * blocks + b]: rank r's share of block b.
template <class V>
double shareTotal(const V& all, size_t blocks, size_t b) {
  double t = 0;
  for (size_t k = b; k < all.size(); k += blocks) t += all[k];
  return t;
}

// Block b's output magnitude S_b (identical arithmetic on every rank).
template <class V>
float outputScale(const V& all, size_t blocks, size_t b, RedOp op) {
  const double t = std::max(shareTotal(all, blocks, b), 0.0);
  return float(op == RedOp::Avg ? t / double(all.size() / blocks) : t);
}

// Rank r's part of the sum's output in block b, in acc's units.
template <class V>
float contributionScale(const V& all, size_t blocks, size_t b, int r) {
  return shareTotal(all, blocks, b) > 0 ? all[size_t(r) * blocks + b] : 0.0f;
}

// The tie rule of call `call` (GRADCOMP_SIGN_TIES).
Status readTies(const param::Overrides& config, uint64_t call, device::SignTies* ties) {
  std::string rule;
  GC_CHECK(config.getString(param::Id::SIGN_TIES, &rule));
  ties->hash = rule == "hash";
  ties->seed = device::streamSeed(0, call, 0, 3);
  return Status::Ok();
}

Status readBlock(const param::Overrides& config, size_t* block) {
  int64_t v = 0;
  GC_CHECK(readInt(config, param::Id::SIGN_BLOCK, &v));
  *block = size_t(v);
  return Status::Ok();
}

class Sign final : public QuantAlgorithm {
 public:
  Sign() : QuantAlgorithm(kName) {}

 private:
  Status configure(const param::Overrides& config, int nranks, FramePlan* plan) override {
    GC_CHECK(readEf(config, &ef_));
    GC_CHECK(readBlock(config, &block_));
    config_ = &config;
    *plan = {ef_, double(nranks)};
    return Status::Ok();
  }

  Status step(Context& ctx, const AllreduceArgs& args, const CallState& st, float* out,
              float* residual) override {
    device::Backend& dev = ctx.dev;
    const size_t n = args.count, block = block_, blocks = blockCount(n, block);
    const int P = ctx.net.size(), r = ctx.net.rank();
    device::SignTies ties;
    GC_CHECK(readTies(*config_, st.call, &ties));
    device::HostArray<uint8_t>& decisions = ws_.bytes;
    GC_CHECK(ring(ctx, st.acc, n, ties, &decisions));
    for (int c = 0; c < P; ++c) {  // out = d, from the decisions in host memory
      const ChunkRange ch = chunkRange(n, P, c, 1);
      GC_CHECK(dev.signExpand(decisions.data() + offsets_[c], ch.size, 1.0f, -1.0f,
                              out + ch.begin, -1));
    }
    device::HostArray<float>& shares = shares_.bind(dev);
    shares.resize(size_t(P) * blocks);
    GC_CHECK(dev.blockDot(st.acc, out, n, block, shares.data() + size_t(r) * blocks));
    GC_CHECK(dev.sync());
    GC_CHECK(exchangeShares(ctx, st.stats, blocks, &shares));
    device::HostArray<float>& scales = scales_.bind(dev);
    scales.resize(blocks);
    if (residual) {  // acc -= c_rb d_b: what this rank did not get across
      for (size_t b = 0; b < blocks; ++b) scales[b] = contributionScale(shares, blocks, b, r);
      GC_CHECK(dev.expandBlocks(out, n, block, scales.data(), residual, /*subtractFrom=*/true));
      GC_CHECK(dev.sync());  // scales is reused below
    }
    for (size_t b = 0; b < blocks; ++b) scales[b] = outputScale(shares, blocks, b, args.op);
    GC_CHECK(dev.expandBlocks(out, n, block, scales.data(), out, /*subtractFrom=*/false));
    return Status::Ok();
  }

  // step() over the whole tensor into full_, then this rank's shard.
  Status stepReduceScatter(Context& ctx, const AllreduceArgs& args, const CallState& st,
                           float* out, float* residual) override {
    device::DeviceArray<float>& full = full_.bind(ctx.dev);
    full.resize(args.count);
    GC_CHECK(step(ctx, args, st, full.data(), residual));
    const size_t shard = recvCountOf(args, ctx.net.size());
    return ctx.dev.copy(out, full.data() + size_t(ctx.net.rank()) * shard, shard * sizeof(float));
  }

  // Every rank's block shares (fp32, host memory) to every rank. A share is
  // bounded by its rank's max|acc| from the stats exchange; anything else is
  // corrupt.
  Status exchangeShares(Context& ctx, const std::vector<device::AbsStats>& stats, size_t blocks,
                        device::HostArray<float>* shares) {
    const int P = ctx.net.size(), r = ctx.net.rank();
    const size_t bytes = blocks * sizeof(float);
    std::vector<Transfer> sends, recvs;
    for (int j = 0; j < P; ++j) {
      if (j == r) continue;
      recvs.push_back({j, shares->data() + size_t(j) * blocks, bytes});
      sends.push_back({j, shares->data() + size_t(r) * blocks, bytes});
    }
    GC_CHECK(exchangeAll(ctx.net, transport::makeTag(ctx.callSeq, uint64_t(2 * P)), recvs, sends,
                         "sign scale shares"));
    for (int j = 0; j < P; ++j)
      for (size_t b = 0; b < blocks; ++b) {
        const double s = (*shares)[size_t(j) * blocks + b], bound = stats[j].maxAbs * (1 + 1e-6);
        GC_REQUIRE(std::isfinite(s) && std::fabs(s) <= bound, Err::RemoteError,
                   "sign scale share of block %zu from rank %d is %g, outside [-%g, %g] (its "
                   "max|acc|)", b, j, s, bound, bound);
      }
    return Status::Ok();
  }

  // Fills *decisions (host memory) with every chunk's packed decision bits
  // (chunk c at offsets_[c]). Counts travel in host memory; the votes of a
  // chunk are packed from acc on the device and added to the arriving
  // counts there; one sync per step before the counts move on.
  Status ring(Context& ctx, const float* acc, size_t n, const device::SignTies& ties,
              device::HostArray<uint8_t>* decisions) {
    device::Backend& dev = ctx.dev;
    const int P = ctx.net.size(), r = ctx.net.rank();
    const int next = mod(r + 1, P), prev = mod(r - 1, P);
    auto range = [&](int c) { return chunkRange(n, P, c, 1); };
    device::HostArray<uint8_t>* cur = &ringA_.bind(dev);
    device::HostArray<uint8_t>* other = &ringB_.bind(dev);
    device::HostArray<uint8_t>& recv = ringRecv_.bind(dev);
    device::DeviceArray<uint8_t>& votes = ringVotes_.bind(dev);
    cur->resize(device::packedBytes(range(mod(r - 1, P)).size, 1));
    // counts of 1 rank at width 1 = the votes
    GC_CHECK(dev.signPack(acc + range(mod(r - 1, P)).begin, range(mod(r - 1, P)).size,
                          cur->data()));
    GC_CHECK(dev.sync());
    for (int i = 1; i < P; ++i) {
      // cur holds chunk (r - i) mod P, counted over i ranks.
      const int recvChunk = mod(r - i - 1, P);
      const int w = countBits(i);
      const size_t len = range(recvChunk).size;
      recv.resize(device::packedBytes(len, w));
      GC_CHECK(exchangeAll(ctx.net, transport::makeTag(ctx.callSeq, uint64_t(i)),
                           {{prev, recv.data(), recv.size()}}, {{next, cur->data(), cur->size()}},
                           "sign count reduce-scatter"));
      votes.resize(device::packedBytes(len, 1));
      GC_CHECK(dev.signPack(acc + range(recvChunk).begin, len, votes.data()));
      other->resize(device::packedBytes(len, countBits(i + 1)));
      GC_CHECK(dev.signCountAdd(recv.data(), w, i, votes.data(), len, other->data(),
                                countBits(i + 1), prev));
      GC_CHECK(dev.sync());  // the counts to forward, and `recv` free again
      std::swap(cur, other);
    }
    // cur: counts of all P ranks for chunk r.
    offsets_.assign(P + 1, 0);
    for (int c = 0; c < P; ++c) offsets_[c + 1] = offsets_[c] + device::packedBytes(range(c).size, 1);
    decisions->resize(offsets_[P]);
    GC_CHECK(dev.signMajority(cur->data(), countBits(P), range(r).size, P, ties, range(r).begin,
                              decisions->data() + offsets_[r]));
    GC_CHECK(dev.sync());
    for (int s = 0; s < P - 1; ++s) {
      const int sendChunk = mod(r - s, P), recvChunk = mod(r - s - 1, P);
      const size_t sendBytes = offsets_[sendChunk + 1] - offsets_[sendChunk];
      const size_t recvBytes = offsets_[recvChunk + 1] - offsets_[recvChunk];
      GC_CHECK(exchangeAll(ctx.net, transport::makeTag(ctx.callSeq, uint64_t(P + s)),
                           {{prev, decisions->data() + offsets_[recvChunk], recvBytes}},
                           {{next, decisions->data() + offsets_[sendChunk], sendBytes}},
                           "sign decision allgather"));
    }
    return Status::Ok();
  }

  bool ef_ = false;
  const param::Overrides* config_ = nullptr;  // this call's (configure)
  std::vector<size_t> offsets_;
  size_t block_ = 1024;
  device::HostArray<float> shares_, scales_;  // [rank][block]; [block]
  device::HostArray<uint8_t> ringA_, ringB_, ringRecv_;  // counts in flight (host)
  device::DeviceArray<uint8_t> ringVotes_;                // a chunk's votes
  device::DeviceArray<float> full_;                       // reduce-scatter: the whole result
};

// Central semantics: the elementwise majority of all ranks' votes, scaled by
// the projection of the exact result onto it.
class SignReference final : public QuantReference {
 public:
  SignReference() : QuantReference(kName) {}

 private:
  Status loadConfig(const param::Overrides& config) override {
    GC_CHECK(readEf(config, &ef_));
    config_ = config;
    return readBlock(config, &block_);
  }
  FramePlan plan(int nranks) const override { return {ef_, double(nranks)}; }
  Status step(const AllreduceArgs& args, const std::vector<std::vector<float>>& acc,
              const std::vector<device::AbsStats>&, uint64_t call, std::vector<float>* out,
              std::vector<std::vector<float>>* contribution, double*) override {
    const int P = int(acc.size());
    const size_t n = args.count, block = block_, blocks = blockCount(n, block);
    device::SignTies ties;
    GC_CHECK(readTies(config_, call, &ties));
    std::vector<float> d(n);
    for (size_t i = 0; i < n; ++i) {
      int positive = 0;
      for (int r = 0; r < P; ++r) positive += acc[r][i] > 0.0f ? 1 : 0;
      const bool up = 2 * positive > P || (2 * positive == P && device::signTieUp(ties, i));
      d[i] = up ? 1.0f : -1.0f;
    }
    device::Backend& cpu = device::cpuBackend();
    std::vector<float> shares(size_t(P) * blocks), scales(blocks);
    for (int r = 0; r < P; ++r)
      GC_CHECK(cpu.blockDot(acc[r].data(), d.data(), n, block, &shares[size_t(r) * blocks]));
    out->resize(n);
    for (size_t b = 0; b < blocks; ++b) scales[b] = outputScale(shares, blocks, b, args.op);
    GC_CHECK(cpu.expandBlocks(d.data(), n, block, scales.data(), out->data(), false));
    contribution->assign(P, std::vector<float>(n));
    for (int r = 0; r < P; ++r) {
      for (size_t b = 0; b < blocks; ++b) scales[b] = contributionScale(shares, blocks, b, r);
      GC_CHECK(cpu.expandBlocks(d.data(), n, block, scales.data(), (*contribution)[r].data(),
                                false));
    }
    return Status::Ok();
  }
  // The allreduce's result: rank r's shard is its slice.
  Status stepReduceScatter(const AllreduceArgs& args, const std::vector<std::vector<float>>& acc,
                           const std::vector<device::AbsStats>& stats, uint64_t call,
                           std::vector<float>* out, std::vector<std::vector<float>>* contribution,
                           double* relTolerance) override {
    return step(args, acc, stats, call, out, contribution, relTolerance);
  }

  bool ef_ = true;
  size_t block_ = 1024;
  param::Overrides config_;
};

}  // namespace

Status makeSignReference(int nranks, const param::Overrides& config,
                         std::unique_ptr<Reference>* out) {
  return makeQuantReference<SignReference>(nranks, config, out);
}

GC_REGISTER_ALGORITHM(
    sign, {kName,
           "all-reducible signSGD: ring reduce-scatter of vote counts (growing bit widths), "
           "majority at the owner, 1-bit allgather; output +-S, S the projection of the "
           "exact result onto the decisions; reduce-scatter: the same schedule, own shard",
           {param::Id::SIGN_EF, param::Id::SIGN_BLOCK, param::Id::SIGN_TIES},
           [] { return std::unique_ptr<Algorithm>(new Sign()); },
           [](int nranks) { return registryReference<SignReference>(nranks, kName); }, false,
           // One reference class: expect() follows args.coll.
           [](int nranks) { return registryReference<SignReference>(nranks, kName); }});

}  // namespace gradcomp::algo::quant
