// The two per-tensor keys of algorithm.h: what steers the schedule must be
// equal on every rank; what only shapes this rank's data may be rank-local.
#include <cstdint>

#include "algorithms/algorithm.h"

namespace gradcomp::algo {
namespace {

// splitmix64's finalizer.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t scheduleKey(const AllreduceArgs& a) {
  if (a.bufferKey) return a.bufferKey;
  // Shape keys live in their own half of the key space (top bit set), apart
  // from small user keys.
  // The collective is part of the shape (0 for allreduce, so allreduce keys
  // are what they always were): a reduce-scatter never shares an allreduce's
  // thresholds or call counts.
  const uint64_t shape = mix(mix(uint64_t(a.count)) ^ (uint64_t(a.coll) << 16 |
                                                       uint64_t(a.dtype) << 8 | uint64_t(a.op)));
  return shape | (uint64_t(1) << 63);
}

uint64_t residualKey(const AllreduceArgs& a) {
  if (a.bufferKey) return a.bufferKey;
  if (a.localKey) return a.localKey;
  // A reduce-scatter's residual covers its whole input, not the shard it
  // receives.
  const void* tensor = a.coll == Collective::ReduceScatter ? a.sendBuf : a.recvBuf;
  return uint64_t(reinterpret_cast<uintptr_t>(tensor));
}

}  // namespace gradcomp::algo
