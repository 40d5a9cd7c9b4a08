#include "plugin/nccl/wiring.h"

#include "algorithms/auto/auto_algorithm.h"
#include "algorithms/error_feedback.h"
#include "algorithms/hierarchy/hierarchical.h"
#include "common/log.h"
#include "device/backend.h"
#include "plugin/nccl/cuda_probe.h"
#include "plugin/nccl/executor.h"
#include "plugin/nccl/nccl_exchange.h"
#include "transport/placement.h"
#include "transport/ucx_transport.h"

namespace gradcomp::nccl {

namespace {

uint64_t fnv1a(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

// One fixed-size record per rank: the common case (every rank agrees) costs a
// single 16-byte ncclAllGather. Only when the hashes differ do the ranks (all
// of them: they all saw the same hashes) exchange the full texts to name the
// differing key. *diff is "" when every rank has the same configuration.
Status compareConfigs(NcclExchange& exchange, const std::string& text, std::string* diff) {
  struct Record {
    uint64_t hash, length;
  };
  static_assert(sizeof(Record) == 16, "fixed wire size");
  Record mine{fnv1a(text), text.size()};
  std::vector<Record> all(size_t(exchange.size()));
  GC_CHECK(exchange.gatherBytes(&mine, sizeof mine, all.data()));
  diff->clear();
  bool equal = true;
  for (const Record& r : all) equal = equal && r.hash == mine.hash && r.length == mine.length;
  if (equal) return Status::Ok();
  std::vector<std::string> texts;
  GC_CHECK(exchange.allgather(text, &texts));
  *diff = firstDifference(texts);
  if (diff->empty()) *diff = "configuration hashes differ across ranks";
  return Status::Ok();
}

// The rules (-1: the defaults) whose algorithm is auto.
std::vector<int> autoRules(const Policy& policy) {
  std::vector<int> rules;
  if (policy.algo == "auto") rules.push_back(-1);
  for (size_t i = 0; i < policy.rules.size(); ++i) {
    const std::string& a = policy.rules[i].algo;
    if (a == "auto" || (a.empty() && policy.algo == "auto")) rules.push_back(int(i));
  }
  return rules;
}

// GRADCOMP_ALGO=auto: each auto runtime's calibration probe over the fresh
// transport, then every rank's verdict allgathered over the real
// communicator, so that ranks never disagree: a probe that failed or ran out
// of time anywhere makes that runtime run dense (NCCL) on every rank; a
// transport failure anywhere disables compression on the communicator.
Status calibrateAuto(const Policy& policy, NcclExchange& exchange, CommState& state) {
  for (int rule : autoRules(policy)) {
    RuleRuntime* rt = nullptr;
    GC_CHECK(runtimeFor(policy, state, rule, &rt));
    algo::autosel::AutoTuner* tuner = algo::autosel::tunerOf(rt->algorithm.get());
    if (tuner == nullptr) continue;
    algo::Context ctx{*state.net, device::cpuBackend(), rt->config, 0, nullptr};
    Status s = tuner->calibrate(ctx);
    const std::string verdict =
        !s.ok() ? "error: " + s.toString() : tuner->disabled() ? "dense: " + tuner->why() : "ok";
    std::vector<std::string> verdicts;
    GC_CHECK(exchange.allgather(verdict, &verdicts));
    for (size_t r = 0; r < verdicts.size(); ++r) {
      if (verdicts[r] == verdict) continue;
      const std::string why = "GRADCOMP_ALGO=auto calibration on rank " + std::to_string(r) +
                              ": " + verdicts[r];
      bool broken = false;
      for (const std::string& v : verdicts) broken = broken || v.rfind("error: ", 0) == 0;
      if (broken) {
        state.net.reset();
        state.disable("auto calibration failed", why);
        GC_WARN("communicator #%llu: %s; compression disabled on this communicator on every rank",
                (unsigned long long)state.id.index, why.c_str());
        return Status::Ok();
      }
      tuner->disable(why);
      GC_WARN("communicator #%llu: %s; auto runs dense (NCCL) on every rank",
              (unsigned long long)state.id.index, why.c_str());
      break;
    }
    if (!s.ok()) {  // every rank failed alike: the transport is unusable
      state.net.reset();
      state.disable("auto calibration failed", verdict);
      GC_WARN("communicator #%llu: %s; compression disabled on this communicator",
              (unsigned long long)state.id.index, verdict.c_str());
      return Status::Ok();
    }
  }
  return Status::Ok();
}

}  // namespace

Status wireCommunicator(const Policy& policy, CommState& state) {
  auto start = std::chrono::steady_clock::now();
  NcclExchange exchange(state.comm, state.rank, state.id.nranks);
  std::string diff, why;
  const std::string executor = deviceExecutorAvailability(&why);
  if (executor != "cuda" && policy.enabled() && state.selected)
    GC_INFO(INIT, "communicator #%llu: no CUDA executor on this rank (%s): calls on device "
            "memory pass through to NCCL", (unsigned long long)state.id.index, why.c_str());
  GC_CHECK(compareConfigs(exchange,
                          effectiveConfigText(policy, state.id, state.selected, executor), &diff));
  state.wiring = Wiring::Disabled;
  if (!diff.empty()) {
    state.disable("config mismatch", "configuration differs across ranks: " + diff);
    GC_WARN("communicator #%llu (%d ranks): configuration differs across ranks: %s; compression "
            "disabled on this communicator on every rank",
            (unsigned long long)state.id.index, state.id.nranks, diff.c_str());
    return Status::Ok();
  }
  if (!policy.enabled()) {
    state.disable("off", "off");
    return Status::Ok();
  }
  if (!state.selected) {
    state.disable("not selected", "not selected by GRADCOMP_COMMS");
    return Status::Ok();
  }
  // The UCX context is process-wide: the GPU of the first communicator that
  // creates it picks its NIC (transport/placement.h).
  if (executor == "cuda") transport::setPlacementDevice(pciBusId());
  std::unique_ptr<transport::Transport> net;
  Status made = transport::createUcxTransport(exchange, transport::UcxOptions{}, &net);
  state.net = std::move(net);
  std::string verdict = made.ok() ? "ok" : made.toString();
  std::vector<std::string> verdicts;
  GC_CHECK(exchange.allgather(verdict, &verdicts));
  for (size_t r = 0; r < verdicts.size(); ++r) {
    if (verdicts[r] == "ok") continue;
    state.net.reset();
    state.disable("UCX wiring failed", "UCX wiring failed on rank " + std::to_string(r) + ": " + verdicts[r]);
    GC_WARN("communicator #%llu: %s; compression disabled on this communicator on every rank",
            (unsigned long long)state.id.index, state.disabledWhy.c_str());
    return Status::Ok();
  }
  std::unique_ptr<algo::ErrorFeedbackStore> residuals;
  Status ef = algo::ErrorFeedbackStore::create(param::Overrides{}, &residuals);
  state.errorFeedback = std::move(residuals);
  if (!ef.ok()) {
    // Same configuration everywhere, so every rank fails alike.
    state.net.reset();
    state.disable("error feedback setup failed", ef.toString());
    GC_WARN("communicator #%llu: %s; compression disabled", (unsigned long long)state.id.index,
            state.disabledWhy.c_str());
    return Status::Ok();
  }
  // The host map over the wired transport; its verdict is agreed through
  // NCCL so that a failure on one rank disables compression on all.
  Status topo = transport::discoverTopology(*state.net, &state.topology);
  verdict = topo.ok() ? "ok" : topo.toString();
  GC_CHECK(exchange.allgather(verdict, &verdicts));
  for (size_t r = 0; r < verdicts.size(); ++r) {
    if (verdicts[r] == "ok") continue;
    state.net.reset();
    state.disable("topology failed",
                  "host topology failed on rank " + std::to_string(r) + ": " + verdicts[r]);
    GC_WARN("communicator #%llu: %s; compression disabled on this communicator on every rank",
            (unsigned long long)state.id.index, state.disabledWhy.c_str());
    return Status::Ok();
  }
  GC_CHECK(calibrateAuto(policy, exchange, state));
  if (state.disabledKind == "auto calibration failed") return Status::Ok();
  state.wiring = Wiring::Ready;
  state.stats.wiringSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  GC_INFO(INIT, "communicator #%llu rank %d/%d: compression on (%s), UCX wired in %.3f s",
          (unsigned long long)state.id.index, state.rank, state.id.nranks, policy.algo.c_str(),
          state.stats.wiringSeconds);
  return Status::Ok();
}

Status runtimeFor(const Policy& policy, CommState& state, int rule, RuleRuntime** out) {
  auto it = state.runtimes.find(rule);
  if (it != state.runtimes.end()) {
    *out = it->second.get();
    return Status::Ok();
  }
  auto made = std::make_shared<RuleRuntime>();
  RuleRuntime& rt = *made;
  const Rule* r = rule >= 0 ? &policy.rules[size_t(rule)] : nullptr;
  rt.algoName = r && !r->algo.empty() ? r->algo : policy.algo;
  GC_CHECK(algorithmOverrides(policy, rule, &rt.config));
  const algo::AlgorithmInfo* info = algo::findAlgorithm(rt.algoName);
  GC_REQUIRE(info != nullptr, Err::InvalidConfig, "algorithm '%s' is not registered; known: %s",
             rt.algoName.c_str(), algo::algorithmNames().c_str());
  rt.algorithm = info->create();
  if (state.topology.hierarchical && algo::hierarchy::supportsHierarchy(*info))
    rt.algorithm =
        algo::hierarchy::makeHierarchical(std::move(rt.algorithm), state.topology.hostRanks);
  else if (state.topology.hierarchical)
    GC_INFO(ALGO, "%s runs flat over all ranks: it has no hierarchical form", info->name.c_str());
  *out = made.get();
  state.runtimes.emplace(rule, std::move(made));
  return Status::Ok();
}

Status reduceScatterRuntimeFor(const Policy& policy, CommState& state, int rule,
                               RuleRuntime** out) {
  auto it = state.rsRuntimes.find(rule);
  if (it != state.rsRuntimes.end()) {
    *out = it->second.get();
    return Status::Ok();
  }
  auto made = std::make_shared<RuleRuntime>();
  RuleRuntime& rt = *made;
  Verdict why = Verdict::Off;
  rt.algoName = reduceScatterAlgo(policy, rule, &why);
  const algo::AlgorithmInfo* info = algo::findAlgorithm(rt.algoName);
  GC_REQUIRE(info && info->hasReduceScatter(), Err::Internal,
             "reduce-scatter runtime for rule %d: no algorithm (%s)", rule, verdictName(why));
  GC_CHECK(algorithmOverrides(policy, rule, &rt.config));
  rt.algorithm = info->create();
  if (state.topology.hierarchical && algo::hierarchy::supportsHierarchy(*info))
    rt.algorithm =
        algo::hierarchy::makeHierarchical(std::move(rt.algorithm), state.topology.hostRanks);
  else if (state.topology.hierarchical)
    GC_INFO(ALGO, "reduce-scatter by %s runs flat over all ranks", info->name.c_str());
  *out = made.get();
  state.rsRuntimes.emplace(rule, std::move(made));
  return Status::Ok();
}

Status allgatherRuntimeFor(const Policy& policy, CommState& state, RuleRuntime** out) {
  if (!state.agRuntime) {
    auto made = std::make_shared<RuleRuntime>();
    made->algoName = policy.agAlgo;
    const algo::AlgorithmInfo* info = algo::findAllgatherAlgorithm(policy.agAlgo);
    GC_REQUIRE(info, Err::Internal, "allgather runtime: no algorithm '%s'",
               policy.agAlgo.c_str());
    GC_CHECK(algorithmOverrides(policy, -1, &made->config));
    made->algorithm = info->create();
    if (state.topology.hierarchical)  // dense inside each host, the codec between hosts
      made->algorithm =
          algo::hierarchy::makeHierarchical(std::move(made->algorithm), state.topology.hostRanks);
    state.agRuntime = std::move(made);
  }
  *out = state.agRuntime.get();
  return Status::Ok();
}

// Drops the communicator's references; a job still running keeps its own.
void unwireCommunicator(CommState& state) {
  if (!state.runtimes.empty()) state.autoFinal = autoReports(state);
  state.runtimes.clear();
  state.rsRuntimes.clear();
  state.agRuntime.reset();
  state.errorFeedback.reset();
  state.budget.release();  // signatures still posted on net
  state.net.reset();
  state.closed = true;
}

}  // namespace gradcomp::nccl
