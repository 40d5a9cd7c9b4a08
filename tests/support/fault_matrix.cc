// See fault_matrix.h.
#include "support/fault_matrix.h"

#include <signal.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include "algorithms/algorithm.h"
#include "algorithms/error_feedback.h"
#include "support/multiproc.h"
#include "transport/bootstrap.h"
#include "transport/ucx_transport.h"

namespace gradcomp::test {
namespace {

constexpr int kMaxRanks = 8;

// Lives in a MAP_SHARED page created before fork: the ranks write, the test
// process reads after reaping them. Plain fields are written by one rank only.
struct SharedRank {
  int pid;
  int errorCode, okCalls, wrongCalls;
  double failSeconds;
  double failedAt, doneAt;  // steady-clock seconds (CLOCK_MONOTONIC: the same in every process)
  char message[1024];
  char firstWrong[256];
};
struct Shared {
  SharedRank ranks[kMaxRanks];
  std::atomic<int> survivorsDone;
  uint64_t faultAtOp;
  double faultAt;  // steady-clock seconds when the faulty rank raised its signal
};

using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
double clockSeconds() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

uint64_t mix(uint64_t x) {  // splitmix64 finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Small multiples of 1/64: every sum of a few of them is exact in float.
float inputValue(uint64_t seed, int call, int rank, size_t i) {
  const uint64_t h = mix(seed ^ mix(uint64_t(call) << 40 ^ uint64_t(rank) << 32 ^ i));
  return float(int64_t(h % 2001) - 1000) / 64.0f;
}

void copyText(char* dst, size_t cap, const std::string& text) {
  std::snprintf(dst, cap, "%s", text.c_str());
}

// Fills *why when out differs from the Reference's expectation.
bool matchesReference(const std::vector<float>& out, const std::vector<double>& expected,
                      const std::vector<double>& tolerance, std::string* why) {
  for (size_t i = 0; i < out.size(); ++i) {
    const double e = expected[i], tol = i < tolerance.size() ? tolerance[i] : 0.0;
    const bool ok = std::isnan(e) ? std::isnan(out[i])
                                  : (out[i] == float(e) || std::fabs(double(out[i]) - e) <= tol);
    if (ok) continue;
    char text[160];
    std::snprintf(text, sizeof text, "element %zu: got %.9g, Reference %.9g (tolerance %.3g)", i,
                  double(out[i]), e, tol);
    *why = text;
    return false;
  }
  return true;
}

struct Plan {
  FaultCase c;
  int faultyRank;
  size_t count;
  Shared* shared;
};

Status connect(std::unique_ptr<transport::AddressExchange>* ex,
               std::unique_ptr<transport::Transport>* net) {
  transport::LaunchInfo info;
  GC_CHECK(transport::launchInfoFromEnvironment(&info));
  GC_CHECK(transport::createUcxBootstrap(info, ex));
  return transport::createUcxTransport(**ex, transport::UcxOptions{}, net);
}

// Survivors wait for each other outside UCX (bounded); the first kills a stopped rank.
void survivorEpilogue(const Plan& p, int rank) {
  Shared& sh = *p.shared;
  sh.survivorsDone.fetch_add(1);
  const auto deadline = Clock::now() + std::chrono::duration<double>(4 * p.c.timeoutS + 20);
  while (sh.survivorsDone.load() < p.c.nranks - 1 && Clock::now() < deadline) {
    timespec ts{0, 1000 * 1000};
    nanosleep(&ts, nullptr);
  }
  const int firstSurvivor = p.faultyRank == 0 ? 1 : 0;
  if (p.c.fault == FaultKind::Stop && rank == firstSurvivor && sh.ranks[p.faultyRank].pid > 0)
    kill(sh.ranks[p.faultyRank].pid, SIGKILL);
}

int rankBody(const Plan& p, int rank) {
  SharedRank& me = p.shared->ranks[rank];
  me.pid = getpid();
  const bool faultyRank = rank == p.faultyRank;
  std::unique_ptr<transport::AddressExchange> ex;
  std::unique_ptr<transport::Transport> net;
  Status s = connect(&ex, &net);
  FaultyTransport* faulty = nullptr;
  if (s.ok() && faultyRank) {
    auto wrapper = std::make_unique<FaultyTransport>(std::move(net), p.c.fault, mix(p.c.seed + 7));
    faulty = wrapper.get();
    Shared* shared = p.shared;
    faulty->onFire([shared] { shared->faultAt = clockSeconds(); });
    net = std::move(wrapper);
  }
  const algo::AlgorithmInfo* info = algo::findAlgorithm(p.c.algorithm);
  param::Overrides config;
  for (const auto& [name, value] : p.c.config)
    if (s.ok()) s = config.set(name, value, "fault case");
  std::unique_ptr<algo::ErrorFeedbackStore> store;
  std::unique_ptr<algo::Reference> ref;
  if (s.ok() && !info) s = makeStatus(Err::InvalidArgument, "no algorithm '%s'", p.c.algorithm.c_str());
  if (s.ok()) s = algo::ErrorFeedbackStore::create(config, &store);
  if (s.ok()) {
    ref = info->reference(p.c.nranks);
    s = ref ? ref->configure(config) : makeStatus(Err::Internal, "no reference");
  }
  if (!s.ok()) {
    std::fprintf(stderr, "rank %d: setup: %s\n", rank, s.toString().c_str());
    return 1;
  }
  std::unique_ptr<algo::Algorithm> algorithm = info->create();
  const bool killOrStop = p.c.fault == FaultKind::Kill || p.c.fault == FaultKind::Stop;
  const int totalCalls = p.c.calls + p.c.extraCalls;
  const size_t n = p.count;
  for (int call = 0; call < totalCalls; ++call) {
    if (faulty && call == 1) {
      // A random operation within the next calls-1 calls, sized by call 0.
      const uint64_t perCall = std::max<uint64_t>(1, faulty->operations());
      const uint64_t at = perCall + mix(p.c.seed + 3) % (perCall * (p.c.calls - 1));
      faulty->arm(at);
      p.shared->faultAtOp = at;
    }
    // Per-call operation counts vary (WAGMA's group steps are cheaper than
    // call 0's global one): a fault not reached during calls 1.. fires now.
    if (faulty && call == p.c.calls && !faulty->fired()) {
      p.shared->faultAtOp = faulty->operations();
      if (killOrStop) faulty->fireNow();
      faulty->arm(faulty->operations());
    }
    std::vector<std::vector<float>> inputs(p.c.nranks, std::vector<float>(n));
    std::vector<const void*> ptrs;
    for (int r = 0; r < p.c.nranks; ++r) {
      for (size_t i = 0; i < n; ++i) inputs[r][i] = inputValue(p.c.seed, call, r, i);
      ptrs.push_back(inputs[r].data());
    }
    std::vector<float> out(n, std::nanf(""));
    algo::AllreduceArgs args;
    args.sendBuf = inputs[rank].data();
    args.recvBuf = out.data();
    args.count = n;
    args.bufferKey = 7;
    algo::Context ctx{*net, device::cpuBackend(), config, uint64_t(call)};
    ctx.errorFeedback = store.get();
    net->setActivity(info->name.c_str());
    const auto t0 = Clock::now();
    s = algorithm->allreduce(ctx, args);
    const double took = secondsSince(t0);
    if (!s.ok()) {
      me.failedAt = clockSeconds();
      me.errorCode = int(s.code());
      me.failSeconds = took;
      copyText(me.message, sizeof me.message, s.toString());
      break;
    }
    ++me.okCalls;
    std::vector<double> expected, tolerance;
    args.sendBuf = nullptr;
    args.recvBuf = nullptr;
    Status rs = ref->expect(ptrs, args, &expected, &tolerance);
    std::string why;
    if (!rs.ok()) why = "Reference failed: " + rs.toString();
    if (rs.ok() && matchesReference(out, expected, tolerance, &why)) continue;
    if (++me.wrongCalls == 1)
      copyText(me.firstWrong, sizeof me.firstWrong, "call " + std::to_string(call) + ": " + why);
  }
  if (faultyRank) return 0;
  // After a kill or stop a survivor tears down at once (its WAGMA streams
  // included), as a process that exits would: that must not wait for the
  // failed rank a second time.
  if (killOrStop) {
    if (me.errorCode) ex->abandon();  // as gcCommDestroy does after a failure
    algorithm.reset();
    store.reset();
    net.reset();
    ex.reset();
    me.doneAt = clockSeconds();
  }
  survivorEpilogue(p, rank);
  return 0;
}

}  // namespace

std::string FaultResult::summary() const {
  std::string text;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankOutcome& o = ranks[r];
    char line[1000], timing[96] = "";
    if (o.detectSeconds >= 0)
      std::snprintf(timing, sizeof timing, "; failed %.2f s after the fault, torn down after %.2f s",
                    o.detectSeconds, o.teardownSeconds);
    std::snprintf(line, sizeof line,
                  "  rank %zu%s: exit %d signal %d%s, %d ok calls (%d wrong), %s%s (%.2f s%s)%s%s\n", r,
                  o.faulty ? " (faulty)" : "", o.exitCode, o.signal, o.hung ? " HUNG" : "",
                  o.okCalls, o.wrongCalls, o.errorCode ? "error: " : "no error",
                  o.message.c_str(), o.failSeconds, timing, o.firstWrong.empty() ? "" : "; wrong: ",
                  o.firstWrong.c_str());
    text += line;
  }
  return text;
}

namespace {

// A FaultResult in shared memory, written by a case's own process.
struct CaseRecord {
  int nranks, faultyRank;
  uint64_t count, faultAtOp;
  double seconds;
  struct Rank {
    int faulty, exitCode, signal, hung, errorCode, okCalls, wrongCalls;
    double failSeconds, detectSeconds, teardownSeconds;
    char message[1024], firstWrong[256];
  } ranks[kMaxRanks];
};

}  // namespace

std::vector<FaultResult> runFaultCases(const std::vector<FaultCase>& cases, int parallel) {
  std::vector<std::vector<char>> records;
  const std::vector<RankExit> exits = runConcurrently(
      int(cases.size()), parallel, sizeof(CaseRecord),
      [&](int i, void* memory) {
        const FaultResult r = runFaultCase(cases[size_t(i)]);
        auto* rec = static_cast<CaseRecord*>(memory);
        rec->nranks = int(std::min<size_t>(r.ranks.size(), kMaxRanks));
        rec->faultyRank = r.faultyRank;
        rec->count = r.count;
        rec->faultAtOp = r.faultAtOp;
        rec->seconds = r.seconds;
        for (int k = 0; k < rec->nranks; ++k) {
          const RankOutcome& o = r.ranks[size_t(k)];
          CaseRecord::Rank& d = rec->ranks[k];
          d = {o.faulty, o.exitCode, o.signal, o.hung, o.errorCode, o.okCalls, o.wrongCalls,
               o.failSeconds, o.detectSeconds, o.teardownSeconds, {}, {}};
          copyText(d.message, sizeof d.message, o.message);
          copyText(d.firstWrong, sizeof d.firstWrong, o.firstWrong);
        }
        return 0;
      },
      &records);
  std::vector<FaultResult> results(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    if (exits[i].exitCode != 0 || exits[i].signal) continue;  // no ranks: the case process failed
    const auto* rec = reinterpret_cast<const CaseRecord*>(records[i].data());
    FaultResult& r = results[i];
    r.faultyRank = rec->faultyRank;
    r.count = rec->count;
    r.faultAtOp = rec->faultAtOp;
    r.seconds = rec->seconds;
    for (int k = 0; k < rec->nranks; ++k) {
      const CaseRecord::Rank& d = rec->ranks[k];
      RankOutcome o;
      o.faulty = d.faulty;
      o.exitCode = d.exitCode;
      o.signal = d.signal;
      o.hung = d.hung;
      o.errorCode = d.errorCode;
      o.okCalls = d.okCalls;
      o.wrongCalls = d.wrongCalls;
      o.failSeconds = d.failSeconds;
      o.detectSeconds = d.detectSeconds;
      o.teardownSeconds = d.teardownSeconds;
      o.message = d.message;
      o.firstWrong = d.firstWrong;
      r.ranks.push_back(o);
    }
  }
  return results;
}

FaultResult runFaultCase(const FaultCase& c) {
  FaultResult result;
  if (c.nranks < 2 || c.nranks > kMaxRanks || c.calls < 2) return result;
  void* page = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                    -1, 0);
  if (page == MAP_FAILED) return result;
  Shared* shared = new (page) Shared{};
  Plan plan{c, int(mix(c.seed) % uint64_t(c.nranks)), 300 + size_t(mix(c.seed + 1) % 1700), shared};
  result.faultyRank = plan.faultyRank;
  result.count = plan.count;

  std::map<std::string, std::string> env = {{"GRADCOMP_TIMEOUT_S", std::to_string(c.timeoutS)}};
  // TCP with UCX peer error handling, or shared memory (where UCX cannot
  // report a dead peer: only the failure monitor or the timeout can).
  env["UCX_TLS"] = !c.tls.empty() ? c.tls : c.fault == FaultKind::Kill ? "tcp,self" : "sm,self";
  env["GRADCOMP_UCX_ERR_MODE"] = env["UCX_TLS"] == "tcp,self" ? "PEER" : "NONE";
  const double deadline = 15 + (c.calls + c.extraCalls) * 1.0 + 6 * c.timeoutS;
  const auto t0 = Clock::now();
  const std::vector<RankExit> exits =
      runRanks(c.nranks, [&](int rank) { return rankBody(plan, rank); }, env, deadline);
  result.seconds = secondsSince(t0);
  result.faultAtOp = shared->faultAtOp;
  for (int r = 0; r < c.nranks; ++r) {
    const SharedRank& s = shared->ranks[r];
    RankOutcome o;
    o.faulty = r == plan.faultyRank;
    o.exitCode = exits[r].exitCode;
    o.signal = exits[r].signal;
    o.hung = exits[r].killedAtDeadline;
    o.errorCode = s.errorCode;
    o.message = s.message;
    o.failSeconds = s.failSeconds;
    if (shared->faultAt > 0 && s.failedAt > 0) o.detectSeconds = s.failedAt - shared->faultAt;
    if (shared->faultAt > 0 && s.doneAt > 0) o.teardownSeconds = s.doneAt - shared->faultAt;
    o.okCalls = s.okCalls;
    o.wrongCalls = s.wrongCalls;
    o.firstWrong = s.firstWrong;
    result.ranks.push_back(o);
  }
  shared->~Shared();
  munmap(page, sizeof(Shared));
  return result;
}

}  // namespace gradcomp::test
