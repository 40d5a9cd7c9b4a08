// Ok-Topk threshold recovery (oktopk.h): a reused threshold that admits far
// fewer than k entries is corrected within one call instead of by a slow
// per-call nudge. Local (rank-local): under k/2 the rank re-selects exactly
// in the same call. Global (shared count K): under k/2 the next call
// evaluates exactly, on every rank and in the central reference alike.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>

#include "algorithms/sparse/oktopk.h"
#include "sparse_harness.h"

using namespace gradcomp;
using namespace gradcomp::test::sparse;
namespace ok = gradcomp::algo::sparse::oktopk;
using gradcomp::algo::sparse::Coo;

namespace {

std::vector<float> shifted(size_t n, float shift) {  // |x| = i + 1 + shift, distinct
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = float(i + 1) + shift;
  return x;
}

Coo ramp(size_t K) {  // K candidates with values K..1 at indexes 0..K-1
  std::vector<uint64_t> idx;
  std::vector<float> val;
  for (size_t i = 0; i < K; ++i) idx.push_back(i), val.push_back(float(K - i));
  return cooOf(idx, val);
}

size_t nonZeros(const std::vector<float>& x) {
  size_t c = 0;
  for (float v : x) c += v != 0.0f;
  return c;
}

}  // namespace

TEST_CASE("oktopk local threshold: nudge above k/2, exact re-selection below", "[sparse]") {
  device::Backend& cpu = device::cpuBackend();
  const size_t n = 1000, k = 100;
  ok::Threshold st;
  Coo sel;
  std::vector<float> x = shifted(n, 0);
  REQUIRE(ok::selectLocal(cpu, x.data(), n, k, true, ok::kNotCounted, &st, &sel).ok());
  CHECK(sel.size() == k);
  CHECK(st.th == 901.0f);  // the k-th largest of 1..1000

  // Reused threshold 901 admits 59 of x - 40 (902..960): in [k/2, 3k/4), kept
  // and nudged down by 1.012 for the next call.
  x = shifted(n, -40);
  REQUIRE(ok::selectLocal(cpu, x.data(), n, k, false, ok::kNotCounted, &st, &sel).ok());
  CHECK(sel.size() == 59);
  CHECK(st.th == 901.0f / 1.012f);

  // 890.3 admits 30 of x - 80 (891..920), under k/2: exact top-k this call.
  x = shifted(n, -80);
  REQUIRE(ok::selectLocal(cpu, x.data(), n, k, false, ok::kNotCounted, &st, &sel).ok());
  REQUIRE(sel.size() == k);
  CHECK(idxOf(sel).front() == n - k);
  CHECK(idxOf(sel).back() == n - 1);
  CHECK(st.th == 821.0f);  // the k-th largest of -79..920

  // More than k admitted: exact as well (the 6k volume bound).
  x = shifted(n, 200);
  REQUIRE(ok::selectLocal(cpu, x.data(), n, k, false, ok::kNotCounted, &st, &sel).ok());
  CHECK(sel.size() == k);
  CHECK(st.th == 1101.0f);
}

TEST_CASE("oktopk local threshold: over k, the selection equals an exact top-k of acc",
          "[sparse]") {
  // A stale threshold admitting ~1.5k entries (ties and -0.0 included): the
  // candidates-only selection must return what selectTopk over all of acc
  // returns, threshold included.
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> q(-200, 200);  // coarse values: many ties
  const size_t n = 20000, k = 500;
  std::vector<float> acc(n);
  for (float& v : acc) v = float(q(rng)) / 8.0f;
  acc[3] = -0.0f;
  Coo exact;
  float thExact = 0;
  REQUIRE(algo::sparse::selectTopk(device::cpuBackend(), acc.data(), n, k, 0, &exact, &thExact).ok());
  ok::Threshold stale{thExact * 0.99f, true};
  size_t above = 0;
  REQUIRE(device::cpuBackend().countAbove(acc.data(), n, stale.th, &above).ok());
  REQUIRE(above > k);
  Coo got;
  REQUIRE(ok::selectLocal(device::cpuBackend(), acc.data(), n, k, false, ok::kNotCounted, &stale, &got).ok());
  CHECK(stale.valid);
  CHECK(stale.th == thExact);
  REQUIRE(got.size() == exact.size());
  CHECK(idxOf(got) == idxOf(exact));
  CHECK(valOf(got) == valOf(exact));
}

TEST_CASE("oktopk global threshold: K < k/2 forces the next evaluation", "[sparse]") {
  device::Backend& cpu = device::cpuBackend();
  const size_t k = 100;
  Coo res;
  ok::Threshold g{5.0f, true};
  REQUIRE(ok::globalFromCandidates(cpu, ramp(80), k, &g, &res).ok());
  CHECK((res.size() == 80 && g.valid && g.th == 5.0f));  // >= 3k/4: unchanged
  REQUIRE(ok::globalFromCandidates(cpu, ramp(60), k, &g, &res).ok());
  CHECK((res.size() == 60 && g.valid && g.th == 5.0f / 1.01f));  // nudged
  g = {5.0f, true};
  REQUIRE(ok::globalFromCandidates(cpu, ramp(40), k, &g, &res).ok());
  CHECK((res.size() == 40 && !g.valid));  // the next call evaluates
  g = {0.0f, true};
  REQUIRE(ok::globalFromCandidates(cpu, ramp(10), k, &g, &res).ok());
  CHECK((res.size() == 10 && g.valid));  // 0 admits every non-zero already
  g = {5.0f, true};
  REQUIRE(ok::globalFromCandidates(cpu, ramp(120), k, &g, &res).ok());
  CHECK((res.size() == k && g.valid && g.th == 21.0f));  // exact: 100th of 120..1
}

TEST_CASE("oktopk recovers k values the call after the global threshold under-delivers",
          "[sparse]") {
  const size_t n = 997, k = 40;
  // P >= 2: at P = 1 the reduced vector is the local top-k itself, so the
  // global threshold is 0 and nothing can under-deliver.
  for (int P : {2, 3, 4}) {
    INFO("P=" << P);
    std::mt19937_64 rng(P + 10);
    // tau' = 100: only call 0 evaluates by schedule. Error feedback off, so
    // the scaled inputs alone decide the counts.
    Group g("oktopk", P, {{"DENSITY", densityFor(k, n)}, {"TOPK_TAU_PRIME", "100"},
                          {"EF", "off"}});
    CHECK(nonZeros(g.checkedCall(normalInputs(rng, P, n))[0]) == k);
    auto small = [&] {
      Inputs in = normalInputs(rng, P, n);
      for (auto& x : in)
        for (auto& v : x) v *= 0.01f;
      return in;
    };
    // 100x smaller sums: the reused global threshold admits (almost) nothing.
    CHECK(2 * nonZeros(g.checkedCall(small())[0]) < k);
    // Evaluated exactly on every rank (and in the reference): k values again.
    const size_t next = nonZeros(g.checkedCall(small())[0]);
    CHECK(4 * next >= 3 * k);
    CHECK(next <= k);
    // Reuse resumes from the exact threshold.
    CHECK(4 * nonZeros(g.checkedCall(small())[0]) >= k);
  }
}
