// "sign": all-reducible signSGD (seed 004, notes section 8). Votes are the
// signs of acc (bit = acc > 0; 0, -0 and NaN vote negative). Counts of
// positive votes travel around a ring reduce-scatter: at step i (1-based) the
// forwarded counts cover i ranks and use ceil(log2(i+1)) bits per element;
// the owner decides +1 iff count > P/2 (ties go to -1) and a ring allgather
// spreads the 1-bit decisions. Output: +-S with
//   scale = sum over ranks of sum|acc_r| / (P * n)   (mean |acc|, fp64, rank
//           order, rounded to fp32 once; agreed through the stats exchange),
//   S = scale for avg, P * scale for sum.
// EF-signSGD (GRADCOMP_SIGN_EF, off by default): rank r keeps
// acc_r - s_r * sign(acc_r), s_r = sum|acc_r| / n, its own vote's error.
//
// Wire bytes per rank (chunk c holds n_c elements, chunks split n evenly):
//   24 (P-1)                                    stats exchange
// + sum_{i=1}^{P-1} ceil(n_{(r-i) mod P} * ceil(log2(i+1)) / 8)   counts
// + sum_{s=0}^{P-2} ceil(n_{(r-s) mod P} / 8)                     decisions
// about n/8 * (sum_i ceil(log2(i+1)) + P - 1) / P bytes: for P = 2^k that is
// the paper's log2 P-type growth instead of 2 * 4n (P-1)/P for dense.
#include <cmath>
#include <memory>

#include "algorithms/quant/code_exchange.h"
#include "algorithms/quant/quant_algorithms.h"
#include "algorithms/quant/quant_common.h"
#include "common/log.h"

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

// Decision magnitude agreed by all ranks (identical arithmetic everywhere).
float outputScale(const std::vector<device::AbsStats>& stats, size_t n, RedOp op) {
  const int P = int(stats.size());
  double total = 0;
  for (const device::AbsStats& s : stats) total += s.sumAbs;
  const float scale = n ? float(total / (double(P) * double(n))) : 0.0f;
  return op == RedOp::Sum ? float(double(scale) * P) : scale;
}

float ownScale(const device::AbsStats& s, size_t n) { return n ? float(s.sumAbs / double(n)) : 0.0f; }

// contribution = +-s_r by acc's own votes.
Status ownContribution(device::Backend& dev, const float* acc, size_t n, float s, float* out) {
  thread_local std::vector<uint8_t> votes;  // per thread: no allocation per call
  votes.resize(device::packedBytes(n, 1));
  GC_CHECK(dev.signPack(acc, n, votes.data()));
  return dev.signExpand(votes.data(), n, s, -s, out);
}

class Sign final : public Algorithm {
 public:
  Status allreduce(Context& ctx, const AllreduceArgs& args) override {
    GC_CHECK(checkArgs(kName, args));
    if (args.count == 0) return Status::Ok();  // nothing to send; every rank agrees
    bool ef = false;
    GC_CHECK(readEf(ctx.config, &ef));
    CallState& st = st_;
    GC_CHECK(beginCall(ctx, args, ef, double(ctx.net.size()), &calls_, &st));
    if (st.fallback) return fallbackCall(ctx, args, &st, &ws_);
    const size_t n = args.count;
    std::vector<uint8_t>& decisions = ws_.bytes;
    std::vector<float>& out = ws_.out;
    std::vector<float>& contribution = ws_.contribution;
    out.resize(n);
    GC_CHECK(ring(ctx, st.acc.data(), n, &decisions));
    const float S = outputScale(st.stats, n, args.op);
    for (int c = 0; c < ctx.net.size(); ++c) {
      const ChunkRange ch = chunkRange(n, ctx.net.size(), c, 1);
      GC_CHECK(ctx.dev.signExpand(&decisions[offsets_[c]], ch.size, S, -S, out.data() + ch.begin));
    }
    if (st.errorFeedback) {
      contribution.resize(n);
      GC_CHECK(ownContribution(ctx.dev, st.acc.data(), n, ownScale(st.stats[ctx.net.rank()], n),
                               contribution.data()));
    }
    return endCall(ctx, args, &st, out.data(), st.errorFeedback ? contribution.data() : nullptr);
  }

 private:
  // Fills *decisions with every chunk's packed decision bits (chunk c at
  // offsets_[c]).
  Status ring(Context& ctx, const float* acc, size_t n, std::vector<uint8_t>* decisions) {
    device::Backend& dev = ctx.dev;
    const int P = ctx.net.size(), r = ctx.net.rank();
    const int next = mod(r + 1, P), prev = mod(r - 1, P);
    auto range = [&](int c) { return chunkRange(n, P, c, 1); };
    auto votesOf = [&](int c, std::vector<uint8_t>* v) {
      v->assign(device::packedBytes(range(c).size, 1), 0);
      return dev.signPack(acc + range(c).begin, range(c).size, v->data());
    };
    std::vector<uint8_t>&cur = ringCur_, &recv = ringRecv_, &votes = ringVotes_;
    GC_CHECK(votesOf(mod(r - 1, P), &cur));  // counts of 1 rank at width 1 = the votes
    for (int i = 1; i < P; ++i) {
      // cur holds chunk (r - i) mod P, counted over i ranks.
      const int recvChunk = mod(r - i - 1, P);
      const int w = countBits(i);
      recv.assign(device::packedBytes(range(recvChunk).size, w), 0);
      GC_CHECK(exchangeAll(ctx.net, transport::makeTag(ctx.callSeq, uint64_t(i)),
                           {{prev, recv.data(), recv.size()}}, {{next, cur.data(), cur.size()}},
                           "sign count reduce-scatter"));
      GC_CHECK(votesOf(recvChunk, &votes));
      cur.assign(device::packedBytes(range(recvChunk).size, countBits(i + 1)), 0);
      Status s = dev.signCountAdd(recv.data(), w, i, votes.data(), range(recvChunk).size,
                                  cur.data(), countBits(i + 1));
      if (s.code() == Err::RemoteError)
        return makeStatus(Err::RemoteError, "sign counts from rank %d: %s", prev,
                          s.message().c_str());
      GC_CHECK(s);
    }
    // cur: counts of all P ranks for chunk r.
    offsets_.assign(P + 1, 0);
    for (int c = 0; c < P; ++c) offsets_[c + 1] = offsets_[c] + device::packedBytes(range(c).size, 1);
    decisions->assign(offsets_[P], 0);
    GC_CHECK(dev.signMajority(cur.data(), countBits(P), range(r).size, P,
                              decisions->data() + offsets_[r]));
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

  CallCounter calls_;
  CallState st_;
  Workspace ws_;
  std::vector<size_t> offsets_;
  std::vector<uint8_t> ringCur_, ringRecv_, ringVotes_;  // ring scratch, kept across calls
};

// Central semantics: the elementwise majority of all ranks' votes.
class SignReference final : public Reference {
 public:
  // Bench flags reach the reference here (registry values until called).
  Status configure(const param::Overrides& config) override { return init(ranks_->size(), config); }
  Status init(int nranks, const param::Overrides& config) {
    GC_CHECK(readEf(config, &ef_));
    return CentralRanks::create(nranks, config, &ranks_);
  }
  Status expect(const std::vector<const void*>& inputs, const AllreduceArgs& args,
                std::vector<double>* expected, std::vector<double>* tolerance) override {
    GC_CHECK(checkArgs("sign reference", args, false));
    if (args.count == 0) {
      expected->clear();
      tolerance->clear();
      return Status::Ok();
    }
    std::vector<std::vector<float>> acc, contribution;
    std::vector<device::AbsStats> stats;
    bool fallback = false;
    uint64_t call = 0;
    const int P = ranks_->size();
    GC_CHECK(ranks_->begin(inputs, args, ef_, double(P), &acc, &stats, &fallback, &call));
    std::vector<float> out(args.count);
    if (fallback) {
      GC_CHECK(ranks_->fallback(acc, args, ef_, &out));
    } else {
      const float S = outputScale(stats, args.count, args.op);
      for (size_t i = 0; i < args.count; ++i) {
        int positive = 0;
        for (int r = 0; r < P; ++r) positive += acc[r][i] > 0.0f ? 1 : 0;
        out[i] = 2 * positive > P ? S : -S;
      }
      contribution.assign(P, std::vector<float>(args.count));
      for (int r = 0; r < P; ++r)
        GC_CHECK(ownContribution(device::cpuBackend(), acc[r].data(), args.count,
                                 ownScale(stats[r], args.count), contribution[r].data()));
      GC_CHECK(ranks_->end(args, ef_, acc, contribution));
    }
    fillExpected(out, 0.0, expected, tolerance);
    return Status::Ok();
  }

 private:
  bool ef_ = false;
  std::unique_ptr<CentralRanks> ranks_;
};

}  // namespace

Status makeSignReference(int nranks, const param::Overrides& config,
                         std::unique_ptr<Reference>* out) {
  auto ref = std::make_unique<SignReference>();
  GC_CHECK(ref->init(nranks, config));
  *out = std::move(ref);
  return Status::Ok();
}

GC_REGISTER_ALGORITHM(
    sign, {kName,
           "all-reducible signSGD: ring reduce-scatter of vote counts (growing bit widths), "
           "majority at the owner, 1-bit allgather; output +-mean|g|",
           {param::Id::SIGN_EF},
           [] { return std::unique_ptr<Algorithm>(new Sign()); },
           [](int nranks) {
             std::unique_ptr<Reference> ref;
             Status s = makeSignReference(nranks, param::Overrides{}, &ref);
             if (!s.ok()) GC_WARN("sign reference: %s", s.toString().c_str());
             return ref;
           }});

}  // namespace gradcomp::algo::quant
