// Per-communicator state of the interposer and the registry that maps an
// ncclComm_t to it. Lookups are concurrent (shared lock); each state has its
// own mutex, taken for the whole of a compressed call (NCCL already requires
// the application to serialize calls on one communicator).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/call_budget.h"
#include "algorithms/auto/tuner.h"
#include "algorithms/error_feedback.h"
#include "common/param.h"
#include "plugin/nccl/nccl_abi.h"
#include "plugin/nccl/policy.h"
#include "transport/host_topology.h"
#include "transport/transport.h"

namespace gradcomp::nccl {

struct BucketStats {
  uint64_t calls = 0;
  uint64_t count = 0;        // elements of the last call (reduce-scatter: of its input)
  bool reduceScatter = false;
  bool allgather = false;
  uint64_t bytesIn = 0;      // logical bytes (count * dtype size), summed
  uint64_t bytesOut = 0;     // bytes this rank sent on the wire, summed
  double seconds = 0;        // time inside the executor (total)
  // Of `seconds`, time blocked in transport waits (communication); the rest is
  // compute (compression, reduction, error feedback). Synchronous executors
  // only: an asynchronous one returns before the call ran (phaseTimed false).
  double waitSeconds = 0;
  bool phaseTimed = true;
  double residualNorm = -1;  // last residual L2 norm; < 0: no error feedback
};

// Of the totals below, the ncclReduceScatter calls.
struct ReduceScatterStats {
  uint64_t compressedCalls = 0, passedCalls = 0;
  uint64_t compressedLogicalBytes = 0, wireBytes = 0, passedBytes = 0;
};

// Shadow mode (shadow.h), per bucket: what compression would have done.
struct ShadowBucket {
  uint64_t calls = 0, failed = 0;
  uint64_t count = 0;              // elements of the last call
  bool reduceScatter = false;
  uint64_t logicalBytes = 0;       // count * dtype size, summed
  uint64_t wireBytes = 0;          // what the compressed algorithm sent, summed
  uint64_t denseWireBytes = 0;     // what a ring would send: 2(P-1)/P (allreduce), (P-1)/P
  std::vector<double> relErrors;   // per call: |compressed - NCCL|_2 / |NCCL|_2
  uint64_t agreeChecked = 0, agreed = 0;  // calls whose results all ranks compared / found equal
  double compressedSeconds = 0, ncclSeconds = 0;
  std::string lastError;
};

struct CommStats {
  // Every intercepted collective (allreduce and reduce-scatter).
  uint64_t compressedCalls = 0, passedCalls = 0;
  uint64_t compressedLogicalBytes = 0, wireBytes = 0, passedBytes = 0;
  double compressedSeconds = 0, compressedWaitSeconds = 0, wiringSeconds = 0;
  std::map<std::string, uint64_t> passReasons;  // verdict name -> calls
  std::map<uint64_t, BucketStats> buckets;      // by buffer key (address)
  ReduceScatterStats reduceScatter;
  ReduceScatterStats allgather;  // of the totals, the ncclAllGather calls (same fields)
  std::map<uint64_t, ShadowBucket> shadow;  // by buffer key, as buckets
};

// Algorithm instance and parameters for one rule (-1: the defaults). Shared:
// an asynchronous executor's job keeps the runtime it runs (shared_from_this)
// until the job is gone, also past the communicator's destruction.
struct RuleRuntime : std::enable_shared_from_this<RuleRuntime> {
  std::string algoName;
  std::unique_ptr<algo::Algorithm> algorithm;
  param::Overrides config;
};

enum class Wiring { Pending, Ready, Disabled };

// The communicator's self-test (selftest.h), for the stats.
struct SelfTestRecord {
  bool ran = false;
  bool passed = false;
  double seconds = 0;
  std::string verdict;  // "ok", or the first failing rank's verdict
};

struct CommState {
  ncclComm_t comm = nullptr;
  CommIdentity id;
  int rank = -1;
  bool selected = false;  // policy selects it (before the cross-rank check)
  bool initInProgress = false;  // nonblocking init or inside a group: wire later

  std::mutex mu;  // everything below
  Wiring wiring = Wiring::Pending;
  // Why compression is off on this communicator: a short category for
  // summaries ("config mismatch", "UCX wiring failed", ...) and the full text.
  std::string disabledKind, disabledWhy;
  void disable(const char* kind, std::string why) {
    wiring = Wiring::Disabled;
    disabledKind = kind;
    disabledWhy = std::move(why);
  }
  // Shared with the jobs of an asynchronous executor (CompressedCall's
  // owners): destroying the communicator drops these references, and a job
  // still running (a proxy stuck past the watchdog) frees them when it ends.
  std::shared_ptr<transport::Transport> net;
  std::map<int, std::shared_ptr<RuleRuntime>> runtimes;
  std::map<int, std::shared_ptr<RuleRuntime>> rsRuntimes;  // ncclReduceScatter's, by rule
  std::shared_ptr<RuleRuntime> agRuntime;                   // ncclAllGather's
  std::shared_ptr<algo::ErrorFeedbackStore> errorFeedback;
  // The host executor's call runner (the CUDA executor keeps one per
  // communicator of its own); released before net.
  algo::CallBudget budget;
  // Agreed at wiring over `net` (transport/host_topology.h); rule algorithms
  // are wrapped in the hierarchical schedule when topology.hierarchical.
  transport::HostTopology topology;
  uint64_t callSeq = 0;
  SelfTestRecord selfTest;
  bool shadowStopped = false;  // a shadow call failed: no more shadowing (shadow.h)
  bool shadowNoted = false;    // "not shadowed" logged once
  bool closed = false;  // destroyed or aborted: transport released
  bool failed = false;
  ncclResult_t failedCode = ncclSuccess;
  std::string failedMessage;
  int failedRank = -1;  // the rank the failure monitor agreed on; -1: none named
  CommStats stats;
  // GRADCOMP_ALGO=auto: each auto runtime's report (by rule), kept when the
  // runtimes are released at destroy so stats can still show it.
  std::vector<std::pair<int, algo::autosel::TunerReport>> autoFinal;
  std::chrono::steady_clock::time_point created = std::chrono::steady_clock::now();
};

// The reports of state's live auto runtimes (rule -1 first); caller holds state.mu.
std::vector<std::pair<int, algo::autosel::TunerReport>> autoReports(const CommState& state);

class CommRegistry {
 public:
  static CommRegistry& instance();
  uint64_t nextIndex() { return nextIndex_.fetch_add(1); }
  void add(std::shared_ptr<CommState> state);
  std::shared_ptr<CommState> find(ncclComm_t comm) const;
  std::shared_ptr<CommState> remove(ncclComm_t comm);
  // Every communicator seen so far, live or destroyed (stats file).
  std::vector<std::shared_ptr<CommState>> history() const;

 private:
  std::atomic<uint64_t> nextIndex_{0};
  mutable std::mutex mu_;
  std::map<ncclComm_t, std::shared_ptr<CommState>> live_;
  std::vector<std::shared_ptr<CommState>> history_;
};

}  // namespace gradcomp::nccl
