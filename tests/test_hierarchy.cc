// The hierarchical schedule (algorithms/hierarchy) over LocalTransport
// threads on the CPU reference: every rank's result of every call is checked
// against the hierarchical reference (host sums bit-exact, then the
// algorithm's own reference per rail), every rank of the job returns the same
// bits, and the bytes each rank sends to other hosts are compared with the
// flat schedule's.
#include <catch2/catch.hpp>

#include <cmath>
#include <thread>

#include "algorithms/error_feedback.h"
#include "algorithms/hierarchy/hierarchical.h"
#include "support/algo_runner.h"
#include "transport/local_transport.h"

using namespace gradcomp;
using namespace gradcomp::algo;

namespace {

struct Run {
  std::string algo;
  std::vector<std::pair<std::string, std::string>> params;
  int hosts = 2, perHost = 2;
  size_t count = 4099;
  int calls = 4;
  RedOp op = RedOp::Sum;
  bool interleaved = false;  // rank r on host r % hosts (else consecutive blocks)
  Collective coll = Collective::AllReduce;
  // Reduce-scatter: count is the whole input (recvcount x P).
  size_t outCount() const {
    return coll == Collective::ReduceScatter ? count / size_t(hosts * perHost) : count;
  }
};

std::vector<std::vector<int>> hostRanksOf(const Run& run) {
  std::vector<std::vector<int>> hosts(static_cast<size_t>(run.hosts));
  for (int r = 0; r < run.hosts * run.perHost; ++r)
    hosts[size_t(run.interleaved ? r % run.hosts : r / run.perHost)].push_back(r);
  return hosts;
}

struct Outcome {
  std::vector<std::vector<std::vector<float>>> out;  // [call][rank][i]
  std::vector<std::vector<float>> in;                // [call * P + rank][i]
  double interHostBytes = 0;                         // summed over ranks and calls
};

// hierarchical: run through makeHierarchical (else the flat algorithm).
Outcome runJob(const Run& run, bool hierarchical) {
  const int P = run.hosts * run.perHost;
  const auto hostRanks = hostRanksOf(run);
  std::vector<int> hostOf(static_cast<size_t>(P));
  for (size_t h = 0; h < hostRanks.size(); ++h)
    for (int r : hostRanks[h]) hostOf[size_t(r)] = int(h);
  param::Overrides cfg;
  for (const auto& [k, v] : run.params) REQUIRE(cfg.set(k, v, "test").ok());
  Outcome o;
  o.out.assign(size_t(run.calls), std::vector<std::vector<float>>(size_t(P)));
  for (int c = 0; c < run.calls; ++c)
    for (int r = 0; r < P; ++r) {
      std::vector<float> x(run.count);
      for (size_t i = 0; i < run.count; ++i) x[i] = testing::inputValue(r, c, i);
      o.in.push_back(x);
    }
  auto nets = transport::createLocalTransports(P, 30.0);
  std::vector<Status> st(static_cast<size_t>(P));
  std::vector<double> inter(static_cast<size_t>(P), 0.0);
  std::vector<std::thread> threads;
  for (int r = 0; r < P; ++r)
    threads.emplace_back([&, r] {
      const AlgorithmInfo* info = findAlgorithm(run.algo);
      std::unique_ptr<Algorithm> alg = info->create();
      if (hierarchical) alg = hierarchy::makeHierarchical(std::move(alg), hostRanks);
      std::unique_ptr<ErrorFeedbackStore> ef;
      Status s = ErrorFeedbackStore::create(cfg, &ef);
      for (int c = 0; c < run.calls && s.ok(); ++c) {
        auto& out = o.out[size_t(c)][size_t(r)];
        out.assign(run.outCount(), 0.0f);
        Context ctx{*nets[size_t(r)], device::cpuBackend(), cfg, uint64_t(c), ef.get()};
        AllreduceArgs a;
        a.sendBuf = o.in[size_t(c * P + r)].data();
        a.recvBuf = out.data();
        a.count = run.count;
        a.op = run.op;
        a.coll = run.coll;
        a.bufferKey = 11;
        s = runCollective(*alg, ctx, a);
        if (s.ok()) s = device::cpuBackend().sync();
      }
      for (int p = 0; p < P; ++p)
        if (hostOf[size_t(p)] != hostOf[size_t(r)])
          inter[size_t(r)] += double(nets[size_t(r)]->counters(p).bytesSent);
      st[size_t(r)] = s;
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < P; ++r) {
    INFO("rank " << r << ": " << st[size_t(r)].message());
    REQUIRE(st[size_t(r)].ok());
    o.interHostBytes += inter[size_t(r)];
  }
  return o;
}

// Number of elements outside the hierarchical reference (bench's rule:
// equal to the expected value rounded to fp32, or within the tolerance),
// over every call and rank; also requires identical results on all ranks.
uint64_t wrongAgainstReference(const Run& run, const Outcome& o) {
  const int P = run.hosts * run.perHost;
  auto ref = hierarchy::makeHierarchicalReference(*findAlgorithm(run.algo), hostRanksOf(run));
  REQUIRE(ref);
  param::Overrides cfg;
  for (const auto& [k, v] : run.params) REQUIRE(cfg.set(k, v, "test").ok());
  REQUIRE(ref->configure(cfg).ok());
  uint64_t wrong = 0;
  std::vector<double> e, tol;
  for (int c = 0; c < run.calls; ++c) {
    std::vector<const void*> inputs;
    for (int r = 0; r < P; ++r) inputs.push_back(o.in[size_t(c * P + r)].data());
    AllreduceArgs a;
    a.count = run.count;
    a.op = run.op;
    a.coll = run.coll;
    a.bufferKey = 11;
    REQUIRE(ref->expect(inputs, a, &e, &tol).ok());
    if (run.coll == Collective::ReduceScatter) {  // rank r: its slice of the expectation
      const size_t rc = run.outCount();
      for (int r = 0; r < P; ++r)
        for (size_t i = 0; i < rc; ++i) {
          const double out = o.out[size_t(c)][size_t(r)][i], want = e[size_t(r) * rc + i];
          wrong += (out == double(float(want)) || std::fabs(out - want) <= tol[size_t(r) * rc + i])
                       ? 0 : 1;
        }
      continue;
    }
    for (int r = 0; r < P; ++r) {
      INFO("call " << c << " rank " << r);
      REQUIRE(o.out[size_t(c)][size_t(r)] == o.out[size_t(c)][0]);
    }
    for (size_t i = 0; i < run.count; ++i) {
      const double out = o.out[size_t(c)][0][i];
      wrong += (out == double(float(e[i])) || std::fabs(out - e[i]) <= tol[i]) ? 0 : 1;
    }
  }
  return wrong;
}

}  // namespace

TEST_CASE("hierarchy: dense, oktopk and qsgd match the hierarchical reference", "[hierarchy]") {
  const std::vector<Run> runs = {
      {"dense", {}, 2, 2, 4099, 3},
      {"dense", {}, 3, 2, 1001, 2, RedOp::Avg, true},
      {"dense", {}, 2, 3, 7, 2},
      {"oktopk", {{"DENSITY", "0.02"}, {"TOPK_TAU_PRIME", "2"}}, 2, 2, 4099, 5},
      {"oktopk", {{"DENSITY", "0.05"}}, 3, 2, 2000, 3, RedOp::Avg, true},
      {"qsgd", {{"BITS", "4"}}, 2, 2, 4099, 4},
      {"qsgd", {{"BITS", "8"}}, 2, 4, 3000, 3, RedOp::Avg},
      {"qsgd", {{"BITS", "4"}}, 1, 4, 999, 2},  // one host: inner over one rank
      {"dense", {}, 4, 1, 513, 2},             // one rank per host: inner over all
  };
  for (const Run& run : runs) {
    INFO(run.algo << " " << run.hosts << "x" << run.perHost << " count " << run.count
                  << (run.op == RedOp::Avg ? " avg" : " sum"));
    const Outcome o = runJob(run, true);
    CHECK(wrongAgainstReference(run, o) == 0);
  }
}

TEST_CASE("hierarchy: zero and tiny counts", "[hierarchy]") {
  for (size_t count : {size_t(0), size_t(1), size_t(3)}) {
    const Run run{"qsgd", {{"BITS", "4"}}, 2, 4, count, 2};
    INFO("count " << count);
    CHECK(wrongAgainstReference(run, runJob(run, true)) == 0);
  }
}

TEST_CASE("hierarchy: compressed traffic between hosts drops to about 1/L of flat",
          "[hierarchy]") {
  // L = 4 ranks per host: each rail carries a quarter of the tensor across
  // hosts, where the flat schedule sends the whole (compressed) tensor from
  // every rank. Allowed: 1.5/L (headers, thresholds and uneven shards). The
  // same for a reduce-scatter (a rail's portion is a quarter of the input).
  for (Collective coll : {Collective::AllReduce, Collective::ReduceScatter})
    for (const char* algo : {"qsgd", "oktopk"}) {
      Run run{algo, {{"BITS", "4"}}, 2, 4, 8 * 2500, 3, RedOp::Sum, false, coll};
      if (std::string(algo) == "oktopk") run.params = {{"DENSITY", "0.01"}};
      const double flat = runJob(run, false).interHostBytes;
      const double hier = runJob(run, true).interHostBytes;
      INFO(algo << " " << collectiveName(coll) << ": inter-host bytes flat " << flat
                << ", hierarchical " << hier);
      CHECK(hier > 0);
      CHECK(hier <= 1.5 / 4 * flat);
    }
  // Dense: the hierarchy sends the reduced shard once per rail.
  const Run dense{"dense", {}, 2, 4, 20000, 1};
  CHECK(runJob(dense, true).interHostBytes < runJob(dense, false).interHostBytes);
}

// Reduce-scatter (hierarchical.h): every rank's shard matches the
// hierarchical reference (host sums of the rails' portions bit for bit, then
// the algorithm's reduce-scatter reference per rail), with consecutive and
// interleaved host layouts, sum and avg, and error feedback across calls.
TEST_CASE("hierarchy: reduce-scatter of every form matches the hierarchical reference",
          "[hierarchy][rs]") {
  const Collective rs = Collective::ReduceScatter;
  const std::vector<Run> runs = {
      {"dense", {}, 2, 2, 4 * 1025, 3, RedOp::Sum, false, rs},
      {"dense", {}, 3, 2, 6 * 167, 2, RedOp::Avg, true, rs},
      {"qsgd", {{"BITS", "4"}}, 2, 2, 4 * 1025, 4, RedOp::Sum, false, rs},
      {"qsgd", {{"BITS", "8"}}, 2, 4, 8 * 375, 3, RedOp::Avg, true, rs},
      {"rbf", {}, 2, 2, 4 * 700, 2, RedOp::Sum, false, rs},
      {"oktopk", {{"DENSITY", "0.02"}, {"TOPK_TAU_PRIME", "2"}}, 2, 2, 4 * 1025, 5, RedOp::Sum,
       false, rs},
      {"cltk", {{"DENSITY", "0.05"}}, 3, 2, 6 * 333, 3, RedOp::Avg, true, rs},
      {"sign", {{"SIGN_BLOCK", "96"}}, 2, 2, 4 * 500, 3, RedOp::Sum, false, rs},
      {"qsgd", {{"BITS", "4"}}, 1, 4, 4 * 250, 2, RedOp::Sum, false, rs},  // one host
      {"dense", {}, 4, 1, 4 * 129, 2, RedOp::Sum, false, rs},             // one rank per host
      {"qsgd", {{"BITS", "4"}}, 2, 2, 0, 2, RedOp::Sum, false, rs},        // count 0
  };
  for (const Run& run : runs) {
    INFO(run.algo << " " << run.hosts << "x" << run.perHost << " count " << run.count
                  << (run.op == RedOp::Avg ? " avg" : " sum")
                  << (run.interleaved ? " interleaved" : ""));
    CHECK(wrongAgainstReference(run, runJob(run, true)) == 0);
  }
}
