// Ok-Topk reference: the whole algorithm computed centrally with the same
// decision functions (oktopk.h) and the same summation order, so the
// distributed result must match it bit for bit, including threshold reuse.
#include <map>

#include "algorithms/sparse/oktopk.h"
#include "algorithms/sparse/reference_frame.h"

namespace gradcomp::algo::sparse::oktopk {
namespace {

class OkTopkReference final : public SparseReference {
 public:
  using SparseReference::SparseReference;

 private:
  Status schedule(const AllreduceArgs& args, size_t k, std::vector<float>& sum) override {
    device::Backend& cpu = device::cpuBackend();
    const int P = frame().nranks();
    const size_t n = args.count;
    State& st = keys_[scheduleKey(args)];
    if (st.count != n) st = State{n, 0, std::vector<Threshold>(P), {}, {}};
    const Schedule sched = scheduleOf(st.compressedCalls++, frame().params());

    std::vector<Coo> local;
    for (int r = 0; r < P; ++r) {
      local.emplace_back(cpu);
      GC_CHECK(selectLocal(cpu, frame().acc(r), n, k, sched.evaluate, kNotCounted, &st.local[r],
                           &local[r]));
    }
    if (sched.repartition || st.bounds.size() != size_t(P) + 1) {
      std::vector<uint64_t> all;
      for (int r = 0; r < P; ++r) {
        std::vector<uint64_t> b;
        GC_CHECK(proposeBoundaries(cpu, local[r], n, P, &b));
        all.insert(all.end(), b.begin(), b.end());
      }
      st.bounds = combineBoundaries(all, n, P);
    }
    // Region j sums sources j, j-1, ..., j+1 (mod P), like the rotated schedule.
    std::vector<float> reduced(n, 0.0f);
    std::vector<std::vector<size_t>> starts(P);
    for (int r = 0; r < P; ++r) GC_CHECK(rangesOf(cpu, local[r], st.bounds, &starts[r]));
    for (int j = 0; j < P; ++j)
      for (int s = 0; s < P; ++s) {
        const int r = (j - s + P) % P;
        const Coo& src = local[r];
        GC_CHECK(cpu.scatterAdd(reduced.data(), n, 0, src.idx.data() + starts[r][j],
                                src.val.data() + starts[r][j], starts[r][j + 1] - starts[r][j]));
      }
    Coo result(cpu);
    bool evaluated = sched.evaluate || !st.global.valid;
    if (!evaluated) {
      Coo candidates;
      GC_CHECK(compactRegion(cpu, reduced.data(), n, st.global.th, 0, &candidates));
      GC_CHECK(globalFromCandidates(cpu, candidates, k, &st.global, &result));
    }
    if (evaluated) {
      Coo all;
      GC_CHECK(compactRegion(cpu, reduced.data(), n, 0.0f, 0, &all));
      GC_CHECK(globalEvaluate(cpu, all, k, &st.global, &result));
    }
    for (int r = 0; r < P; ++r)
      GC_CHECK(zeroContribution(cpu, frame().acc(r), n, local[r], result));
    return cpu.scatterAdd(sum.data(), n, 0, result.idx.data(), result.val.data(), result.size());
  }
  struct State {
    size_t count = 0;
    uint64_t compressedCalls = 0;
    std::vector<Threshold> local;
    Threshold global;
    std::vector<uint64_t> bounds;
  };
  std::map<uint64_t, State> keys_;
};

// The reduce-scatter form: every rank's local selection (same threshold
// machinery), summed per owner range in the rotated order, all contributed.
// Fills the whole tensor; rank j's shard is its range of it.
class OkTopkReduceScatterReference final : public SparseReference {
 public:
  using SparseReference::SparseReference;

 private:
  Status schedule(const AllreduceArgs& args, size_t k, std::vector<float>& sum) override {
    device::Backend& cpu = device::cpuBackend();
    const int P = frame().nranks();
    const size_t n = args.count;
    State& st = keys_[scheduleKey(args)];
    if (st.count != n) st = State{n, 0, std::vector<Threshold>(P)};
    const Schedule sched = scheduleOf(st.compressedCalls++, frame().params());
    const std::vector<uint64_t> bounds = ownerBounds(n, P);
    std::vector<Coo> local;
    std::vector<std::vector<size_t>> starts(P);
    for (int r = 0; r < P; ++r) {
      local.emplace_back(cpu);
      GC_CHECK(selectLocal(cpu, frame().acc(r), n, k, sched.evaluate || k >= n, kNotCounted,
                           &st.local[r], &local[r]));
      GC_CHECK(rangesOf(cpu, local[r], bounds, &starts[r]));
    }
    for (int j = 0; j < P; ++j)
      for (int s = 0; s < P; ++s) {
        const int r = (j - s + P) % P;
        GC_CHECK(cpu.scatterAdd(sum.data(), n, 0, local[r].idx.data() + starts[r][j],
                                local[r].val.data() + starts[r][j],
                                starts[r][j + 1] - starts[r][j]));
      }
    for (int r = 0; r < P; ++r)
      GC_CHECK(cpu.scatterZero(frame().acc(r), n, 0, local[r].idx.data(), local[r].size()));
    return Status::Ok();
  }
  struct State {
    size_t count = 0;
    uint64_t compressedCalls = 0;
    std::vector<Threshold> local;
  };
  std::map<uint64_t, State> keys_;
};

}  // namespace

std::unique_ptr<Reference> makeReference(int nranks) {
  return std::unique_ptr<Reference>(new OkTopkReference(nranks));
}

std::unique_ptr<Reference> makeReduceScatterReference(int nranks) {
  return std::unique_ptr<Reference>(new OkTopkReduceScatterReference(nranks));
}

}  // namespace gradcomp::algo::sparse::oktopk
