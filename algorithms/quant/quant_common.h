// Shared plumbing of the quantized family (qsgd, rbf, sign, fft): the fp32
// working copy of a call's input with error feedback, the per-call agreement
// on statistics (non-finite fallback, vmax, sign scale), parameter reads, and
// the central per-rank state their References keep.
//
// Every call starts the same way on every rank:
//   acc = fp32(input) (+ residual when error feedback is on), in one device
//   pass that also yields the AbsStats (device/backend.h accumulate); with
//   error feedback acc is the residual itself (error_feedback.h);
//   one small exchange gives every rank every rank's AbsStats of acc;
//   if any rank has a NaN/Inf, or the sum could overflow fp32, the whole call
//   falls back to the exact (uncompressed) sum for that call and the residual
//   is cleared (notes section 9: a NaN the user had stays visible, no finite
//   input becomes NaN through compression).
// The compressed step then leaves in acc what this rank did not get across
// (acc - contribution), mostly inside the encoding kernels themselves.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/error_feedback.h"
#include "algorithms/quant/code_exchange.h"
#include "device/quant_types.h"

namespace gradcomp::algo::quant {

// Parameters with per-algorithm defaults (GRADCOMP_BITS is shared).
Status readBits(const param::Overrides& config, int fallback, int* bits);
Status readInt(const param::Overrides& config, param::Id id, int64_t* out);
// RBF mantissa for `bits` (GRADCOMP_RBF_MANTISSA or the default), validated.
Status readRbfMantissa(const param::Overrides& config, int bits, const char* who, int* mantissa);
// GRADCOMP_RBF_VMAX; 0 when unset (tracked from the data).
Status readRbfVmax(const param::Overrides& config, double* vmax);
// GRADCOMP_QUANT_OWNER_EF (qsgd, rbf): owner-side error feedback; `fallback`
// when unset.
Status readOwnerEf(const param::Overrides& config, bool fallback, bool* on);

// Floating dtypes only; integers are Unsupported (callers pass them to dense).
// References pass buffers = false (they get the inputs separately).
Status checkArgs(const char* who, const AllreduceArgs& args, bool buffers = true);

// Number of calls an algorithm object has made for each scheduleKey: seeds and
// schedules derive from it, and a Reference counts the same way (the bench
// checks a sequence under its own key with a fresh Reference).
class CallCounter {
 public:
  uint64_t next(uint64_t key) { return counts_[key]++; }

 private:
  std::map<uint64_t, uint64_t> counts_;
};

// True when the call must fall back to the exact sum: a non-finite value on
// some rank, or |sum| that could leave the fp32 range (growth = how much the
// largest |value| can grow before decoding: P for sums, P * chunk for spectra).
bool mustFallBack(const std::vector<device::AbsStats>& all, double growth);

// Elements a call returns on this rank: count, or recvcount for a
// reduce-scatter.
inline size_t outputCount(const AllreduceArgs& args, int nranks) {
  return args.coll == Collective::ReduceScatter ? recvCountOf(args, nranks) : args.count;
}

// One call's distributed state on this rank.
struct CallState {
  float* acc = nullptr;                  // fp32 input (+ residual), device memory
  std::vector<device::AbsStats> stats;   // every rank's stats of acc, by rank
  bool fallback = false;
  bool errorFeedback = false;            // acc is the residual (error_feedback.h)
  uint64_t key = 0;
  uint64_t call = 0;                     // CallCounter value of this call
};

// Loads the input, adds the residual (when `useErrorFeedback` and the store
// is on), exchanges stats (tag step 0) and decides the fallback. scratch
// backs acc without error feedback (and bf16 residuals).
Status beginCall(Context& ctx, const AllreduceArgs& args, bool useErrorFeedback, double growth,
                 CallCounter* counter, device::DeviceArray<float>* scratch, CallState* state);
// Exact fp32 sum in rank order (avg: then divided by P in fp64, rounded once)
// through the code exchange with raw payloads (a reduce-scatter: its raw
// reduce-scatter, this rank's shard); clears the residual.
Status fallbackCall(Context& ctx, const AllreduceArgs& args, CallState* state, Workspace* ws);
// Stores out (fp32, device memory; outputCount values) into recvBuf unless it
// is recvBuf, and
// keeps the residual acc holds; syncs.
Status endCall(Context& ctx, const AllreduceArgs& args, CallState* state, const float* out);

// ---- Central side (References) --------------------------------------------
// The per-rank state a Reference keeps to mirror beginCall/endCall: one
// residual store per rank, created from the same configuration.
class CentralRanks {
 public:
  static Status create(int nranks, const param::Overrides& config,
                       std::unique_ptr<CentralRanks>* out);
  int size() const { return int(res_->stores.size()); }
  // Reference::shareResiduals.
  void share(std::shared_ptr<CentralResiduals> residuals) { res_ = std::move(residuals); }

  // acc[r] = fp32(inputs[r]) (+ residual r), stats, fallback; mirrors beginCall.
  Status begin(const std::vector<const void*>& inputs, const AllreduceArgs& args,
               bool useErrorFeedback, double growth, std::vector<std::vector<float>>* acc,
               std::vector<device::AbsStats>* stats, bool* fallback, uint64_t* call);
  // Exact rank-order sum, residuals cleared; mirrors fallbackCall.
  Status fallback(const std::vector<std::vector<float>>& acc, const AllreduceArgs& args,
                  bool useErrorFeedback, std::vector<float>* out);
  // residual r = acc[r] - contribution[r], then owner[r]'s values on its
  // range when owner is not empty (owner-side error feedback); mirrors endCall.
  Status end(const AllreduceArgs& args, bool useErrorFeedback,
             const std::vector<std::vector<float>>& acc,
             const std::vector<std::vector<float>>& contribution,
             const std::vector<OwnerResidual>& owner = {});

 private:
  std::shared_ptr<CentralResiduals> res_;
  std::vector<device::DeviceArray<float>> scratch_;  // per rank (CPU reference memory)
  std::vector<float*> accs_;                         // per rank: the store's accumulator
  CallCounter counter_;
};

// expected[i] = out[i] widened; tolerance[i] = tol(i).
void fillExpected(const std::vector<float>& out, double relTolerance,
                  std::vector<double>* expected, std::vector<double>* tolerance);

}  // namespace gradcomp::algo::quant
