#include "algorithms/quant/quant_frame.h"

namespace gradcomp::algo::quant {

Status QuantAlgorithm::allreduce(Context& ctx, const AllreduceArgs& args) {
  GC_CHECK(checkArgs(name_, args));
  if (args.count == 0) return Status::Ok();  // nothing to send; every rank agrees
  FramePlan plan;
  GC_CHECK(configure(ctx.config, ctx.net.size(), &plan));
  GC_CHECK(beginCall(ctx, args, plan.errorFeedback, plan.growth, &calls_, &accScratch_, &st_));
  ws_.bind(ctx.dev);
  if (st_.fallback) return fallbackCall(ctx, args, &st_, &ws_);
  // fp32: the result goes straight into recvBuf (the input already sits in acc).
  float* out = nullptr;
  if (args.dtype == DataType::Float32) {
    out = static_cast<float*>(args.recvBuf);
  } else {
    ws_.out.resize(args.count);
    out = ws_.out.data();
  }
  GC_CHECK(step(ctx, args, st_, out, st_.errorFeedback ? st_.acc : nullptr));
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
    GC_CHECK(step(args, acc, stats, call, &out, &contribution, &relTolerance));
    GC_CHECK(ranks_->end(args, p.errorFeedback, acc, contribution, ownerResidual_));
  }
  fillExpected(out, relTolerance, expected, tolerance);
  return Status::Ok();
}

}  // namespace gradcomp::algo::quant
