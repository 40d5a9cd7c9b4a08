// GRADCOMP_ALGO=auto on one communicator: the candidates, the agreed model
// (probe.h, auto_model.h) and the per-class choices (chooser.h), plus what
// keeps error feedback consistent across switches. Used by the registered
// "auto" algorithm (auto_algorithm.h: the C API, gradcomp-bench) and by the
// NCCL interposer, which can run the dense choice as NCCL's own allreduce.
//
// Every decision is a function of data all ranks share: the call's arguments,
// per-class call counts, and the model and measurements agreed across ranks.
// Measured call times enter only through agreements at fixed call counts
// (chooser.h): per measured call the max over ranks of measured / predicted
// (the job waits for its slowest rank), then per candidate the median over
// its agreed calls.
//
// Error feedback across a switch: a tensor whose last call ran a compressing
// candidate may hold a residual. When its next call chooses dense, that call
// runs FlushDense (ef_flush.h: the residual is sent with the gradient and
// cleared) instead of plain dense or NCCL; a later compressing call starts
// from a zero residual. Between compressing candidates the residual carries
// over (it is error in the input's space, whichever compressor left it).
#pragma once

#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/auto/auto_model.h"
#include "algorithms/auto/candidates.h"
#include "algorithms/auto/chooser.h"
#include "algorithms/auto/probe.h"

namespace gradcomp::algo::autosel {

struct TunerReport {
  std::string state;  // "calibrated", "dense: <why>", "not calibrated"
  std::vector<std::string> labels;
  bool haveModel = false;
  Model model;
  double probeSeconds = 0;
  std::vector<ClassReport> classes;
};

class AutoTuner {
 public:
  struct Decision {
    int candidate = -1;   // index into the candidates; -1: the dense fallback
    bool dense = false;   // a dense allreduce (the interposer may pass it to NCCL)
    bool flush = false;   // dense that must carry a residual: run algorithmFor()
    bool record = false;  // time the call and pass it to finish()
    ClassKey key;
    double baseS = 0;     // the model's prediction for the call
    uint64_t tensor = 0;  // scheduleKey: the flush decision must be alike on every rank
  };

  AutoTuner();
  ~AutoTuner();

  // Reads GRADCOMP_AUTO_* and the candidates through `config` (registry
  // values unless overridden). Bad values (unknown candidate, empty list, a
  // bad parameter) disable auto: every call runs dense, why() names the
  // variable (logged once as a WARN).
  void configure(const param::Overrides& config);
  bool configured() const { return configured_; }
  // Calling thread (Algorithm::prepare): every configured candidate prepares
  // for the call with its own parameters (which one runs is chosen in it).
  Status prepare(Context& ctx, const AllreduceArgs& args);
  // Collective: the probe (configures first if needed). A transport failure
  // returns its Status; any other failure disables auto on every rank alike.
  Status calibrate(Context& ctx);
  bool calibrated() const { return calibrated_; }
  bool disabled() const { return !why_.empty(); }
  const std::string& why() const { return why_; }
  // Runs dense from now on (the interposer: the probe failed on some rank).
  void disable(const std::string& why);

  // The next call's decision. Collective when an agreement is due (every rank
  // calls plan for the same calls, in the same order). measurable: the
  // caller times the call synchronously (false under an asynchronous
  // executor: the model alone decides).
  Status plan(Context& ctx, const AllreduceArgs& args, bool measurable, Decision* out);
  Algorithm& algorithmFor(const Decision& d);
  // The candidate's parameters (the configuration auto was configured with,
  // plus the candidate's own); callConfig for the dense fallback.
  const param::Overrides& configFor(const Decision& d, const param::Overrides& callConfig) const;
  // After the call succeeded; seconds: its wall time on this rank (used only
  // when d.record). errorFeedback: whether the call had a residual store on.
  void finish(const Decision& d, double seconds, bool errorFeedback);
  std::string labelOf(const Decision& d) const;

  TunerReport report() const;
  const Model& model() const { return model_; }
  void setTimingHook(TimingHook hook) { hook_ = std::move(hook); }

 private:
  void logAgreement(const ClassKey& key, const std::vector<double>& base) const;

  struct Candidate {
    CandidateSpec spec;
    const AlgorithmInfo* info = nullptr;
    param::Overrides config;
    std::unique_ptr<Algorithm> algorithm;
  };

  bool configured_ = false, calibrated_ = false;
  std::atomic<bool> candidatesReady_{false};  // configure() done: candidates_ fixed
  std::string why_;
  std::vector<Candidate> candidates_;
  ChooserOptions options_;
  double budgetS_ = 0.25, limitS_ = 1.0;
  std::unique_ptr<Chooser> chooser_;
  Model model_;
  double probeSeconds_ = 0;
  std::unique_ptr<Algorithm> dense_, flush_, agreeDense_;
  // Schedule keys (bufferKey, else the call's shape) whose last call compressed
  // with error feedback: the next dense call of that key flushes this rank's
  // residual of its buffer. Keyed like the schedule, never by address, so every
  // rank flushes (a dense allreduce over UCX) or passes through alike. Another
  // tensor of the same shape keeps its residual until its next compressed call
  // or until the store retires it as stale.
  std::set<uint64_t> compressed_;
  TimingHook hook_;
};

}  // namespace gradcomp::algo::autosel
