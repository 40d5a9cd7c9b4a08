// Shared pieces of the sparse allreduce family (topka, gtopk, oktopk, dsa):
// parameters, the per-call frame (warm-up, fp32 accumulator with error
// feedback, the non-finite fallback, output), and exact top-k selection.
//
// Decisions (docs/design.md, "Sparse allreduce"):
// - Compression works on an fp32 accumulator acc = residual + g whatever the
//   dtype (float16/bfloat16/float64 inputs are converted; float64 results carry
//   fp32 precision). Integer dtypes run the dense allreduce.
// - NaN/Inf: when any rank's accumulator holds a non-finite value (agreed by a
//   one-word dissemination OR), the call runs the dense allreduce on the raw
//   inputs, so NaN/Inf land where dense NCCL puts them; residuals are left
//   untouched for that call.
// - The first GRADCOMP_WARMUP_CALLS calls of a tensor run dense.
// - Error feedback runs when ctx.errorFeedback is set and enabled; the caller
//   decides per call from GRADCOMP_EF (ErrorFeedbackStore::forCall), so a
//   run's EF=off override is honoured.
// - The result is the fp32 sparse sum converted to the dtype (one rounding);
//   ncclAvg then divides it by P (device divide: fp64, one rounding).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "algorithms/algorithm.h"
#include "device/buffer.h"

namespace gradcomp::algo::sparse {

struct SparseParams {
  double density = 0.01;
  int64_t tau = 64, tauPrime = 32, warmupCalls = 0;
  Status read(const param::Overrides& config);
};

// k = max(1, floor(density * n)), at most n (n >= 1).
size_t topkCount(double density, size_t n);

// Key of the logical tensor (AllreduceArgs::bufferKey, else the buffer address).
inline uint64_t tensorKey(const AllreduceArgs& a) {
  return a.bufferKey ? a.bufferKey : uint64_t(reinterpret_cast<uintptr_t>(a.recvBuf));
}

// Sorted COO list.
// Backend memory (device/buffer.h): algorithms construct it on ctx.dev (or
// bind() it) before primitives fill it; a default-constructed Coo lives on
// the heap (references, tests).
struct Coo {
  device::Buffer<uint64_t> idx;
  device::Buffer<float> val;
  Coo() = default;
  explicit Coo(device::Backend& dev)
      : idx(device::BackendAllocator<uint64_t>(dev)), val(device::BackendAllocator<float>(dev)) {}
  void bind(device::Backend& dev) { device::bound(idx, dev), device::bound(val, dev); }
  size_t size() const { return idx.size(); }
  void clear() { idx.clear(), val.clear(); }
};

// Encoded messages, in backend memory when an algorithm fills them.
using Bytes = device::Buffer<uint8_t>;
// n empty messages in dev's memory.
inline std::vector<Bytes> bytesOn(device::Backend& dev, size_t n) {
  std::vector<Bytes> v;
  v.reserve(n);
  for (size_t i = 0; i < n; ++i) v.emplace_back(device::BackendAllocator<uint8_t>(dev));
  return v;
}

// Exact top-k of x[0..n) by |x| (threshold = k-th largest, ties admitted in
// index order; exact zeros never), indexes offset by base. *threshold
// (nullable) receives the k-th largest |x|.
Status selectTopk(device::Backend& dev, const float* x, size_t n, size_t k, uint64_t base,
                  Coo* out, float* threshold = nullptr);
// The same on a COO list: its exact top-k entries, in index order.
Status selectTopkCoo(device::Backend& dev, const Coo& in, size_t k, Coo* out,
                     float* threshold = nullptr);

// Per-call frame shared by every sparse algorithm.
class SparseFrame {
 public:
  // Decides what this call does. *compress = false: the call ran dense
  // (warm-up, integer dtype, non-finite input) and is complete. Otherwise acc
  // holds residual + input in fp32 and the caller runs its schedule, then
  // finish().
  Status begin(Context& ctx, const AllreduceArgs& args, int64_t warmupCalls, bool* compress);
  device::Buffer<float>& acc() { return acc_; }
  // Stores the residual (acc with the contributed entries zeroed by the
  // caller) and writes result (dense fp32, count) to args.recvBuf.
  Status finish(Context& ctx, const AllreduceArgs& args, const float* result);

 private:
  Status runDense(Context& ctx, const AllreduceArgs& args);
  struct KeyCalls {
    size_t count = 0;
    uint64_t calls = 0;
  };
  std::map<uint64_t, KeyCalls> calls_;
  std::unique_ptr<Algorithm> dense_;
  device::Buffer<float> acc_;
  bool efActive_ = false;
};

// Base of every sparse algorithm: reads the parameters, runs the frame and
// owns the result buffer, so a subclass writes only its schedule.
class SparseAlgorithm : public Algorithm {
 public:
  Status allreduce(Context& ctx, const AllreduceArgs& args) final;

 protected:
  // Runs when the call compresses. acc: residual + input (fp32, args.count);
  // the schedule zeroes the entries this rank contributed (the rest stays in
  // the residual) and adds the sparse result into `result` (dense fp32,
  // args.count, zero on entry; for fp32 calls it is args.recvBuf itself).
  virtual Status schedule(Context& ctx, const AllreduceArgs& args, const SparseParams& params,
                          size_t k, device::Buffer<float>& acc, float* result) = 0;

 private:
  SparseFrame frame_;
  device::Buffer<float> result_;
};

// fp32 sparse sum -> the value every rank returns, as the reference sees it:
// converted to dtype, divided by P for Avg, widened to double.
Status expectedFromFp32(const std::vector<float>& sum, const AllreduceArgs& args, int nranks,
                        std::vector<double>* expected);
// Exact dense sum (rank order, fp64) with a bound covering any summation order
// in the dtype: the reference of calls that ran dense.
Status expectedDense(const std::vector<const void*>& inputs, const AllreduceArgs& args,
                     std::vector<double>* expected, std::vector<double>* tolerance);
// Loads inputs[r] as fp32 (the accumulator before the residual).
Status loadFp32(const void* input, const AllreduceArgs& args, std::vector<float>* out);
bool allFinite(const float* x, size_t n);

}  // namespace gradcomp::algo::sparse
