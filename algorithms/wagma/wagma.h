// WAGMA: wait-avoiding group model averaging (seed 002; notes/algorithms.md
// section 5). Registered as "wagma". Each call of a logical tensor (residualKey:
// the C API's bufferKey; through the NCCL interposer the output buffer's
// address, so the job must keep one buffer per tensor, as DDP's buckets do)
// averages within butterfly groups of S ranks (topology.h); every
// GRADCOMP_WAGMA_PERIOD-th call of that tensor is a global average.
//
// Modes (GRADCOMP_WAGMA_MODE), i.e. what the caller allreduces:
// - weights: the caller allreduces model weights (local SGD, model averagers,
//   gradcomp-train --average weights). The result is the rank's new model.
//   This is exact WAGMA-SGD (Algorithm 2), for any optimizer.
// - gradient: the caller allreduces gradients and applies them itself (DDP).
//   Group-averaging gradients would let replicas drift, so a per-tensor shadow
//   D (initially 0) turns the gradient stream into a model-averaging one: the
//   rank contributes g + D, gets a = the WAGMA average of the contributions,
//   returns a - D and sets D = a. With plain SGD at a constant learning rate
//   lr, the rank's model W0 - lr * sum(returns) = W0 - lr * a equals WAGMA's
//   model average of the locally updated models exactly; with momentum,
//   adaptive optimizers or a changing lr it is a heuristic.
//
// Execution (GRADCOMP_WAGMA_WAIT): 0 is the wait-avoiding group allreduce
// (stream.h: a progress thread per tensor on a private channel; late ranks
// contribute their previous buffer passively); 1 is the blocking group
// allreduce on the communicator's transport, for comparison.
//
// ncclAvg returns the average; ncclSum returns P times it (what a sum would
// be if every rank held that average; exact when P is a power of two).
// Floating dtypes only. Parameters are read at a tensor's first call and kept
// for that tensor.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/wagma/channel.h"
#include "algorithms/wagma/stream.h"
#include "algorithms/wagma/topology.h"

namespace gradcomp::algo::wagma {

enum class Mode { Weights, Gradient };

class Wagma final : public Algorithm {
 public:
  // channels: how wait-avoiding streams get their private transport (tests
  // pass local fabrics); empty: ucxChannelFactory().
  explicit Wagma(ChannelFactory channels = {});
  ~Wagma() override;
  Status runAllreduce(Context& ctx, const AllreduceArgs& args) override;
  // Not in the wait-avoiding mode (GRADCOMP_WAGMA_WAIT=0).
  bool waitsForEveryRank(const Context& ctx, const AllreduceArgs& args) const override;

  // For tests: the report of the last call of `key` (false if none), and the
  // versions the key's progress thread executed (empty in blocking mode).
  bool lastReport(uint64_t key, CallReport* out) const;
  std::vector<uint64_t> executed(uint64_t key) const;

 private:
  struct Tensor;
  Status setup(Context& ctx, const AllreduceArgs& args, Tensor* t);
  Status average(Context& ctx, Tensor& t, const void* in, void* out);
  Status blockingAverage(Context& ctx, Tensor& t, const void* in, void* out);

  ChannelFactory channels_;
  std::unique_ptr<Algorithm> dense_;
  std::map<uint64_t, std::unique_ptr<Tensor>> tensors_;
  // Keys in first-call order, the same on every rank (collective order); the
  // destructor closes the tensors' streams in this order, because closing
  // one waits for the peers to close theirs and keys (buffer addresses)
  // sort differently on each rank.
  std::vector<uint64_t> order_;
};

}  // namespace gradcomp::algo::wagma
