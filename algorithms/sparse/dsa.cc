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

class Dsa final : public Algorithm {
 public:
  Status allreduce(Context& ctx, const AllreduceArgs& args) override {
    SparseParams params;
    GC_CHECK(params.read(ctx.config));
    bool compress = false;
    GC_CHECK(frame_.begin(ctx, args, params.warmupCalls, &compress));
    if (!compress) return Status::Ok();
    const int P = ctx.net.size();
    const size_t n = args.count, k = topkCount(params.density, n);
    DsaKey& st = keys_[tensorKey(args)];
    if (st.count != n) st = DsaKey{n};
    const bool repartition = st.calls++ % uint64_t(params.tau) == 0;
    std::vector<float>& acc = frame_.acc();

    Coo local;
    GC_CHECK(selectTopk(ctx.dev, acc.data(), n, k, 0, &local));
    if (repartition || st.bounds.size() != size_t(P) + 1) {
      std::vector<uint64_t> all;
      GC_CHECK(allgatherWords(ctx, kStepBounds, oktopk::proposeBoundaries(local, n, P), &all));
      st.bounds = oktopk::combineBoundaries(all, n, P);
    }
    std::vector<float> region;
    GC_CHECK(oktopk::splitAndReduce(ctx, local, st.bounds, k, &region));
    Coo sum;
    GC_CHECK(oktopk::gatherRegions(ctx, region, st.bounds, k, &sum));
    GC_CHECK(ctx.dev.scatterZero(acc.data(), n, 0, local.idx.data(), local.size()));
    result_.assign(n, 0.0f);
    GC_CHECK(ctx.dev.scatterAdd(result_.data(), n, 0, sum.idx.data(), sum.val.data(), sum.size()));
    return frame_.finish(ctx, args, result_.data());
  }

 private:
  SparseFrame frame_;
  std::map<uint64_t, DsaKey> keys_;
  std::vector<float> result_;
};

class DsaReference final : public Reference {
 public:
  explicit DsaReference(int nranks) : frame_(nranks) {}
  Status configure(const param::Overrides& config) override { return frame_.configure(config); }
  Status expect(const std::vector<const void*>& inputs, const AllreduceArgs& args,
                std::vector<double>* expected, std::vector<double>* tolerance) override {
    bool compress = false;
    GC_CHECK(frame_.begin(inputs, args, &compress, expected, tolerance));
    if (!compress) return Status::Ok();
    device::Backend& cpu = device::cpuBackend();
    const int P = frame_.nranks();
    const size_t n = args.count, k = topkCount(frame_.params().density, n);
    DsaKey& st = keys_[tensorKey(args)];
    if (st.count != n) st = DsaKey{n};
    const bool repartition = st.calls++ % uint64_t(frame_.params().tau) == 0;
    std::vector<Coo> local(P);
    std::vector<uint64_t> proposals;
    for (int r = 0; r < P; ++r) {
      GC_CHECK(selectTopk(cpu, frame_.acc(r).data(), n, k, 0, &local[r]));
      const auto b = oktopk::proposeBoundaries(local[r], n, P);
      proposals.insert(proposals.end(), b.begin(), b.end());
    }
    if (repartition || st.bounds.size() != size_t(P) + 1)
      st.bounds = oktopk::combineBoundaries(proposals, n, P);
    std::vector<float> reduced(n, 0.0f);
    for (int j = 0; j < P; ++j)
      for (int s = 0; s < P; ++s) {  // the schedule's order: j, j-1, ..., j+1
        const Coo& src = local[(j - s + P) % P];
        size_t first = 0, last = 0;
        oktopk::rangeOf(src, st.bounds[j], st.bounds[j + 1], &first, &last);
        GC_CHECK(cpu.scatterAdd(reduced.data(), n, 0, src.idx.data() + first,
                                src.val.data() + first, last - first));
      }
    // What travels is the non-zeros (|v| > 0): -0.0 sums come back as +0.0.
    for (float& v : reduced)
      if (v == 0.0f) v = 0.0f;
    for (int r = 0; r < P; ++r)
      GC_CHECK(cpu.scatterZero(frame_.acc(r).data(), n, 0, local[r].idx.data(), local[r].size()));
    return frame_.finish(args, reduced, expected, tolerance);
  }

 private:
  ReferenceFrame frame_;
  std::map<uint64_t, DsaKey> keys_;
};

}  // namespace

GC_REGISTER_ALGORITHM(dsa, {
    "dsa",
    "DSA: exact top-k per rank, balanced split-and-reduce, allgather of the reduced regions "
    "(COO/DenseStream/dense per message); exact sum of the selections; error feedback",
    {param::Id::DENSITY, param::Id::TOPK_TAU, param::Id::WARMUP_CALLS},
    [] { return std::unique_ptr<Algorithm>(new Dsa()); },
    [](int nranks) { return std::unique_ptr<Reference>(new DsaReference(nranks)); },
});

}  // namespace gradcomp::algo::sparse
