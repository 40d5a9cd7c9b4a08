#include "algorithms/auto/auto_reference.h"

#include <cmath>
#include <vector>

#include "algorithms/auto/candidates.h"
#include "algorithms/error_feedback.h"
#include "device/arrays.h"
#include "device/backend.h"

namespace gradcomp::algo::autosel {
namespace {

// Unit roundoff and smallest subnormal step of a float dtype (one rounding to
// it errs by at most u * |value| + eta).
void roundoff(DataType t, double* u, double* eta) {
  switch (t) {
    case DataType::Float16: *u = std::ldexp(1.0, -11); *eta = std::ldexp(1.0, -25); break;
    case DataType::BFloat16: *u = std::ldexp(1.0, -8); *eta = std::ldexp(1.0, -134); break;
    case DataType::Float32: *u = std::ldexp(1.0, -24); *eta = std::ldexp(1.0, -150); break;
    default: *u = 0; *eta = 0; break;  // float64: the fp32 sum widens exactly
  }
}

class AutoReference final : public Reference {
 public:
  explicit AutoReference(int nranks) : nranks_(nranks) {}

  Status configure(const param::Overrides& config) override {
    std::string text;
    std::vector<CandidateSpec> specs;
    GC_CHECK(config.getString(param::Id::AUTO_CANDIDATES, &text));
    // A bad list runs every call dense (the tuner's "disabled"): labels are "dense" then.
    if (!parseCandidates(text, "GRADCOMP_AUTO_CANDIDATES", &specs).ok()) specs.clear();
    GC_CHECK(CentralResiduals::create(nranks_, config, &residuals_));
    residuals_->shared = true;
    candidates_.clear();
    for (const CandidateSpec& spec : specs) {
      param::Overrides own = config;
      for (const auto& [name, value] : spec.params)
        GC_CHECK(own.set(name, value, "GRADCOMP_AUTO_CANDIDATES entry " + spec.label));
      const AlgorithmInfo* info = findAlgorithm(spec.algo);
      Candidate c{spec.label, info->reference ? info->reference(nranks_) : nullptr};
      GC_REQUIRE(c.reference != nullptr, Err::Unsupported,
                 "auto reference: candidate %s has no reference", spec.label.c_str());
      GC_CHECK(c.reference->configure(own));
      const Status shared = c.reference->shareResiduals(residuals_);
      GC_REQUIRE(shared.ok(), Err::Unsupported, "auto reference: candidate %s: %s",
                 spec.label.c_str(), shared.message().c_str());
      candidates_.push_back(std::move(c));
    }
    scratch_.clear();
    for (int r = 0; r < nranks_; ++r) scratch_.emplace_back(device::cpuBackend());
    dense_ = findAlgorithm("dense")->reference(nranks_);
    GC_CHECK(dense_->configure(config));
    configured_ = true;
    return Status::Ok();
  }

  Status recordChoice(const std::string& label) override {
    choice_ = label;
    return Status::Ok();
  }

  Status expect(const std::vector<const void*>& inputs, const AllreduceArgs& args,
                std::vector<double>* expected, std::vector<double>* tolerance) override {
    if (!configured_) GC_CHECK(configure(param::Overrides()));  // registry values
    GC_REQUIRE(!choice_.empty(), Err::InvalidArgument,
               "auto reference: no choice recorded for call %llu (recordChoice before expect)",
               (unsigned long long)residuals_->callSeq);
    std::string label = choice_;
    choice_.clear();
    const size_t mark = label.size() - std::min(label.size(), std::string(kFlushMark).size());
    const bool flush = label.compare(mark, std::string::npos, kFlushMark) == 0;
    if (flush) label.resize(mark);
    Reference* ref = label == "dense" ? dense_.get() : nullptr;  // also the disabled tuner's
    for (Candidate& c : candidates_)
      if (c.label == label) ref = c.reference.get();
    GC_REQUIRE(ref != nullptr, Err::InvalidArgument,
               "auto reference: call %llu ran '%s', which is not a candidate",
               (unsigned long long)residuals_->callSeq, label.c_str());
    const Status s = flush ? expectFlush(inputs, args, expected, tolerance)
                           : ref->expect(inputs, args, expected, tolerance);
    residuals_->callSeq++;
    return s;
  }

 private:
  // FlushDense: rank r sends fp32(input r) + residual r, the fp32 sum is
  // converted to the dtype (then divided for avg), residuals are cleared.
  Status expectFlush(const std::vector<const void*>& inputs, const AllreduceArgs& args,
                     std::vector<double>* expected, std::vector<double>* tolerance) {
    const bool ef = residuals_->stores[0]->enabled();
    if (!ef || !isFloating(args.dtype) || args.count == 0)
      return dense_->expect(inputs, args, expected, tolerance);
    device::Backend& cpu = device::cpuBackend();
    const uint64_t key = residualKey(args), seq = residuals_->callSeq;
    std::vector<const void*> accs;
    for (int r = 0; r < nranks_; ++r) {
      ErrorFeedbackStore& store = *residuals_->stores[size_t(r)];
      store.retireStale(seq);
      float* acc = nullptr;
      bool fresh = true;
      GC_CHECK(store.begin(cpu, key, args.count, seq, &scratch_[size_t(r)], &acc, &fresh));
      device::AccumulateStats st;
      GC_CHECK(cpu.accumulate(acc, inputs[size_t(r)], args.dtype, args.count, !fresh, -1.0f, &st));
      accs.push_back(acc);
    }
    AllreduceArgs sum = args;
    sum.dtype = DataType::Float32;
    sum.op = RedOp::Sum;
    GC_CHECK(dense_->expect(accs, sum, expected, tolerance));
    // The dense bound covers the fp32 sum; converting it to the dtype and the
    // avg's divide (in the dtype) each round once more.
    double u = 0, eta = 0;
    roundoff(args.dtype, &u, &eta);
    for (size_t i = 0; i < args.count; ++i) {
      double& e = (*expected)[i];
      double& t = (*tolerance)[i];
      if (!std::isfinite(e)) continue;
      if (args.dtype != DataType::Float32) t += u * std::fabs(e) + eta;
      if (args.op == RedOp::Avg) {
        e /= nranks_;
        t = t / nranks_ + u * std::fabs(e) + eta;
      }
    }
    for (auto& store : residuals_->stores) GC_CHECK(store->clear(cpu, key));
    return Status::Ok();
  }

  struct Candidate {
    std::string label;
    std::unique_ptr<Reference> reference;
  };
  int nranks_;
  bool configured_ = false;
  std::shared_ptr<CentralResiduals> residuals_;
  std::vector<Candidate> candidates_;
  std::unique_ptr<Reference> dense_;
  std::vector<device::DeviceArray<float>> scratch_;  // per rank: bf16 residuals' accumulator
  std::string choice_;
};

}  // namespace

std::unique_ptr<Reference> makeAutoReference(int nranks) {
  return std::unique_ptr<Reference>(new AutoReference(nranks));
}

}  // namespace gradcomp::algo::autosel
