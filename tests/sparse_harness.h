// Test harness for the sparse family: P ranks on threads over the local
// transport (one algorithm object and residual store per rank, like a
// communicator), each call checkable against the algorithm's Reference, plus
// input generators and the independent top-k definition. Header-only; used by
// test_sparse_*.cc.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/error_feedback.h"
#include "algorithms/sparse/sparse_common.h"
#include "transport/local_transport.h"

namespace gradcomp::test::sparse {

using namespace gradcomp::algo;
namespace sparse_coo = gradcomp::algo::sparse;

using Inputs = std::vector<std::vector<float>>;

// P ranks on threads, one algorithm instance and residual store per rank.
struct Group {
  int P;
  param::Overrides config;
  std::vector<std::unique_ptr<transport::Transport>> nets;
  std::vector<std::unique_ptr<Algorithm>> algs;
  std::vector<std::unique_ptr<ErrorFeedbackStore>> efs;
  std::unique_ptr<Reference> ref;
  uint64_t callSeq = 0;

  Group(const std::string& algo, int nranks, const std::map<std::string, std::string>& params)
      : P(nranks) {
    for (const auto& [k, v] : params) REQUIRE(config.set(k, v, "test").ok());
    const AlgorithmInfo* info = findAlgorithm(algo);
    REQUIRE(info);
    nets = transport::createLocalTransports(P, 20.0);
    for (int r = 0; r < P; ++r) {
      algs.push_back(info->create());
      std::unique_ptr<ErrorFeedbackStore> s;
      REQUIRE(ErrorFeedbackStore::create(config, &s).ok());
      efs.push_back(std::move(s));
    }
    ref = info->reference(P);
    REQUIRE(ref->configure(config).ok());
  }

  // One collective on fp32 inputs; returns each rank's output.
  Inputs call(const Inputs& in, uint64_t key = 42, RedOp op = RedOp::Sum) {
    Inputs out(P, std::vector<float>(in[0].size(), -99.0f));
    std::vector<Status> st(P);
    std::vector<std::thread> threads;
    const uint64_t seq = callSeq++;
    for (int r = 0; r < P; ++r)
      threads.emplace_back([&, r] {
        Context ctx{*nets[r], device::cpuBackend(), config, seq};
        ctx.errorFeedback = efs[r].get();
        AllreduceArgs a;
        a.sendBuf = in[r].data();
        a.recvBuf = out[r].data();
        a.count = in[r].size();
        a.op = op;
        a.bufferKey = key;
        st[r] = algs[r]->allreduce(ctx, a);
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < P; ++r) {
      INFO("rank " << r << ": " << st[r].toString());
      REQUIRE(st[r].ok());
    }
    return out;
  }

  // The call checked against the reference (bit-exact after rounding) and
  // for identical outputs on all ranks.
  Inputs checkedCall(const Inputs& in, uint64_t key = 42, RedOp op = RedOp::Sum) {
    Inputs out = call(in, key, op);
    std::vector<const void*> ptrs;
    for (const auto& v : in) ptrs.push_back(v.data());
    AllreduceArgs a;
    a.count = in[0].size();
    a.op = op;
    a.bufferKey = key;
    std::vector<double> expected, tol;
    REQUIRE(ref->expect(ptrs, a, &expected, &tol).ok());
    size_t wrong = 0;
    for (size_t i = 0; i < a.count; ++i) {
      const double o = out[0][i];
      const bool right = o == float(expected[i]) || std::fabs(o - expected[i]) <= tol[i] ||
                         (std::isnan(o) && std::isnan(expected[i]));
      wrong += !right;
    }
    CHECK(wrong == 0);
    for (int r = 1; r < P; ++r) CHECK(std::memcmp(out[r].data(), out[0].data(), 4 * a.count) == 0);
    return out;
  }

  std::vector<float> residual(int r, size_t n, uint64_t key = 42) {
    std::vector<float> z(n, 0.0f);
    REQUIRE(efs[r]->readResidual(key, n, z.data()).ok());
    return z;
  }
  uint64_t maxBytesSent() {
    uint64_t m = 0;
    for (auto& n : nets) m = std::max(m, n->totalCounters().bytesSent);
    return m;
  }
  void resetCounters() {
    for (auto& n : nets) n->resetCounters();
  }
};

// Values on a 1/64 grid in [-16, 16]: fp32 sums of a few are exact, so
// summation order cannot matter and ties are frequent.
inline Inputs gridInputs(std::mt19937_64& rng, int P, size_t n) {
  std::uniform_int_distribution<int> v(-1024, 1024);
  Inputs in(P, std::vector<float>(n));
  for (auto& x : in)
    for (auto& e : x) e = float(v(rng)) / 64.0f;
  return in;
}

inline Inputs normalInputs(std::mt19937_64& rng, int P, size_t n) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  Inputs in(P, std::vector<float>(n));
  for (auto& x : in)
    for (auto& e : x) e = g(rng);
  return in;
}

// Topk_k by |x| with ties in index order and zeros never selected: the
// independent definition (stable sort, no thresholds).
inline std::vector<std::pair<uint64_t, float>> topk(const std::vector<float>& x, size_t k) {
  std::vector<uint64_t> order(x.size());
  for (size_t i = 0; i < x.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](uint64_t a, uint64_t b) { return std::fabs(x[a]) > std::fabs(x[b]); });
  std::vector<std::pair<uint64_t, float>> sel;
  for (size_t i = 0; i < order.size() && sel.size() < k; ++i)
    if (x[order[i]] != 0.0f) sel.push_back({order[i], x[order[i]]});
  std::sort(sel.begin(), sel.end());
  return sel;
}

inline size_t kOf(double density, size_t n) {
  return std::min(n, std::max<size_t>(1, size_t(std::floor(density * double(n)))));
}

// Topk_k(sum_i Topk_k(x_i)) as a dense vector.
inline std::vector<float> okTopkFormula(const Inputs& in, size_t k) {
  const size_t n = in[0].size();
  std::vector<float> sum(n, 0.0f);
  for (const auto& x : in)
    for (auto [i, v] : topk(x, k)) sum[i] += v;
  std::vector<float> u(n, 0.0f);
  for (auto [i, v] : topk(sum, k)) u[i] = v;
  return u;
}

inline std::string densityFor(size_t k, size_t n) {
  return std::to_string(std::min(1.0, (double(k) + 0.5) / double(n)));
}

// Residual conservation over one call: max_i |sum_r (in_r + eps_r) - (out_i +
// sum_r eps'_r)|, where eps are the residuals before the call (updated to
// eps' on return). Error feedback must neither lose nor invent mass.
inline double conservationGap(Group& g, const Inputs& in, const Inputs& out,
                              std::vector<std::vector<float>>* eps) {
  const size_t n = in[0].size();
  std::vector<std::vector<float>> now(g.P);
  for (int r = 0; r < g.P; ++r) now[r] = g.residual(r, n);
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    double lhs = 0, rhs = out[0][i];
    for (int r = 0; r < g.P; ++r) lhs += double(in[r][i]) + (*eps)[r][i], rhs += now[r][i];
    worst = std::max(worst, std::fabs(lhs - rhs));
  }
  eps->swap(now);
  return worst;
}

inline const std::vector<int> kRanks = {1, 2, 3, 4, 5, 8};

// COO lists of the CPU reference backend, built from and read as host vectors.
inline sparse_coo::Coo cooOf(const std::vector<uint64_t>& idx, const std::vector<float>& val) {
  sparse_coo::Coo c(device::cpuBackend());
  REQUIRE(c.idx.assign(idx.data(), idx.size()).ok());
  REQUIRE(c.val.assign(val.data(), val.size()).ok());
  return c;
}
inline std::vector<uint64_t> idxOf(const sparse_coo::Coo& c) {
  const uint64_t* p = c.idx.hostView();
  return p ? std::vector<uint64_t>(p, p + c.size()) : std::vector<uint64_t>();
}
inline std::vector<float> valOf(const sparse_coo::Coo& c) {
  const float* p = c.val.hostView();
  return p ? std::vector<float>(p, p + c.size()) : std::vector<float>();
}

}  // namespace gradcomp::test::sparse
