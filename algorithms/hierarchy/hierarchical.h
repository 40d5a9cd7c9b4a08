// The hierarchical schedule of issue 21: any registered algorithm run
// across hosts only, with the traffic inside a host dense.
//
//   1. dense reduce-scatter among the L ranks of a host: local rank l ends
//      with shard l (dense::chunkOf(count, L, l)) summed over its host;
//   2. the inner algorithm on shard l over rail l (the ranks of local rank l,
//      one per host; a transport::makeGroupView of the communicator), op Sum;
//   3. dense allgather of the shards among the host's ranks; Avg divides by P
//      once at the end.
//
// The host sum of shard l is x_l + x_0 + x_1 + ... (local ranks ascending,
// l's own term first, one Backend::add per term, each rounded to the dtype),
// an order the reference reproduces bit for bit. Every rank of a host ends
// with the identical result (the allgather copies one rank's shard).
//
// Keys: the inner call's bufferKey is shardKey(bufferKey, l) (0 stays 0, and
// the shape key then uses the shard's count, equal on the whole rail), its
// localKey shardKey(residualKey(args), l): error feedback is per rank on its
// shard and never shares a residual with a flat run of the same tensor.
//
// Reduce-scatter (NCCL's layout, algorithm.h; inner algorithms with a
// reduce-scatter form): rank g = hostRanks[h][l] must end with shard g of
// the sum. Local rank l's portion is the H shards of its rail's ranks,
// hostRanks[0][l], ..., hostRanks[H-1][l], packed in host order:
//   1. dense reduce-scatter of the portions among the host's ranks (direct,
//      the same summation order as above: x_l first, then ascending);
//   2. the inner reduce-scatter of the portion (H recvcounts) over rail l,
//      op Sum: rail rank h receives slot h, the shard of hostRanks[h][l];
//   Avg divides by P at the end. Only the portions' compressed codes cross
// hosts: a rank sends (L-1)/L of the tensor dense inside its host and the
// inner schedule's share of count / L across hosts.
//
// Allgather (layout at algo::Collective; the inner algorithm an allgather
// schedule, algorithms/allgather/allgather.h), m = sendcount, H hosts of L:
//   1. the inner allgather over rail l: rank hostRanks[h][l] contributes its
//      shard and receives the rail's H shards, each decode(encode(shard)),
//      compressed between hosts;
//   2. a dense host allgather: every local rank sends the others its rail's
//      H decoded shards and writes theirs into their slots.
// Every slot g then holds decode(encode(shard g)) as its owner's rail
// decoded it: the flat schedule's bytes exactly (the codecs are
// deterministic), on every rank, so the flat reference is this form's too.
// Decoded shards, not raw ones, go through the host: a rank that received
// its host's raw shards would have to encode each again to hold what the
// other hosts hold. Wire bytes per rank (allgather::hierarchicalWireBytes):
// (H-1) x payload(m) to its rail peers in H-1 messages, (L-1) x H x m x
// element size to its host peers in L-1 messages.
#pragma once

#include <memory>
#include <vector>

#include "algorithms/algorithm.h"
#include "transport/host_topology.h"

namespace gradcomp::algo::hierarchy {

// Whether `info` may run hierarchically: every schedule except selectors
// (auto chooses per call among flat schedules) and wagma (group averaging of
// weights, whose groups are its own).
bool supportsHierarchy(const AlgorithmInfo& info);

// Key of shard `localRank`'s state derived from a tensor's key (0 stays 0).
uint64_t shardKey(uint64_t key, int localRank);

// `hostRanks`: the ranks of each host (uniform sizes, every rank once), as
// transport::HostTopology::hostRanks; the same on every rank.
std::unique_ptr<Algorithm> makeHierarchical(std::unique_ptr<Algorithm> inner,
                                            std::vector<std::vector<int>> hostRanks);

// The reference of the hierarchical form: host sums in the schedule's order
// (bit-exact), then `info`'s reference across hosts on each shard (one
// reference object per rail, so stateful references follow each rail), Avg
// divided by P; a reduce-scatter (args.coll) through `info`'s reduce-scatter
// reference on each portion, the whole tensor's values as flat references
// give them; an allgather (an allgather registry entry) through `info`'s
// flat allgather reference, which the hierarchical form matches bit for bit.
// nullptr when `info` has no reference.
std::unique_ptr<Reference> makeHierarchicalReference(const AlgorithmInfo& info,
                                                     std::vector<std::vector<int>> hostRanks);

}  // namespace gradcomp::algo::hierarchy
