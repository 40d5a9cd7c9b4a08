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
  sum.resize(std::max<size_t>(a.size() + b.size(), 1));
  size_t count = 0;
  GC_CHECK(dev.mergeAdd(a.idx.data(), a.val.data(), a.size(), b.idx.data(), b.val.data(),
                        b.size(), sum.idx.data(), sum.val.data(), sum.idx.size(), &count));
  GC_CHECK(dev.sync());
  sum.resize(count);
  return selectTopkCoo(dev, sum, k, out);
}

Status keepSurvivors(device::Backend& dev, const device::DeviceArray<uint64_t>& kept,
                     device::DeviceArray<uint64_t>* alive) {
  device::DeviceArray<uint64_t> both(dev, std::max<size_t>(std::min(kept.size(), alive->size()), 1));
  size_t count = 0;
  GC_CHECK(dev.intersect(alive->data(), alive->size(), kept.data(), kept.size(), both.data(),
                         both.size(), &count));
  GC_CHECK(dev.sync());
  both.resize(count);
  *alive = std::move(both);
  return Status::Ok();
}

namespace {

constexpr uint64_t kStepFold = 0x40000, kStepRounds = 0x40100, kStepResult = 0x40200,
                   kStepSurvivors = 0x40201;

// One wire message: send `mine` to sendTo (-1: none) and receive a vector of at
// most k entries from recvFrom (-1: none) into *theirs, both on tag `step`.
Status exchange(Context& ctx, uint64_t step, size_t n, size_t k, int sendTo, const Coo& mine,
                int recvFrom, Coo* theirs) {
  device::Backend& dev = ctx.dev;
  Bytes out(dev), in(dev, wireBound(n, k));
  if (sendTo >= 0) {
    GC_CHECK(encodeSparse(dev, SparsePiece{&mine, 0, mine.size(), 0, n}, &out));
    GC_CHECK(dev.sync());
  }
  size_t got = 0;
  RequestSet req(ctx.net);
  if (recvFrom >= 0)
    GC_CHECK(req.irecvUpTo(recvFrom, makeTag(ctx.callSeq, step), in.data(), in.size(), &got));
  if (sendTo >= 0) GC_CHECK(req.isend(sendTo, makeTag(ctx.callSeq, step), out.data(), out.size()));
  GC_CHECK(req.waitAll());
  if (recvFrom < 0) return Status::Ok();
  theirs->bind(dev);
  theirs->resize(k);
  size_t nnz = 0, used = 0;
  GC_CHECK(decodeSparse(dev, in.data(), got, 0, n, theirs->idx.data(), theirs->val.data(), k,
                        recvFrom, &nnz, &used));
  GC_REQUIRE(used == got, Err::RemoteError, "gtopk: rank %d's message has %zu bytes after its end",
             recvFrom, got - used);
  theirs->resize(nnz);
  return dev.sync();  // the decode reads `in`
}

// The extra rank learns which of its entries survived: a sorted index list
// that must be a subset of its own selection (checked on the device).
Status recvSurvivors(Context& ctx, int from, size_t k, const Coo& local,
                     device::DeviceArray<uint64_t>* alive) {
  device::HostArray<uint64_t> in(ctx.dev, k + 1);  // never a zero-size buffer
  size_t got = 0;
  RequestSet req(ctx.net);
  GC_CHECK(req.irecvUpTo(from, makeTag(ctx.callSeq, kStepSurvivors), in.data(),
                    in.size() * sizeof(uint64_t), &got));
  GC_CHECK(req.waitAll());
  GC_REQUIRE(got % sizeof(uint64_t) == 0 && got / sizeof(uint64_t) <= k, Err::RemoteError,
             "gtopk: rank %d sent a %zu-byte survivor list (expected a multiple of 8, at most "
             "%zu entries)", from, got, k);
  GC_CHECK(alive->bind(ctx.dev).assign(in.data(), got / sizeof(uint64_t)));
  GC_CHECK(ctx.dev.checkSubset(alive->data(), alive->size(), local.idx.data(), local.size(), from));
  return ctx.dev.sync();  // the copy reads `in`; the check's verdict
}

class GTopk final : public SparseAlgorithm {
  Status schedule(Context& ctx, const AllreduceArgs& args, const SparseParams&, size_t k,
                  float* acc, const FrameStats&, float* result) override {
    device::Backend& dev = ctx.dev;
    const int P = ctx.net.size(), me = ctx.net.rank(), P2 = treeSize(P);
    const size_t n = args.count;
    Coo local(dev), cur(dev);
    GC_CHECK(selectTopk(dev, acc, n, k, 0, &local));
    device::DeviceArray<uint64_t> alive(dev);
    GC_CHECK(alive.assign(local.idx));
    if (me >= P2) {  // extra rank: fold into me - P2, get the result back
      GC_CHECK(exchange(ctx, kStepFold, n, k, me - P2, local, -1, nullptr));
      GC_CHECK(exchange(ctx, kStepResult, n, k, -1, local, me - P2, &cur));
      GC_CHECK(recvSurvivors(ctx, me - P2, k, local, &alive));
    } else {
      const int extra = me + P2 < P ? me + P2 : -1;
      device::DeviceArray<uint64_t> extraAlive(dev);
      GC_CHECK(cur.assign(local));
      if (extra >= 0) {
        Coo theirs(dev), merged(dev);
        GC_CHECK(exchange(ctx, kStepFold, n, k, -1, cur, extra, &theirs));
        GC_CHECK(mergeTopk(dev, cur, theirs, k, &merged));
        GC_CHECK(extraAlive.assign(theirs.idx));
        GC_CHECK(keepSurvivors(dev, merged.idx, &extraAlive));
        GC_CHECK(keepSurvivors(dev, merged.idx, &alive));
        cur = std::move(merged);
      }
      int round = 0;
      for (int d = 1; d < P2; d *= 2, ++round) {
        Coo theirs(dev), merged(dev);
        GC_CHECK(exchange(ctx, kStepRounds + round, n, k, me ^ d, cur, me ^ d, &theirs));
        GC_CHECK(mergeTopk(dev, cur, theirs, k, &merged));
        GC_CHECK(keepSurvivors(dev, merged.idx, &alive));
        if (extra >= 0) GC_CHECK(keepSurvivors(dev, merged.idx, &extraAlive));
        cur = std::move(merged);
      }
      if (extra >= 0) {
        GC_CHECK(exchange(ctx, kStepResult, n, k, extra, cur, -1, nullptr));
        device::HostArray<uint64_t> list(dev, extraAlive.size());
        GC_CHECK(dev.copy(list.data(), extraAlive.data(), extraAlive.size() * sizeof(uint64_t)));
        GC_CHECK(dev.sync());
        RequestSet req(ctx.net);
        GC_CHECK(req.isend(extra, makeTag(ctx.callSeq, kStepSurvivors), list.data(),
                          list.size() * sizeof(uint64_t)));
        GC_CHECK(req.waitAll());
      }
    }
    GC_CHECK(dev.scatterZero(acc, n, 0, alive.data(), alive.size()));
    return dev.scatterAdd(result, n, 0, cur.idx.data(), cur.val.data(), cur.size());
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
    std::vector<device::DeviceArray<uint64_t>> alive;
    for (int r = 0; r < P; ++r) {
      GC_CHECK(selectTopk(cpu, frame().acc(r), n, k, 0, &local[r]));
      alive.emplace_back(cpu);
      GC_CHECK(alive[r].assign(local[r].idx));
    }
    // After each merge, rank r < P2 and its extra keep what survived.
    auto survive = [&](int r) -> Status {
      GC_CHECK(keepSurvivors(cpu, cur[r].idx, &alive[r]));
      if (r + P2 < P) GC_CHECK(keepSurvivors(cpu, cur[r].idx, &alive[r + P2]));
      return Status::Ok();
    };
    for (int r = 0; r < P2; ++r) {
      GC_CHECK(cur[r].assign(local[r]));
      if (r + P2 < P) {
        GC_CHECK(mergeTopk(cpu, local[r], local[r + P2], k, &cur[r]));
        GC_CHECK(survive(r));
      }
    }
    for (int d = 1; d < P2; d *= 2) {
      std::vector<Coo> next(P2);
      for (int r = 0; r < P2; ++r) GC_CHECK(mergeTopk(cpu, cur[r], cur[r ^ d], k, &next[r]));
      cur.swap(next);
      for (int r = 0; r < P2; ++r) GC_CHECK(survive(r));
    }
    for (int r = 0; r < P; ++r)
      GC_CHECK(cpu.scatterZero(frame().acc(r), n, 0, alive[r].data(), alive[r].size()));
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
