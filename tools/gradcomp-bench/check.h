// Checking one rank's allreduce output.
//
// Scheme (sound for stateful algorithms): with -c 1 every call of a size's
// sequence is checked, warm-up and timed calls alike, right after it returns
// (outside the timed region). Inputs are pure functions f(seed, rank, index,
// call), so every rank regenerates all ranks' inputs of the call. One
// Reference object per sequence sees every call in the order the algorithm
// saw them, so its central state (residuals, thresholds) evolves exactly like
// the algorithm's. Each rank compares its own output with the reference
// (#wrong, summed over ranks by the caller) and with the exact sum (relerr).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "common/param.h"
#include "common/status.h"

namespace gradcomp::bench {

struct CallCheck {
  uint64_t wrong = 0;     // elements outside the reference's tolerance
  double relErr = 0;      // ||out - exact|| / ||exact|| (0 when both are 0)
};

class Checker {
 public:
  // `info.reference` may be empty: then only relerr is computed. hostRanks
  // (the ranks of each host) non-empty: the algorithm ran the hierarchical
  // schedule on these hosts, and so does the reference (hierarchy/hierarchical.h).
  Checker(const algo::AlgorithmInfo& info, int nranks,
          std::vector<std::vector<int>> hostRanks = {},
          algo::Collective coll = algo::Collective::AllReduce);
  // Hands the run's algorithm parameters (bench flags) to the reference, so it
  // computes the semantics of the configuration the algorithm actually ran.
  Status configure(const param::Overrides& config);

  bool hasReference() const { return reference_ != nullptr; }

  // --algo auto: what the next call ran (gcCommLastAlgorithm), before its
  // checkCall; the reference replays that choice (auto_reference.h).
  Status recordChoice(const std::string& label) {
    return reference_ ? reference_->recordChoice(label) : Status::Ok();
  }

  // inputs[r]: rank r's input of this call (args.dtype, args.count elements);
  // out: this rank's result (a reduce-scatter's: elements [rank * recvcount,
  // ...) of the reduction). Feeds the reference (one call of the sequence).
  Status checkCall(const std::vector<const void*>& inputs, const algo::AllreduceArgs& args,
                   const void* out, int rank, CallCheck* result);

 private:
  int nranks_;
  std::unique_ptr<algo::Reference> reference_;
  std::vector<double> expected_, tolerance_;
};

}  // namespace gradcomp::bench
