// The cost model of GRADCOMP_ALGO=auto: pure data and arithmetic, no
// transport, so the tuner (tuner.h), the tests and the simulator
// (tools/gradcomp-sim --auto-check) share one piece of code.
//
// A Model is what every rank of a communicator holds identically: it is built
// only from probe measurements that were agreed across ranks (the max over
// ranks, probe.h), so the same inputs give the same bits everywhere. Time of
// one call of candidate c on `count` elements:
//
//   T_c(n) = latency_c + wire_c(n) * beta + compute_c(n)
//   wire_c(n)    = w0 + w1 * n * s     bytes the busiest rank sends
//   compute_c(n) = c0 + c1 * n * s     the rest: work outside transport
//                                      waits, the transport's own copies
//
// with beta the link's seconds per byte (probed by a shift exchange under
// the load pattern of a ring step) and s = dtype size / 4 for candidates
// whose traffic and work follow the element size (dense), 1 for compressing
// ones (they work on fp32 accumulators whatever the input type).
// latency_c is the probe's wait time not explained by bytes (the candidate's
// message rounds and synchronization at the smallest probe size); compute_c
// is fitted to what remains of the measured totals, so the model reproduces
// the probe's measurements and extrapolates linearly in n.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"

namespace gradcomp::algo::autosel {

struct LinkFit {
  double alphaS = 0;        // one small shift exchange, seconds
  double betaSPerByte = 0;  // per byte of a large shift exchange
};

// A candidate's probe runs on `count` fp32 elements, agreed across ranks.
struct ProbeSample {
  double count = 0;
  double totalS = 0;     // wall time per call: the min over ranks (the last to arrive)
  double computeS = 0;   // time outside transport waits: the max over ranks
  double wireBytes = 0;  // bytes sent per call by the busiest rank
};

struct CandidateFit {
  bool usable = false;
  bool elementSizeScales = false;  // dense: wire and compute follow the dtype size
  double latencyS = 0;
  double wire0 = 0, wirePerElement = 0;
  double compute0 = 0, computePerElement = 0;
};

struct Model {
  int nranks = 0;
  LinkFit link;
  std::vector<CandidateFit> candidates;  // in GRADCOMP_AUTO_CANDIDATES order
};

// Affine fits through the smallest and largest sample (one sample: through
// the origin); negative slopes or intercepts are clamped (noise), so a fit
// never predicts less than zero. No samples (or a non-finite one): not usable.
CandidateFit fitCandidate(const std::vector<ProbeSample>& samples, const LinkFit& link,
                          bool elementSizeScales);

// Predicted seconds of one call; +inf for an unusable candidate.
double predictSeconds(const Model& model, size_t candidate, size_t count, DataType dtype);
double predictWireBytes(const Model& model, size_t candidate, size_t count, DataType dtype);

// Fixed layout of doubles (reports, tests comparing ranks bit for bit).
std::vector<double> modelWords(const Model& model);
Status modelFromWords(const std::vector<double>& words, Model* out);

// Slot-wise max of every rank's vector (all the same length): the agreement
// rule for measured values. words[r] is rank r's.
std::vector<double> slotMax(const std::vector<std::vector<double>>& words);

}  // namespace gradcomp::algo::autosel
