// The dense allreduce that GRADCOMP_ALGO=auto runs when a tensor switches
// from a compressing candidate to dense while it still holds an error-
// feedback residual: it sends the residual with the gradient (the sum of
// fp32(input) + residual over ranks) and clears it, so nothing a compressor
// held back is lost and a later compressing call starts from zero. Without
// a residual (error feedback off, a new tensor) it is the plain dense
// allreduce.
#pragma once

#include <memory>

#include "algorithms/algorithm.h"
#include "device/arrays.h"

namespace gradcomp::algo::autosel {

class FlushDense final : public Algorithm {
 public:
  explicit FlushDense(std::unique_ptr<Algorithm> dense) : dense_(std::move(dense)) {}
  Status runAllreduce(Context& ctx, const AllreduceArgs& args) override;

 private:
  std::unique_ptr<Algorithm> dense_;
  device::DeviceArray<float> scratch_;  // the accumulator with bf16 residuals
};

}  // namespace gradcomp::algo::autosel
