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
  // Where host:port came from, for messages.
  std::string addressSource = "GRADCOMP_BOOTSTRAP or MASTER_ADDR/MASTER_PORT";
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

// A rendezvous whose address is published before anyone knows its rank
// (NCCL's CollNet: every rank listens and hands NCCL an opaque handle, NCCL
// exchanges the handles, and only connect() says which rank is which).
// listenUcxRendezvous opens a UCX listener on `host` (a local address) at a
// port the kernel picks. joinUcxRendezvous is collective over info.size
// ranks: rank 0 serves on the listener it is given; the others drop theirs
// and connect to info.host:info.port, rank 0's listener. Timeouts and errors
// as createUcxBootstrap.
class RendezvousListener {
 public:
  virtual ~RendezvousListener() = default;
  virtual std::string host() const = 0;
  virtual int port() const = 0;
};
Status listenUcxRendezvous(const std::string& host, std::unique_ptr<RendezvousListener>* out);
Status joinUcxRendezvous(std::unique_ptr<RendezvousListener> listener, const LaunchInfo& info,
                         std::unique_ptr<AddressExchange>* out);

}  // namespace gradcomp::transport
