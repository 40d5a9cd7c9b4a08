// cltk: a shared-index sparse allreduce at the volume bound (cyclic local
// top-k, after ScaleCom, Chen et al., NeurIPS 2020). With one leader
// (GRADCOMP_CLTK_LEADERS=1; the default, every rank leading, is below) each
// call one rank leads, in turn by the tensor's call count (leaderOf): it
// selects its exact top-k indices and broadcasts them along a binomial tree;
// every rank gathers its accumulator's values at those indices and the k
// values are summed by a dense ring reduce-scatter + allgather. Every rank
// then holds the exact sum of all accumulators on the leader's index set, and
// contributes those entries in full (error feedback keeps everything else).
//
// Leaders per call (GRADCOMP_CLTK_LEADERS = L, 0 = P): with L > 1 the L ranks
// leaderOf(c), +1, ... (mod P) each select their top floor(k/L) and the
// index sets are allgathered (the other ranks send a header alone); the
// shared set is their union (sorted, at most k), and the rest is as above.
// With one leader, what is large on another rank waits in its residual until
// that rank leads (up to P calls): gradcomp-train at 4 ranks, 2 epochs, 15
// seeds, every rank leading (the default, L = 0) gained 1.25 (MLP) and 1.07
// (CNN) points of test accuracy over one leader, and trained like dense
// (epoch-2 loss 0.342 / 0.352, dense 0.341 / 0.356, one leader 0.374 /
// 0.392; docs/results/accuracy.md, session 7).
//
// Volume per rank: 2k(P-1)/P fp32 values in the ring (the sparse allreduce
// lower bound of the Ok-Topk paper, flat in P) plus the index set, which the
// leader's broadcast tree delivers once to every rank: k offsets of 4 bytes
// (8 past 2^32 elements) or a bitmap of n bits, whichever is smaller (the
// bitmap wins above a density of 1/32). With L leaders the allgather sends
// at most P - 1 index blocks a rank, at most k offsets in all (each block in
// the smaller coding of its floor(k/L)), and the ring carries the union,
// at most k values. Ok-Topk sends up to 6k(P-1)/P; TopkA 2k(P-1).
//
// Index message (host memory, little-endian): u8 coding (4 or 8 = offset
// width, 0 = bitmap), 7 zero bytes, u64 count, then the body of
// Backend::indexEncode. A receiver checks every field against its own n and k.
//
// The ring is dense::ringAllreduce on the k-vector (never recursive
// doubling), so the reference reproduces its order of additions: chunk c of
// the k-vector is summed as x_{c-1} + (... + (x_{c+1} + x_c)) (ranks mod P).
// Tag steps: the broadcast (or the leaders' allgather) 0x60000, the ring 0..8P.
//
// Reduce-scatter form (docs/design.md, "Sparse reduce-scatter"): the same
// shared set S (m <= k indexes, the same leaders in turn, counted per
// scheduleKey, which tells a reduce-scatter from an allreduce by shape), and
// each rank sends owner j only its values at S's indexes inside j's range
// (NCCL's layout), no indexes (shared_reduce_scatter.h). Rank j returns, at
// S's indexes in its range, the sum of every rank's accumulator there; every
// rank contributes S in full, the rest of its accumulator (its own chunk's
// too) stays in its residual. Volume per rank: the index phase above, plus
// 4 (m - m_me) bytes of values (m_me: S's indexes in its own range), at most
// 4k bytes: k words, never more than the allreduce's ring 2k(P-1)/P
// (P >= 2), and k(P-1)/P words, half of it, when S is spread evenly.
#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "algorithms/dense/dense.h"
#include "algorithms/sparse/collectives.h"
#include "algorithms/sparse/reference_frame.h"
#include "algorithms/sparse/shared_reduce_scatter.h"
#include "algorithms/sparse/sparse_common.h"
#include "algorithms/sparse/wire_format.h"

namespace gradcomp::algo::sparse {
namespace {

constexpr uint64_t kStepIndexes = 0x60000;
constexpr size_t kIndexHeaderBytes = 16;

// The smaller coding of `count` indexes over n elements.
int indexCoding(size_t count, uint64_t n) {
  const int offsets = indexBytesFor(n);
  const size_t bitmap = device::Backend::indexSetBytes(count, n, device::Backend::kIndexBitmap);
  return bitmap < device::Backend::indexSetBytes(count, n, offsets) ? device::Backend::kIndexBitmap
                                                                      : offsets;
}

size_t indexMessageBound(uint64_t n, size_t k) {
  return kIndexHeaderBytes + device::Backend::indexSetBytes(k, n, indexCoding(k, n));
}

// The leader's message: header written here, body by the backend (synced
// before the broadcast sends it).
Status encodeIndexes(device::Backend& dev, const Coo& sel, uint64_t n,
                     device::HostArray<uint8_t>* msg) {
  const size_t m = sel.size();
  const int coding = indexCoding(m, n);
  msg->resize(kIndexHeaderBytes + device::Backend::indexSetBytes(m, n, coding));
  uint8_t* h = msg->data();
  std::memset(h, 0, kIndexHeaderBytes);
  h[0] = uint8_t(coding);
  for (int b = 0; b < 8; ++b) h[8 + b] = uint8_t(uint64_t(m) >> (8 * b));
  if (m == 0) return Status::Ok();  // a header alone (a rank that does not lead)
  return dev.indexEncode(sel.idx.data(), m, 0, n, coding, h + kIndexHeaderBytes);
}

// A receiver's side: every header field checked against this rank's n and k.
Status decodeIndexes(device::Backend& dev, const device::HostArray<uint8_t>& msg, uint64_t n,
                     size_t k, int leader, Coo* sel) {
  GC_REQUIRE(msg.size() >= kIndexHeaderBytes, Err::RemoteError,
             "cltk: the leader's (rank %d) index message has %zu bytes, less than its header",
             leader, msg.size());
  const uint8_t* h = msg.data();
  uint64_t m = 0;
  for (int b = 0; b < 8; ++b) m |= uint64_t(h[8 + b]) << (8 * b);
  bool reservedZero = true;
  for (int b = 1; b < 8; ++b) reservedZero = reservedZero && h[b] == 0;
  const int coding = h[0];
  GC_REQUIRE(reservedZero && (coding == device::Backend::kIndexBitmap || coding == indexBytesFor(n)),
             Err::RemoteError, "cltk: the leader's (rank %d) index message has coding %d "
             "(accepted: 0 = bitmap, %d) or non-zero reserved bytes", leader, coding,
             indexBytesFor(n));
  GC_REQUIRE(m <= k, Err::RemoteError,
             "cltk: the leader's (rank %d) index message announces %llu indexes, more than k = %zu",
             leader, (unsigned long long)m, k);
  const size_t body = device::Backend::indexSetBytes(size_t(m), n, coding);
  GC_REQUIRE(msg.size() == kIndexHeaderBytes + body, Err::RemoteError,
             "cltk: the leader's (rank %d) index message has %zu bytes, its header implies %zu",
             leader, msg.size(), kIndexHeaderBytes + body);
  sel->idx.resize(size_t(m));  // values are gathered from this rank's accumulator
  if (m == 0) return Status::Ok();
  return dev.indexDecode(h + kIndexHeaderBytes, size_t(m), 0, n, coding, sel->idx.data(), leader);
}

struct KeyCalls {
  size_t count = 0;
  uint64_t calls = 0;
};

// The leader of call c of `key` (scheduleKey: counted alike on every rank):
// (c + floor(c / P^2)) mod P, i.e. ranks 0..P-1 in turn, shifted by one every
// P^2 calls. In turn, so a tensor with a key of its own meets each rank every
// P calls and no residual waits longer (a rotation shifted every P calls, or a
// hashed leader, left residuals waiting up to 2P calls: 5-seed accuracy fell
// by 1.2 points, docs/results/sparse.md). The shift matters when m tensors
// share a key (the interposer keys by shape) and gcd(m, P) > 1: a tensor then
// sees only some leaders within P^2 calls, and the shift walks it through all.
int leaderOf(std::map<uint64_t, KeyCalls>* keys, uint64_t key, size_t n, int P) {
  KeyCalls& kc = (*keys)[key];
  if (kc.count != n) kc = KeyCalls{n, 0};
  const uint64_t c = kc.calls++, p = uint64_t(P);
  return int((c + c / (p * p)) % p);
}

// GRADCOMP_CLTK_LEADERS -> the number of leaders L of a call (1..min(P, k))
// and each one's share floor(k / L): the union of the shares has at most k
// indexes, so the values ring never carries more than with one leader.
size_t leadersOf(int64_t param, int P, size_t k) {
  size_t L = param <= 0 ? size_t(P) : size_t(param);
  return std::max<size_t>(1, std::min({L, size_t(P), k}));
}

// Is `r` one of the L leaders lead, lead + 1, ... (mod P)?
bool leads(int r, int lead, size_t L, int P) { return size_t((r - lead + P) % P) < L; }

class Cltk final : public SparseAlgorithm {
  Status schedule(Context& ctx, const AllreduceArgs& args, const SparseParams& params, size_t k,
                  float* acc, const FrameStats&, float* result) override {
    device::Backend& dev = ctx.dev;
    const size_t n = args.count;
    Coo sel(dev);
    GC_CHECK(sharedIndexes(ctx, args, params, k, acc, &sel));
    const size_t m = sel.size();
    if (m == 0) return dev.sync();  // the leader's accumulator is all zero: nothing to send

    // Everyone's values there, summed by the ring, contributed in full.
    device::DeviceArray<float>& vals = vals_.bind(dev);
    vals.resize(m);
    GC_CHECK(dev.gatherValues(vals.data(), acc, n, sel.idx.data(), m));
    GC_CHECK(dev.scatterZero(acc, n, 0, sel.idx.data(), m));
    if (ctx.net.size() > 1)
      GC_CHECK(dense::ringAllreduce(ctx, vals.data(), m, DataType::Float32, &stage_));
    GC_CHECK(dev.scatterAdd(result, n, 0, sel.idx.data(), vals.data(), m));
    return dev.sync();  // the decode read `msg`; its errors surface here
  }

  // The reduce-scatter form: the same shared set; each owner gets only the
  // values inside its range (shared_reduce_scatter.h). Contributed in full.
  Status scheduleReduceScatter(Context& ctx, const AllreduceArgs& args,
                               const SparseParams& params, size_t k, float* acc,
                               const FrameStats&, float* result) override {
    device::Backend& dev = ctx.dev;
    const size_t n = args.count;
    Coo sel(dev);
    GC_CHECK(sharedIndexes(ctx, args, params, k, acc, &sel));
    const size_t m = sel.size();
    if (m == 0) return dev.sync();
    device::DeviceArray<float>& vals = vals_.bind(dev);
    vals.resize(m);
    GC_CHECK(dev.gatherValues(vals.data(), acc, n, sel.idx.data(), m));
    GC_CHECK(dev.scatterZero(acc, n, 0, sel.idx.data(), m));
    return reduceScatterSharedValues(ctx, sel, vals.data(), n, result, &shared_);
  }

  // The call's shared index set (sorted, at most k, identical on every
  // rank): the leader's top-k broadcast (L = 1) or the leaders' union.
  Status sharedIndexes(Context& ctx, const AllreduceArgs& args, const SparseParams& params,
                       size_t k, float* acc, Coo* sel) {
    device::Backend& dev = ctx.dev;
    const int P = ctx.net.size(), me = ctx.net.rank();
    const size_t n = args.count;
    const int leader = leaderOf(&keys_, scheduleKey(args), n, P);
    const size_t L = leadersOf(params.cltkLeaders, P, k);
    if (L > 1) return unionOfLeaders(ctx, acc, n, k / L, leader, L, sel);
    // The shared index set: the leader's top-k, broadcast without values.
    device::HostArray<uint8_t>& msg = msg_.bind(dev);
    msg.clear();
    if (me == leader) {
      GC_CHECK(selectTopk(dev, acc, n, k, 0, sel));
      GC_CHECK(encodeIndexes(dev, *sel, n, &msg));
    }
    GC_CHECK(broadcastBlock(ctx, kStepIndexes, leader, indexMessageBound(n, k), &msg));
    if (me != leader) GC_CHECK(decodeIndexes(dev, msg, n, k, leader, sel));
    return Status::Ok();
  }

  // L > 1: each leader's top-`share` indexes (a header alone from the other
  // ranks) allgathered, decoded and merged in rank order into *sel, sorted.
  Status unionOfLeaders(Context& ctx, float* acc, size_t n, size_t share, int leader, size_t L,
                        Coo* sel) {
    device::Backend& dev = ctx.dev;
    const int P = ctx.net.size(), me = ctx.net.rank();
    std::vector<Bytes> blocks = bytesOn(dev, P);
    std::vector<size_t> caps(P, kIndexHeaderBytes);
    for (int r = 0; r < P; ++r)
      if (leads(r, leader, L, P)) caps[r] = indexMessageBound(n, share);
    {
      Coo mine(dev);
      if (leads(me, leader, L, P)) GC_CHECK(selectTopk(dev, acc, n, share, 0, &mine));
      GC_CHECK(encodeIndexes(dev, mine, n, &blocks[me]));
      GC_CHECK(allgatherBlocks(ctx, kStepIndexes, caps, &blocks));
    }
    device::DeviceArray<float>& zeros = zeros_.bind(dev);  // mergeAdd's values, unused
    if (zeros.size() < share * L) {
      zeros.resize(share * L);
      GC_CHECK(dev.zero(zeros.data(), zeros.size() * sizeof(float)));
    }
    Coo part(dev), merged(dev);
    sel->bind(dev);
    sel->clear();
    for (int r = 0; r < P; ++r) {
      const bool lead = leads(r, leader, L, P);
      GC_CHECK(decodeIndexes(dev, blocks[r], n, lead ? share : 0, r, &part));  // 0: a header
      if (part.size() == 0) continue;
      if (sel->size() == 0) {
        GC_CHECK(sel->idx.assign(part.idx));
        continue;
      }
      merged.resize(sel->size() + part.size());
      size_t count = 0;
      GC_CHECK(dev.mergeAdd(sel->idx.data(), zeros.data(), sel->size(), part.idx.data(),
                            zeros.data(), part.size(), merged.idx.data(), merged.val.data(),
                            merged.size(), &count));
      GC_CHECK(dev.sync());  // count
      merged.idx.resize(count);
      std::swap(sel->idx, merged.idx);
    }
    return dev.sync();  // the decodes read `blocks`
  }

  std::map<uint64_t, KeyCalls> keys_;
  device::DeviceArray<float> vals_, zeros_;
  device::HostArray<uint8_t> msg_;  // the leader's index message (kept: decodes read it)
  dense::Staging stage_;
  SharedExchangeStage shared_;
};

// reduceScatter: the reduce-scatter form's reference (the owners' sums over
// the whole tensor, shared_reduce_scatter.h), else the allreduce's ring.
class CltkReference final : public SparseReference {
 public:
  CltkReference(int nranks, bool reduceScatter)
      : SparseReference(nranks), reduceScatter_(reduceScatter) {}

 private:
  Status schedule(const AllreduceArgs& args, size_t k, std::vector<float>& sum) override {
    device::Backend& cpu = device::cpuBackend();
    const int P = frame().nranks();
    const size_t n = args.count;
    const int leader = leaderOf(&keys_, scheduleKey(args), n, P);
    const size_t L = leadersOf(frame().params().cltkLeaders, P, k);
    std::set<uint64_t> chosen;  // the union of the leaders' top-(k / L) (L = 1: top-k)
    for (size_t j = 0; j < L; ++j) {
      Coo part;
      GC_CHECK(selectTopk(cpu, frame().acc(int((size_t(leader) + j) % size_t(P))), n,
                          k / L, 0, &part));
      const uint64_t* pi = part.idx.hostView();
      chosen.insert(pi, pi + part.size());
    }
    const std::vector<uint64_t> sorted(chosen.begin(), chosen.end());
    const size_t m = sorted.size();
    const uint64_t* idx = sorted.data();
    if (reduceScatter_) {
      std::vector<const float*> accs;
      for (int r = 0; r < P; ++r) accs.push_back(frame().acc(r));
      referenceSharedSums(accs, n, idx, m, &sum);
      for (int r = 0; r < P; ++r) GC_CHECK(cpu.scatterZero(frame().acc(r), n, 0, idx, m));
      return Status::Ok();
    }
    std::vector<float> vals(m);
    for (size_t c = 0; c < size_t(P); ++c) {  // the ring's order per chunk of the k-vector
      const dense::Chunk ch = dense::chunkOf(m, P, int(c));
      for (size_t j = ch.begin; j < ch.begin + ch.size; ++j) {
        float s = frame().acc(int(c))[idx[j]];
        for (int t = 1; t < P; ++t) s = frame().acc(int((c + size_t(t)) % size_t(P)))[idx[j]] + s;
        vals[j] = s;
      }
    }
    for (int r = 0; r < P; ++r) GC_CHECK(cpu.scatterZero(frame().acc(r), n, 0, idx, m));
    return cpu.scatterAdd(sum.data(), n, 0, idx, vals.data(), m);
  }

  bool reduceScatter_;
  std::map<uint64_t, KeyCalls> keys_;
};

}  // namespace

GC_REGISTER_ALGORITHM(cltk, {
    "cltk",
    "shared-index top-k: a rotating leader's top-k indices broadcast, every rank's values there "
    "summed by a dense ring (2k(P-1)/P values per rank, the sparse volume bound); error feedback; "
    "reduce-scatter: each owner gets the values at the shared indexes in its range (<= k)",
    {param::Id::DENSITY, param::Id::WARMUP_CALLS, param::Id::EF, param::Id::CLTK_LEADERS},
    [] { return std::unique_ptr<Algorithm>(new Cltk()); },
    [](int nranks) { return std::unique_ptr<Reference>(new CltkReference(nranks, false)); },
    false,
    [](int nranks) { return std::unique_ptr<Reference>(new CltkReference(nranks, true)); },
});

}  // namespace gradcomp::algo::sparse
