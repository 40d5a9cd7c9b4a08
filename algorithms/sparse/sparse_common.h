// Shared pieces of the sparse allreduce family (topka, gtopk, oktopk, dsa):
// parameters, the per-call frame (warm-up, fp32 accumulator with error
// feedback, the non-finite fallback, output), COO lists and exact top-k
// selection.
//
// Decisions (docs/design.md, "Sparse allreduce"):
// - Compression works on an fp32 accumulator acc = residual + g whatever the
//   dtype (float16/bfloat16/float64 inputs are converted; float64 results carry
//   fp32 precision). Integer dtypes run the dense allreduce.
// - NaN/Inf: when any rank's accumulator holds a non-finite value (agreed by a
//   one-word dissemination OR), the call runs the dense allreduce on the raw
//   inputs, so NaN/Inf land where dense NCCL puts them; the residuals are
//   cleared (they held the non-finite sum).
// - The first GRADCOMP_WARMUP_CALLS calls of a tensor run dense.
// - Error feedback runs when ctx.errorFeedback is set and enabled; the caller
//   decides per call from GRADCOMP_EF (ErrorFeedbackStore::forCall), so a
//   run's EF=off override is honoured. The accumulator is the residual itself
//   (error_feedback.h): schedules zero what they contributed in place.
// - The result is the fp32 sparse sum converted to the dtype (one rounding);
//   ncclAvg then divides it by P (device divide: fp64, one rounding).
// - Data path (device/backend.h): the accumulator, COO lists and results live
//   in device memory; only encoded messages (wire_format.h) and counts cross
//   to the host. Every count the host needs is a control word read after a
//   sync; schedules sync at communication rounds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "algorithms/algorithm.h"
#include "device/arrays.h"

namespace gradcomp::algo::sparse {

struct SparseParams {
  double density = 0.01;
  int64_t tau = 64, tauPrime = 32, warmupCalls = 0;
  int64_t cltkLeaders = 0;  // cltk: leaders per call (0: every rank)
  Status read(const param::Overrides& config);
};

// k = max(1, floor(density * n)), at most n (n >= 1).
size_t topkCount(double density, size_t n);


// Sorted COO list in device memory. size() is known to the host (every
// producer below knows its count without reading the list).
struct Coo {
  device::DeviceArray<uint64_t> idx;
  device::DeviceArray<float> val;
  Coo() = default;
  explicit Coo(device::Backend& dev) : idx(dev), val(dev) {}
  void bind(device::Backend& dev) { idx.bind(dev), val.bind(dev); }
  size_t size() const { return idx.size(); }
  void resize(size_t n) { idx.resize(n), val.resize(n); }
  void clear() { idx.clear(), val.clear(); }
  // A device copy of o (bound to o's backend when unbound).
  Status assign(const Coo& o);
};

// Encoded messages: host memory of the call's backend.
using Bytes = device::HostArray<uint8_t>;
// n empty messages in dev's host memory.
inline std::vector<Bytes> bytesOn(device::Backend& dev, size_t n) {
  std::vector<Bytes> v;
  v.reserve(n);
  for (size_t i = 0; i < n; ++i) v.emplace_back(dev);
  return v;
}

// Exact top-k of x[0..n) by |x| (threshold = k-th largest, ties admitted in
// index order; exact zeros never), indexes offset by base. *threshold
// (nullable) receives the k-th largest |x|. zeroSelected: the selected x[i]
// become +0.0 (the whole selection is contributed). One sync.
Status selectTopk(device::Backend& dev, float* x, size_t n, size_t k, uint64_t base, Coo* out,
                  float* threshold = nullptr, bool zeroSelected = false);
// The same on a COO list: its exact top-k entries, in index order. One sync.
Status selectTopkCoo(device::Backend& dev, const Coo& in, size_t k, Coo* out,
                     float* threshold = nullptr);
// [*first, *last): the entries of the sorted list inside [lo, hi) for every
// range (bounds: ranges + 1 boundaries). One sync.
Status rangesOf(device::Backend& dev, const Coo& sel, const std::vector<uint64_t>& bounds,
                std::vector<size_t>* starts);

// What the frame computed from the call's input in its one pass.
struct FrameStats {
  uint64_t above = 0;  // entries above the threshold the algorithm asked for
  // Those entries of acc (sorted COO, `above` of them) when the backend
  // compacted them in the same pass (Backend::accumulateCompact) and they
  // fit the capacity asked for; else nullptr. Valid until the next call.
  const Coo* candidates = nullptr;
};

// Elements a call returns: count (allreduce) or recvcount = count / P
// (reduce-scatter, NCCL's layout: algorithm.h).
inline size_t outputCount(const AllreduceArgs& a, int nranks) {
  return a.coll == Collective::ReduceScatter ? recvCountOf(a, nranks) : a.count;
}

// NCCL's reduce-scatter ranges: rank j owns [j * count / P, (j + 1) * count / P)
// (P + 1 boundaries; count is a multiple of P).
std::vector<uint64_t> ownerBounds(size_t count, int nranks);

// Per-call frame shared by every sparse algorithm (allreduce and
// reduce-scatter alike: the accumulator always covers the whole tensor).
class SparseFrame {
 public:
  // Decides what this call does. *compress = false: the call ran dense
  // (warm-up, integer dtype, non-finite input) and is complete. Otherwise
  // acc() holds residual + input in fp32 and the caller runs its schedule,
  // then finish(). countThreshold >= 0: stats->above counts |acc| above it
  // in the same pass, and where the backend can, stats->candidates holds
  // those entries when there are at most candidateCapacity. Dense calls run
  // runCollective(dense), so a reduce-scatter runs dense's ring
  // reduce-scatter.
  Status begin(Context& ctx, const AllreduceArgs& args, int64_t warmupCalls, float countThreshold,
               size_t candidateCapacity, bool* compress, FrameStats* stats);
  float* acc() { return acc_; }
  // Keeps the residual (acc with the contributed entries zeroed by the
  // caller) and writes result (dense fp32, outputCount, device memory) to
  // args.recvBuf, unless result already is recvBuf. Syncs.
  Status finish(Context& ctx, const AllreduceArgs& args, const float* result);

 private:
  Status runDense(Context& ctx, const AllreduceArgs& args);
  struct KeyCalls {
    size_t count = 0;
    uint64_t calls = 0;
  };
  std::map<uint64_t, KeyCalls> calls_;
  std::unique_ptr<Algorithm> dense_;
  device::DeviceArray<float> scratch_;  // acc without error feedback, or bf16 residuals
  Coo candidates_;                      // FrameStats::candidates, kept across calls
  float* acc_ = nullptr;
  bool efActive_ = false;
};

// Base of every sparse algorithm: reads the parameters, runs the frame and
// owns the result buffer, so a subclass writes only its schedule.
class SparseAlgorithm : public Algorithm {
 public:

 protected:
  Status runAllreduce(Context& ctx, const AllreduceArgs& args) final;
  // The frame around scheduleReduceScatter (subclasses that override it
  // register a reduceScatterReference).
  Status runReduceScatter(Context& ctx, const AllreduceArgs& args) final;

  // Runs when the call compresses. acc: residual + input (fp32, args.count,
  // device memory); the schedule zeroes the entries this rank contributed
  // (the rest stays in the residual) and adds the sparse result into `result`
  // (dense fp32, args.count, zero on entry; for fp32 calls args.recvBuf).
  // stats: what the frame counted for fusedThreshold().
  virtual Status schedule(Context& ctx, const AllreduceArgs& args, const SparseParams& params,
                          size_t k, float* acc, const FrameStats& stats, float* result) = 0;
  // The reduce-scatter form (args.coll == ReduceScatter): acc as above (the
  // whole tensor, args.count); `result` is this rank's shard (dense fp32,
  // recvcount, zero on entry; for fp32 calls args.recvBuf, which in place
  // overlaps the input: the input is only read before, into acc). Default:
  // Unsupported.
  virtual Status scheduleReduceScatter(Context& ctx, const AllreduceArgs& args,
                                       const SparseParams& params, size_t k, float* acc,
                                       const FrameStats& stats, float* result);
  // A threshold the schedule wants counted in the frame's pass (< 0: none).
  virtual float fusedThreshold(const AllreduceArgs& args, const SparseParams& params) {
    (void)args, (void)params;
    return -1.0f;
  }

 private:
  Status run(Context& ctx, const AllreduceArgs& args);
  SparseFrame frame_;
  device::DeviceArray<float> result_;
};

// fp32 sparse sum -> the value every rank returns, as the reference sees it:
// converted to dtype, divided by P for Avg, widened to double.
Status expectedFromFp32(const std::vector<float>& sum, const AllreduceArgs& args, int nranks,
                        std::vector<double>* expected);
// Exact dense sum (rank order, fp64) with a bound covering any summation order
// in the dtype: the reference of calls that ran dense.
Status expectedDense(const std::vector<const void*>& inputs, const AllreduceArgs& args,
                     std::vector<double>* expected, std::vector<double>* tolerance);

}  // namespace gradcomp::algo::sparse
