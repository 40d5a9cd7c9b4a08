#include "plugin/nccl/interposer.h"

#include <algorithm>
#include <chrono>
#include <mutex>

#include "algorithms/auto/auto_algorithm.h"
#include "algorithms/error_feedback.h"
#include "common/log.h"
#include "device/backend.h"
#include "plugin/nccl/comm_state.h"
#include "plugin/nccl/cuda_probe.h"
#include "plugin/nccl/executor.h"
#include "plugin/nccl/real_nccl.h"
#include "plugin/nccl/selftest.h"
#include "plugin/nccl/shadow.h"
#include "plugin/nccl/stats.h"
#include "plugin/nccl/wiring.h"
#include "transport/failure_monitor.h"

namespace gradcomp::nccl {
namespace {

thread_local int tInside = 0;
thread_local int tGroupDepth = 0;

struct PolicyHolder {
  Policy policy;
  Status status;
};

// Frozen at the first communicator creation (or first call), like the registry.
const PolicyHolder& policyHolder() {
  static PolicyHolder* holder = [] {
    auto* h = new PolicyHolder();
    h->status = loadPolicy(&h->policy);
    if (!h->status.ok()) {
      GC_WARN("%s; %s", h->status.message().c_str(),
              h->policy.strict ? "GRADCOMP_STRICT=1: communicator creation fails"
                               : "running uncompressed (GRADCOMP_STRICT=1 makes this fatal)");
    } else if (h->policy.enabled()) {
      GC_INFO(INIT, "NCCL interposer: algorithm %s, communicators '%s', min bytes %llu%s%s",
              h->policy.algo.c_str(), h->policy.commsText.c_str(),
              (unsigned long long)h->policy.minBytes, h->policy.configPath.empty() ? "" : ", config ",
              h->policy.configPath.c_str());
    }
    return h;
  }();
  return *holder;
}

const Policy& policy() { return policyHolder().policy; }

size_t ncclDtypeSize(int dtype) {
  switch (dtype) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}

ncclResult_t toNccl(Err e) {
  switch (e) {
    case Err::Ok: return ncclSuccess;
    case Err::RemoteError: case Err::Timeout: return ncclRemoteError;
    case Err::SystemError: return ncclSystemError;
    case Err::InvalidArgument: return ncclInvalidArgument;
    case Err::InvalidConfig: return ncclInvalidUsage;
    default: return ncclInternalError;
  }
}

// `what`: the collective that failed ("allreduce" for wiring and the monitor).
void markFailed(CommState& st, const Status& s, const char* what = "allreduce") {
  if (st.failed) return;
  st.failed = true;
  if (st.net)
    if (std::shared_ptr<transport::FailureMonitor> m = st.net->failureMonitor())
      st.failedRank = m->failedRank();
  st.failedCode = toNccl(s.code());
  st.failedMessage = std::string("gradcomp: compressed ") + what + " failed on communicator #" +
                     std::to_string(st.id.index) + " (rank " + std::to_string(st.rank) + "/" +
                     std::to_string(st.id.nranks) + "): " + s.toString();
  GC_WARN("%s; the communicator is marked failed (ncclCommGetAsyncError reports it)",
          st.failedMessage.c_str());
}

// Rank and size of a communicator whose creation may still have been in flight.
void fillRankAndSize(CommState& st) {
  const RealNccl& nccl = real();
  if (st.rank < 0 && nccl.commUserRank) nccl.commUserRank(st.comm, &st.rank);
  if (st.id.nranks <= 0 && nccl.commCount) nccl.commCount(st.comm, &st.id.nranks);
}

void passThroughStats(CommState& st, Verdict v, size_t bytes, algo::Collective coll) {
  std::lock_guard<std::mutex> lock(st.mu);
  st.stats.passedCalls++;
  st.stats.passedBytes += bytes;
  if (coll != algo::Collective::AllReduce) {
    ReduceScatterStats& part = coll == algo::Collective::ReduceScatter ? st.stats.reduceScatter
                                                                       : st.stats.allgather;
    part.passedCalls++;
    part.passedBytes += bytes;
  }
  st.stats.passReasons[verdictName(v)]++;
}

// The compressed path; caller holds st.mu. Runs `algorithm` with `config`
// as call number `callSeq`; *seconds (nullable) gets its time when the
// executor is synchronous. `activity` names the call in failure messages and
// must outlive it (the rule's name, owned by the communicator's state).
// Returns the result for the app.
ncclResult_t runCompressed(CommState& st, Executor& exec, const RuleRuntime& rt,
                           algo::Algorithm& algorithm,
                           const param::Overrides& config, const std::string& name,
                           const char* activity,
                           uint64_t callSeq, const algo::AllreduceArgs& args, size_t bytes,
                           cudaStream_t stream, double* secondsOut = nullptr) {
  CompressedCall call;
  call.args = args;
  call.algorithm = &algorithm;
  call.algorithmName = activity;
  call.net = st.net.get();
  call.config = &config;
  call.callSeq = callSeq;
  call.errorFeedback = st.errorFeedback.get();
  // The rule's algorithm (auto, not its candidate); an allgather's from its own registry.
  call.asked = args.coll == algo::Collective::AllGather ? algo::findAllgatherAlgorithm(rt.algoName)
                                                        : algo::findAlgorithm(rt.algoName);
  call.askedConfig = &rt.config;
  call.budget = &st.budget;
  call.ownsNet = st.net;
  call.ownsRuntime = rt.shared_from_this();
  call.ownsResiduals = st.errorFeedback;
  // An asynchronous executor's proxy thread owns the transport and the
  // residuals until the call finishes: read neither here.
  const bool sync = exec.synchronous();
  uint64_t sentBefore = sync ? st.net->totalCounters().bytesSent : 0;
  double waitBefore = sync ? st.net->waitSeconds() : 0;
  auto start = std::chrono::steady_clock::now();
  Status s = exec.submit(call, stream);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!s.ok()) {
    markFailed(st, s, algo::collectiveName(args.coll));
    return st.failedCode;
  }
  if (secondsOut) *secondsOut = seconds;
  uint64_t sent = sync ? st.net->totalCounters().bytesSent - sentBefore : 0;
  // Clamped: the wait clock and ours are read at different instants.
  double waited = sync ? std::min(seconds, std::max(0.0, st.net->waitSeconds() - waitBefore)) : 0;
  st.stats.compressedCalls++;
  st.stats.compressedLogicalBytes += bytes;
  st.stats.wireBytes += sent;
  st.stats.compressedSeconds += seconds;
  st.stats.compressedWaitSeconds += waited;
  if (args.coll != algo::Collective::AllReduce) {
    ReduceScatterStats& rs = args.coll == algo::Collective::ReduceScatter ? st.stats.reduceScatter
                                                                          : st.stats.allgather;
    rs.compressedCalls++;
    rs.compressedLogicalBytes += bytes;
    rs.wireBytes += sent;
  }
  const uint64_t key = algo::residualKey(args);  // per this rank's buffer, as the residuals
  BucketStats& b = st.stats.buckets[key];
  b.calls++;
  b.count = args.count;
  b.reduceScatter = args.coll == algo::Collective::ReduceScatter;
  b.allgather = args.coll == algo::Collective::AllGather;
  b.bytesIn += bytes;
  b.bytesOut += sent;
  b.seconds += seconds;
  b.waitSeconds += waited;
  b.phaseTimed = b.phaseTimed && sync;
  if (sync && st.errorFeedback && st.errorFeedback->enabled()) b.residualNorm = st.errorFeedback->residualNorm(key);
  GC_TRACE(PLUGIN, "comm #%llu call %llu: %zu bytes compressed by %s to %llu wire bytes in %.6f s",
           (unsigned long long)st.id.index, (unsigned long long)call.callSeq, bytes,
           name.c_str(), (unsigned long long)sent, seconds);
  return ncclSuccess;
}

// GRADCOMP_ALGO=auto; caller holds st.mu. The tuner decides (an agreement
// with the peers over UCX when one is due, synchronous executors only); a
// dense choice without a residual to carry goes to NCCL (`passThrough`),
// everything else runs compressed. Synchronous calls are timed for the tuner.
template <class PassThrough>
ncclResult_t runAuto(CommState& st, Executor& exec, RuleRuntime& rt,
                     algo::autosel::AutoTuner& tuner, const algo::AllreduceArgs& args,
                     size_t bytes, cudaStream_t stream, PassThrough&& passThrough) {
  const uint64_t callSeq = st.callSeq++;
  const bool measurable = exec.synchronous();
  algo::Context ctx{*st.net, device::cpuBackend(), rt.config, callSeq, st.errorFeedback.get()};
  algo::autosel::AutoTuner::Decision d;
  Status s = tuner.plan(ctx, args, measurable, &d);
  if (!s.ok()) {
    markFailed(st, s);
    return st.failedCode;
  }
  const bool ef = st.errorFeedback && st.errorFeedback->enabled();
  if (d.dense && !d.flush) {
    const auto start = std::chrono::steady_clock::now();
    ncclResult_t rc = passThrough();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (rc == ncclSuccess) tuner.finish(d, seconds, ef);
    st.stats.passedCalls++;
    st.stats.passedBytes += bytes;
    st.stats.passReasons[verdictName(Verdict::AutoDense)]++;
    return rc;
  }
  double seconds = 0;
  ncclResult_t rc =
      runCompressed(st, exec, rt, tuner.algorithmFor(d), tuner.configFor(d, rt.config),
                    "auto: " + tuner.labelOf(d), rt.algoName.c_str(), callSeq, args, bytes,
                    stream, &seconds);
  if (rc == ncclSuccess) tuner.finish(d, seconds, ef);
  return rc;
}

}  // namespace

InsideScope::InsideScope() : reentered_(tInside > 0) { ++tInside; }
InsideScope::~InsideScope() { --tInside; }

ncclResult_t strictConfigCheck() {
  const PolicyHolder& h = policyHolder();
  return (!h.status.ok() && h.policy.strict) ? ncclInvalidUsage : ncclSuccess;
}

ncclResult_t onCommCreated(ncclResult_t rc, ncclComm_t comm, int nranks, int rank,
                           const ncclConfig_t* config, bool singleProcess) {
  if (comm == nullptr || (rc != ncclSuccess && rc != ncclInProgress)) return rc;
  auto st = std::make_shared<CommState>();
  st->comm = comm;
  st->id.index = CommRegistry::instance().nextIndex();
  st->id.nranks = nranks;
  st->rank = rank;
  st->id.singleProcess = singleProcess;
  if (config && config->version >= GC_NCCL_CONFIG_COMMNAME_VERSION && config->commName)
    st->id.name = config->commName;
  st->initInProgress = rc == ncclInProgress || tGroupDepth > 0;
  if (!st->initInProgress) fillRankAndSize(*st);
  const Policy& p = policy();
  st->selected = p.enabled() && !singleProcess && selectorsMatch(p.comms, st->id);
  // Every multi-process communicator goes through the configuration exchange,
  // compression on or off here: a peer may have it on and wait for this rank.
  // Single-process communicators have every rank in this process, hence one
  // configuration, and a blocking exchange from one thread would deadlock.
  if (singleProcess) {
    st->disable("single-process communicator", "single-process communicator (ncclCommInitAll)");
  }
  CommRegistry::instance().add(st);
  registerStatsAtExit();
  if (st->wiring == Wiring::Pending && !st->initInProgress) {
    std::lock_guard<std::mutex> lock(st->mu);
    Status s = wireCommunicator(p, *st);
    if (!s.ok()) {
      st->disable("exchange at init failed", s.toString());
      GC_WARN("communicator #%llu: exchange at init failed: %s; running uncompressed",
              (unsigned long long)st->id.index, s.toString().c_str());
    }
  }
  return rc;
}

void onCommGone(ncclComm_t comm, const char* how) {
  std::shared_ptr<CommState> st = CommRegistry::instance().remove(comm);
  if (!st) return;
  {
    std::lock_guard<std::mutex> lock(st->mu);
    // The stats file records a failure the ranks agreed on, even one that
    // happened between this rank's calls.
    if (!st->failed && st->net)
      if (std::shared_ptr<transport::FailureMonitor> m = st->net->failureMonitor(); m && m->failed())
        markFailed(*st, m->verdict());
    if (Executor* e = st->net ? cudaExecutor() : nullptr) e->release(st->net.get(), std::string(how) == "abort");
    unwireCommunicator(*st);
    if (policy().enabled()) {
      GC_INFO(PLUGIN, "%s", statsLine(*st, how).c_str());
      for (const std::string& line : autoStatsLines(*st)) GC_INFO(PLUGIN, "%s", line.c_str());
    }
  }
  Status s = writeStatsFile();
  if (!s.ok()) GC_WARN("%s", s.toString().c_str());
}

namespace {

// One intercepted collective, as the application called it.
struct CollCall {
  algo::Collective coll = algo::Collective::AllReduce;
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  size_t count = 0;  // the application's count (reduce-scatter: recvcount; allgather: sendcount)
  ncclDataType_t dtype = ncclFloat32;
  ncclRedOp_t op = ncclSum;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
};

// Both collectives: the policy decides, then the compressed path or the
// real NCCL (`passThrough`). Everything a decision reads is shared by all
// ranks (policy, communicator identity, the call's arguments).
template <class PassThrough>
ncclResult_t intercept(const CollCall& c, PassThrough&& passThrough) {
  std::shared_ptr<CommState> st = CommRegistry::instance().find(c.comm);
  if (!st) return passThrough();
  const bool rs = c.coll == algo::Collective::ReduceScatter;
  const bool ag = c.coll == algo::Collective::AllGather;
  // A reduce-scatter compresses (and is sized by) its whole input, an
  // allgather its whole output.
  int nranks = st->id.nranks;
  if ((rs || ag) && nranks <= 0 && real().commCount) real().commCount(c.comm, &nranks);
  const size_t total = rs || ag ? c.count * size_t(std::max(nranks, 0)) : c.count;
  size_t bytes = total * ncclDtypeSize(c.dtype);
  int rule = -1;
  Verdict v = decide(policy(), st->id, CallShape{total, int(c.dtype), int(c.op), c.coll}, &rule);
  if (v == Verdict::Compress && tGroupDepth > 0) v = Verdict::InGroup;
  if (v == Verdict::Compress && streamCapturing(c.stream)) v = Verdict::Capturing;
  Executor* exec = nullptr;
  if (v == Verdict::Compress) {
    exec = selectExecutor(memoryKind(c.sendbuff), memoryKind(c.recvbuff));
    if (exec == nullptr) v = Verdict::NoExecutor;
  }
  {
    std::unique_lock<std::mutex> lock(st->mu);
    // A failed communicator keeps failing: passing through while peers may be
    // inside a compressed call would hang or mix results.
    if (st->failed) return st->failedCode;
    // Created nonblocking or inside a group: the exchange runs at the first
    // collective outside a group, whatever this call's verdict, because
    // that is the same call on every rank (NCCL's collective order rule).
    if (st->wiring == Wiring::Pending && tGroupDepth == 0) {
      fillRankAndSize(*st);
      Status s = wireCommunicator(policy(), *st);
      if (!s.ok()) {
        markFailed(*st, s);
        return st->failedCode;
      }
    }
    if (v == Verdict::Compress && st->wiring != Wiring::Ready) v = Verdict::CommDisabled;
    // Before the first compressed call touches a user buffer: the same call
    // on every rank (the same verdict from shared data), so every rank tests.
    if (v == Verdict::Compress && !st->selfTest.ran && st->selfTest.verdict.empty() &&
        selfTestWanted(policy(), *exec)) {
      Status s = runSelfTest(policy(), *st, *exec, c.recvbuff);
      if (!s.ok()) {
        markFailed(*st, s);
        return st->failedCode;
      }
      if (st->wiring != Wiring::Ready) v = Verdict::CommDisabled;
    }
    algo::AllreduceArgs args;
    args.sendBuf = c.sendbuff;
    args.recvBuf = c.recvbuff;
    // NCCL gives no tensor identity that ranks agree on: buffer addresses
    // differ per rank and allocators reuse them differently, so state
    // that steers the schedule is keyed by the call's shape (bufferKey 0,
    // algo::scheduleKey) and only this rank's residuals by its buffer
    // (a reduce-scatter's: its input's).
    args.bufferKey = 0;
    args.localKey = uint64_t(uintptr_t(rs ? c.sendbuff : c.recvbuff));
    if (ag) args.op = RedOp::Sum;  // an allgather has no op
    args.count = total;
    args.coll = c.coll;
    eligibleDtype(int(c.dtype), &args.dtype);
    eligibleOp(int(c.op), &args.op);
    // NCCL's in-place layout or disjoint buffers; anything else is NCCL's
    // to judge, as if gradcomp were absent (the same on every rank with
    // the same layout; a rank whose layout differs fails the call check).
    if (v == Verdict::Compress && (rs || ag)) {
      Status layout = algo::checkCallArgs(args, st->id.nranks, st->rank);
      if (!layout.ok()) {
        v = rs ? Verdict::RsLayout : Verdict::AgLayout;
        if (st->stats.passReasons.count(verdictName(v)) == 0)
          GC_WARN("communicator #%llu: %s passes through to NCCL: %s",
                  (unsigned long long)st->id.index, rs ? "ncclReduceScatter" : "ncclAllGather",
                  layout.message().c_str());
      }
    }
    // Shadow mode measures allreduces and reduce-scatters only: an
    // allgather then passes through unmeasured, NCCL's result as promised.
    if (v == Verdict::Compress && ag && policy().shadow) v = Verdict::Off;
    if (v == Verdict::Compress) {
      RuleRuntime* rt = nullptr;
      Status s = rs   ? reduceScatterRuntimeFor(policy(), *st, rule, &rt)
                 : ag ? allgatherRuntimeFor(policy(), *st, &rt)
                      : runtimeFor(policy(), *st, rule, &rt);
      if (!s.ok()) {
        markFailed(*st, s);
        return st->failedCode;
      }
      if (policy().shadow)
        return runShadow(*st, *exec, *rt, args, bytes, c.stream, passThrough);
      if (algo::autosel::AutoTuner* tuner = algo::autosel::tunerOf(rt->algorithm.get()))
        return runAuto(*st, *exec, *rt, *tuner, args, bytes, c.stream, passThrough);
      return runCompressed(*st, *exec, *rt, *rt->algorithm, rt->config, rt->algoName,
                           rt->algoName.c_str(), st->callSeq++, args, bytes, c.stream);
    }
    if (v == Verdict::NoExecutor && st->stats.passReasons.count(verdictName(v)) == 0)
      GC_INFO(PLUGIN, "communicator #%llu: eligible %s on device memory passes through to "
              "NCCL (no CUDA executor in this build)", (unsigned long long)st->id.index,
              algo::collectiveName(c.coll));
  }
  passThroughStats(*st, v, bytes, c.coll);
  return passThrough();
}

}  // namespace

ncclResult_t allReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t dtype,
                       ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  const RealNccl& nccl = real();
  auto passThrough = [&] {
    return nccl.allReduce ? nccl.allReduce(sendbuff, recvbuff, count, dtype, op, comm, stream)
                          : ncclSystemError;
  };
  return intercept(CollCall{algo::Collective::AllReduce, sendbuff, recvbuff, count, dtype, op,
                            comm, stream},
                   passThrough);
}

ncclResult_t allGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                       ncclDataType_t dtype, ncclComm_t comm, cudaStream_t stream) {
  const RealNccl& nccl = real();
  auto passThrough = [&] {
    return nccl.allGather ? nccl.allGather(sendbuff, recvbuff, sendcount, dtype, comm, stream)
                          : ncclSystemError;
  };
  return intercept(CollCall{algo::Collective::AllGather, sendbuff, recvbuff, sendcount, dtype,
                            ncclSum, comm, stream},
                   passThrough);
}

ncclResult_t reduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                           ncclDataType_t dtype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  const RealNccl& nccl = real();
  auto passThrough = [&] {
    return nccl.reduceScatter
               ? nccl.reduceScatter(sendbuff, recvbuff, recvcount, dtype, op, comm, stream)
               : ncclSystemError;
  };
  return intercept(CollCall{algo::Collective::ReduceScatter, sendbuff, recvbuff, recvcount, dtype,
                            op, comm, stream},
                   passThrough);
}

ncclResult_t getAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  const RealNccl& nccl = real();
  if (nccl.commGetAsyncError == nullptr) return ncclSystemError;
  ncclResult_t rc = nccl.commGetAsyncError(comm, asyncError);
  if (rc != ncclSuccess || asyncError == nullptr || *asyncError != ncclSuccess) return rc;
  std::shared_ptr<CommState> st = CommRegistry::instance().find(comm);
  if (st) {
    std::lock_guard<std::mutex> lock(st->mu);
    if (Executor* e = !st->failed && st->net ? cudaExecutor() : nullptr) {
      Status s = e->asyncError(st->net.get());
      if (!s.ok()) markFailed(*st, s);
    }
    // A peer failure the ranks agreed on, also between calls: an application
    // polling ncclCommGetAsyncError (PyTorch's watchdog) learns it at once.
    if (!st->failed && st->net)
      if (std::shared_ptr<transport::FailureMonitor> m = st->net->failureMonitor(); m && m->failed())
        markFailed(*st, m->verdict());
    if (st->failed) *asyncError = st->failedCode;
  }
  return rc;
}

const char* lastError(ncclComm_t comm) {
  thread_local std::string message;
  std::shared_ptr<CommState> st = comm ? CommRegistry::instance().find(comm) : nullptr;
  if (st) {
    std::lock_guard<std::mutex> lock(st->mu);
    if (st->failed) {
      message = st->failedMessage;
      return message.c_str();
    }
  }
  const RealNccl& nccl = real();
  return nccl.getLastError ? nccl.getLastError(comm) : "";
}

ncclResult_t groupStart() {
  const RealNccl& nccl = real();
  ++tGroupDepth;
  return nccl.groupStart ? nccl.groupStart() : ncclSystemError;
}

ncclResult_t groupEnd() {
  const RealNccl& nccl = real();
  if (tGroupDepth > 0) --tGroupDepth;
  return nccl.groupEnd ? nccl.groupEnd() : ncclSystemError;
}

}  // namespace gradcomp::nccl
