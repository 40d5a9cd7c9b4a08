// gtopk (recursive-doubling tree merge of k-sparse vectors) over LocalTransport
// threads. Properties: the result equals the tree computed independently here
// (dense vectors, stable-sort top-k) for P in {1,2,3,4,5,8} including k < P;
// every call equals the registered Reference bit for bit and all ranks are
// bit-identical (checkedCall); residual conservation with the survivor rule;
// the survivor rule itself on a crafted case; O(k) words per round.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "sparse_harness.h"

using namespace gradcomp;
using namespace gradcomp::test::sparse;

namespace {

std::vector<float> dense(const std::vector<std::pair<uint64_t, float>>& sel, size_t n) {
  std::vector<float> v(n, 0.0f);
  for (auto [i, x] : sel) v[i] = x;
  return v;
}

// The gTop-k tree, written independently of algorithms/sparse/gtopk.cc:
// extras r >= P2 fold into r - P2, then butterfly rounds; each merge is the
// top-k of the sum. Inputs on the 1/64 grid keep every sum exact.
std::vector<float> gtopkFormula(const Inputs& in, size_t k) {
  const int P = int(in.size());
  const size_t n = in[0].size();
  int P2 = 1;
  while (2 * P2 <= P) P2 *= 2;
  auto merge = [&](const std::vector<float>& a, const std::vector<float>& b) {
    std::vector<float> s(n);
    for (size_t i = 0; i < n; ++i) s[i] = a[i] + b[i];
    return dense(topk(s, k), n);
  };
  std::vector<std::vector<float>> cur(P2);
  for (int r = 0; r < P2; ++r) {
    cur[r] = dense(topk(in[r], k), n);
    if (r + P2 < P) cur[r] = merge(cur[r], dense(topk(in[r + P2], k), n));
  }
  for (int d = 1; d < P2; d *= 2) {
    std::vector<std::vector<float>> next(P2);
    for (int r = 0; r < P2; ++r) next[r] = merge(cur[r], cur[r ^ d]);
    cur.swap(next);
  }
  return cur[0];
}

}  // namespace

TEST_CASE("gtopk equals the central tree for P in {1,2,3,4,5,8}, k < P included", "[sparse]") {
  REQUIRE(findAlgorithm("gtopk"));
  std::mt19937_64 rng(11);
  for (int P : kRanks)
    for (size_t n : {size_t(1), size_t(10), size_t(997)})
      for (size_t k : {size_t(1), size_t(3), size_t(40)}) {
        if (k > n) continue;
        INFO("P=" << P << " n=" << n << " k=" << k);
        Group g("gtopk", P, {{"DENSITY", densityFor(k, n)}, {"EF", "off"}});
        for (int call = 0; call < 3; ++call) {
          const Inputs in = gridInputs(rng, P, n);
          const Inputs out = g.checkedCall(in);  // reference + ranks bit-identical
          CHECK(out[0] == gtopkFormula(in, k));
          size_t nnz = 0;
          for (float v : out[0]) nnz += v != 0.0f;
          CHECK(nnz <= k);
        }
      }
}

TEST_CASE("gtopk keeps in the residual what did not survive every merge", "[sparse]") {
  // k = 1, n = 2. Round 1: {0:4}+{1:5} keeps index 1 (rank 0's 4 dropped),
  // {0:7}+{1:1} keeps index 0 (rank 3's 1 dropped). Round 2: {1:5}+{0:7}
  // keeps index 0 = 7. Index 0 is in rank 0's selection and in the result,
  // yet rank 0's value never reached it: its residual keeps 4.
  Group g("gtopk", 4, {{"DENSITY", densityFor(1, 2)}});
  const Inputs in = {{4, 0}, {0, 5}, {7, 0}, {0, 1}};
  const Inputs out = g.checkedCall(in);
  CHECK(out[0] == std::vector<float>{7, 0});
  CHECK(g.residual(0, 2) == std::vector<float>{4, 0});
  CHECK(g.residual(1, 2) == std::vector<float>{0, 5});
  CHECK(g.residual(2, 2) == std::vector<float>{0, 0});
  CHECK(g.residual(3, 2) == std::vector<float>{0, 1});
}

TEST_CASE("gtopk error feedback conserves mass: sum_i acc_i = u + sum_i eps_i", "[sparse]") {
  std::mt19937_64 rng(13);
  for (int P : {1, 3, 4, 5}) {
    INFO("P=" << P);
    const size_t n = 500;
    Group g("gtopk", P, {{"DENSITY", "0.03"}});
    std::vector<std::vector<float>> eps(P, std::vector<float>(n, 0.0f));
    for (int call = 0; call < 6; ++call) {
      const Inputs in = gridInputs(rng, P, n);
      CHECK(conservationGap(g, in, g.checkedCall(in), &eps) < 1e-4);
    }
  }
}

TEST_CASE("gtopk wire volume: at most one k-sparse message per round", "[sparse]") {
  const size_t n = 100000, k = 1000;  // density 0.01
  for (int P : {2, 3, 4, 8}) {
    std::mt19937_64 rng(P);
    Group g("gtopk", P, {{"DENSITY", "0.01"}});
    g.call(normalInputs(rng, P, n));
    g.resetCounters();
    g.call(normalInputs(rng, P, n));
    int rounds = 0;
    for (int d = 1; 2 * d <= P; d *= 2) ++rounds;
    const bool folds = (P & (P - 1)) != 0;  // + result and survivor list
    const double message = 40.0 + 8.0 * k;
    const double bound = (rounds + (folds ? 2 : 0)) * message + 64.0 * P;
    INFO("P=" << P << " bytes " << g.maxBytesSent() << " bound " << bound);
    CHECK(double(g.maxBytesSent()) <= bound);
    CHECK(double(g.maxBytesSent()) >= rounds * 8.0 * k * 0.9);  // it does move k per round
  }
}
