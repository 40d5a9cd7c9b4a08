// Reduce-scatter harness for the sparse forms (test_reduce_scatter_sparse.cc):
// P ranks on threads over LocalTransport, one algorithm object and residual
// store per rank, each call in NCCL's layout (count = recvcount x P, rank r
// receives [r * recvcount, (r + 1) * recvcount)), optionally in place, and
// checkable against the algorithm's reduceScatterReference.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <thread>

#include "sparse_harness.h"

namespace gradcomp::test::sparse {

struct RsGroup {
  int P;
  param::Overrides config;
  std::vector<std::unique_ptr<transport::Transport>> nets;
  std::vector<std::unique_ptr<Algorithm>> algs;
  std::vector<std::unique_ptr<ErrorFeedbackStore>> efs;
  std::unique_ptr<Reference> ref;
  uint64_t callSeq = 0;

  RsGroup(const std::string& algo, int nranks, const std::map<std::string, std::string>& params)
      : P(nranks) {
    for (const auto& [k, v] : params) REQUIRE(config.set(k, v, "test").ok());
    const AlgorithmInfo* info = findAlgorithm(algo);
    REQUIRE(info);
    nets = transport::createLocalTransports(P, 20.0);
    for (int r = 0; r < P; ++r) {
      algs.push_back(info->create());
      REQUIRE(algs.back()->hasReduceScatter());
      std::unique_ptr<ErrorFeedbackStore> s;
      REQUIRE(ErrorFeedbackStore::create(config, &s).ok());
      efs.push_back(std::move(s));
    }
    if (info->reduceScatterReference) {
      ref = info->reduceScatterReference(P);
      REQUIRE(ref->configure(config).ok());
    }
  }

  AllreduceArgs argsOf(size_t n, RedOp op, uint64_t key) const {
    AllreduceArgs a;
    a.count = n;
    a.op = op;
    a.bufferKey = key;
    a.coll = Collective::ReduceScatter;
    return a;
  }

  // One reduce-scatter of fp32 inputs (each of recvcount x P elements);
  // returns each rank's shard. inPlace: NCCL's in-place layout.
  Inputs call(const Inputs& in, RedOp op = RedOp::Sum, bool inPlace = false, uint64_t key = 42) {
    const size_t n = in[0].size(), rc = n / size_t(P);
    Inputs buf = in, out(P, std::vector<float>(rc, -99.0f));
    std::vector<Status> st(P);
    std::vector<std::thread> threads;
    const uint64_t seq = callSeq++;
    for (int r = 0; r < P; ++r)
      threads.emplace_back([&, r] {
        Context ctx{*nets[r], device::cpuBackend(), config, seq};
        ctx.errorFeedback = efs[r].get();
        AllreduceArgs a = argsOf(n, op, key);
        a.sendBuf = buf[r].data();
        a.recvBuf = inPlace ? buf[r].data() + size_t(r) * rc : out[r].data();
        st[r] = runCollective(*algs[r], ctx, a);
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < P; ++r) {
      INFO("rank " << r << ": " << st[r].toString());
      REQUIRE(st[r].ok());
      if (inPlace) out[r].assign(buf[r].begin() + r * rc, buf[r].begin() + (r + 1) * rc);
    }
    return out;
  }

  // The call checked against the reference: rank r's shard must equal its
  // slice of the expected tensor (within the reference's tolerance; NaN
  // where it expects NaN). Returns the shards.
  Inputs checkedCall(const Inputs& in, RedOp op = RedOp::Sum, bool inPlace = false,
                     uint64_t key = 42) {
    const Inputs out = call(in, op, inPlace, key);
    std::vector<const void*> ptrs;
    for (const auto& v : in) ptrs.push_back(v.data());
    std::vector<double> expected, tol;
    REQUIRE(ref->expect(ptrs, argsOf(in[0].size(), op, key), &expected, &tol).ok());
    REQUIRE(expected.size() == in[0].size());
    const size_t rc = in[0].size() / size_t(P);
    size_t wrong = 0;
    for (int r = 0; r < P; ++r)
      for (size_t i = 0; i < rc; ++i) {
        const double o = out[r][i], e = expected[r * rc + i];
        wrong += !(o == float(e) || std::fabs(o - e) <= tol[r * rc + i] ||
                   (std::isnan(o) && std::isnan(e)));
      }
    CHECK(wrong == 0);
    return out;
  }

  std::vector<float> residual(int r, size_t n, uint64_t key = 42) {
    std::vector<float> z(n, 0.0f);
    REQUIRE(efs[r]->readResidual(key, n, z.data()).ok());
    return z;
  }
  uint64_t bytesSent(int r) const { return nets[r]->totalCounters().bytesSent; }
  void resetCounters() {
    for (auto& n : nets) n->resetCounters();
  }
};

// The shards laid end to end: the whole reduced tensor.
inline std::vector<float> joined(const Inputs& shards) {
  std::vector<float> all;
  for (const auto& s : shards) all.insert(all.end(), s.begin(), s.end());
  return all;
}

// Bytes a rank sends in the frame's non-finite flag exchange (anyRank: one
// 4-byte word per round, ceil(log2 P) rounds).
inline uint64_t flagBytes(int P) {
  uint64_t b = 0;
  for (int d = 1; d < P; d *= 2) b += 4;
  return b;
}

}  // namespace gradcomp::test::sparse
