// Ok-Topk: the distributed schedule and its registration (see oktopk.h).
// Boundaries allgather: tag step 0x30000.
#include <map>

#include "algorithms/sparse/collectives.h"
#include "algorithms/sparse/oktopk.h"
#include "algorithms/sparse/reference_frame.h"

namespace gradcomp::algo::sparse::oktopk {

std::unique_ptr<Reference> makeReference(int nranks);  // oktopk_reference.cc

namespace {

constexpr uint64_t kStepBounds = 0x30000;

class OkTopk final : public Algorithm {
 public:
  Status allreduce(Context& ctx, const AllreduceArgs& args) override {
    SparseParams params;
    GC_CHECK(params.read(ctx.config));
    bool compress = false;
    GC_CHECK(frame_.begin(ctx, args, params.warmupCalls, &compress));
    if (!compress) return Status::Ok();
    const int P = ctx.net.size();
    const size_t n = args.count, k = topkCount(params.density, n);
    KeyState& st = keys_[tensorKey(args)];
    if (st.count != n) st = KeyState{n};
    const Schedule sched = scheduleOf(st.compressedCalls++, params);
    std::vector<float>& acc = frame_.acc();

    Coo local;
    GC_CHECK(selectLocal(ctx.dev, acc.data(), n, k, sched.evaluate, &st.local, &local));
    if (sched.repartition || st.bounds.size() != size_t(P) + 1) {
      std::vector<uint64_t> all;
      GC_CHECK(allgatherWords(ctx, kStepBounds, proposeBoundaries(local, n, P), &all));
      st.bounds = combineBoundaries(all, n, P);
    }
    std::vector<float> region;
    GC_CHECK(splitAndReduce(ctx, local, st.bounds, k, &region));
    Coo result;
    GC_CHECK(globalPhase(ctx, region, st.bounds, k, sched.evaluate, &st.global, &result));
    GC_CHECK(zeroContribution(ctx.dev, acc.data(), n, local, result));
    result_.assign(n, 0.0f);
    GC_CHECK(ctx.dev.scatterAdd(result_.data(), n, 0, result.idx.data(), result.val.data(),
                                result.size()));
    return frame_.finish(ctx, args, result_.data());
  }

 private:
  SparseFrame frame_;
  std::map<uint64_t, KeyState> keys_;
  std::vector<float> result_;
};

}  // namespace

GC_REGISTER_ALGORITHM(oktopk, {
    "oktopk",
    "Ok-Topk O(k) sparse allreduce: reused local/global top-k thresholds, balanced regions, "
    "rotated split-and-reduce, balanced allgatherv; error feedback on the contributed set",
    {param::Id::DENSITY, param::Id::TOPK_TAU, param::Id::TOPK_TAU_PRIME, param::Id::WARMUP_CALLS},
    [] { return std::unique_ptr<Algorithm>(new OkTopk()); },
    [](int nranks) { return makeReference(nranks); },
});

}  // namespace gradcomp::algo::sparse::oktopk
