// Where this rank runs (hwloc): its CPU set, the NUMA nodes under it and the
// network device nearest to it. Discovered from the process's CPU binding, or
// from a GPU's PCI bus id (the CPUs and NIC nearest that GPU), and logged at
// INFO (INIT), in NCCL's style.
//
// What it drives (GRADCOMP_PLACEMENT=auto, the default; off: nothing):
// - UCX's network device: when UCX_NET_DEVICES is unset and the nearest NIC
//   is an OpenFabrics (RDMA) device with an ACTIVE port, the transport's UCX
//   context is limited to it (ucxNetDevicesFor), like NCCL's one NIC per GPU.
//   The context is process-wide, so the first communicator's placement
//   decides (the GPU it runs on, setPlacementDevice).
// - the CUDA executor's proxy thread is bound to the CPUs nearest its GPU
//   (bindCurrentThread); the pinned payload buffers it allocates then land on
//   that NUMA node by first touch.
#pragma once

#include <string>

#include "common/status.h"

namespace gradcomp::transport {

struct Placement {
  std::string cpuset;  // hwloc list syntax, e.g. "0-7,16-23"; "" unknown
  std::string numa;    // NUMA node os indexes under the CPU set, e.g. "0" or "0,1"
  std::string nic;     // nearest OpenFabrics (else network) OS device; "" none
  std::string nicKind; // "OpenFabrics" or "Network"
  std::string gpu;     // the PCI bus id it was found for; "" the process's binding
  std::string error;   // why hwloc could not tell ("" ok)
};

// Never fails: what hwloc cannot tell stays empty and `error` says why.
// Discovered at the first call and kept for the process.
Placement discoverPlacement();
// The placement of the PCI device `busId` ("0000:3b:00.0", the form of
// cudaDeviceGetPCIBusId): the CPUs of its nearest non-I/O ancestor (NUMA
// node or package) and the NIC nearest those. "" or a bus id hwloc does not
// know: discoverPlacement().
Placement discoverPlacementNear(const std::string& busId);
// "cpuset 0-1, NUMA node 0, nearest NIC mlx5_0 (OpenFabrics)".
std::string describePlacement(const Placement& p);

// True when `sysfsRoot`/class/infiniband lists a device: without one there is
// no NIC for ucxNetDevicesFor to pick, and hwloc's topology (tens of ms, I/O
// plugins) is not loaded for it.
bool rdmaDevicesPresent(const std::string& sysfsRoot = "/sys");

// UCX_NET_DEVICES for the placement's NIC: "<nic>:<port>" for an OpenFabrics
// device with a port whose state under `sysfsRoot`/class/infiniband/<nic>/
// ports/<port>/state reads ACTIVE (the lowest such port); "" otherwise (no
// RDMA NIC, none active: UCX's own choice stands).
std::string ucxNetDevicesFor(const Placement& p, const std::string& sysfsRoot = "/sys");

// The GPU whose placement picks UCX's network device (first call wins; the
// UCX context is created once per process). Thread-safe.
void setPlacementDevice(const std::string& busId);
std::string placementDevice();

// Binds the calling thread to the CPUs of `cpuset` (hwloc list syntax).
Status bindCurrentThread(const std::string& cpuset);

}  // namespace gradcomp::transport
