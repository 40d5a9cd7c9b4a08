// The calibration probe of GRADCOMP_ALGO=auto: a short, bounded, collective
// measurement on the communicator's own transport and backend, whose results
// are agreed (max over ranks) after every phase, so every rank builds the
// same Model (auto_model.h) and takes the same decisions about the probe
// itself (sizes, stopping):
//
//  1. latency: 8-byte shift exchanges (send to r+d, receive from r-d, every
//     rank at once) for up to 8 distances d, 5 rounds; alpha = the max over
//     distances of the min over rounds;
//  2. bandwidth: shift exchanges from 64 KiB, growing 4x while a step takes
//     under 2 ms and the plan allows (up to 16 MiB); beta = (t - alpha) / m
//     at the largest size;
//  3. candidates: each runs on 64K fp32 elements (fresh instances and
//     residuals) once to pay one-time costs, then twice measured, each
//     after a barrier (wall time, time outside transport waits, bytes
//     sent); then level by level at 256K, 1M and 4M elements, cheapest
//     candidate first, each only if its projection from the level below fits
//     its share of what is left of the plan. Agreed: the min over ranks of
//     the mean wall time (the rank that arrived last waited least), the max
//     of the rest.
//
// The plan is GRADCOMP_AUTO_PROBE_MS (the sizes are chosen to fit it from
// what was measured so far); if the agreed elapsed time passes the limit
// (GRADCOMP_AUTO_PROBE_LIMIT_MS) at a phase boundary, the probe stops and
// fails on every rank alike. A candidate that fails on some rank for a
// reason other than the transport (its parameters, memory) is unusable on
// every rank. A transport failure (a dead or silent peer, bounded by
// GRADCOMP_TIMEOUT_S) returns its Status: the transport is then broken.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/auto/auto_model.h"

namespace gradcomp::algo::autosel {

// Applied to every time this rank measures before it is agreed: `what` is
// "shift" (link probe), "total LABEL" / "compute LABEL" (a candidate's probe
// run) or "call LABEL" (a measured call). Tests give each rank different
// timings through it; production has none.
using TimingHook = std::function<double(const std::string& what, double seconds)>;

struct ProbeCandidate {
  std::string label;
  const AlgorithmInfo* info = nullptr;
  const param::Overrides* config = nullptr;
  bool elementSizeScales = false;
};

struct ProbeOptions {
  double budgetS = 0.25;  // the plan
  double limitS = 1.0;
  TimingHook hook;  // may be empty
};

struct ProbeOutcome {
  bool ok = false;
  std::string why;  // when !ok: why the job runs dense, naming the variable
  Model model;
  double seconds = 0;  // agreed (max over ranks) duration
  std::vector<std::vector<ProbeSample>> samples;  // per candidate, agreed
};

// The element counts the probe measures candidates at, smallest first (the
// simulator's --auto-check fits its models at the same sizes).
const std::vector<size_t>& probeLevels();
// The most memory the probe draws from the backend: its largest shift
// exchange (send and receive) and a candidate at the largest level (the
// call's buffers and about 4x the tensor of its own, CallBudget's bound).
device::Backend::Reservation probeMemoryBound();

// Collective over ctx.net with buffers in ctx.dev; `dense` runs the
// agreements. Tags: sequence numbers in a band of their own.
Status runProbe(Context& ctx, Algorithm& dense, const std::vector<ProbeCandidate>& candidates,
                const ProbeOptions& options, ProbeOutcome* out);

}  // namespace gradcomp::algo::autosel
