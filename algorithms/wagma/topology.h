// WAGMA's rank layout and dynamic butterfly groups (seed 002, Algorithm 1, as
// corrected in notes/algorithms.md section 5).
//
// Power-of-two core: with P2 = the largest power of two <= P and L = log2 P2,
// the core ranks [0, P2) form the butterfly. Call t averages within groups of
// S = 2^g core ranks: the bit positions B_t = {(t*g + j) mod L : j < g}, taken
// in phase order j = 0..g-1, and the group of p is every core rank that agrees
// with p on all bits outside B_t. The groups partition the core for every t and
// g consecutive calls' bit sets cover all L bits after ceil(L / g) calls.
//
// Non-power-of-two P (this project's rule, the paper assumes P = 2^L): each
// extra rank e in [P2, P) is folded into its core partner e - P2. The partner
// adds e's buffer before the butterfly and hands the group result back to e,
// so e belongs to its partner's group and the group average divides by the
// number of contributions, core ranks plus their folded extras.
#pragma once

#include <cstdint>
#include <vector>

#include "common/status.h"

namespace gradcomp::algo::wagma {

struct Topology {
  int nranks = 1;     // P
  int core = 1;       // P2
  int logCore = 0;    // L
  int logGroup = 0;   // g; the group size is S = 2^g core ranks
  int groupSize() const { return 1 << logGroup; }
};

// requestedGroup: GRADCOMP_WAGMA_GROUP (0: sqrt(P2) rounded up to a power of
// two, i.e. g = ceil(L / 2)). Anything else must be a power of two <= P2.
Status makeTopology(int nranks, int64_t requestedGroup, Topology* out);

// Bit positions of call t's butterfly, in phase order.
std::vector<int> groupBits(const Topology& topo, uint64_t t);

// The fold partner of `rank` (extra <-> core), or -1 when it has none.
int foldPartner(const Topology& topo, int rank);

// Every rank (core and folded extras) in `rank`'s group at call t, ascending.
std::vector<int> groupMembers(const Topology& topo, int rank, uint64_t t);

// Number of contributions in `rank`'s group at call t (= groupMembers().size()).
int groupContributors(const Topology& topo, int rank, uint64_t t);

}  // namespace gradcomp::algo::wagma
