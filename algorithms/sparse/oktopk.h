// Ok-Topk sparse allreduce (Li & Hoefler, PPoPP'22, Algorithm 1; algorithms.md
// section 3). Result u = Topk_k(sum_i Topk_k(acc_i)) with thresholds that are
// exact every TOPK_TAU_PRIME calls and reused (nudged) in between, identical
// on every rank.
//
// Reduce-scatter form (docs/design.md, "Sparse reduce-scatter"): Ok-Topk's
// split-and-reduce over NCCL's fixed ranges (ownerBounds) instead of balanced
// regions, with no global phase. Each rank selects L_i from the whole
// accumulator with the allreduce form's local threshold machinery (exact every
// TOPK_TAU_PRIME calls, reused and nudged between, never more than k entries,
// k = DENSITY x count; exact every call when k >= count, so density 1 selects
// every non-zero and equals dense), sends the entries in rank j's range to rank j (COO,
// DenseStream or dense, whichever is smallest), and rank j returns
// sum_i L_i restricted to its range, summed in the order j, j-1, ..., j+1
// (mod P). Everything selected is contributed, the owner's own entries
// included; unselected entries, the owner's own chunk's too, stay in the
// residual (of the whole tensor). Wire per rank: P - 1 messages of a 40-byte
// header and min(8 e_j, DenseStream, 4 recvcount) bytes for the e_j entries
// bound to rank j, so at most 40(P-1) + min(8k, 4 count (P-1)/P) bytes
// (2k words + 10(P-1) header words; 4-byte offsets while recvcount <= 2^32,
// else 12 bytes an entry). Ok-Topk's allreduce sends up to 6k(P-1)/P words.
//
// The decision logic lives here as plain functions over data, shared by the
// distributed schedule (oktopk.cc, oktopk_split.cc, oktopk_gather.cc) and the
// central reference (oktopk_reference.cc), so both decide identically.
//
// Decisions beyond the paper (docs/design.md):
// - Local count upper limit = k: a reused local threshold that admits more
//   than k entries is replaced by an exact selection for that call (this keeps
//   the 6k(P-1)/P bound). Fewer than k/2: also an exact selection for that
//   call (the threshold is rank-local, so this costs compute, not volume);
//   in [k/2, 3k/4) the threshold is divided by 1.012 for the next call (the
//   reference code's factor). With the nudges alone (session 2) results fell
//   to 0.32 k and took tens of calls to recover (docs/results/sparse.md).
// - Global: the K candidates above the reused global threshold are
//   allgathered. K <= k: the result is all of them; K < k/2 (and a threshold
//   above 0) marks the threshold invalid, so the next call evaluates it
//   exactly (K is known to every rank, so every rank and the reference decide
//   alike; that call moves the evaluation allgatherv and is exempt from the
//   6k bound like scheduled evaluations); K in [k/2, 3k/4): divided by 1.01
//   for the next call. K > k: their exact top-k; since the
//   candidates are every reduced value above the old threshold, their k-th
//   largest is the exact global threshold, which replaces the old one (a
//   free re-evaluation; the paper's *1.008 nudge is not needed). Such calls
//   move 2K(P-1)/P words in the allgatherv, within the 6k bound while K <= 2k.
// - On evaluation calls every rank receives all reduced values (allgatherv),
//   so the global top-k is computed in place and balance/allgatherv is skipped.
// - Region j's sum adds sources in the order j, j-1, ..., j+1 (mod P): the
//   order of the rotated schedule, so the reference reproduces it bit for bit.
#pragma once

#include <functional>

#include <cstdint>
#include <vector>

#include "algorithms/sparse/sparse_common.h"

namespace gradcomp::algo::sparse::oktopk {

struct Threshold {
  float th = 0;
  bool valid = false;  // false: the next call selects exactly (first call, or recovery)
};

struct Schedule {
  bool evaluate;     // exact local and global thresholds this call
  bool repartition;  // new region boundaries this call
};
inline Schedule scheduleOf(uint64_t compressedCall, const SparseParams& p) {
  return {compressedCall % uint64_t(p.tauPrime) == 0, compressedCall % uint64_t(p.tau) == 0};
}

// Per-tensor state of one rank.
struct KeyState {
  size_t count = 0;
  uint64_t compressedCalls = 0;
  Threshold local, global;
  std::vector<uint64_t> bounds;  // P + 1 region boundaries
};

// This call's local selection (sorted COO) and the next call's threshold.
// aboveReused: #{|acc| > state->th} when the caller counted it already (the
// frame's fused pass), else kNotCounted. candidates (nullable, with
// aboveReused only): those entries, compacted by the same pass
// (FrameStats::candidates), so a reused threshold reads acc no more.
constexpr size_t kNotCounted = ~size_t(0);
Status selectLocal(device::Backend& dev, float* acc, size_t n, size_t k, bool evaluate,
                   size_t aboveReused, Threshold* state, Coo* out,
                   const Coo* candidates = nullptr);

// One rank's proposed boundaries (P - 1 words): its selected indexes at
// positions floor(cnt * j / P), j = 1..P-1; j * n / P when it selected nothing.
Status proposeBoundaries(device::Backend& dev, const Coo& selected, size_t n, int P,
                         std::vector<uint64_t>* proposals);
// all = P proposals of P - 1 words: b[0] = 0, b[j] = floor(sum_r all[r][j-1] / P),
// b[P] = n. Non-decreasing by construction.
std::vector<uint64_t> combineBoundaries(const std::vector<uint64_t>& all, size_t n, int P);
// The same from the P - 1 column sums sum_r all[r][j-1] (what the schedule's
// integer allreduce of the proposals yields): b[j] = min(sums[j-1] / P, n).
std::vector<uint64_t> boundariesFromSums(const std::vector<uint64_t>& sums, size_t n, int P);

// Evaluation: the exact global top-k of all reduced non-zeros (sorted COO).
Status globalEvaluate(device::Backend& dev, const Coo& reduced, size_t k, Threshold* global,
                      Coo* result);
// Reuse: the K candidates above the reused threshold, truncated to the exact
// top-k (and the threshold set exactly) when K > k; K < k/2 invalidates the
// threshold (next call evaluates); K < 3k/4 nudges it.
Status globalFromCandidates(device::Backend& dev, const Coo& candidates, size_t k,
                            Threshold* global, Coo* result);

// acc[i] = 0 for i in local AND result (the entries this rank contributed).
Status zeroContribution(device::Backend& dev, float* acc, size_t n, const Coo& local,
                        const Coo& result);
// The entries of a dense region with |x| > threshold as COO (indexes base +
// i), sized to what is selected. One sync.
Status compactRegion(device::Backend& dev, const float* region, size_t len, float threshold,
                     uint64_t base, Coo* out);

// The threshold a call reuses, if it reuses one: the frame counts the
// entries above it in its pass (SparseAlgorithm::fusedThreshold).
inline float reusedThreshold(const KeyState& st, size_t n, const SparseParams& p) {
  if (st.count != n || !st.local.valid || scheduleOf(st.compressedCalls, p).evaluate) return -1;
  return st.local.th;
}

// Distributed phases (ctx.net); steps documented in the .cc files.
// Rank me's region [bounds[me], bounds[me+1]) summed over every rank's local
// selection (each holds at most k entries), into *region (dense fp32).
Status splitAndReduce(Context& ctx, const Coo& local, const std::vector<uint64_t>& bounds,
                      size_t k, device::DeviceArray<float>* region);
// The same into regionData (fp32, the region's length, zero on entry).
// whileInFlight (optional) runs once the first messages are posted, before
// any arrival is reduced: the caller's work that does not depend on them
// (the reduce-scatter's residual update) then overlaps the transfers.
Status splitAndReduce(Context& ctx, const Coo& local, const std::vector<uint64_t>& bounds,
                      size_t k, float* regionData,
                      const std::function<Status()>& whileInFlight = {});
// Every rank's reduced region non-zeros (each region holds at most P*k) to
// every rank, in index order (allgatherBlocks, each in its smallest format).
Status gatherRegions(Context& ctx, const device::DeviceArray<float>& region,
                     const std::vector<uint64_t>& bounds, size_t k, Coo* all);
// Global selection from the reduced regions: *result (sorted, identical on
// every rank).
Status globalPhase(Context& ctx, const device::DeviceArray<float>& region,
                   const std::vector<uint64_t>& bounds, size_t k, bool evaluate,
                   Threshold* global, Coo* result);

}  // namespace gradcomp::algo::sparse::oktopk
