#include "algorithms/wagma/topology.h"

#include <algorithm>

namespace gradcomp::algo::wagma {

Status makeTopology(int nranks, int64_t requestedGroup, Topology* out) {
  GC_REQUIRE(nranks >= 1, Err::InvalidArgument, "wagma: communicator size %d must be >= 1",
             nranks);
  Topology t;
  t.nranks = nranks;
  while (t.core * 2 <= nranks) {
    t.core *= 2;
    ++t.logCore;
  }
  if (requestedGroup == 0) {
    t.logGroup = (t.logCore + 1) / 2;
  } else {
    GC_REQUIRE(requestedGroup <= t.core && (requestedGroup & (requestedGroup - 1)) == 0,
               Err::InvalidConfig,
               "GRADCOMP_WAGMA_GROUP=%lld is invalid for %d ranks: expected 0 (automatic) or a "
               "power of two <= %d (the largest power of two <= P)",
               (long long)requestedGroup, nranks, t.core);
    while ((int64_t(1) << t.logGroup) < requestedGroup) ++t.logGroup;
  }
  *out = t;
  return Status::Ok();
}

std::vector<int> groupBits(const Topology& topo, uint64_t t) {
  std::vector<int> bits;
  if (topo.logCore == 0) return bits;
  const uint64_t L = uint64_t(topo.logCore);
  // (t*g + j) mod L without overflowing t*g for huge t.
  const uint64_t start = ((t % L) * uint64_t(topo.logGroup)) % L;
  for (int j = 0; j < topo.logGroup; ++j) bits.push_back(int((start + uint64_t(j)) % L));
  return bits;
}

int foldPartner(const Topology& topo, int rank) {
  if (rank >= topo.core) return rank - topo.core;
  return rank + topo.core < topo.nranks ? rank + topo.core : -1;
}

std::vector<int> groupMembers(const Topology& topo, int rank, uint64_t t) {
  const int base = rank >= topo.core ? rank - topo.core : rank;
  int mask = 0;
  for (int b : groupBits(topo, t)) mask |= 1 << b;
  std::vector<int> members;
  for (int q = 0; q < topo.core; ++q) {
    if ((q & ~mask) != (base & ~mask)) continue;
    members.push_back(q);
    if (q + topo.core < topo.nranks) members.push_back(q + topo.core);
  }
  std::sort(members.begin(), members.end());
  return members;
}

int groupContributors(const Topology& topo, int rank, uint64_t t) {
  return int(groupMembers(topo, rank, t).size());
}

}  // namespace gradcomp::algo::wagma
