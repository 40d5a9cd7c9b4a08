// The objects behind the public C API handles (include/gradcomp/gradcomp.h).
// A gcComm is used by one thread at a time (like an NCCL communicator).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "algorithms/algorithm.h"
#include "algorithms/call_budget.h"
#include "algorithms/error_feedback.h"
#include "common/param.h"
#include "transport/bootstrap.h"
#include "transport/host_topology.h"
#include "transport/transport.h"

namespace gradcomp::nccl {
struct Policy;
}

struct gcComm {
  // Declaration order is teardown order reversed: the transport goes before
  // the bootstrap it was wired through.
  // A cpu-device backend, declared first so it outlives the algorithms' and
  // residuals' memory.
  std::unique_ptr<gradcomp::device::Backend> ownedDev;
  std::unique_ptr<gradcomp::transport::AddressExchange> bootstrap;
  std::unique_ptr<gradcomp::transport::Transport> net;
  gradcomp::device::Backend* dev = nullptr;  // GRADCOMP_API_BACKEND: cpu or cpu-device
  std::unique_ptr<gradcomp::algo::ErrorFeedbackStore> errorFeedback;
  // Agreed at init (transport/host_topology.h): which ranks share a host and
  // whether algorithms run hierarchically.
  gradcomp::transport::HostTopology topology;
  // One instance per algorithm name, created at first use (they keep state:
  // scratch buffers, thresholds keyed by bufferKey); wrapped in the
  // hierarchical schedule when topology.hierarchical and the algorithm
  // supports it.
  std::map<std::string, std::unique_ptr<gradcomp::algo::Algorithm>> algorithms;
  // The proxy contract's reservations (cpu-device checks them as a GPU needs).
  gradcomp::algo::CallBudget budget;
  uint64_t callSeq = 0;  // equal on all ranks: every rank makes the same calls
  std::string lastAlgorithm;  // gcCommLastAlgorithm
  // The interposer's configuration, loaded and compared across ranks by the
  // first gcCommPolicyConfig (plugin/nccl/policy.h).
  std::shared_ptr<const gradcomp::nccl::Policy> policy;
};

struct gcAlgoConfig {
  const gradcomp::algo::AlgorithmInfo* info = nullptr;
  gradcomp::param::Overrides overrides;
};

namespace gradcomp::api {

// Records the calling thread's last error message (gcLastError) and maps the
// status to a gcResult_t; the one place where that translation happens.
int toResult(const Status& s);

}  // namespace gradcomp::api
