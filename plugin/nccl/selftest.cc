#include "plugin/nccl/selftest.h"

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "algorithms/auto/candidates.h"
#include "algorithms/call_budget.h"
#include "common/log.h"
#include "plugin/nccl/nccl_exchange.h"
#include "transport/failure_monitor.h"

namespace gradcomp::nccl {
namespace {

// Call numbers of the test's calls: far above any job's, the same on every
// rank (tags and signatures derive from them).
constexpr uint64_t kSelfTestSeq = 0xFFF000;

// One algorithm to test, with the parameters a real call would run it with.
struct Item {
  std::string label;  // "qsgd allreduce", "oktopk:DENSITY=0.05 reducescatter"
  const algo::AlgorithmInfo* info = nullptr;
  param::Overrides config;
  algo::Collective coll = algo::Collective::AllReduce;
};

// GRADCOMP_SELFTEST_INJECT: KIND:RANK.
struct Injection {
  enum class Kind { None, Wrong, Error, Stall } kind = Kind::None;
  int rank = -1;
};

Status parseInjection(const std::string& text, Injection* out) {
  *out = Injection{};
  if (text.empty()) return Status::Ok();
  const size_t colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  char* end = nullptr;
  const long rank = colon == std::string::npos ? -1 : strtol(text.c_str() + colon + 1, &end, 10);
  GC_REQUIRE(colon != std::string::npos && end && *end == 0 && rank >= 0 &&
                 (kind == "wrong" || kind == "error" || kind == "stall"),
             Err::InvalidConfig,
             "GRADCOMP_SELFTEST_INJECT='%s': expected KIND:RANK with KIND wrong, error or stall",
             text.c_str());
  out->kind = kind == "wrong" ? Injection::Kind::Wrong
              : kind == "error" ? Injection::Kind::Error
                                : Injection::Kind::Stall;
  out->rank = int(rank);
  return Status::Ok();
}

// Rank r's input: small multiples of 1/256, so sums are exact in float32.
float inputOf(int rank, size_t i) {
  const uint64_t h = (uint64_t(i) * 2654435761u + uint64_t(rank) * 40503u) % 4096;
  return float(int64_t(h) - 2048) / 256.0f;
}

// The algorithms the communicator may run, each once per collective.
Status planItems(const Policy& policy, std::vector<Item>* out) {
  std::set<std::string> seen;
  auto add = [&](const std::string& algoName, int rule, algo::Collective coll,
                 const std::map<std::string, std::string>& extra, const std::string& label) {
    const algo::AlgorithmInfo* info = algo::findAlgorithm(algoName);
    if (info == nullptr || info->selector) return Status::Ok();
    Item item;
    item.info = info;
    item.coll = coll;
    GC_CHECK(algorithmOverrides(policy, rule, &item.config));
    for (const auto& [k, v] : extra) GC_CHECK(item.config.set(k, v, "auto candidate " + label));
    item.label = label + " " + algo::collectiveName(coll);
    if (seen.insert(item.label).second) out->push_back(std::move(item));
    return Status::Ok();
  };
  auto addRule = [&](const std::string& algoName, int rule) -> Status {
    if (algoName.empty() || algoName == "off") return Status::Ok();
    if (algoName != "auto") return add(algoName, rule, algo::Collective::AllReduce, {}, algoName);
    param::Overrides cfg;
    GC_CHECK(algorithmOverrides(policy, rule, &cfg));
    std::string text;
    GC_CHECK(cfg.getString(param::Id::AUTO_CANDIDATES, &text));
    std::vector<algo::autosel::CandidateSpec> specs;
    GC_CHECK(algo::autosel::parseCandidates(text, "GRADCOMP_AUTO_CANDIDATES", &specs));
    for (const auto& c : specs)
      GC_CHECK(add(c.algo, rule, algo::Collective::AllReduce, c.params, c.label));
    return Status::Ok();
  };
  GC_CHECK(addRule(policy.algo, -1));
  for (size_t i = 0; i < policy.rules.size(); ++i)
    GC_CHECK(addRule(policy.rules[i].algo.empty() ? policy.algo : policy.rules[i].algo, int(i)));
  // GRADCOMP_AG_ALGO's allgather, with the parameters its runtime reads
  // (wiring.cc: the policy's, no rule's).
  if (policy.agAlgo != "off") {
    Item item;
    item.info = algo::findAllgatherAlgorithm(policy.agAlgo);
    GC_REQUIRE(item.info, Err::InvalidConfig, "GRADCOMP_AG_ALGO=%s is not an allgather",
               policy.agAlgo.c_str());
    item.coll = algo::Collective::AllGather;
    GC_CHECK(algorithmOverrides(policy, -1, &item.config));
    item.label = policy.agAlgo + " allgather";
    out->push_back(std::move(item));
  }
  for (int rule = -1; rule < int(policy.rules.size()); ++rule) {
    Verdict why = Verdict::Compress;
    const std::string rs = reduceScatterAlgo(policy, rule, &why);
    const algo::AlgorithmInfo* info = rs.empty() ? nullptr : algo::findAlgorithm(rs);
    if (info && info->hasReduceScatter())
      GC_CHECK(add(rs, rule, algo::Collective::ReduceScatter, {}, rs));
  }
  return Status::Ok();
}

// Fails every call on the injected rank (GRADCOMP_SELFTEST_INJECT=error:R),
// as an algorithm that refuses its input would.
class InjectedError final : public algo::Algorithm {
 public:
  explicit InjectedError(const algo::AlgorithmInfo* info) { setInfo(info); }

 protected:
  Status runAllreduce(algo::Context&, const algo::AllreduceArgs&) override { return fail(); }
  Status runReduceScatter(algo::Context&, const algo::AllreduceArgs&) override { return fail(); }
  Status runAllgather(algo::Context&, const algo::AllreduceArgs&) override { return fail(); }

 private:
  Status fail() {
    return Status(Err::Internal, "injected by GRADCOMP_SELFTEST_INJECT: this rank's call fails");
  }
};

// What the calling thread and the test's thread share. The test's thread
// holds it (and through it the transport) until it returns, also after the
// calling thread gave up on it.
struct Run {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  bool abandoned = false;  // the calling thread gave up waiting
  std::string verdict;  // "ok", or what failed
  std::string doing;    // the item running now (for a timeout's message)

  std::shared_ptr<transport::Transport> net;
  std::vector<Item> items;
  algo::CallBudget budget;  // the test's own: no reservation or signature of the job's
  Injection inject;
  const void* like = nullptr;  // an application buffer: the private buffers' device
  double timeoutS = 30;
  int rank = 0, nranks = 0;

  ~Run() { budget.release(); }  // before net goes (signatures still posted)
};

std::string checkResult(const Item& item, const std::vector<float>& out, size_t count, int rank,
                        int nranks) {
  // An allgather's inputs are the first count / P of each rank's values.
  std::unique_ptr<algo::Reference> ref = item.coll == algo::Collective::ReduceScatter
                                             ? item.info->reduceScatterReference(nranks)
                                         : item.coll == algo::Collective::AllGather
                                             ? item.info->allgatherReference(nranks)
                                             : item.info->reference(nranks);
  if (!ref) return "error: " + item.label + ": the algorithm has no reference";
  Status s = ref->configure(item.config);
  std::vector<std::vector<float>> inputs(static_cast<size_t>(nranks), std::vector<float>(count));
  std::vector<const void*> ptrs;
  for (int r = 0; r < nranks; ++r) {
    for (size_t i = 0; i < count; ++i) inputs[size_t(r)][i] = inputOf(r, i);
    ptrs.push_back(inputs[size_t(r)].data());
  }
  algo::AllreduceArgs args;
  args.count = count;
  args.coll = item.coll;
  std::vector<double> expected, tolerance;
  if (s.ok()) s = ref->expect(ptrs, args, &expected, &tolerance);
  if (!s.ok()) return "error: " + item.label + ": its reference failed: " + s.toString();
  const bool rs = item.coll == algo::Collective::ReduceScatter;
  const size_t first = rs ? size_t(rank) * (count / size_t(nranks)) : 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double want = expected[first + i], tol = tolerance[first + i];
    const bool ok = tol == 0 ? out[i] == float(want) : std::fabs(double(out[i]) - want) <= tol;
    if (ok) continue;
    char text[256];
    std::snprintf(text, sizeof text,
                  "wrong: %s of %zu floats: element %zu is %.9g, expected %.9g (tolerance %.3g)",
                  item.label.c_str(), count, first + i, double(out[i]), want, tol);
    return text;
  }
  return "ok";
}

// What a rank sends: "ok", or "CULPRIT|what failed", CULPRIT the rank it
// blames (itself for a wrong result; the one the failure monitor named).
std::string verdictText(int culprit, const std::string& what) {
  return std::to_string(culprit) + "|" + what;
}

// The test's thread: every item through the executor, in order.
void runItems(const std::shared_ptr<Run>& run, Executor* exec) {
  const bool injected = run->inject.rank == run->rank;
  if (injected && run->inject.kind == Injection::Kind::Stall) {
    // Stalls until the calling thread gives up on it, as a stuck kernel or
    // driver call would, then returns without having run anything.
    std::unique_lock<std::mutex> lock(run->mu);
    run->cv.wait(lock, [&] { return run->abandoned; });
    run->verdict = "stalled (injected)";
    run->done = true;
    run->cv.notify_all();
    return;
  }
  // Every rank runs every item (the same collectives in the same order);
  // the first failure is the verdict. After an error the transport is
  // broken on every rank alike (the call check agreed on it): stop there.
  std::string verdict = "ok";
  // A failure of this rank's own: reported through the failure monitor too,
  // so the peers' tests stop waiting for this rank at once.
  auto failOwn = [&](const std::string& what) {
    verdict = verdictText(run->rank, what);
    if (std::shared_ptr<transport::FailureMonitor> m = run->net->failureMonitor())
      m->reportSelf(Status(Err::Internal, "rank " + std::to_string(run->rank) + ": self-test " + what));
  };
  // The executor's own buffers (device memory and a private stream on a
  // device executor), made before any call parks the stream.
  std::unique_ptr<PrivateSpace> space;
  const size_t bytes = kSelfTestCount * sizeof(float);
  const Status made = exec->makePrivateSpace(run->like, bytes, bytes, &space);
  if (!made.ok()) failOwn("error: private buffers: " + made.toString());
  uint64_t seq = kSelfTestSeq;
  const std::vector<Item> none;
  for (const Item& item : made.ok() ? run->items : none) {
    {
      std::lock_guard<std::mutex> lock(run->mu);
      run->doing = item.label;
    }
    const bool rs = item.coll == algo::Collective::ReduceScatter;
    const bool ag = item.coll == algo::Collective::AllGather;
    const size_t count = rs || ag ? kSelfTestCount / size_t(run->nranks) * size_t(run->nranks)
                                  : kSelfTestCount;
    // An allgather sends count / P values (this rank's shard) and gets count.
    std::vector<float> in(ag ? count / size_t(run->nranks) : count),
        out(rs ? count / size_t(run->nranks) : count, -1.0f);
    for (size_t i = 0; i < in.size(); ++i) in[i] = inputOf(run->rank, i);
    const Status moved = space->upload(in.data(), in.size() * sizeof(float));
    if (!moved.ok()) {
      failOwn("error: " + item.label + ": " + moved.toString());
      break;
    }
    std::unique_ptr<algo::Algorithm> algorithm =
        injected && run->inject.kind == Injection::Kind::Error
            ? std::unique_ptr<algo::Algorithm>(new InjectedError(item.info))
            : item.info->create();
    CompressedCall call;
    call.args.sendBuf = space->send();
    call.args.recvBuf = space->recv();
    call.args.count = count;
    call.args.coll = item.coll;
    call.args.localKey = uint64_t(uintptr_t(space->recv()));
    call.algorithm = algorithm.get();
    call.algorithmName = item.label.c_str();
    call.net = run->net.get();
    call.config = &item.config;
    call.callSeq = seq++;
    call.asked = item.info;
    call.askedConfig = &item.config;
    call.budget = &run->budget;
    call.ownsNet = run->net;
    Status s = exec->submit(call, space->stream());
    // An asynchronous executor: the call's outcome (bounded by the engine's
    // timeout and watchdog; the phase's own timeout abandons this thread).
    if (s.ok()) s = exec->waitIdle(run->net.get());
    if (!s.ok()) {
      // The rank the agreement named, else this one.
      std::shared_ptr<transport::FailureMonitor> m = run->net->failureMonitor();
      const int culprit = m && m->failed() && m->failedRank() >= 0 ? m->failedRank() : run->rank;
      verdict = verdictText(culprit, "error: " + item.label + ": " + s.toString());
      break;
    }
    const Status back = space->download(out.data(), out.size() * sizeof(float));
    if (!back.ok()) {
      failOwn("error: " + item.label + ": " + back.toString());
      break;
    }
    if (injected && run->inject.kind == Injection::Kind::Wrong) out[0] += 1.0f;
    const std::string checked = checkResult(item, out, count, run->rank, run->nranks);
    if (checked != "ok" && verdict == "ok") verdict = verdictText(run->rank, checked);
  }
  std::lock_guard<std::mutex> lock(run->mu);
  run->verdict = verdict;
  run->done = true;
  run->cv.notify_all();
}

// The rank the failed verdicts blame most often (ties: the lowest), with
// its own verdict's text (else the first that blames it); -1 when all are ok.
int blamedRank(const std::vector<std::string>& verdicts, std::string* what) {
  std::vector<int> votes(verdicts.size(), 0);
  std::vector<std::string> texts(verdicts.size());
  for (size_t r = 0; r < verdicts.size(); ++r) {
    const std::string& v = verdicts[r];
    if (v == "ok") continue;
    const size_t bar = v.find('|');
    int culprit = bar == std::string::npos ? int(r) : atoi(v.c_str());
    if (culprit < 0 || size_t(culprit) >= verdicts.size()) culprit = int(r);
    ++votes[size_t(culprit)];
    const std::string text = bar == std::string::npos ? v : v.substr(bar + 1);
    if (texts[size_t(culprit)].empty() || size_t(culprit) == r) texts[size_t(culprit)] = text;
  }
  int best = -1;
  for (size_t r = 0; r < votes.size(); ++r)
    if (votes[r] > 0 && (best < 0 || votes[r] > votes[size_t(best)])) best = int(r);
  if (best >= 0) *what = texts[size_t(best)];
  return best;
}

}  // namespace

bool selfTestWanted(const Policy& policy, const Executor& exec) {
  if (policy.selftest == "on") return true;
  return policy.selftest == "auto" && !exec.synchronous();  // a device executor
}

Status runSelfTest(const Policy& policy, CommState& st, Executor& exec, const void* like) {
  const auto start = std::chrono::steady_clock::now();
  st.selfTest.ran = true;
  auto run = std::make_shared<Run>();
  run->net = st.net;
  run->like = like;
  run->rank = st.rank;
  run->nranks = st.id.nranks;
  run->timeoutS = policy.selftestTimeoutS;
  std::string verdict;
  Status planned = parseInjection(policy.selftestInject, &run->inject);
  if (planned.ok()) planned = planItems(policy, &run->items);
  if (!planned.ok()) {
    verdict = verdictText(st.rank, "error: " + planned.toString());
  } else {
    std::thread(runItems, run, &exec).detach();
    std::unique_lock<std::mutex> lock(run->mu);
    if (run->cv.wait_for(lock, std::chrono::duration<double>(run->timeoutS),
                         [&] { return run->done; })) {
      verdict = run->verdict;
    } else {
      std::shared_ptr<transport::FailureMonitor> m =
          run->net ? run->net->failureMonitor() : nullptr;
      // A test blocked on a peer names it: that peer is the one to blame.
      const int waitingOn = m ? m->waitingOn() : -1;
      char text[320];
      std::snprintf(text, sizeof text,
                    "timeout: the self-test did not finish within GRADCOMP_SELFTEST_TIMEOUT_S = "
                    "%g s (running %s%s)",
                    run->timeoutS, run->doing.empty() ? "its first call" : run->doing.c_str(),
                    waitingOn >= 0 ? (", waiting for rank " + std::to_string(waitingOn)).c_str()
                                   : "");
      // Give up on it, through the communicator's failure monitor: a test
      // blocked on a peer reports its suspicion (the monitor's root names
      // the rank the waits lead to: one that is not waiting itself), one
      // that waits on nothing reports itself. The verdict ends the waits of
      // every rank's test at once, so no test's thread outlives the phase
      // by more than a moment.
      run->abandoned = true;
      run->cv.notify_all();
      int culprit = st.rank;
      if (m) {
        const Status own(Err::Timeout, "rank " + std::to_string(st.rank) + ": " + text);
        lock.unlock();
        if (waitingOn >= 0) (void)m->settle(waitingOn, transport::monitor::SuspectKind::Silent,
                                            run->timeoutS, own);
        else m->reportSelf(own);
        for (int i = 0; i < 150 && !m->failed(); ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        if (m->failed() && m->failedRank() >= 0) culprit = m->failedRank();
        lock.lock();
      }
      verdict = verdictText(culprit, text);
      run->cv.wait_for(lock, std::chrono::seconds(1), [&] { return run->done; });
    }
  }

  // Agreed over NCCL: every rank gets here within its time limit.
  NcclExchange exchange(st.comm, st.rank, st.id.nranks);
  std::vector<std::string> all;
  GC_CHECK(exchange.allgather(verdict, &all));
  st.selfTest.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string what;
  const int failed = blamedRank(all, &what);
  std::string names;
  for (const Item& item : run->items) names += (names.empty() ? "" : ", ") + item.label;
  if (failed < 0) {
    st.selfTest.passed = true;
    st.selfTest.verdict = "ok";
    GC_INFO(INIT, "communicator #%llu: self-test passed in %.3f s (%s; %zu floats per call)",
            (unsigned long long)st.id.index, st.selfTest.seconds, names.c_str(), kSelfTestCount);
    return Status::Ok();
  }
  st.selfTest.verdict = "rank " + std::to_string(failed) + ": " + what;
  const std::string why = "self-test failed on " + st.selfTest.verdict;
  GC_WARN("communicator #%llu: %s; every rank passes this communicator's calls through to NCCL "
          "(no user buffer was touched). Details: GRADCOMP_DEBUG=INFO on rank %d; "
          "GRADCOMP_SELFTEST=off skips the test",
          (unsigned long long)st.id.index, why.c_str(), failed);
  // The test's thread may still use the transport: it keeps its own
  // reference; the communicator drops its own and never touches it again.
  // An asynchronous executor lets go of the communicator now (its queued
  // calls fail; a proxy stuck in the driver is abandoned, as at shutdown).
  if (!exec.synchronous()) exec.release(st.net.get(), /*abortPending=*/true);
  st.budget.release();
  st.net.reset();
  st.disable("self-test failed", why);
  return Status::Ok();
}

}  // namespace gradcomp::nccl
