// Setting a selected communicator up for compression, collectively over the
// real communicator: (1) allgather the effective configuration text; any
// difference disables compression on that communicator on every rank with one
// WARN naming the first differing key; (2) create the UCX transport (worker
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

// Closes the transport (destroy/abort).
void unwireCommunicator(CommState& state);

}  // namespace gradcomp::nccl
