// Error-feedback keys for CollNet chunks.
//
// NCCL hands CollNet anonymous chunks: iallreduce gets pointers into NCCL's
// staging buffers (or registered user buffers), never a tensor identity. What
// is stable from one training step to the next is the call order: NCCL
// issues the same sequence of iallreduce calls on every head rank (it
// enforces one order per collComm), and the same sequence every step as long
// as the application's allreduces, NCCL's algorithm choice and its chunking
// repeat. So with GRADCOMP_COLLNET_EF_PERIOD = N (iallreduce calls per step)
// a chunk's key is (call order mod N, element count, dtype): computed from
// data every head rank shares, so every rank passes the same bufferKey to the
// algorithm (its per-key call counters and seeds stay in step).
//
// The buffer handle and offset guard it, on this rank only: the residual of a
// key is applied only to a chunk at the same position (registration base +
// offset) as the chunk that left it; otherwise the residual is cleared first
// (a restart), never added to other data. NCCL (2.28 coll_net.cc) puts the
// j-th chunk of a collective's channel at staging slot j mod 8 of that
// channel, counted from the start of each collective, so in a repeating step
// a chunk comes back to the same slot; a wrong N shows up as another slot or
// length and restarts instead of mixing tensors.
//
// N = 0 (the default): no error feedback; every chunk shares one key.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>

#include "common/dtype.h"

namespace gradcomp::collnet {

// What the guard found for a call's key (always New without error feedback).
enum class SlotState { New, Same, Moved };

class ChunkKeys {
 public:
  explicit ChunkKeys(uint64_t period) : period_(period) {}
  bool errorFeedback() const { return period_ > 0; }
  uint64_t period() const { return period_; }

  // The key of call number `callSeq` (0, 1, ... on this collComm). slotBase
  // and slotOffset: where the chunk's send data lies (this rank's view).
  // *state: Same, the key's last chunk was at this slot (its residual
  // applies); Moved, it was elsewhere (clear the residual first); New.
  uint64_t key(uint64_t callSeq, size_t count, DataType dtype, uintptr_t slotBase,
               size_t slotOffset, SlotState* state);

  // What every rank computes for a call (tests give it to the Reference).
  static uint64_t sharedKey(uint64_t period, uint64_t callSeq, size_t count, DataType dtype);

 private:
  struct Slot {
    uintptr_t base = 0;
    size_t offset = 0;
  };
  uint64_t period_;
  std::unordered_map<uint64_t, Slot> slots_;  // at most period x (distinct counts) entries
};

}  // namespace gradcomp::collnet
