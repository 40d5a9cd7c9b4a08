#include "algorithms/quant/quant_frame.h"

namespace gradcomp::algo::quant {

// Algorithm::allreduce / reduceScatter checked the collective and the
// arguments (checkCallArgs); run() adds what quantization needs (checkArgs).
Status QuantAlgorithm::runAllreduce(Context& ctx, const AllreduceArgs& args) {
  return run(ctx, args);
}

Status QuantAlgorithm::runReduceScatter(Context& ctx, const AllreduceArgs& args) {
  return run(ctx, args);
}

Status QuantAlgorithm::stepReduceScatter(Context&, const AllreduceArgs&, const CallState&, float*,
                                         float*) {
  return makeStatus(Err::Unsupported, "%s has no reduce-scatter form", name_);
}

Status QuantAlgorithm::run(Context& ctx, const AllreduceArgs& args) {
  GC_CHECK(checkArgs(name_, args));
  if (args.count == 0) return Status::Ok();  // nothing to send; every rank agrees
  FramePlan plan;
  GC_CHECK(configure(ctx.config, ctx.net.size(), &plan));
  GC_CHECK(beginCall(ctx, args, plan.errorFeedback, plan.growth, &calls_, &accScratch_, &st_));
  ws_.bind(ctx.dev);
  if (st_.fallback) return fallbackCall(ctx, args, &st_, &ws_);
  // fp32: the result goes straight into recvBuf (the input already sits in
  // acc, so in place is safe for either collective).
  float* out = nullptr;
  if (args.dtype == DataType::Float32) {
    out = static_cast<float*>(args.recvBuf);
  } else {
    ws_.out.resize(outputCount(args, ctx.net.size()));
    out = ws_.out.data();
  }
  float* residual = st_.errorFeedback ? st_.acc : nullptr;
  if (args.coll == Collective::ReduceScatter)
    GC_CHECK(stepReduceScatter(ctx, args, st_, out, residual));
  else
    GC_CHECK(step(ctx, args, st_, out, residual));
  return endCall(ctx, args, &st_, out);
}

Status QuantReference::init(int nranks, const param::Overrides& config) {
  GC_CHECK(loadConfig(config));
  return CentralRanks::create(nranks, config, &ranks_);
}

Status QuantReference::expect(const std::vector<const void*>& inputs, const AllreduceArgs& args,
                              std::vector<double>* expected, std::vector<double>* tolerance) {
  const std::string who = std::string(name_) + " reference";
  GC_CHECK(checkArgs(who.c_str(), args, false));
  if (args.count == 0) {
    expected->clear();
    tolerance->clear();
    return Status::Ok();
  }
  const bool rs = args.coll == Collective::ReduceScatter;
  GC_REQUIRE(!rs || args.count % size_t(ranks_->size()) == 0, Err::InvalidArgument,
             "%s: reduce-scatter count %zu is not recvcount x %d ranks", who.c_str(), args.count,
             ranks_->size());
  const FramePlan p = plan(ranks_->size());
  std::vector<std::vector<float>> acc, contribution;
  std::vector<device::AbsStats> stats;
  bool fallback = false;
  uint64_t call = 0;
  GC_CHECK(ranks_->begin(inputs, args, p.errorFeedback, p.growth, &acc, &stats, &fallback, &call));
  std::vector<float> out(args.count);
  double relTolerance = 0;
  if (fallback) {
    GC_CHECK(ranks_->fallback(acc, args, p.errorFeedback, &out));
  } else {
    ownerResidual_.clear();
    if (rs)
      GC_CHECK(stepReduceScatter(args, acc, stats, call, &out, &contribution, &relTolerance));
    else
      GC_CHECK(step(args, acc, stats, call, &out, &contribution, &relTolerance));
    GC_CHECK(ranks_->end(args, p.errorFeedback, acc, contribution, ownerResidual_));
  }
  fillExpected(out, relTolerance, expected, tolerance);
  return Status::Ok();
}

Status QuantReference::stepReduceScatter(const AllreduceArgs&,
                                         const std::vector<std::vector<float>>&,
                                         const std::vector<device::AbsStats>&, uint64_t,
                                         std::vector<float>*, std::vector<std::vector<float>>*,
                                         double*) {
  return makeStatus(Err::Unsupported, "%s reference has no reduce-scatter form", name_);
}

}  // namespace gradcomp::algo::quant
