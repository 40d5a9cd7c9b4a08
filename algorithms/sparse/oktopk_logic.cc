// Ok-Topk decision logic shared by the schedule and the reference (oktopk.h).
#include <algorithm>

#include "algorithms/sparse/oktopk.h"

namespace gradcomp::algo::sparse::oktopk {

Status selectLocal(device::Backend& dev, float* acc, size_t n, size_t k, bool evaluate,
                   size_t aboveReused, Threshold* state, Coo* out, const Coo* candidates) {
  out->bind(dev);
  if (!evaluate && state->valid) {
    size_t count = aboveReused;
    if (count == kNotCounted) {
      candidates = nullptr;
      GC_CHECK(dev.countAbove(acc, n, state->th, &count));
      GC_CHECK(dev.sync());
    }
    GC_REQUIRE(!candidates || candidates->size() == count, Err::Internal,
               "oktopk: %zu candidates for %zu entries above the reused threshold",
               candidates ? candidates->size() : size_t(0), count);
    // Under half of k: re-select exactly now (rank-local, compute only).
    if (count <= k && 2 * count >= k) {
      if (candidates) {
        GC_CHECK(out->assign(*candidates));
      } else {
        out->resize(count);
        GC_CHECK(dev.compactAbove(acc, n, state->th, 0, 0, out->idx.data(), out->val.data(),
                                  count, nullptr, false));
      }
      if (4 * count < 3 * k) state->th = state->th / 1.012f;
      return Status::Ok();
    }
    if (count > k) {
      // The exact top-k lies among the `count` entries above the reused
      // threshold: select among those (about k) instead of all n. Same
      // threshold and ties (index order) as selecting over acc.
      if (candidates) return selectTopkCoo(dev, *candidates, k, out, &state->th);
      Coo above(dev);
      above.resize(count);
      GC_CHECK(dev.compactAbove(acc, n, state->th, 0, 0, above.idx.data(), above.val.data(),
                                count, nullptr, false));
      return selectTopkCoo(dev, above, k, out, &state->th);
    }
  }
  // Exact: evaluation call, first call, or the reused threshold admitted
  // more than k or fewer than k/2 entries.
  GC_CHECK(selectTopk(dev, acc, n, k, 0, out, &state->th));
  state->valid = true;
  return Status::Ok();
}

Status proposeBoundaries(device::Backend& dev, const Coo& selected, size_t n, int P,
                         std::vector<uint64_t>* proposals) {
  proposals->assign(P - 1, 0);
  const size_t cnt = selected.size();
  if (cnt == 0) {
    for (int j = 1; j < P; ++j) (*proposals)[j - 1] = uint64_t(n) * j / P;
    return Status::Ok();
  }
  // The P - 1 indexes at positions floor(cnt * j / P): control words.
  device::HostArray<uint64_t> pos(dev), picked(dev);
  pos.resize(P - 1);
  picked.resize(P - 1);
  for (int j = 1; j < P; ++j) pos[j - 1] = cnt * size_t(j) / size_t(P);
  GC_CHECK(dev.gather(picked.data(), selected.idx.data(), cnt, pos.data(), pos.size()));
  GC_CHECK(dev.sync());
  proposals->assign(picked.begin(), picked.end());
  return Status::Ok();
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

Status globalEvaluate(device::Backend& dev, const Coo& reduced, size_t k, Threshold* global,
                      Coo* result) {
  global->valid = true;
  if (reduced.size() <= k) {  // everything qualifies; a threshold of 0 keeps it so
    global->th = 0;
    result->bind(dev);
    return result->assign(reduced);
  }
  return selectTopkCoo(dev, reduced, k, result, &global->th);
}

Status globalFromCandidates(device::Backend& dev, const Coo& candidates, size_t k,
                            Threshold* global, Coo* result) {
  const size_t K = candidates.size();
  if (K > k) {
    // The candidates are every reduced value above the old threshold, so
    // their k-th largest is the exact global threshold: re-evaluated for free.
    return selectTopkCoo(dev, candidates, k, result, &global->th);
  }
  result->bind(dev);
  GC_CHECK(result->assign(candidates));
  // K is the same on every rank, so is this decision. Under half of k: the
  // next call evaluates the global threshold exactly (not when it is 0: that
  // admits every non-zero already); under 3k/4: nudge.
  if (2 * K < k && global->th > 0) global->valid = false;
  else if (4 * K < 3 * k) global->th = global->th / 1.01f;
  return Status::Ok();
}

Status zeroContribution(device::Backend& dev, float* acc, size_t n, const Coo& local,
                        const Coo& result) {
  return dev.zeroIntersection(acc, n, 0, local.idx.data(), local.size(), result.idx.data(),
                              result.size());
}

Status compactRegion(device::Backend& dev, const float* region, size_t len, float threshold,
                     uint64_t base, Coo* out) {
  // Counted first so the lists are sized to what is selected, not to the
  // region: zero-filling region-sized lists every call cost more than the
  // selection (perf, 100 MiB).
  size_t expected = 0;
  out->bind(dev);
  GC_CHECK(dev.countAbove(region, len, threshold, &expected));
  GC_CHECK(dev.sync());
  out->resize(expected);
  return dev.compactAbove(const_cast<float*>(region), len, threshold, 0, base, out->idx.data(),
                          out->val.data(), expected, nullptr, false);
}

}  // namespace gradcomp::algo::sparse::oktopk
