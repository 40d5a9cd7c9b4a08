// Central replay of SparseFrame for the references of the sparse algorithms:
// the same warm-up, dense fallback and per-rank error feedback (one
// ErrorFeedbackStore per simulated rank, built from the same parameters), so
// a reference computes exactly what the distributed schedule returns.
// Assumes the communicator provides an error-feedback store (as gcComm does).
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "algorithms/error_feedback.h"
#include "algorithms/sparse/sparse_common.h"

namespace gradcomp::algo::sparse {

class ReferenceFrame {
 public:
  explicit ReferenceFrame(int nranks) : nranks_(nranks) {}
  Status configure(const param::Overrides& config);
  const SparseParams& params() const { return params_; }
  int nranks() const { return nranks_; }

  // *compress = false: the call runs dense and expected/tolerance are filled.
  // Otherwise acc(r) holds rank r's residual + input (CPU reference memory,
  // host-readable), as SparseFrame leaves it.
  Status begin(const std::vector<const void*>& inputs, const AllreduceArgs& args, bool* compress,
               std::vector<double>* expected, std::vector<double>* tolerance);
  float* acc(int r) { return accs_[r]; }
  // Reference::shareResiduals (after configure).
  void share(std::shared_ptr<CentralResiduals> residuals) { res_ = std::move(residuals); }
  // Stores each rank's residual (acc with contributions zeroed) and fills
  // expected from the fp32 sum; tolerance 0 (bit-exact replay).
  Status finish(const AllreduceArgs& args, const std::vector<float>& sum,
                std::vector<double>* expected, std::vector<double>* tolerance);

 private:
  Status ensureConfigured();
  int nranks_;
  bool configured_ = false;
  SparseParams params_;
  std::shared_ptr<CentralResiduals> res_;
  std::vector<device::DeviceArray<float>> scratch_;  // per rank: no EF, or bf16 residuals
  std::vector<float*> accs_;
  struct KeyCalls {
    size_t count = 0;
    uint64_t calls = 0;
  };
  std::map<uint64_t, KeyCalls> calls_;
  uint64_t callSeq_ = 0;
};

// Base of every sparse reference: the frame replay around a central schedule.
class SparseReference : public Reference {
 public:
  explicit SparseReference(int nranks) : frame_(nranks) {}
  Status configure(const param::Overrides& config) final { return frame_.configure(config); }
  Status shareResiduals(const std::shared_ptr<CentralResiduals>& residuals) final {
    frame_.share(residuals);
    return Status::Ok();
  }
  Status expect(const std::vector<const void*>& inputs, const AllreduceArgs& args,
                std::vector<double>* expected, std::vector<double>* tolerance) final;

 protected:
  // Runs when the call compresses: frame().acc(r) holds rank r's accumulator;
  // zero each rank's contribution and fill sum (dense fp32, args.count, zero
  // on entry) with the fp32 result.
  virtual Status schedule(const AllreduceArgs& args, size_t k, std::vector<float>& sum) = 0;
  ReferenceFrame& frame() { return frame_; }

 private:
  ReferenceFrame frame_;
};

}  // namespace gradcomp::algo::sparse
