// DSA: sparse allreduce over DenseStream (SparCML's split-allgather with the
// DenseStream representation, seed 001; algorithms.md section 4). Every rank
// selects its exact top-k; regions come from the balanced split (Ok-Topk step
// 2, every TOPK_TAU calls); each region's owner sums what the others send it
// (the rotated, bucketed split_and_reduce of oktopk) and the reduced regions
// are allgathered (recursive doubling for power-of-two P, ring otherwise).
// There is no global truncation: the result is the exact sum of every rank's
// selection (up to min(n, P k) non-zeros). Each message takes its smallest
// format, so regions filled in by the sum travel as DenseStream or dense.
// Everything selected is contributed, so the residual is acc minus the
// selection. Volume between 4k(P-1)/P and (2k + n)(P-1)/P words.
//
// Decision: the reduce-scatter is the direct (split) exchange rather than
// recursive halving, so that any P works without folding ranks.
#include <map>

#include "algorithms/sparse/collectives.h"
#include "algorithms/sparse/oktopk.h"
#include "algorithms/sparse/reference_frame.h"

namespace gradcomp::algo::sparse {
namespace {

constexpr uint64_t kStepBounds = 0x30000;

struct DsaKey {
  size_t count = 0;
  uint64_t calls = 0;
  std::vector<uint64_t> bounds;
};

class Dsa final : public SparseAlgorithm {
  Status schedule(Context& ctx, const AllreduceArgs& args, const SparseParams& params, size_t k,
                  float* acc, const FrameStats&, float* result) override {
    const int P = ctx.net.size();
    const size_t n = args.count;
    DsaKey& st = keys_[scheduleKey(args)];
    if (st.count != n) st = DsaKey{n, 0, {}};
    const bool repartition = st.calls++ % uint64_t(params.tau) == 0;

    // Everything selected is contributed: the selection zeroes it in acc.
    Coo local(ctx.dev);
    GC_CHECK(selectTopk(ctx.dev, acc, n, k, 0, &local, nullptr, /*zeroSelected=*/true));
    if (repartition || st.bounds.size() != size_t(P) + 1) {
      // Summed, not gathered (as oktopk): ~2 (P - 1) words per rank.
      std::vector<uint64_t> sums;
      GC_CHECK(oktopk::proposeBoundaries(ctx.dev, local, n, P, &sums));
      GC_CHECK(allreduceSumWords(ctx, kStepBounds, &sums));
      st.bounds = oktopk::boundariesFromSums(sums, n, P);
    }
    device::DeviceArray<float>& region = region_;  // kept across calls (no page faults)
    GC_CHECK(oktopk::splitAndReduce(ctx, local, st.bounds, k, &region));
    Coo sum(ctx.dev);
    GC_CHECK(oktopk::gatherRegions(ctx, region, st.bounds, k, &sum));
    return ctx.dev.scatterAdd(result, n, 0, sum.idx.data(), sum.val.data(), sum.size());
  }

  std::map<uint64_t, DsaKey> keys_;
  device::DeviceArray<float> region_;
};

class DsaReference final : public SparseReference {
 public:
  using SparseReference::SparseReference;

 private:
  Status schedule(const AllreduceArgs& args, size_t k, std::vector<float>& reduced) override {
    device::Backend& cpu = device::cpuBackend();
    const int P = frame().nranks();
    const size_t n = args.count;
    DsaKey& st = keys_[scheduleKey(args)];
    if (st.count != n) st = DsaKey{n, 0, {}};
    const bool repartition = st.calls++ % uint64_t(frame().params().tau) == 0;
    std::vector<Coo> local;
    std::vector<uint64_t> proposals;
    for (int r = 0; r < P; ++r) {
      local.emplace_back(cpu);
      GC_CHECK(selectTopk(cpu, frame().acc(r), n, k, 0, &local[r]));
      std::vector<uint64_t> b;
      GC_CHECK(oktopk::proposeBoundaries(cpu, local[r], n, P, &b));
      proposals.insert(proposals.end(), b.begin(), b.end());
    }
    if (repartition || st.bounds.size() != size_t(P) + 1)
      st.bounds = oktopk::combineBoundaries(proposals, n, P);
    std::vector<std::vector<size_t>> starts(P);
    for (int r = 0; r < P; ++r) GC_CHECK(rangesOf(cpu, local[r], st.bounds, &starts[r]));
    for (int j = 0; j < P; ++j)
      for (int s = 0; s < P; ++s) {  // the schedule's order: j, j-1, ..., j+1
        const int r = (j - s + P) % P;
        const Coo& src = local[r];
        GC_CHECK(cpu.scatterAdd(reduced.data(), n, 0, src.idx.data() + starts[r][j],
                                src.val.data() + starts[r][j], starts[r][j + 1] - starts[r][j]));
      }
    // What travels is the non-zeros (|v| > 0): -0.0 sums come back as +0.0.
    for (float& v : reduced)
      if (v == 0.0f) v = 0.0f;
    for (int r = 0; r < P; ++r)
      GC_CHECK(cpu.scatterZero(frame().acc(r), n, 0, local[r].idx.data(), local[r].size()));
    return Status::Ok();
  }

  std::map<uint64_t, DsaKey> keys_;
};

}  // namespace

GC_REGISTER_ALGORITHM(dsa, {
    "dsa",
    "DSA: exact top-k per rank, balanced split-and-reduce, allgather of the reduced regions "
    "(COO/DenseStream/dense per message); exact sum of the selections; error feedback",
    {param::Id::DENSITY, param::Id::TOPK_TAU, param::Id::WARMUP_CALLS, param::Id::EF},
    [] { return std::unique_ptr<Algorithm>(new Dsa()); },
    [](int nranks) { return std::unique_ptr<Reference>(new DsaReference(nranks)); },
});

}  // namespace gradcomp::algo::sparse
