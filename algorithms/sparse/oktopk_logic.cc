// Ok-Topk decision logic shared by the schedule and the reference (oktopk.h).
#include <algorithm>

#include "algorithms/sparse/oktopk.h"

namespace gradcomp::algo::sparse::oktopk {

Status selectLocal(device::Backend& dev, const float* acc, size_t n, size_t k, bool evaluate,
                   Threshold* state, Coo* out) {
  size_t count = 0;
  if (!evaluate && state->valid) {
    GC_CHECK(dev.countAbove(acc, n, state->th, &count));
    // Under half of k: re-select exactly now (rank-local, compute only).
    if (count <= k && 2 * count >= k) {
      out->idx.resize(count);
      out->val.resize(count);
      size_t got = 0;
      GC_CHECK(dev.compactAbove(acc, n, state->th, 0, 0, out->idx.data(), out->val.data(), count,
                                &got));
      if (4 * count < 3 * k) state->th = state->th / 1.012f;
      return Status::Ok();
    }
    if (count > k) {
      // The exact top-k lies among the `count` entries above the reused
      // threshold: select among those (about k) instead of all n. Same
      // threshold and ties (index order) as selecting over acc.
      Coo above(dev);
      above.idx.resize(count);
      above.val.resize(count);
      size_t got = 0;
      GC_CHECK(dev.compactAbove(acc, n, state->th, 0, 0, above.idx.data(), above.val.data(),
                                count, &got));
      GC_CHECK(selectTopkCoo(dev, above, k, out, &state->th));
      return Status::Ok();
    }
  }
  // Exact: evaluation call, first call, or the reused threshold admitted
  // more than k or fewer than k/2 entries.
  GC_CHECK(selectTopk(dev, acc, n, k, 0, out, &state->th));
  state->valid = true;
  return Status::Ok();
}

std::vector<uint64_t> proposeBoundaries(const Coo& selected, size_t n, int P) {
  std::vector<uint64_t> b(P - 1);
  const size_t cnt = selected.size();
  for (int j = 1; j < P; ++j)
    b[j - 1] = cnt ? selected.idx[cnt * size_t(j) / size_t(P)] : uint64_t(n) * j / P;
  return b;
}

std::vector<uint64_t> combineBoundaries(const std::vector<uint64_t>& all, size_t n, int P) {
  std::vector<uint64_t> sums(P - 1, 0);
  for (int r = 0; r < P; ++r)
    for (int j = 1; j < P; ++j) sums[j - 1] += all[size_t(r) * (P - 1) + (j - 1)];
  return boundariesFromSums(sums, n, P);
}

std::vector<uint64_t> boundariesFromSums(const std::vector<uint64_t>& sums, size_t n, int P) {
  std::vector<uint64_t> b(P + 1, 0);
  for (int j = 1; j < P; ++j) b[j] = std::min<uint64_t>(sums[j - 1] / uint64_t(P), n);
  b[P] = n;
  return b;
}

void rangeOf(const Coo& sel, uint64_t lo, uint64_t hi, size_t* first, size_t* last) {
  *first = size_t(std::lower_bound(sel.idx.begin(), sel.idx.end(), lo) - sel.idx.begin());
  *last = size_t(std::lower_bound(sel.idx.begin(), sel.idx.end(), hi) - sel.idx.begin());
}

Status globalEvaluate(device::Backend& dev, const Coo& reduced, size_t k, Threshold* global,
                      Coo* result) {
  global->valid = true;
  if (reduced.size() <= k) {  // everything qualifies; a threshold of 0 keeps it so
    global->th = 0;
    *result = reduced;
    return Status::Ok();
  }
  return selectTopkCoo(dev, reduced, k, result, &global->th);
}

Status globalFromCandidates(device::Backend& dev, const Coo& candidates, size_t k,
                            Threshold* global, Coo* result) {
  const size_t K = candidates.size();
  if (K > k) {
    // The candidates are every reduced value above the old threshold, so
    // their k-th largest is the exact global threshold: re-evaluated for free.
    GC_CHECK(selectTopkCoo(dev, candidates, k, result, &global->th));
    return Status::Ok();
  }
  *result = candidates;
  // K is the same on every rank, so is this decision. Under half of k: the
  // next call evaluates the global threshold exactly (not when it is 0: that
  // admits every non-zero already); under 3k/4: nudge.
  if (2 * K < k && global->th > 0) global->valid = false;
  else if (4 * K < 3 * k) global->th = global->th / 1.01f;
  return Status::Ok();
}

Status zeroContribution(device::Backend& dev, float* acc, size_t n, const Coo& local,
                        const Coo& result) {
  auto both = device::makeBuffer<uint64_t>(dev);
  both.reserve(std::min(local.size(), result.size()));
  std::set_intersection(local.idx.begin(), local.idx.end(), result.idx.begin(), result.idx.end(),
                        std::back_inserter(both));
  return dev.scatterZero(acc, n, 0, both.data(), both.size());
}

}  // namespace gradcomp::algo::sparse::oktopk
