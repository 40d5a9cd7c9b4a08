// The value exchange of cltk's reduce-scatter form (docs/design.md, "Sparse
// reduce-scatter"): every rank holds the same sorted index set S (m <= k
// entries) and its own values there; rank j receives, from every other rank,
// exactly the values at S's indexes inside j's range (NCCL's layout,
// ownerBounds), without indexes: both sides know S. Per rank 4 (m - m_me)
// bytes, at most 4k, in P - 1 raw fp32 messages (an empty one is not sent).
// Rank j sums its range as v_j + v_{j-1} + ... + v_{j+1} (mod P), left to
// right in fp32 (one Backend::add per source), then scatter-adds the sums
// into `result`. Tag step 0x61000.
#pragma once

#include <cstddef>
#include <vector>

#include "algorithms/sparse/sparse_common.h"

namespace gradcomp::algo::sparse {

// Buffers kept across calls (grown, never shrunk).
struct SharedExchangeStage {
  device::HostArray<float> out, in;  // what is sent, what arrives (host)
  device::DeviceArray<float> sum;    // this rank's range, summed
  void bind(device::Backend& dev) { out.bind(dev), in.bind(dev), sum.bind(dev); }
};

// sel: S in device memory (idx sorted; val unused); vals: this rank's m
// values at S (device). result: this rank's shard (recvcount = n / P fp32,
// device, zero on entry), gets the sums at S's indexes in its range. Syncs.
Status reduceScatterSharedValues(Context& ctx, const Coo& sel, const float* vals, size_t n,
                                 float* result, SharedExchangeStage* stage);

// The same summation centrally, for the references: accs[r] is rank r's
// accumulator (host-readable, n); adds into sum (n, the whole tensor) the
// exact fp32 result every owner returns at the sorted indexes idx[0..m).
void referenceSharedSums(const std::vector<const float*>& accs, size_t n, const uint64_t* idx,
                         size_t m, std::vector<float>* sum);

}  // namespace gradcomp::algo::sparse
