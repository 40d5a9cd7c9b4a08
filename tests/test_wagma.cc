// WAGMA (algorithms/wagma): groups, the blocking schedule, the gradient
// shadow and the reference, over LocalTransport threads. Wait-avoiding
// execution is in test_wagma_async.cc.
//
// Inputs are small integers and groups have power-of-two sizes unless a test
// says otherwise, so sums and averages are exact in fp32 and results are
// compared bit for bit.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <mutex>
#include <set>
#include <thread>

#include "algorithms/wagma/reference.h"
#include "algorithms/wagma/topology.h"
#include "algorithms/wagma/wagma.h"
#include "transport/local_transport.h"

using namespace gradcomp;
using namespace gradcomp::algo::wagma;
using gradcomp::algo::AllreduceArgs;
using gradcomp::algo::Context;

namespace {

// Channels for wait-avoiding streams: the k-th request of every rank gets
// endpoint `rank` of the k-th local fabric.
struct ChannelPool {
  explicit ChannelPool(int p) : P(p), requests(p, 0) {}
  ChannelFactory factory(int rank) {
    return [this, rank](Context&, std::unique_ptr<transport::Transport>* out) {
      std::lock_guard<std::mutex> lock(mu);
      const size_t k = size_t(requests[rank]++);
      while (fabrics.size() <= k) fabrics.push_back(transport::createLocalTransports(P, 20.0));
      *out = std::move(fabrics[k][rank]);
      return Status::Ok();
    };
  }
  const int P;
  std::mutex mu;
  std::vector<int> requests;
  std::vector<std::vector<std::unique_ptr<transport::Transport>>> fabrics;
};

// One rank's view: call() runs one allreduce of `key` through its Wagma.
struct Rank {
  int rank;
  Wagma& algo;
  transport::Transport& net;
  const param::Overrides& cfg;
  uint64_t seq = 0;
  Status call(const void* in, void* out, size_t n, uint64_t key = 7,
              DataType t = DataType::Float32, RedOp op = RedOp::Avg) {
    Context ctx{net, device::cpuBackend(), cfg, seq++};
    AllreduceArgs a;
    a.sendBuf = in;
    a.recvBuf = out;
    a.count = n;
    a.dtype = t;
    a.op = op;
    a.bufferKey = key;
    return algo.allreduce(ctx, a);
  }
};

param::Overrides config(int group, int period, bool wait, const char* mode = "weights") {
  param::Overrides o;
  REQUIRE(o.set("WAGMA_GROUP", std::to_string(group), "test").ok());
  REQUIRE(o.set("WAGMA_PERIOD", std::to_string(period), "test").ok());
  REQUIRE(o.set("WAGMA_WAIT", wait ? "1" : "0", "test").ok());
  REQUIRE(o.set("WAGMA_MODE", mode, "test").ok());
  return o;
}

// Runs body on P threads (one Wagma per rank); returns each rank's error ("" = ok).
std::vector<std::string> onRanks(int P, const param::Overrides& cfg,
                                 const std::function<std::string(Rank&)>& body) {
  auto nets = transport::createLocalTransports(P, 20.0);
  ChannelPool pool(P);
  std::vector<std::string> errors(P);
  std::vector<std::thread> threads;
  for (int r = 0; r < P; ++r)
    threads.emplace_back([&, r] {
      Wagma algo(pool.factory(r));
      Rank rk{r, algo, *nets[r], cfg};
      errors[r] = body(rk);
    });
  for (auto& t : threads) t.join();
  return errors;
}

void requireAllOk(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) {
    INFO("rank " << r);
    CHECK(errors[r] == "");
  }
}

#define OK_OR_RETURN(expr)                                             \
  do {                                                                 \
    Status s_ = (expr);                                                \
    if (!s_.ok()) return std::string(#expr) + ": " + s_.toString();    \
  } while (0)

}  // namespace

TEST_CASE("wagma groups partition the ranks for every call", "[wagma]") {
  for (int P : {1, 2, 3, 4, 5, 6, 8, 12, 16, 32}) {
    Topology base;
    REQUIRE(makeTopology(P, 0, &base).ok());
    for (int S = 1; S <= base.core; S *= 2) {
      Topology topo;
      REQUIRE(makeTopology(P, S, &topo).ok());
      REQUIRE(topo.groupSize() == S);
      for (uint64_t t = 0; t < 40; ++t) {
        INFO("P=" << P << " S=" << S << " t=" << t);
        std::vector<int> owner(P, -1);
        for (int r = 0; r < P; ++r) {
          const std::vector<int> g = groupMembers(topo, r, t);
          REQUIRE(std::find(g.begin(), g.end(), r) != g.end());
          int cores = 0;
          for (int m : g) {
            cores += m < topo.core;
            // Every member sees the same group: the groups are disjoint.
            REQUIRE(groupMembers(topo, m, t) == g);
          }
          REQUIRE(cores == S);
          REQUIRE(groupContributors(topo, r, t) == int(g.size()));
          owner[r] = g.front();
        }
        std::set<int> groups(owner.begin(), owner.end());
        REQUIRE(int(groups.size()) == topo.core / S);  // P2/S groups cover all ranks
      }
    }
  }
}

TEST_CASE("wagma groups match the notes' P=8, S=4 example", "[wagma]") {
  Topology topo;
  REQUIRE(makeTopology(8, 4, &topo).ok());
  using G = std::vector<int>;
  CHECK(groupMembers(topo, 0, 0) == G{0, 1, 2, 3});
  CHECK(groupMembers(topo, 5, 0) == G{4, 5, 6, 7});
  CHECK(groupMembers(topo, 0, 1) == G{0, 1, 4, 5});
  CHECK(groupMembers(topo, 6, 1) == G{2, 3, 6, 7});
  CHECK(groupMembers(topo, 0, 2) == G{0, 2, 4, 6});
  CHECK(groupMembers(topo, 7, 2) == G{1, 3, 5, 7});
  CHECK(groupBits(topo, 1) == std::vector<int>{2, 0});  // (t*g + j) mod L
}

TEST_CASE("wagma group size: default and invalid values", "[wagma]") {
  Topology t;
  REQUIRE(makeTopology(8, 0, &t).ok());
  CHECK(t.groupSize() == 4);  // sqrt(8) rounded up to a power of two
  REQUIRE(makeTopology(16, 0, &t).ok());
  CHECK(t.groupSize() == 4);
  REQUIRE(makeTopology(6, 0, &t).ok());  // core 4, extras 4, 5 folded into 0, 1
  CHECK(t.groupSize() == 2);
  CHECK(foldPartner(t, 5) == 1);
  CHECK(foldPartner(t, 1) == 5);
  CHECK(foldPartner(t, 2) == -1);
  Status s = makeTopology(8, 3, &t);
  CHECK(s.code() == Err::InvalidConfig);
  CHECK(s.message().find("GRADCOMP_WAGMA_GROUP=3") != std::string::npos);
  CHECK(makeTopology(6, 8, &t).code() == Err::InvalidConfig);  // > largest power of two
}

// Exactness properties hold when nobody is late, which only the blocking
// schedule guarantees; test_wagma_async.cc checks wait-avoiding results
// against what each rank actually contributed.
TEST_CASE("wagma with S = P equals allreduce", "[wagma]") {
  for (bool wait : {true})
    for (int P : {2, 4, 8}) {
      INFO("P=" << P << " wait=" << wait);
      const size_t n = 33;
      requireAllOk(onRanks(P, config(P, 1024, wait), [&](Rank& rk) -> std::string {
        for (int t = 0; t < 5; ++t) {
          std::vector<float> in(n), out(n);
          for (size_t i = 0; i < n; ++i) in[i] = float((rk.rank * 7 + i * 3 + t) % 11);
          OK_OR_RETURN(rk.call(in.data(), out.data(), n));
          for (size_t i = 0; i < n; ++i) {
            double mean = 0;
            for (int q = 0; q < P; ++q) mean += double((q * 7 + i * 3 + t) % 11);
            if (out[i] != float(mean / P)) return "element " + std::to_string(i) + " differs";
          }
        }
        return "";
      }));
    }
}

TEST_CASE("wagma: one-hot inputs reach the global mean after ceil(log_S P) calls", "[wagma]") {
  struct Case { int P, S, calls; };
  for (Case c : {Case{8, 2, 3}, Case{8, 4, 2}, Case{16, 4, 2}, Case{16, 2, 4}, Case{4, 2, 2}})
    for (bool wait : {true}) {
      INFO("P=" << c.P << " S=" << c.S << " wait=" << wait);
      requireAllOk(onRanks(c.P, config(c.S, 1024, wait), [&](Rank& rk) -> std::string {
        std::vector<float> w(c.P, 0.0f);
        w[rk.rank] = 1.0f;
        for (int t = 1; t <= c.calls; ++t) {
          OK_OR_RETURN(rk.call(w.data(), w.data(), w.size()));
          bool mean = true;
          for (float x : w) mean = mean && x == 1.0f / c.P;
          if (t < c.calls && mean) return "global mean already after " + std::to_string(t);
          if (t == c.calls && !mean) return "no global mean after " + std::to_string(t);
        }
        return "";
      }));
    }
}

TEST_CASE("wagma blocking: sum preserved, every period-th call all ranks equal", "[wagma]") {
  for (int P : {4, 6, 8}) {
    INFO("P=" << P);
    const int period = 3, calls = 7;
    const size_t n = 17;
    std::vector<std::vector<std::vector<float>>> outs(calls, std::vector<std::vector<float>>(P));
    requireAllOk(onRanks(P, config(0, period, true), [&](Rank& rk) -> std::string {
      for (int t = 0; t < calls; ++t) {
        std::vector<float> in(n);
        for (size_t i = 0; i < n; ++i) in[i] = float((rk.rank * 5 + i + t * 3) % 13);
        outs[t][rk.rank].resize(n);
        OK_OR_RETURN(rk.call(in.data(), outs[t][rk.rank].data(), n));
      }
      return "";
    }));
    for (int t = 0; t < calls; ++t) {
      INFO("call " << t);
      const bool global = (t + 1) % period == 0;
      bool allEqual = true;
      for (size_t i = 0; i < n; ++i) {
        double inSum = 0, outSum = 0;
        for (int r = 0; r < P; ++r) {
          inSum += double((r * 5 + i + t * 3) % 13);
          outSum += outs[t][r][i];
          allEqual = allEqual && outs[t][r][i] == outs[t][0][i];
        }
        // Power-of-two groups divide exactly; folded groups of 3 round once.
        CHECK(std::fabs(outSum - inSum) <= (P == 6 ? 1e-4 * inSum : 0.0));
        if (global) CHECK(outs[t][0][i] == float(inSum / P));
      }
      CHECK(allEqual == global);  // group calls differ across groups for these inputs
    }
  }
}

TEST_CASE("wagma gradient-shadow mode reproduces weight averaging for plain SGD", "[wagma]") {
  // The same SGD run twice: averaging weights, and averaging gradients through
  // the shadow. A gradient that depends on the weights makes the runs diverge
  // unless the equivalence holds.
  const int P = 8, steps = 12;
  const size_t n = 5;
  const double lr = 0.125;
  auto grad = [](int r, int t, size_t i, double w) { return 0.25 * w + (r + 1) * ((t + i) % 3); };
  std::vector<std::vector<double>> byWeights(P), byGradients(P);
  for (bool gradientMode : {false, true})
    for (bool wait : {true, false}) {
      INFO("gradient=" << gradientMode << " wait=" << wait);
      auto& final = gradientMode ? byGradients : byWeights;
      requireAllOk(onRanks(P, config(2, 5, wait, gradientMode ? "gradient" : "weights"),
                           [&](Rank& rk) -> std::string {
        std::vector<double> w(n, 1.0), g(n);
        for (int t = 0; t < steps; ++t) {
          for (size_t i = 0; i < n; ++i) g[i] = grad(rk.rank, t, i, w[i]);
          if (gradientMode) {
            OK_OR_RETURN(rk.call(g.data(), g.data(), n, 7, DataType::Float64));
            for (size_t i = 0; i < n; ++i) w[i] -= lr * g[i];
          } else {
            for (size_t i = 0; i < n; ++i) w[i] -= lr * g[i];
            OK_OR_RETURN(rk.call(w.data(), w.data(), n, 7, DataType::Float64));
          }
        }
        if (wait) final[rk.rank] = w;
        return "";
      }));
    }
  for (int r = 0; r < P; ++r)
    for (size_t i = 0; i < n; ++i) CHECK(byGradients[r][i] == Approx(byWeights[r][i]).epsilon(1e-12));
}

TEST_CASE("wagma: ncclSum returns P times the average", "[wagma]") {
  const int P = 4;
  requireAllOk(onRanks(P, config(2, 1024, true), [&](Rank& rk) -> std::string {
    std::vector<float> in(3, float(rk.rank)), out(3);
    OK_OR_RETURN(rk.call(in.data(), out.data(), 3, 9, DataType::Float32, RedOp::Sum));
    // Call 0 uses bit 0: groups {0,1}, {2,3}.
    const float expect = rk.rank < 2 ? 0.5f * 4 : 2.5f * 4;
    return out[0] == expect ? "" : "sum " + std::to_string(out[0]);
  }));
}

TEST_CASE("wagma reference matches the blocking schedule", "[wagma]") {
  for (int P : {4, 6}) {
    INFO("P=" << P);
    const int calls = 9;
    const size_t n = 11;
    // The reference reads the registry, so the job uses the registry defaults
    // (blocking needs WAGMA_WAIT=1; period 8 puts call 7 on the global path).
    param::Overrides cfg;
    REQUIRE(cfg.set("WAGMA_WAIT", "1", "test").ok());
    std::vector<std::vector<std::vector<float>>> ins(calls, std::vector<std::vector<float>>(P)),
        outs = ins;
    requireAllOk(onRanks(P, cfg, [&](Rank& rk) -> std::string {
      for (int t = 0; t < calls; ++t) {
        auto& in = ins[t][rk.rank];
        in.resize(n);
        for (size_t i = 0; i < n; ++i) in[i] = float(std::sin(rk.rank * 3.0 + i + t * 0.7));
        outs[t][rk.rank].resize(n);
        OK_OR_RETURN(rk.call(in.data(), outs[t][rk.rank].data(), n));
      }
      return "";
    }));
    WagmaReference ref(P);
    // With GRADCOMP_WAGMA_WAIT unset the reference assumes wait-avoiding and
    // only widens its bound, so the blocking outputs must pass either way.
    for (int t = 0; t < calls; ++t) {
      std::vector<const void*> ptrs;
      for (int r = 0; r < P; ++r) ptrs.push_back(ins[t][r].data());
      AllreduceArgs a;
      a.count = n;
      a.op = RedOp::Avg;
      a.bufferKey = 3;
      std::vector<double> expected, tol;
      REQUIRE(ref.expect(ptrs, a, &expected, &tol).ok());
      INFO("call " << t);
      for (int r = 0; r < P; ++r)
        for (size_t i = 0; i < n; ++i) CHECK(std::fabs(outs[t][r][i] - expected[i]) <= tol[i]);
      if (t == 7)  // global call: exact mean, tolerance at rounding level
        for (size_t i = 0; i < n; ++i) CHECK(tol[i] < 1e-5);
    }
  }
}
