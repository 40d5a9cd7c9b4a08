// Where this rank runs (hwloc): its CPU set, the NUMA nodes under it and the
// network device nearest to it. Discovered once per communicator and logged
// at INFO (INIT), in NCCL's style.
//
// gradcomp does not change UCX_NET_DEVICES from it: the process-wide UCX
// context is created before any communicator knows its topology, and a NIC
// choice made here could not be checked in CI (no RDMA device in the lab).
// The nearest NIC is reported so that a launcher can set UCX_NET_DEVICES.
#pragma once

#include <string>

namespace gradcomp::transport {

struct Placement {
  std::string cpuset;  // hwloc list syntax, e.g. "0-7,16-23"; "" unknown
  std::string numa;    // NUMA node os indexes under the CPU set, e.g. "0" or "0,1"
  std::string nic;     // nearest OpenFabrics (else network) OS device; "" none
  std::string nicKind; // "OpenFabrics" or "Network"
  std::string error;   // why hwloc could not tell ("" ok)
};

// Never fails: what hwloc cannot tell stays empty and `error` says why.
// Discovered at the first call and kept for the process.
Placement discoverPlacement();
// "cpuset 0-1, NUMA node 0, nearest NIC mlx5_0 (OpenFabrics)".
std::string describePlacement(const Placement& p);

}  // namespace gradcomp::transport
