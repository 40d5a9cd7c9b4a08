// hwloc discovery of placement.h. The topology is loaded with I/O devices
// (PCI and OS devices) kept, so NICs appear under their PCI bridge.
#include "transport/placement.h"

#include <hwloc.h>

#include <cstdlib>

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
Placement discoverOnce() {
  Placement p;
  static hwloc_topology_t topo = nullptr;
  if (hwloc_topology_init(&topo) != 0) return p.error = "hwloc_topology_init failed", p;
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(topo) != 0) return p.error = "hwloc_topology_load failed", p;
  hwloc_bitmap_t mine = hwloc_bitmap_alloc();
  if (hwloc_get_cpubind(topo, mine, HWLOC_CPUBIND_PROCESS) != 0)
    hwloc_bitmap_copy(mine, hwloc_topology_get_topology_cpuset(topo));
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
  hwloc_bitmap_free(mine);
  return p;
}

}  // namespace

Placement discoverPlacement() {
  static const Placement once = discoverOnce();
  return once;
}

std::string describePlacement(const Placement& p) {
  if (!p.error.empty()) return "placement unknown (" + p.error + ")";
  return "cpuset " + (p.cpuset.empty() ? std::string("?") : p.cpuset) + ", NUMA node " +
         (p.numa.empty() ? std::string("?") : p.numa) + ", nearest NIC " +
         (p.nic.empty() ? std::string("none") : p.nic + " (" + p.nicKind + ")");
}

}  // namespace gradcomp::transport
