#include "algorithms/auto/auto_algorithm.h"

#include <chrono>

#include "algorithms/auto/auto_reference.h"
#include "algorithms/auto/probe.h"
#include "algorithms/error_feedback.h"

namespace gradcomp::algo::autosel {

Status AutoAlgorithm::runAllreduce(Context& ctx, const AllreduceArgs& args) {
  if (!tuner_.calibrated()) GC_CHECK(tuner_.calibrate(ctx));
  AutoTuner::Decision d;
  GC_CHECK(tuner_.plan(ctx, args, true, &d));
  Context run{ctx.net, ctx.dev, tuner_.configFor(d, ctx.config), ctx.callSeq, ctx.errorFeedback};
  const auto t0 = std::chrono::steady_clock::now();
  GC_CHECK(tuner_.algorithmFor(d).allreduce(run, args));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  tuner_.finish(d, seconds, ctx.errorFeedback && ctx.errorFeedback->enabled());
  last_ = tuner_.labelOf(d) + (d.flush ? kFlushMark : "");
  return Status::Ok();
}

// The probe runs inside the first call; later calls may switch candidates.
device::Backend::Reservation AutoAlgorithm::extraFirstCall(const AllreduceArgs&) const {
  return probeMemoryBound();
}

AutoTuner* tunerOf(Algorithm* algorithm) {
  auto* a = dynamic_cast<AutoAlgorithm*>(algorithm);
  return a ? &a->tuner() : nullptr;
}

const AutoTuner* tunerOf(const Algorithm* algorithm) {
  auto* a = dynamic_cast<const AutoAlgorithm*>(algorithm);
  return a ? &a->tuner() : nullptr;
}

GC_REGISTER_ALGORITHM(
    auto_selector,
    {"auto",
     "per call the candidate of GRADCOMP_AUTO_CANDIDATES that a model calibrated on this job "
     "predicts fastest (probe at the first call, measured times agreed across ranks)",
     {param::Id::AUTO_CANDIDATES, param::Id::AUTO_PROBE_MS, param::Id::AUTO_PROBE_LIMIT_MS,
      param::Id::AUTO_REFINE_CALLS,
      param::Id::AUTO_TRIAL_MS, param::Id::AUTO_HYSTERESIS, param::Id::AUTO_EXPLORE, param::Id::DENSE_RD_MAX_BYTES,
      param::Id::EF, param::Id::DENSITY, param::Id::TOPK_TAU, param::Id::TOPK_TAU_PRIME,
      param::Id::WARMUP_CALLS, param::Id::CLTK_LEADERS, param::Id::BITS, param::Id::BUCKET,
      param::Id::RBF_MANTISSA,
      param::Id::RBF_VMAX, param::Id::QUANT_SEED, param::Id::QUANT_OWNER_EF, param::Id::SIGN_EF,
      param::Id::SIGN_TIES,
      param::Id::SIGN_BLOCK, param::Id::THETA, param::Id::THETA_DECAY_CALLS,
      param::Id::FFT_CHUNK},
     [] { return std::unique_ptr<Algorithm>(new AutoAlgorithm()); },
     [](int nranks) { return makeAutoReference(nranks); },
     true});

}  // namespace gradcomp::algo::autosel
