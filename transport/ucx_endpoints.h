// Endpoints of one UCX transport: one per peer, created from the exchanged
// worker addresses, with an error callback that records which peer failed.
#pragma once

#include <ucp/api/ucp.h>

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace gradcomp::transport::ucx {

enum class ErrMode { Peer, None };

class Endpoints {
 public:
  ~Endpoints();  // close() must have run; leftovers are force-closed

  // Connects to every rank in `addresses` but `self`. AUTO is resolved per
  // endpoint: NONE to peers on the same host (UCX 1.13's shared-memory
  // transports cannot do PEER, and PEER would push same-host traffic onto
  // loopback TCP at a fraction of the bandwidth; a dead same-host peer is
  // caught by the timeout), PEER to other hosts (a dead peer is reported at
  // once), falling back to NONE when UCX_TLS has no transport that can do PEER.
  //
  // Routes: a peer on another host is connected through its network-only
  // address (`netAddresses`) when `netBetweenHosts`, so UCX cannot pick shared
  // memory for it even where the kernel would allow it (emulated hosts on one
  // machine, GRADCOMP_HOSTID); when no network transport reaches it (UCX_TLS
  // without one) the full address is used, with one INFO line.
  Status connect(ucp_worker_h worker, int self, const std::vector<std::string>& addresses,
                 const std::vector<std::string>& netAddresses, const std::vector<bool>& sameHost,
                 const std::string& modeName, bool netBetweenHosts);
  // Endpoint to `peer`; the one to self is created at first use.
  Status get(int peer, ucp_ep_h* out);
  // UCS_OK, or the error UCX reported for that peer's endpoint.
  ucs_status_t failure(int peer) const { return slots_[peer]->failed; }
  ErrMode mode(int peer) const { return slots_[peer]->mode; }
  // The UCX transports of the endpoint's lanes now, e.g. "posix,cma" or
  // "tcp" (wireup may still change them); "" for self and unconnected peers.
  std::string route(int peer) const;

  // Closes every endpoint (FLUSH, or FORCE for failed peers / `force`), waiting
  // at most `boundS` seconds for the closes to finish.
  void close(bool force, double boundS);

 private:
  struct Slot {
    int peer = -1;
    ucp_ep_h ep = nullptr;
    ucs_status_t failed = UCS_OK;
    ErrMode mode = ErrMode::Peer;
    bool closing = false;
  };
  static void onError(void* arg, ucp_ep_h ep, ucs_status_t status);
  Status create(int peer, const std::string& address, ErrMode mode, ucs_status_t* ucsStatus);

  ucp_worker_h worker_ = nullptr;
  int self_ = -1;
  std::string selfAddress_;
  std::vector<std::unique_ptr<Slot>> slots_;
};

}  // namespace gradcomp::transport::ucx
