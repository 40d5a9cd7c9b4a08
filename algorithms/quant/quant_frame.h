// The call frame every quantized algorithm (qsgd, rbf, sign, fft) shares,
// written once: argument checks, the empty call, beginCall / the non-finite
// fallback / endCall around the algorithm's compressed step, and the same
// frame on the central side for its Reference (CentralRanks around a central
// step). An algorithm supplies its parameters and its step; the frame makes
// the distributed and the central path take the same branches in the same
// order, which is what keeps `#wrong` at 0.
//
// The reduce-scatter form (NCCL's layout, algorithm.h) runs in the same frame
// over the whole sendBuf tensor: the same stats exchange, fallback rule and
// per-tensor residual (residualKey: the sendBuf tensor), with stepReduceScatter
// instead of step; the exact fallback is the raw reduce-scatter (fp32 sum in
// rank order, avg / P). Its Reference is the algorithm's own: expect() with
// args.coll == ReduceScatter fills the whole tensor, rank r's shard at
// [r * recvcount, (r + 1) * recvcount).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "algorithms/quant/quant_common.h"
#include "common/log.h"

namespace gradcomp::algo::quant {

// What a call's parameters decide before anything is exchanged.
struct FramePlan {
  bool errorFeedback = true;  // use the communicator's residual store (when it is on)
  double growth = 1;          // see mustFallBack
};

class QuantAlgorithm : public Algorithm {
 public:
  explicit QuantAlgorithm(const char* name) : name_(name) {}

 protected:
  Status runAllreduce(Context& ctx, const AllreduceArgs& args) final;
  Status runReduceScatter(Context& ctx, const AllreduceArgs& args) final;

  // Reads this call's parameters and keeps what step() needs.
  virtual Status configure(const param::Overrides& config, int nranks, FramePlan* plan) = 0;
  // The compressed allreduce of st.acc (count > 0, no fallback): fills
  // out[0..count) (device memory) with what every rank returns (fp32, op
  // applied) and, when residual is not null (it is st.acc then), leaves in
  // it acc - this rank's own part of the result in acc's units.
  virtual Status step(Context& ctx, const AllreduceArgs& args, const CallState& st, float* out,
                      float* residual) = 0;
  // The reduce-scatter of st.acc (the whole tensor, count = P * recvcount,
  // no fallback): fills out[0..recvcount) (device memory) with this rank's
  // shard (fp32, op applied); residual as in step(). Algorithms with a
  // reduce-scatter form override it and register a reduceScatterReference;
  // the default is Unsupported.
  virtual Status stepReduceScatter(Context& ctx, const AllreduceArgs& args, const CallState& st,
                                   float* out, float* residual);

  Workspace ws_;  // step() may use every member except out

 private:
  Status run(Context& ctx, const AllreduceArgs& args);

  const char* name_;
  CallCounter calls_;
  CallState st_;
  device::DeviceArray<float> accScratch_;  // acc without error feedback (or bf16 residuals)
};

// Central mirror of QuantAlgorithm.
class QuantReference : public Reference {
 public:
  explicit QuantReference(const char* name) : name_(name) {}
  // Reads the parameters; every rank's residual starts afresh.
  Status init(int nranks, const param::Overrides& config);
  // Bench flags reach the reference here (registry values until called).
  Status configure(const param::Overrides& config) final { return init(ranks_->size(), config); }
  Status shareResiduals(const std::shared_ptr<CentralResiduals>& residuals) final {
    ranks_->share(residuals);
    return Status::Ok();
  }
  Status expect(const std::vector<const void*>& inputs, const AllreduceArgs& args,
                std::vector<double>* expected, std::vector<double>* tolerance) final;

 protected:
  virtual Status loadConfig(const param::Overrides& config) = 0;
  virtual FramePlan plan(int nranks) const = 0;
  // Central step over every rank's acc (stats and call as the ranks see them):
  // fills *out (count values) and, with error feedback, (*contribution)[r]
  // for every rank; *relTolerance: allowed error relative to max|out| (0:
  // bit-exact).
  virtual Status step(const AllreduceArgs& args, const std::vector<std::vector<float>>& acc,
                      const std::vector<device::AbsStats>& stats, uint64_t call,
                      std::vector<float>* out, std::vector<std::vector<float>>* contribution,
                      double* relTolerance) = 0;
  // The reduce-scatter form's central step (args.coll == ReduceScatter):
  // fills *out with the whole tensor (shard j as rank j returns it) and the
  // contributions as step() does. Default: Unsupported.
  virtual Status stepReduceScatter(const AllreduceArgs& args,
                                   const std::vector<std::vector<float>>& acc,
                                   const std::vector<device::AbsStats>& stats, uint64_t call,
                                   std::vector<float>* out,
                                   std::vector<std::vector<float>>* contribution,
                                   double* relTolerance);

  // Owner-side error feedback: step() fills it (simulateExchange's owner
  // output) when the call's residuals hold the owners' phase-2 errors on
  // their own chunks; empty (cleared before every step) otherwise.
  std::vector<OwnerResidual> ownerResidual_;

 private:
  const char* name_;
  std::unique_ptr<CentralRanks> ranks_;
};

// make*Reference (quant_algorithms.h) for a QuantReference subclass R.
template <class R>
Status makeQuantReference(int nranks, const param::Overrides& config,
                          std::unique_ptr<Reference>* out) {
  auto ref = std::make_unique<R>();
  GC_CHECK(ref->init(nranks, config));
  *out = std::move(ref);
  return Status::Ok();
}

// AlgorithmInfo::reference for R: registry values (environment, defaults);
// null (with a warning) when they are invalid.
template <class R>
std::unique_ptr<Reference> registryReference(int nranks, const char* name) {
  std::unique_ptr<Reference> ref;
  Status s = makeQuantReference<R>(nranks, param::Overrides{}, &ref);
  if (!s.ok()) GC_WARN("%s reference: %s", name, s.toString().c_str());
  return ref;
}

}  // namespace gradcomp::algo::quant
