// Central replay of the sparse call frame (see reference_frame.h).
#include "algorithms/sparse/reference_frame.h"

namespace gradcomp::algo::sparse {

Status ReferenceFrame::configure(const param::Overrides& config) {
  GC_CHECK(params_.read(config));
  GC_CHECK(CentralResiduals::create(nranks_, config, &res_));
  accs_.assign(nranks_, nullptr);
  scratch_.clear();
  for (int r = 0; r < nranks_; ++r) scratch_.emplace_back(device::cpuBackend());
  configured_ = true;
  return Status::Ok();
}

Status ReferenceFrame::ensureConfigured() {
  if (configured_) return Status::Ok();
  return configure(param::Overrides());  // registry values
}

Status ReferenceFrame::begin(const std::vector<const void*>& inputs, const AllreduceArgs& args,
                             bool* compress, std::vector<double>* expected,
                             std::vector<double>* tolerance) {
  GC_CHECK(ensureConfigured());
  GC_REQUIRE(int(inputs.size()) == nranks_, Err::InvalidArgument,
             "reference: %zu inputs for %d ranks", inputs.size(), nranks_);
  *compress = false;
  const uint64_t own = callSeq_++;
  const uint64_t seq = res_->shared ? res_->callSeq : own;
  if (args.count == 0 || !isFloating(args.dtype))
    return expectedDense(inputs, args, expected, tolerance);
  const uint64_t key = residualKey(args);
  KeyCalls& kc = calls_[scheduleKey(args)];
  if (kc.count != args.count) kc = KeyCalls{args.count, 0};
  if (kc.calls++ < uint64_t(params_.warmupCalls))
    return expectedDense(inputs, args, expected, tolerance);
  device::Backend& cpu = device::cpuBackend();
  bool finite = true;
  for (int r = 0; r < nranks_; ++r) {
    bool fresh = true;
    if (res_->stores[r]->enabled()) {
      res_->stores[r]->retireStale(seq);
      GC_CHECK(res_->stores[r]->begin(cpu, key, args.count, seq, &scratch_[r], &accs_[r], &fresh));
    } else {
      scratch_[r].resize(args.count);
      accs_[r] = scratch_[r].data();
    }
    device::AccumulateStats st;
    GC_CHECK(cpu.accumulate(accs_[r], inputs[r], args.dtype, args.count, !fresh, -1.0f, &st));
    finite = finite && st.nonFinite == 0;
  }
  if (!finite) {
    for (int r = 0; r < nranks_; ++r)
      if (res_->stores[r]->enabled()) GC_CHECK(res_->stores[r]->clear(cpu, key));
    return expectedDense(inputs, args, expected, tolerance);
  }
  *compress = true;
  return Status::Ok();
}

Status ReferenceFrame::finish(const AllreduceArgs& args, const std::vector<float>& sum,
                              std::vector<double>* expected, std::vector<double>* tolerance) {
  for (int r = 0; r < nranks_; ++r)
    if (res_->stores[r]->enabled())
      GC_CHECK(res_->stores[r]->end(device::cpuBackend(), residualKey(args), accs_[r]));
  GC_CHECK(expectedFromFp32(sum, args, nranks_, expected));
  tolerance->assign(args.count, 0.0);
  return Status::Ok();
}

Status SparseReference::expect(const std::vector<const void*>& inputs, const AllreduceArgs& args,
                               std::vector<double>* expected, std::vector<double>* tolerance) {
  bool compress = false;
  GC_CHECK(frame_.begin(inputs, args, &compress, expected, tolerance));
  if (!compress) return Status::Ok();
  std::vector<float> sum(args.count, 0.0f);
  GC_CHECK(schedule(args, topkCount(frame_.params().density, args.count), sum));
  return frame_.finish(args, sum, expected, tolerance);
}

}  // namespace gradcomp::algo::sparse
