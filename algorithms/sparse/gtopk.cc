// gTop-k: tree merge logic, the distributed schedule, its central reference
// and registration (see gtopk.h). Tag steps: fold 0x40000, rounds
// [0x40100, 0x40140), result 0x40200, survivors 0x40201.
#include "algorithms/sparse/gtopk.h"

#include <algorithm>
#include <iterator>

#include "algorithms/sparse/collectives.h"
#include "algorithms/sparse/reference_frame.h"
#include "algorithms/sparse/wire_format.h"

namespace gradcomp::algo::sparse::gtopk {

using transport::makeTag;

int treeSize(int P) {
  int p2 = 1;
  while (p2 * 2 <= P) p2 *= 2;
  return p2;
}

Status mergeTopk(device::Backend& dev, const Coo& a, const Coo& b, size_t k, Coo* out) {
  Coo sum(dev);
  sum.idx.reserve(a.size() + b.size());
  sum.val.reserve(a.size() + b.size());
  size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    if (j == b.size() || (i < a.size() && a.idx[i] < b.idx[j])) {
      sum.idx.push_back(a.idx[i]), sum.val.push_back(a.val[i++]);
    } else if (i == a.size() || b.idx[j] < a.idx[i]) {
      sum.idx.push_back(b.idx[j]), sum.val.push_back(b.val[j++]);
    } else {
      sum.idx.push_back(a.idx[i]), sum.val.push_back(a.val[i++] + b.val[j++]);
    }
  }
  return selectTopkCoo(dev, sum, k, out);
}

void keepSurvivors(const device::Buffer<uint64_t>& kept, device::Buffer<uint64_t>* alive) {
  device::Buffer<uint64_t> both(alive->get_allocator());
  both.reserve(std::min(kept.size(), alive->size()));
  std::set_intersection(alive->begin(), alive->end(), kept.begin(), kept.end(),
                        std::back_inserter(both));
  alive->swap(both);
}

namespace {

constexpr uint64_t kStepFold = 0x40000, kStepRounds = 0x40100, kStepResult = 0x40200,
                   kStepSurvivors = 0x40201;

// One wire message: send `mine` to sendTo (-1: none) and receive a vector of at
// most k entries from recvFrom (-1: none) into *theirs, both on tag `step`.
Status exchange(Context& ctx, uint64_t step, size_t n, size_t k, int sendTo, const Coo& mine,
                int recvFrom, Coo* theirs) {
  Bytes out = device::makeBuffer<uint8_t>(ctx.dev);
  Bytes in = device::makeBuffer<uint8_t>(ctx.dev, wireBound(n, k));
  if (sendTo >= 0)
    GC_CHECK(encodeSparse(ctx.dev, mine.idx.data(), mine.val.data(), mine.size(), 0, n, &out));
  size_t got = 0;
  RequestSet req(ctx.net);
  if (recvFrom >= 0)
    GC_CHECK(req.recv(recvFrom, makeTag(ctx.callSeq, step), in.data(), in.size(), &got));
  if (sendTo >= 0) GC_CHECK(req.send(sendTo, makeTag(ctx.callSeq, step), out.data(), out.size()));
  GC_CHECK(req.waitAll());
  if (recvFrom < 0) return Status::Ok();
  theirs->bind(ctx.dev);
  theirs->idx.resize(k);
  theirs->val.resize(k);
  size_t nnz = 0, used = 0;
  GC_CHECK(decodeSparse(ctx.dev, in.data(), got, 0, n, theirs->idx.data(), theirs->val.data(), k,
                        &nnz, &used));
  GC_REQUIRE(used == got, Err::RemoteError, "gtopk: rank %d's message has %zu bytes after its end",
             recvFrom, got - used);
  theirs->idx.resize(nnz);
  theirs->val.resize(nnz);
  return Status::Ok();
}

// The extra rank learns which of its entries survived: a sorted index list
// that must be a subset of its own selection.
Status recvSurvivors(Context& ctx, int from, size_t k, const Coo& local,
                     device::Buffer<uint64_t>* alive) {
  alive->assign(k + 1, 0);  // never a zero-size buffer
  size_t got = 0;
  RequestSet req(ctx.net);
  GC_CHECK(req.recv(from, makeTag(ctx.callSeq, kStepSurvivors), alive->data(),
                    alive->size() * sizeof(uint64_t), &got));
  GC_CHECK(req.waitAll());
  GC_REQUIRE(got % sizeof(uint64_t) == 0 && got / sizeof(uint64_t) <= k, Err::RemoteError,
             "gtopk: rank %d sent a %zu-byte survivor list (expected a multiple of 8, at most "
             "%zu entries)", from, got, k);
  alive->resize(got / sizeof(uint64_t));
  GC_REQUIRE(std::adjacent_find(alive->begin(), alive->end(), std::greater_equal<uint64_t>()) ==
                     alive->end() &&
                 std::includes(local.idx.begin(), local.idx.end(), alive->begin(), alive->end()),
             Err::RemoteError,
             "gtopk: rank %d's survivor list is not an increasing subset of this rank's "
             "selection", from);
  return Status::Ok();
}

class GTopk final : public SparseAlgorithm {
  Status schedule(Context& ctx, const AllreduceArgs& args, const SparseParams&, size_t k,
                  device::Buffer<float>& acc, float* result) override {
    const int P = ctx.net.size(), me = ctx.net.rank(), P2 = treeSize(P);
    const size_t n = args.count;

    Coo local(ctx.dev), cur(ctx.dev);
    GC_CHECK(selectTopk(ctx.dev, acc.data(), n, k, 0, &local));
    device::Buffer<uint64_t> alive = local.idx;  // copies take the allocator: ctx.dev
    if (me >= P2) {  // extra rank: fold into me - P2, get the result back
      GC_CHECK(exchange(ctx, kStepFold, n, k, me - P2, local, -1, nullptr));
      GC_CHECK(exchange(ctx, kStepResult, n, k, -1, local, me - P2, &cur));
      GC_CHECK(recvSurvivors(ctx, me - P2, k, local, &alive));
    } else {
      const int extra = me + P2 < P ? me + P2 : -1;
      auto extraAlive = device::makeBuffer<uint64_t>(ctx.dev);
      cur = local;
      if (extra >= 0) {
        Coo theirs(ctx.dev), merged(ctx.dev);
        GC_CHECK(exchange(ctx, kStepFold, n, k, -1, cur, extra, &theirs));
        GC_CHECK(mergeTopk(ctx.dev, cur, theirs, k, &merged));
        extraAlive = theirs.idx;
        keepSurvivors(merged.idx, &extraAlive);
        keepSurvivors(merged.idx, &alive);
        cur = std::move(merged);
      }
      int round = 0;
      for (int d = 1; d < P2; d *= 2, ++round) {
        Coo theirs(ctx.dev), merged(ctx.dev);
        GC_CHECK(exchange(ctx, kStepRounds + round, n, k, me ^ d, cur, me ^ d, &theirs));
        GC_CHECK(mergeTopk(ctx.dev, cur, theirs, k, &merged));
        keepSurvivors(merged.idx, &alive);
        if (extra >= 0) keepSurvivors(merged.idx, &extraAlive);
        cur = std::move(merged);
      }
      if (extra >= 0) {
        GC_CHECK(exchange(ctx, kStepResult, n, k, extra, cur, -1, nullptr));
        RequestSet req(ctx.net);
        GC_CHECK(req.send(extra, makeTag(ctx.callSeq, kStepSurvivors), extraAlive.data(),
                          extraAlive.size() * sizeof(uint64_t)));
        GC_CHECK(req.waitAll());
      }
    }
    GC_CHECK(ctx.dev.scatterZero(acc.data(), n, 0, alive.data(), alive.size()));
    return ctx.dev.scatterAdd(result, n, 0, cur.idx.data(), cur.val.data(), cur.size());
  }
};

// The same tree computed centrally: cur[r] is the vector rank r < P2 holds,
// alive[r] rank r's surviving entries.
class GTopkReference final : public SparseReference {
 public:
  using SparseReference::SparseReference;

 private:
  Status schedule(const AllreduceArgs& args, size_t k, std::vector<float>& sum) override {
    device::Backend& cpu = device::cpuBackend();
    const int P = frame().nranks(), P2 = treeSize(P);
    const size_t n = args.count;
    std::vector<Coo> local(P), cur(P2);
    std::vector<device::Buffer<uint64_t>> alive(P);
    for (int r = 0; r < P; ++r) {
      GC_CHECK(selectTopk(cpu, frame().acc(r).data(), n, k, 0, &local[r]));
      alive[r] = local[r].idx;
    }
    // After each merge, rank r < P2 and its extra keep what survived.
    auto survive = [&](int r) {
      keepSurvivors(cur[r].idx, &alive[r]);
      if (r + P2 < P) keepSurvivors(cur[r].idx, &alive[r + P2]);
    };
    for (int r = 0; r < P2; ++r) {
      cur[r] = local[r];
      if (r + P2 < P) {
        GC_CHECK(mergeTopk(cpu, local[r], local[r + P2], k, &cur[r]));
        survive(r);
      }
    }
    for (int d = 1; d < P2; d *= 2) {
      std::vector<Coo> next(P2);
      for (int r = 0; r < P2; ++r) GC_CHECK(mergeTopk(cpu, cur[r], cur[r ^ d], k, &next[r]));
      cur.swap(next);
      for (int r = 0; r < P2; ++r) survive(r);
    }
    for (int r = 0; r < P; ++r)
      GC_CHECK(cpu.scatterZero(frame().acc(r).data(), n, 0, alive[r].data(), alive[r].size()));
    return cpu.scatterAdd(sum.data(), n, 0, cur[0].idx.data(), cur[0].val.data(), cur[0].size());
  }
};

}  // namespace

GC_REGISTER_ALGORITHM(gtopk, {
    "gtopk",
    "gTop-k: recursive-doubling tree merge of every rank's exact top-k, re-selecting the top-k "
    "of each pairwise sum (O(k) words per round); error feedback on the surviving entries",
    {param::Id::DENSITY, param::Id::WARMUP_CALLS, param::Id::EF},
    [] { return std::unique_ptr<Algorithm>(new GTopk()); },
    [](int nranks) { return std::unique_ptr<Reference>(new GTopkReference(nranks)); },
});

}  // namespace gradcomp::algo::sparse::gtopk
