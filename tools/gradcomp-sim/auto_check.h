// gradcomp-sim --auto-check: GRADCOMP_ALGO=auto's model checked offline. For
// each candidate of GRADCOMP_AUTO_CANDIDATES the simulator runs the real
// schedule at the probe's sizes (algorithms/auto/probe.h probeLevels) on the
// simulated link, fits the model with the same code the tuner uses
// (auto_model.h fitCandidate: link alpha/beta from the flags, each sample's
// total time, its compute from a run on a free network, its bytes), predicts
// the target sizes (predictSeconds) and compares with the simulated time of
// each candidate there: which candidate the model alone would choose, and
// how far that is from the best simulated one.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "algorithms/auto/auto_model.h"
#include "algorithms/auto/probe.h"
#include "tools/gradcomp-sim/sim_run.h"

namespace gradcomp::sim {

struct AutoCheckRow {
  size_t count = 0;
  std::vector<double> predictedS, simulatedS;  // per candidate
  int chosen = -1, best = -1;                  // least predicted, least simulated
};

struct AutoCheckResult {
  int ranks = 0;
  std::vector<std::string> labels;
  algo::autosel::Model model;
  std::vector<AutoCheckRow> rows;
};

// base: cost model, calls, inputs and parameters (AUTO_CANDIDATES among them);
// levels: the sizes the model is fitted at (tests use smaller ones).
Status autoCheck(const SimJob& base, int ranks, const std::vector<size_t>& counts,
                 AutoCheckResult* out,
                 const std::vector<size_t>& levels = algo::autosel::probeLevels());

// Prints the table (and the JSON at jsonPath when not empty); exit status.
int runAutoCheck(const SimJob& base, const std::vector<int>& ranks, const std::vector<size_t>& counts,
                 const std::string& jsonPath);

}  // namespace gradcomp::sim
