// Ok-Topk: the distributed schedule and its registration (see oktopk.h).
// Boundaries: the proposals' integer allreduce (allreduceSumWords), tag
// steps [0x30000, 0x30040).
#include <map>

#include "algorithms/sparse/collectives.h"
#include "algorithms/sparse/oktopk.h"
#include "algorithms/sparse/reference_frame.h"
#include "common/log.h"

namespace gradcomp::algo::sparse::oktopk {

std::unique_ptr<Reference> makeReference(int nranks);  // oktopk_reference.cc
std::unique_ptr<Reference> makeReduceScatterReference(int nranks);

namespace {

constexpr uint64_t kStepBounds = 0x30000;

class OkTopk final : public SparseAlgorithm {
  float fusedThreshold(const AllreduceArgs& args, const SparseParams& params) override {
    auto it = keys_.find(scheduleKey(args));
    return it == keys_.end() ? -1.0f : reusedThreshold(it->second, args.count, params);
  }

  Status schedule(Context& ctx, const AllreduceArgs& args, const SparseParams& params, size_t k,
                  float* acc, const FrameStats& stats, float* out) override {
    const int P = ctx.net.size();
    const size_t n = args.count;
    KeyState& st = keys_[scheduleKey(args)];
    const bool fused = reusedThreshold(st, n, params) >= 0;  // the frame counted above st.local.th
    if (st.count != n) st = KeyState{n, 0, {}, {}, {}};
    const Schedule sched = scheduleOf(st.compressedCalls++, params);

    Coo local(ctx.dev);
    GC_CHECK(selectLocal(ctx.dev, acc, n, k, sched.evaluate, fused ? stats.above : kNotCounted,
                         &st.local, &local, fused ? stats.candidates : nullptr));
    if (sched.repartition || st.bounds.size() != size_t(P) + 1) {
      // Summed, not gathered: ~2 (P - 1) words sent per rank, not (P - 1)^2.
      std::vector<uint64_t> sums;
      GC_CHECK(proposeBoundaries(ctx.dev, local, n, P, &sums));
      GC_CHECK(allreduceSumWords(ctx, kStepBounds, &sums));
      st.bounds = boundariesFromSums(sums, n, P);
    }
    device::DeviceArray<float>& region = region_;
    GC_CHECK(splitAndReduce(ctx, local, st.bounds, k, &region));
    Coo result(ctx.dev);
    const bool globalExact = sched.evaluate || !st.global.valid;  // for the trace
    GC_CHECK(globalPhase(ctx, region, st.bounds, k, sched.evaluate, &st.global, &result));
    // Achieved density per call (GRADCOMP_DEBUG=TRACE): with reused
    // thresholds the local and global counts drift around k.
    GC_TRACE(ALGO, "oktopk key %#llx call %llu%s: n %zu k %zu local %zu result %zu",
             (unsigned long long)scheduleKey(args), (unsigned long long)(st.compressedCalls - 1),
             sched.evaluate ? " (evaluate)" : globalExact ? " (global exact)" : "", n, k,
             local.size(), result.size());
    GC_CHECK(zeroContribution(ctx.dev, acc, n, local, result));
    return ctx.dev.scatterAdd(out, n, 0, result.idx.data(), result.val.data(),
                              result.size());
  }

  // The reduce-scatter form (oktopk.h): local selection, split-and-reduce
  // over NCCL's ranges straight into the shard; all of L_i is contributed.
  Status scheduleReduceScatter(Context& ctx, const AllreduceArgs& args,
                               const SparseParams& params, size_t k, float* acc,
                               const FrameStats& stats, float* out) override {
    const size_t n = args.count;
    KeyState& st = keys_[scheduleKey(args)];
    const bool fused = reusedThreshold(st, n, params) >= 0;
    if (st.count != n) st = KeyState{n, 0, {}, {}, {}};
    const Schedule sched = scheduleOf(st.compressedCalls++, params);
    Coo local(ctx.dev);
    GC_CHECK(selectLocal(ctx.dev, acc, n, k, sched.evaluate || k >= n,
                         fused ? stats.above : kNotCounted, &st.local, &local,
                         fused ? stats.candidates : nullptr));
    // The residual loses the selection (values sent from `local`, not acc)
    // while the pieces travel.
    GC_CHECK(splitAndReduce(ctx, local, ownerBounds(n, ctx.net.size()), k, out, [&] {
      return ctx.dev.scatterZero(acc, n, 0, local.idx.data(), local.size());
    }));
    GC_TRACE(ALGO, "oktopk reduce-scatter key %#llx: n %zu k %zu local %zu",
             (unsigned long long)scheduleKey(args), n, k, local.size());
    return Status::Ok();
  }

  std::map<uint64_t, KeyState> keys_;
  // This rank's reduced region, kept across calls: a fresh n/P-float buffer
  // per call cost page faults on every call (perf, 100 MiB).
  device::DeviceArray<float> region_;
};

}  // namespace

GC_REGISTER_ALGORITHM(oktopk, {
    "oktopk",
    "Ok-Topk O(k) sparse allreduce: reused local/global top-k thresholds, balanced regions, "
    "rotated split-and-reduce, balanced allgatherv; error feedback on the contributed set; "
    "reduce-scatter: split-and-reduce of the local top-k over NCCL's ranges",
    {param::Id::DENSITY, param::Id::TOPK_TAU, param::Id::TOPK_TAU_PRIME, param::Id::WARMUP_CALLS,
     param::Id::EF},
    [] { return std::unique_ptr<Algorithm>(new OkTopk()); },
    [](int nranks) { return makeReference(nranks); },
    false,
    [](int nranks) { return makeReduceScatterReference(nranks); },
});

}  // namespace gradcomp::algo::sparse::oktopk
