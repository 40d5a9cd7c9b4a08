// Host topology of a communicator (issue 21, style.md practice 12): which
// ranks share a host, agreed by every rank from one exchange at wiring, and
// the schedule that follows from it (GRADCOMP_HIERARCHY).
//
// Contract:
// - A rank's host is GRADCOMP_HOSTID when set (like NCCL_HOSTID: tests and
//   the lab fake hosts with it), else "hostname/boot id".
// - agreeTopology gathers every rank's record on rank 0 and broadcasts the
//   table; every rank then derives the topology from the same table with the
//   same pure function (buildTopology), so the decision (hierarchical or
//   flat) is identical on every rank by construction. Waits are the
//   transport's (bounded by GRADCOMP_TIMEOUT_S).
// - Hosts are numbered by their lowest rank; a host's ranks are its local
//   ranks 0..L-1 in ascending rank order; rail l is the ranks of local rank l,
//   one per host, in host order.
// - A map that cannot run hierarchically (records that differ in format,
//   ranks asking for different modes, an uneven number of ranks per host)
//   sets `problem` and runs flat on every rank; never a hang.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "transport/transport.h"

namespace gradcomp::transport {

enum class HierarchyMode { Auto, Flat, Host };
const char* hierarchyModeName(HierarchyMode m);

// This rank's host identity. kind: "env" (GRADCOMP_HOSTID), "auto"
// (hostname/boot id) or "bad" (GRADCOMP_HOSTID malformed; id holds why).
struct HostIdentity {
  std::string kind, id;
};
HostIdentity localHostIdentity();
// Checks a GRADCOMP_HOSTID value: 1..128 printable ASCII characters, no
// spaces and no '|'. Returns "" when valid, else why not.
std::string hostIdProblem(const std::string& id);

struct HostTopology {
  int rank = 0, size = 1;
  std::vector<int> hostOf;                // host index of each rank
  std::vector<std::string> hostIds;       // identity of each host
  std::vector<std::vector<int>> hostRanks;  // ranks of each host, ascending
  int host = 0, localRank = 0, localSize = 1;
  HierarchyMode mode = HierarchyMode::Auto;  // what the ranks asked for (agreed)
  std::string problem;        // why the job runs flat although asked not to ("" none)
  bool hierarchical = false;  // the schedule: identical on every rank

  int hosts() const { return int(hostRanks.size()); }
  // Ranks of rail `localRank` (one per host, by host index); valid when uniform.
  std::vector<int> rail(int localRank) const;
  // Every host has the same number of ranks.
  bool uniform() const;
  // One line for logs: "rank 3: host 1 of 2 ('b'), local rank 1 of 2, schedule host".
  std::string describe() const;
};

// The record a rank contributes ("v1|mode|kind|id", at most kMaxRecord bytes).
constexpr size_t kMaxTopologyRecord = 512;
std::string encodeTopologyRecord(const HostIdentity& me, HierarchyMode mode);
// Pure: the topology `rank` derives from every rank's record.
HostTopology buildTopology(int rank, const std::vector<std::string>& records);

// Collective over `net`: exchanges the records (rank 0 gathers and broadcasts
// the table on the reserved topology tags) and builds the topology.
Status agreeTopology(Transport& net, const HostIdentity& me, HierarchyMode mode,
                     HostTopology* out);

// agreeTopology with GRADCOMP_HOSTID and GRADCOMP_HIERARCHY, then logs: INFO
// with the placement (INIT), and one WARN naming the problem on rank 0 when
// the job runs flat because of one. With GRADCOMP_STRICT a problem is an
// InvalidConfig error on every rank instead.
Status discoverTopology(Transport& net, HostTopology* out);

}  // namespace gradcomp::transport
