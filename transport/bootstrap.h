// Wiring a communicator: who am I, how many are we, and a collective exchange
// of small blobs (UCX worker addresses) among all ranks.
// Standalone runs use the UCX-listener bootstrap below; the NCCL interposer
// implements AddressExchange over the real NCCL communicator instead.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace gradcomp::transport {

class AddressExchange {
 public:
  virtual ~AddressExchange() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Collective: every rank contributes `mine` and receives all, indexed by rank.
  virtual Status allgather(const std::string& mine, std::vector<std::string>* all) = 0;
  // The communicator failed (peers may be gone or stopped): tear down without
  // waiting for anything to be flushed to them.
  virtual void abandon() {}
};

struct LaunchInfo {
  int rank = -1;
  int size = -1;
  std::string host;  // rendezvous host (rank 0 listens there)
  int port = -1;
  bool listenAny = false;  // rank 0 listens on every address (host derived from the allocation)
  std::string source;  // which variables supplied rank/size, for messages
};

// Rank and size from GRADCOMP_RANK/NRANKS, else the launcher's variables
// (launcher_env.h: torchrun, Open MPI, PMI, Slurm, RANK/WORLD_SIZE; first
// complete pair wins); address from GRADCOMP_BOOTSTRAP=host:port, else
// MASTER_ADDR:MASTER_PORT (the next port under torchrun, whose agent holds
// MASTER_PORT), else derived from the launcher (launcher_env.h). Errors name
// the missing or malformed variable.
Status launchInfoFromEnvironment(LaunchInfo* out);

// Rendezvous through a UCX listener on rank 0 at host:port; all ranks connect,
// send their blob, and receive the table. Fails after GRADCOMP_TIMEOUT_S with an
// error naming the ranks that never arrived (rank 0) or the address (others).
Status createUcxBootstrap(const LaunchInfo& info, std::unique_ptr<AddressExchange>* out);

}  // namespace gradcomp::transport
