// Wait-avoiding WAGMA (algorithms/wagma/stream.h): stale participation,
// exactly-once execution under random delays, and no deadlock, over
// LocalTransport threads and over UCX between real processes.
//
// Every rank's input of call t is a known integer vector, and each call's
// report says which call's buffer the rank contributed, so the test rebuilds
// every group's W_sum from the reports and checks every rank's output against
// Algorithm 2's rule (W_sum / c, or (W_sum + fresh) / (c + 1) when stale).
#include <catch2/catch.hpp>
#include <atomic>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <functional>
#include <thread>
#include <unistd.h>

#include "algorithms/wagma/wagma.h"
#include "support/multiproc.h"
#include "transport/local_transport.h"
#include "transport/ucx_transport.h"

using namespace gradcomp;
using namespace gradcomp::algo::wagma;
using gradcomp::algo::AllreduceArgs;
using gradcomp::algo::Context;

namespace {

constexpr size_t kCount = 9;

float inputOf(int rank, int64_t call, size_t i) {
  return float((rank * 37 + call * 11 + int64_t(i) * 5) % 101);
}

struct Record {
  CallReport rep;
  float out[kCount];
};

param::Overrides config(int period) {
  param::Overrides o;
  REQUIRE(o.set("WAGMA_PERIOD", std::to_string(period), "test").ok());
  REQUIRE(o.set("WAGMA_WAIT", "0", "test").ok());
  return o;
}

// One rank's calls; `beforeCall(t)` may delay the rank (injected lateness).
std::string runCalls(Wagma& algo, transport::Transport& net, const param::Overrides& cfg,
                     int calls, const std::function<void(int)>& beforeCall,
                     std::vector<Record>* records) {
  std::vector<float> in(kCount);
  for (int t = 0; t < calls; ++t) {
    beforeCall(t);
    for (size_t i = 0; i < kCount; ++i) in[i] = inputOf(net.rank(), t, i);
    Record rec;
    Context ctx{net, device::cpuBackend(), cfg, uint64_t(t)};
    AllreduceArgs a;
    a.sendBuf = in.data();
    a.recvBuf = rec.out;
    a.count = kCount;
    a.op = RedOp::Avg;
    a.bufferKey = 5;
    Status s = algo.allreduce(ctx, a);
    if (!s.ok()) return "call " + std::to_string(t) + ": " + s.toString();
    if (!algo.lastReport(5, &rec.rep)) return "no report";
    records->push_back(rec);
  }
  std::vector<uint64_t> ran = algo.executed(5);
  if (ran.size() != size_t(calls)) return "executed " + std::to_string(ran.size()) + " versions";
  for (int t = 0; t < calls; ++t)
    if (ran[t] != uint64_t(t)) return "version order broken at " + std::to_string(t);
  return "";
}

// Checks every rank's every call against the contributions the reports name.
// Returns the number of stale calls seen.
int verify(int P, int period, const std::vector<std::vector<Record>>& recs) {
  Topology topo;
  REQUIRE(makeTopology(P, 0, &topo).ok());
  const int calls = int(recs[0].size());
  int stale = 0;
  for (int t = 0; t < calls; ++t)
    for (int r = 0; r < P; ++r) {
      INFO("call " << t << " rank " << r);
      const CallReport& rep = recs[r][t].rep;
      REQUIRE(rep.call == uint64_t(t));
      const bool global = (t + 1) % period == 0;
      REQUIRE(rep.global == global);
      const std::vector<int> members = global ? std::vector<int>() : groupMembers(topo, r, t);
      std::vector<int> all;
      for (int q = 0; q < P; ++q) all.push_back(q);
      const std::vector<int>& group = global ? all : members;
      REQUIRE(rep.contributors == int(group.size()));
      REQUIRE(rep.fresh == (rep.contributed == t));
      REQUIRE(rep.contributed <= t);
      if (global) REQUIRE(rep.fresh);
      // Staleness is bounded by the last global call.
      REQUIRE(rep.contributed >= t - (t % period) - 1);
      stale += rep.fresh ? 0 : 1;
      for (size_t i = 0; i < kCount; ++i) {
        double sum = 0;
        for (int m : group) sum += inputOf(m, recs[m][t].rep.contributed, i);
        const double expect = rep.fresh ? sum / group.size()
                                        : (sum + inputOf(r, t, i)) / (group.size() + 1);
        REQUIRE(std::fabs(recs[r][t].out[i] - expect) <= 1e-5 * std::max(1.0, expect));
      }
    }
  return stale;
}

// Condition flags between test threads ("rank r finished call t").
struct Flags {
  std::mutex mu;
  std::condition_variable cv;
  std::set<std::pair<int, int>> done;
  void set(int r, int t) {
    std::lock_guard<std::mutex> lock(mu);
    done.insert({r, t});
    cv.notify_all();
  }
  bool waitFor(int r, int t) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(20), [&] { return done.count({r, t}) > 0; });
  }
};

// Runs `calls` calls on P threads with one local fabric per wait-avoiding stream.
std::vector<std::vector<Record>> runLocal(int P, int period, int calls,
                                          const std::function<void(int, int)>& beforeCall,
                                          const std::function<void(int, int)>& afterCall) {
  auto nets = transport::createLocalTransports(P, 20.0);
  auto channels = transport::createLocalTransports(P, 20.0);
  const param::Overrides cfg = config(period);
  std::vector<std::vector<Record>> recs(P);
  std::vector<std::string> errors(P);
  std::vector<std::thread> threads;
  for (int r = 0; r < P; ++r)
    threads.emplace_back([&, r] {
      Wagma algo([&, r](Context&, std::unique_ptr<transport::Transport>* out) {
        *out = std::move(channels[r]);
        return Status::Ok();
      });
      int last = -1;
      errors[r] = runCalls(algo, *nets[r], cfg, calls, [&](int t) {
        if (last >= 0) afterCall(r, last);
        beforeCall(r, t);
        last = t;
      }, &recs[r]);
      afterCall(r, last);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < P; ++r) {
    INFO("rank " << r);
    REQUIRE(errors[r] == "");
  }
  return recs;
}

}  // namespace

TEST_CASE("wagma wait-avoiding: a rank forced late takes the stale path", "[wagma]") {
  // P=4, S=2: call 3 uses bit 1, so ranks 1 and 3 form a group. Rank 1
  // arrives at call 3 only after rank 3 finished it, which rank 3 can only do
  // with rank 1's passive contribution: its latest buffer, from call 2.
  // Ranks 0 and 2 hold back from call 4 until then: their activations for
  // version 4 would otherwise run version 3 early everywhere (an activation
  // for w runs every pending version below w), making rank 3 stale as well.
  // The hooks run on rank threads, where Catch2 assertions are not
  // thread-safe: count failed waits there, assert after the threads joined.
  Flags flags;
  std::atomic<int> missedWaits{0};
  auto waitOrCount = [&](int rank, int call) {
    if (!flags.waitFor(rank, call)) missedWaits.fetch_add(1);
  };
  auto recs = runLocal(4, 1024, 6,
                       [&](int r, int t) {
                         if (r == 1 && t == 3) waitOrCount(3, 3);
                         if (r == 3 && t == 3) waitOrCount(1, 2);
                         if ((r == 0 || r == 2) && t == 4) waitOrCount(3, 3);
                       },
                       [&](int r, int t) { flags.set(r, t); });
  REQUIRE(missedWaits.load() == 0);
  const CallReport& late = recs[1][3].rep;
  CHECK_FALSE(late.fresh);
  CHECK(late.contributed == 2);
  CHECK(recs[3][3].rep.fresh);
  CHECK(recs[1][3].out[0] == Approx((inputOf(3, 3, 0) + inputOf(1, 2, 0) + inputOf(1, 3, 0)) / 3));
  CHECK(recs[3][3].out[0] == (inputOf(3, 3, 0) + inputOf(1, 2, 0)) / 2);
  CHECK(verify(4, 1024, recs) >= 1);
}

TEST_CASE("wagma wait-avoiding: every version runs exactly once under random delays", "[wagma]") {
  for (int P : {2, 4, 6, 8}) {
    INFO("P=" << P);
    const int period = 5, calls = 40;
    // Each call delays a random subset of ranks by up to 2 ms (injected
    // lateness, not synchronization).
    std::vector<std::mt19937> rng;
    for (int r = 0; r < P; ++r) rng.emplace_back(1234 + r);
    auto recs = runLocal(P, period, calls,
                         [&](int r, int) {
                           if (rng[r]() % 3 == 0)
                             std::this_thread::sleep_for(std::chrono::microseconds(rng[r]() % 2000));
                         },
                         [](int, int) {});
    const int stale = verify(P, period, recs);
    INFO("stale calls: " << stale);
    CHECK(stale > 0);  // the delays must exercise the passive path
  }
}

// Each rank keys its tensors by its own buffer addresses (the interposer's
// bufferKey), so the keys' order differs across ranks. Closing a stream waits
// for the peers' farewell on that stream: closing them in key order made rank
// 0 wait on tensor A while rank 1 waited on tensor B, until the timeout.
TEST_CASE("wagma wait-avoiding: tensors keyed in a different order per rank close promptly", "[wagma]") {
  const int P = 4;
  auto nets = transport::createLocalTransports(P, 20.0);
  std::vector<std::vector<std::unique_ptr<transport::Transport>>> fabrics;
  for (int s = 0; s < 2; ++s) fabrics.push_back(transport::createLocalTransports(P, 20.0));
  const param::Overrides cfg = config(4);
  std::vector<std::string> errors(P);
  std::vector<double> closeSeconds(P, 0);
  std::vector<std::thread> threads;
  for (int r = 0; r < P; ++r)
    threads.emplace_back([&, r] {
      size_t next = 0;  // streams are created in first-call order, the same on every rank
      auto algo = std::make_unique<Wagma>([&, r](Context&, std::unique_ptr<transport::Transport>* out) {
        *out = std::move(fabrics.at(next++)[r]);
        return Status::Ok();
      });
      std::vector<float> in(kCount), out(kCount);
      for (int t = 0; t < 6 && errors[r].empty(); ++t)
        for (int tensor = 0; tensor < 2 && errors[r].empty(); ++tensor) {
          for (size_t i = 0; i < kCount; ++i) in[i] = inputOf(r, t, i);
          Context ctx{*nets[r], device::cpuBackend(), cfg, uint64_t(2 * t + tensor)};
          AllreduceArgs a;
          a.sendBuf = in.data();
          a.recvBuf = out.data();
          a.count = kCount;
          a.op = RedOp::Avg;
          a.bufferKey = r % 2 == 0 ? 10 + tensor : 11 - tensor;  // odd ranks: reversed
          Status s = algo->allreduce(ctx, a);
          if (!s.ok()) errors[r] = s.toString();
        }
      const auto start = std::chrono::steady_clock::now();
      algo.reset();
      closeSeconds[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < P; ++r) {
    INFO("rank " << r);
    CHECK(errors[r] == "");
    CHECK(closeSeconds[r] < 5.0);  // the timeout is 60 s
  }
}

// ---------------------------------------------------------------------------
// UCX processes: the default channel (a UCX worker per stream, wired over the
// communicator's transport). Each rank writes its records to a file; the
// parent verifies them all.

namespace {

const std::map<std::string, std::string> kShm = {
    {"UCX_TLS", "sm,self"}, {"GRADCOMP_UCX_ERR_MODE", "NONE"}, {"GRADCOMP_TIMEOUT_S", "30"}};

bool waitForFile(const std::string& path) {
  for (int i = 0; i < 20000; ++i) {  // bounded: 20 s
    if (access(path.c_str(), F_OK) == 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

int ucxRank(int rank, const std::string& dir, int period, int calls) {
  using namespace gradcomp::transport;
  LaunchInfo info;
  std::unique_ptr<AddressExchange> ex;
  std::unique_ptr<Transport> net;
  Status s = launchInfoFromEnvironment(&info);
  if (s.ok()) s = createUcxBootstrap(info, &ex);
  if (s.ok()) s = createUcxTransport(*ex, UcxOptions{}, &net);
  if (!s.ok()) {
    fprintf(stderr, "rank %d: connect: %s\n", rank, s.toString().c_str());
    return 1;
  }
  param::Overrides cfg;
  if (!cfg.set("WAGMA_PERIOD", std::to_string(period), "test").ok()) return 1;
  std::vector<Record> recs;
  std::mt19937 rng(99 + rank);
  std::string err;
  {
    Wagma algo;  // default: UCX channels
    int last = -1;
    err = runCalls(algo, *net, cfg, calls, [&](int t) {
      if (last >= 0) std::ofstream(dir + "/r" + std::to_string(rank) + "c" + std::to_string(last));
      last = t;
      // Forced lateness at call 5 (group {1, 3}), as in the local test.
      if (rank == 1 && t == 5) waitForFile(dir + "/r3c5");
      if (rank == 3 && t == 5) waitForFile(dir + "/r1c4");
      if ((rank == 0 || rank == 2) && t == 6) waitForFile(dir + "/r3c5");
      if (rng() % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
    }, &recs);
    std::ofstream(dir + "/r" + std::to_string(rank) + "c" + std::to_string(last));
  }
  if (!err.empty()) {
    fprintf(stderr, "rank %d: %s\n", rank, err.c_str());
    return 1;
  }
  std::ofstream f(dir + "/rank" + std::to_string(rank), std::ios::binary);
  f.write(reinterpret_cast<const char*>(recs.data()), std::streamsize(recs.size() * sizeof(Record)));
  return f.good() ? 0 : 1;
}

}  // namespace

TEST_CASE("wagma wait-avoiding over UCX processes: exactly once, stale path, no deadlock",
          "[wagma][ucx][mp]") {
  const int P = 4, period = 4, calls = 40;
  char tmpl[] = "/tmp/gradcomp_wagma_XXXXXX";
  REQUIRE(mkdtemp(tmpl));
  const std::string dir = tmpl;
  REQUIRE(test::allSucceeded(
      test::runRanks(P, [&](int rank) { return ucxRank(rank, dir, period, calls); }, kShm, 120)));
  std::vector<std::vector<Record>> recs(P);
  for (int r = 0; r < P; ++r) {
    std::ifstream f(dir + "/rank" + std::to_string(r), std::ios::binary);
    recs[r].resize(calls);
    f.read(reinterpret_cast<char*>(recs[r].data()), std::streamsize(calls * sizeof(Record)));
    REQUIRE(f.gcount() == std::streamsize(calls * sizeof(Record)));
  }
  verify(P, period, recs);
  CHECK_FALSE(recs[1][5].rep.fresh);
  CHECK(recs[1][5].rep.contributed == 4);
  (void)!system(("rm -rf " + dir).c_str());
}
