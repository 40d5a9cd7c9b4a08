// Bandwidth terms of the Ok-Topk paper's Table 1 (Li and Hoefler, PPoPP'22),
// as bytes one rank sends per allreduce. The paper counts words: a COO entry
// is 2 words (index + value), so its 2k is 8k bytes here (4-byte offsets, fp32
// values; algorithms/sparse/wire_format.h). n = count, k = density * n.
//
//   dense  (Rabenseifner / ring)  2n(P-1)/P words          -> 8n(P-1)/P
//   topka  (allgather)            2k(P-1) words            -> 8k(P-1)
//   dsa    (SparCML)              [4k(P-1)/P, (2k+n)(P-1)/P] words
//   gtopk  (reduction tree)       4k log2 P words (critical path: reduce +
//                                 broadcast; one rank sends 2k..4k log2 P)
//   oktopk                        [2k(P-1)/P, 6k(P-1)/P] words
//   cltk   (shared index, ours)   2k(P-1)/P words (values: the lower bound)
//                                 + the leader's index message (2k words
//                                 COO) once per tree edge: the leader sends
//                                 it to ceil(log2 P) children; with L
//                                 leaders (GRADCOMP_CLTK_LEADERS) an
//                                 allgather of their k/L indexes each, and
//                                 the union (<= k) in the ring
//
// Our messages also carry framing the table leaves out: a 40-byte header per
// sparse message and 8-byte block lengths in the recursive-doubling allgather.
// VolumeBound::framing estimates it per rank so tests can bound the volume.
#pragma once

#include <cstddef>
#include <string>

#include "common/param.h"
#include "common/status.h"

namespace gradcomp::sim {

struct VolumeBound {
  bool known = false;  // the table has a row for this algorithm
  double lo = 0, hi = 0;  // bytes sent per rank, table terms only
  double framing = 0;     // upper estimate of headers and lengths, bytes
  std::string formula;    // the row, for reports
};

VolumeBound tableVolume(const std::string& algo, int P, size_t n, size_t k);

// An allgather's (GRADCOMP_AG_ALGO's schedules, algorithms/allgather/
// allgather.h) bytes one rank sends, exact (lo = hi, no framing), n = the
// whole output (fp32), m = n/P, payload(m) the codec's bytes for a shard:
//   flat          (P-1) payload(m)
//   hierarchical  (H-1) payload(m) between hosts + (L-1) H m 4 inside a host
//                 (H = P/L hosts of L = ranksPerHost ranks)
// On the alpha-beta clock (compute free) the flat ring takes P-1 steps of
// alpha + beta payload(m): each step waits for the previous one's arrival.
// allgatherTime gives that time, or for the hierarchical form the rail's
// ring (H-1 steps between hosts) plus the host exchange: every rank's L-1
// messages of H m 4 bytes, which its NIC and each receiver's take one at a
// time: intraAlpha + (L-1) intraBeta H m 4.
struct LinkModel {
  double alphaS = 0, betaSPerByte = 0, intraAlphaS = 0, intraBetaSPerByte = 0;
};
Status allgatherVolume(const std::string& algo, const param::Overrides& config, int P, size_t n,
                       int ranksPerHost, bool hierarchical, VolumeBound* out);
Status allgatherTime(const std::string& algo, const param::Overrides& config, int P, size_t n,
                     int ranksPerHost, bool hierarchical, const LinkModel& link, double* seconds);

}  // namespace gradcomp::sim
