// Setting a communicator up, collectively over the real communicator. Every
// rank that has libgradcomp loaded runs step (1) for every multi-process
// communicator, whatever its own settings (GRADCOMP_ALGO=off and a rejected
// configuration included), so that ranks with different settings never wait
// for each other: (1) allgather a 16-byte hash of the effective configuration
// text (the texts themselves only when the hashes differ); any difference
// disables compression on that communicator on every rank with one WARN
// naming the first differing key; then, only where compression is on and the
// communicator selected: (2) create the UCX transport (worker
// addresses exchanged through the same real communicator); (3) allgather
// whether (2) succeeded everywhere, so that ranks never disagree about
// compressing. Every rank reaches the same Wiring state.
#pragma once

#include "plugin/nccl/comm_state.h"

namespace gradcomp::nccl {

// Caller holds state.mu. Sets state.wiring to Ready or Disabled. A non-OK
// Status means the real communicator itself failed during the exchange.
Status wireCommunicator(const Policy& policy, CommState& state);

// The algorithm instance for `rule` (-1: defaults), created on first use.
Status runtimeFor(const Policy& policy, CommState& state, int rule, RuleRuntime** out);

// ncclReduceScatter's algorithm instance for `rule` (reduceScatterAlgo;
// the caller checked decide() compresses), created on first use; under a
// hierarchical topology it runs the hierarchical reduce-scatter
// (algorithms/hierarchy/hierarchical.h), like the allreduce.
Status reduceScatterRuntimeFor(const Policy& policy, CommState& state, int rule,
                               RuleRuntime** out);

// ncclAllGather's algorithm instance (GRADCOMP_AG_ALGO, the defaults'
// parameters; flat over all ranks), created on first use.
Status allgatherRuntimeFor(const Policy& policy, CommState& state, RuleRuntime** out);

// Closes the transport (destroy/abort).
void unwireCommunicator(CommState& state);

}  // namespace gradcomp::nccl
