// hwloc discovery of placement.h. The topology is loaded with I/O devices
// (PCI and OS devices) kept, so NICs and GPUs appear under their PCI bridge.
#include "transport/placement.h"

#include <dirent.h>
#include <hwloc.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>

namespace gradcomp::transport {
namespace {

std::string listOf(hwloc_const_bitmap_t set) {
  char* s = nullptr;
  if (hwloc_bitmap_list_asprintf(&s, set) < 0 || !s) return "";
  std::string out(s);
  free(s);
  return out;
}

// Lower is nearer: 0 the device's non-I/O ancestor lies inside our CPU set,
// 1 it intersects it, 2 elsewhere; then the ancestor's CPU count (smaller
// ancestors are closer, e.g. a NUMA node before the whole machine).
std::pair<int, int> distanceOf(hwloc_topology_t topo, hwloc_obj_t dev, hwloc_const_bitmap_t mine) {
  hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, dev);
  if (!anc || !anc->cpuset) return {3, 0};
  const int weight = hwloc_bitmap_weight(anc->cpuset);
  if (hwloc_bitmap_isincluded(anc->cpuset, mine)) return {0, weight};
  if (hwloc_bitmap_intersects(anc->cpuset, mine)) return {1, weight};
  return {2, weight};
}

}  // namespace

namespace {

// Loaded once and kept for the process (the machine does not change under
// it): destroying it unloads hwloc's I/O plugins, and what they keep for the
// process then shows as leaks no suppression can name (an unloaded module).
// hwloc topologies are safe for concurrent reads once loaded.
hwloc_topology_t topology(std::string* error) {
  static hwloc_topology_t topo = nullptr;
  static std::string why;
  static std::once_flag once;
  std::call_once(once, [] {
    if (hwloc_topology_init(&topo) != 0) {
      why = "hwloc_topology_init failed";
      topo = nullptr;
      return;
    }
    hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (hwloc_topology_load(topo) != 0) {
      why = "hwloc_topology_load failed";
      topo = nullptr;
    }
  });
  *error = why;
  return topo;
}

// The placement of the CPU set `mine`: its NUMA nodes and nearest NIC.
Placement placementOf(hwloc_topology_t topo, hwloc_const_bitmap_t mine) {
  Placement p;
  p.cpuset = listOf(mine);
  hwloc_obj_t node = nullptr;
  while ((node = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, node)))
    if (node->cpuset && hwloc_bitmap_intersects(node->cpuset, mine))
      p.numa += (p.numa.empty() ? "" : ",") + std::to_string(node->os_index);
  // OpenFabrics devices (RDMA) before plain network devices, then nearest.
  std::pair<int, std::pair<int, int>> best{9, {9, 0}};
  hwloc_obj_t dev = nullptr;
  while ((dev = hwloc_get_next_osdev(topo, dev))) {
    const bool ib = dev->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS;
    const bool eth = dev->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK;
    if (!(ib || eth) || !dev->name) continue;
    const std::pair<int, std::pair<int, int>> key{ib ? 0 : 1, distanceOf(topo, dev, mine)};
    if (key < best) {
      best = key;
      p.nic = dev->name;
      p.nicKind = ib ? "OpenFabrics" : "Network";
    }
  }
  return p;
}

Placement discoverOnce() {
  Placement p;
  hwloc_topology_t topo = topology(&p.error);
  if (!topo) return p;
  hwloc_bitmap_t mine = hwloc_bitmap_alloc();
  if (hwloc_get_cpubind(topo, mine, HWLOC_CPUBIND_PROCESS) != 0)
    hwloc_bitmap_copy(mine, hwloc_topology_get_topology_cpuset(topo));
  p = placementOf(topo, mine);
  hwloc_bitmap_free(mine);
  return p;
}

std::mutex gDeviceMu;
std::string gDevice;

}  // namespace

Placement discoverPlacement() {
  static const Placement once = discoverOnce();
  return once;
}

Placement discoverPlacementNear(const std::string& busId) {
  if (busId.empty()) return discoverPlacement();
  std::string error;
  hwloc_topology_t topo = topology(&error);
  if (!topo) return discoverPlacement();
  hwloc_obj_t pci = hwloc_get_pcidev_by_busidstring(topo, busId.c_str());
  hwloc_obj_t anc = pci ? hwloc_get_non_io_ancestor_obj(topo, pci) : nullptr;
  if (!anc || !anc->cpuset || hwloc_bitmap_iszero(anc->cpuset)) return discoverPlacement();
  Placement p = placementOf(topo, anc->cpuset);
  p.gpu = busId;
  return p;
}

bool rdmaDevicesPresent(const std::string& sysfsRoot) {
  DIR* dir = opendir((sysfsRoot + "/class/infiniband").c_str());
  if (!dir) return false;
  bool any = false;
  while (dirent* e = readdir(dir))
    if (e->d_name[0] != '.') any = true;
  closedir(dir);
  return any;
}

std::string ucxNetDevicesFor(const Placement& p, const std::string& sysfsRoot) {
  if (p.nicKind != "OpenFabrics" || p.nic.empty() || p.nic.find('/') != std::string::npos)
    return "";
  for (int port = 1; port <= 8; ++port) {
    const std::string path = sysfsRoot + "/class/infiniband/" + p.nic + "/ports/" +
                             std::to_string(port) + "/state";
    std::ifstream in(path);
    std::string state;
    if (in && std::getline(in, state) && state.find("ACTIVE") != std::string::npos)
      return p.nic + ":" + std::to_string(port);
  }
  return "";
}

void setPlacementDevice(const std::string& busId) {
  std::lock_guard<std::mutex> lock(gDeviceMu);
  if (gDevice.empty()) gDevice = busId;
}

std::string placementDevice() {
  std::lock_guard<std::mutex> lock(gDeviceMu);
  return gDevice;
}

Status bindCurrentThread(const std::string& cpuset) {
  std::string error;
  hwloc_topology_t topo = topology(&error);
  GC_REQUIRE(topo, Err::SystemError, "cannot bind a thread: %s", error.c_str());
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  const bool parsed = !cpuset.empty() && hwloc_bitmap_list_sscanf(set, cpuset.c_str()) == 0 &&
                      !hwloc_bitmap_iszero(set);
  const int rc = parsed ? hwloc_set_cpubind(topo, set, HWLOC_CPUBIND_THREAD) : -1;
  const int err = errno;
  hwloc_bitmap_free(set);
  GC_REQUIRE(parsed, Err::InvalidArgument, "cannot bind a thread to CPU set '%s': not a CPU list",
             cpuset.c_str());
  GC_REQUIRE(rc == 0, Err::SystemError, "cannot bind a thread to CPU set '%s': %s",
             cpuset.c_str(), strerror(err));
  return Status::Ok();
}

std::string describePlacement(const Placement& p) {
  if (!p.error.empty()) return "placement unknown (" + p.error + ")";
  return (p.gpu.empty() ? std::string() : "near GPU " + p.gpu + ": ") + "cpuset " +
         (p.cpuset.empty() ? std::string("?") : p.cpuset) + ", NUMA node " +
         (p.numa.empty() ? std::string("?") : p.numa) + ", nearest NIC " +
         (p.nic.empty() ? std::string("none") : p.nic + " (" + p.nicKind + ")");
}

}  // namespace gradcomp::transport
