#include "plugin/collnet/chunk_key.h"

namespace gradcomp::collnet {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t ChunkKeys::sharedKey(uint64_t period, uint64_t callSeq, size_t count, DataType dtype) {
  if (period == 0) return 1;  // no error feedback: one key, bounded per-key state
  uint64_t k = mix(mix(mix(callSeq % period) ^ uint64_t(count)) ^ uint64_t(dtype));
  return k == 0 ? 1 : k;  // bufferKey 0 means "use the address"
}

uint64_t ChunkKeys::key(uint64_t callSeq, size_t count, DataType dtype, uintptr_t slotBase,
                        size_t slotOffset, SlotState* state) {
  const uint64_t k = sharedKey(period_, callSeq, count, dtype);
  *state = SlotState::New;
  if (period_ == 0) return k;
  auto [it, fresh] = slots_.try_emplace(k);
  if (!fresh)
    *state = it->second.base == slotBase && it->second.offset == slotOffset ? SlotState::Same
                                                                             : SlotState::Moved;
  it->second.base = slotBase;
  it->second.offset = slotOffset;
  return k;
}

}  // namespace gradcomp::collnet
