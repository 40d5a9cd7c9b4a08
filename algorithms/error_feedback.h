// Error-feedback residual store (one per communicator, shared by every
// compressing algorithm on it). A residual belongs to one logical tensor,
// keyed by AllreduceArgs::bufferKey. Frameworks rebuild buckets and reuse
// addresses (PyTorch DDP after iteration 1), so:
// - a key seen again with a different element count is retired and restarts
//   at zero (logged at INFO);
// - a key unused for GRADCOMP_EF_RETIRE_CALLS collectives is retired;
// - total residual memory is capped by GRADCOMP_EF_MAX_MB: acquiring a new
//   residual beyond the cap first retires least-recently-used keys, and fails
//   with InvalidConfig naming the variable if the tensor alone exceeds the cap.
// Residuals are fp32, or bf16 with GRADCOMP_EF_DTYPE=bfloat16 (half the memory;
// the store converts on load/save). GRADCOMP_EF=off disables error feedback:
// algorithms then see no residual (has() == false).
//
// Usage per call:  acc = residual + g  (load), compress/communicate,
//                  residual = acc - contribution  (store).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

#include "common/param.h"
#include "common/status.h"

namespace gradcomp::algo {

class ErrorFeedbackStore {
 public:
  // Reads GRADCOMP_EF, GRADCOMP_EF_DTYPE, GRADCOMP_EF_MAX_MB,
  // GRADCOMP_EF_RETIRE_CALLS through `config`.
  static Status create(const param::Overrides& config, std::unique_ptr<ErrorFeedbackStore>* out);
  // A communicator's store when each call brings its own parameters (the
  // public C API: gcAlgoConfigSet, bench/train --param): GRADCOMP_EF_DTYPE,
  // _MAX_MB and _RETIRE_CALLS from the registry, always enabled; whether a
  // call uses it is decided per call by forCall().
  static Status createForCommunicator(std::unique_ptr<ErrorFeedbackStore>* out);
  // The store a call with algorithm parameters `config` uses: `store` when
  // GRADCOMP_EF is on for the call (the run's override, else the registry),
  // else nullptr (the call runs without error feedback). This is where a
  // per-run EF=off/on wins over the value the store was created with.
  static Status forCall(ErrorFeedbackStore* store, const param::Overrides& config,
                        ErrorFeedbackStore** out);

  bool enabled() const { return enabled_; }
  // acc[i] = residual[i] + acc[i] for the residual of `key` (zero when new).
  // `callSeq` marks the key used; no-op when disabled.
  Status addResidual(uint64_t key, uint64_t callSeq, float* acc, size_t count);
  // residual[i] = acc[i] - contribution[i] (contribution may be nullptr: 0).
  Status storeResidual(uint64_t key, const float* acc, const float* contribution, size_t count);
  // Retire keys unused since callSeq - GRADCOMP_EF_RETIRE_CALLS.
  void retireStale(uint64_t callSeq);

  size_t bytesUsed() const { return bytesUsed_; }
  size_t keyCount() const { return entries_.size(); }
  // L2 norm of a residual (stats); 0 when absent.
  double residualNorm(uint64_t key) const;

 private:
  struct Entry {
    size_t count = 0;
    uint64_t lastUsed = 0;
    std::vector<float> f32;      // fp32 mode
    std::vector<uint16_t> bf16;  // bf16 mode
    std::list<uint64_t>::iterator lru;
  };
  Status acquire(uint64_t key, size_t count, uint64_t callSeq, Entry** out);
  void retire(uint64_t key);

  bool enabled_ = true;
  bool bf16_ = false;
  size_t capBytes_ = 0;
  uint64_t retireCalls_ = 0;
  size_t bytesUsed_ = 0;
  std::unordered_map<uint64_t, Entry> entries_;
  std::list<uint64_t> lru_;  // front = most recent
};

}  // namespace gradcomp::algo
