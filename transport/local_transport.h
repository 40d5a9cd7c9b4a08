// Transport between threads of one process: P endpoints over shared mailboxes.
// Same contract as every Transport (tags, capacity check, timeout, counters), so
// algorithm unit tests and the simulator run the real schedules without UCX.
#pragma once

#include <memory>
#include <vector>

#include "transport/transport.h"

namespace gradcomp::transport {

struct LocalFabric;  // shared state of one group of local endpoints

// Creates `size` connected endpoints; endpoint r is rank r. Each endpoint must be
// used by one thread at a time. timeoutS < 0: GRADCOMP_TIMEOUT_S.
std::vector<std::unique_ptr<Transport>> createLocalTransports(int size, double timeoutS = -1);

}  // namespace gradcomp::transport
