// Transport over UCX tag matching on host memory. One ucp_context per process,
// one worker per transport (per communicator), endpoints to every peer with
// peer-failure error handling. UCX_* variables are read by UCX itself.
#pragma once

#include <memory>

#include "transport/bootstrap.h"
#include "transport/transport.h"

namespace gradcomp::transport {

class FailureMonitor;

struct UcxOptions {
  double timeoutS = -1;  // < 0: GRADCOMP_TIMEOUT_S
  int spinUs = -1;       // < 0: GRADCOMP_WAIT_SPIN_US
  // The communicator's failure monitor, for a transport between the same
  // ranks (WAGMA's channels); null: the transport wires its own through the
  // same exchange (transport/failure_monitor.h).
  std::shared_ptr<FailureMonitor> monitor;
};

// Collective over `exchange`: creates a worker, exchanges worker addresses
// (and the failure monitor's), connects to every peer.
Status createUcxTransport(AddressExchange& exchange, const UcxOptions& options,
                          std::unique_ptr<Transport>* out);

}  // namespace gradcomp::transport
