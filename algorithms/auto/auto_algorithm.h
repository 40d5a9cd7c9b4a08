// "auto" in the algorithm registry (a selector: AlgorithmInfo::selector):
// per call one of GRADCOMP_AUTO_CANDIDATES, chosen by the communicator's
// AutoTuner (tuner.h). Its first call is the calibration probe (collective,
// bounded by GRADCOMP_AUTO_PROBE_MS). Its Reference (auto_reference.h)
// replays each call's recorded choice with that candidate's Reference.
#pragma once

#include <string>

#include "algorithms/auto/tuner.h"

namespace gradcomp::algo::autosel {

class AutoAlgorithm final : public Algorithm {
 public:
  Status runAllreduce(Context& ctx, const AllreduceArgs& args) override;
  Status prepare(Context& ctx, const AllreduceArgs& args) override {
    return tuner_.prepare(ctx, args);
  }
  bool choosesPerCall() const override { return true; }
  device::Backend::Reservation extraFirstCall(const AllreduceArgs& args) const override;
  AutoTuner& tuner() { return tuner_; }
  const AutoTuner& tuner() const { return tuner_; }
  // What the last call ran: the candidate's label ("qsgd:BITS=4"; "dense"
  // when none), "dense(flush)" (kFlushMark) for a dense call that sent and
  // cleared a compressor's residual (FlushDense).
  const std::string& lastChoice() const { return last_; }

 private:
  AutoTuner tuner_;
  std::string last_;
};

// The tuner of an auto instance; nullptr for every other algorithm.
AutoTuner* tunerOf(Algorithm* algorithm);
const AutoTuner* tunerOf(const Algorithm* algorithm);

}  // namespace gradcomp::algo::autosel
