// Error-feedback residual store (one per communicator, shared by every
// compressing algorithm on it), in device memory. A residual belongs to one
// logical tensor, keyed by residualKey(AllreduceArgs). Frameworks rebuild
// buckets and reuse addresses (PyTorch DDP after iteration 1), so:
// - a key seen again with a different element count is retired and restarts
//   at zero (logged at INFO);
// - a key unused for GRADCOMP_EF_RETIRE_CALLS collectives is retired;
// - total residual memory is capped by GRADCOMP_EF_MAX_MB: acquiring a new
//   residual beyond the cap first retires least-recently-used keys, and fails
//   with InvalidConfig naming the variable if the tensor alone exceeds the cap.
// GRADCOMP_EF=off disables error feedback: algorithms then see no residual.
//
// The residual is the accumulator (device/backend.h, accumulate): with fp32
// residuals (the default) a call gets the residual itself, adds its gradient
// in place (acc = residual + g), compresses from it and leaves in it what it
// did not contribute, so no O(n) copy is ever made. With
// GRADCOMP_EF_DTYPE=bfloat16 (half the memory) the call gets a scratch fp32
// accumulator loaded from the bf16 residual, and end() rounds it back.
//
// Usage per call:  begin (acc = residual) -> accumulate(acc += g) ->
//   compress, zeroing / subtracting what was contributed -> end.
// A call that falls back to the dense sum (a non-finite value) clears the
// residual: it held r + g with the NaN/Inf in it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <unordered_map>
#include <vector>

#include "common/param.h"
#include "common/status.h"
#include "device/arrays.h"

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
  // else nullptr (the call runs without error feedback).
  static Status forCall(ErrorFeedbackStore* store, const param::Overrides& config,
                        ErrorFeedbackStore** out);

  bool enabled() const { return enabled_; }
  // The fp32 accumulator of `key` for this call (count elements, device
  // memory of dev), holding the residual (zero when new). *fresh: the
  // residual is new (all zero), so the caller may load instead of add.
  // `scratch` backs it in bf16 mode. `callSeq` marks the key used.
  Status begin(device::Backend& dev, uint64_t key, size_t count, uint64_t callSeq,
               device::DeviceArray<float>* scratch, float** acc, bool* fresh);
  // acc (from begin) holds the new residual: stores it (bf16 mode; a no-op
  // for fp32, where acc is the residual).
  Status end(device::Backend& dev, uint64_t key, const float* acc);
  // residual(key) = 0 (the non-finite fallback).
  Status clear(device::Backend& dev, uint64_t key);
  // Retire keys unused since callSeq - GRADCOMP_EF_RETIRE_CALLS.
  void retireStale(uint64_t callSeq);

  size_t bytesUsed() const { return bytesUsed_; }
  size_t keyCount() const { return entries_.size(); }
  // out[0..count) = the residual of `key` as fp32 (zeros when absent or of
  // another size), by primitives of the residual's backend; out must be
  // host memory that backend accepts. Syncs. For tests and tools.
  Status readResidual(uint64_t key, size_t count, float* out) const;
  // L2 norm of a residual (stats), when its backend lets the host read it
  // (device/backend.h hostAccessible: the host executor); 0 when absent, -1
  // when unknown (device memory).
  double residualNorm(uint64_t key) const;

 private:
  struct Entry {
    size_t count = 0;
    uint64_t lastUsed = 0;
    device::DeviceArray<float> f32;      // fp32 mode
    device::DeviceArray<uint16_t> bf16;  // bf16 mode
    std::list<uint64_t>::iterator lru;
  };
  Status acquire(device::Backend& dev, uint64_t key, size_t count, uint64_t callSeq, Entry** out,
                 bool* fresh);
  void retire(uint64_t key);
  size_t entryBytes(size_t count) const { return count * (bf16_ ? 2 : 4); }

  bool enabled_ = true;
  bool bf16_ = false;
  size_t capBytes_ = 0;
  uint64_t retireCalls_ = 0;
  size_t bytesUsed_ = 0;
  std::unordered_map<uint64_t, Entry> entries_;
  std::list<uint64_t> lru_;  // front = most recent
};

// Every simulated rank's residual store of a Reference (CPU reference
// memory). A reference owns one; a selector's Reference (auto) gives one to
// all its candidates' references, since the candidates share the
// communicator's store (Reference::shareResiduals).
struct CentralResiduals {
  std::vector<std::unique_ptr<ErrorFeedbackStore>> stores;  // [rank]
  // Set by the selector's reference: uses are then marked (and stale
  // residuals retired) by its call index `callSeq`, one clock for every
  // candidate, instead of each reference's own count.
  bool shared = false;
  uint64_t callSeq = 0;
  static Status create(int nranks, const param::Overrides& config,
                       std::shared_ptr<CentralResiduals>* out);
};

}  // namespace gradcomp::algo
