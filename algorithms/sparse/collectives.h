// Small collectives used by the sparse schedules. Tags are
// transport::makeTag(ctx.callSeq, step + round); each helper documents the
// step range it uses so phases of one call never share a tag.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/shared/requests.h"
#include "device/arrays.h"

namespace gradcomp::algo::sparse {

// Transfers go through the shared request set (algorithms/shared/requests.h).
using shared::RequestSet;

// True on every rank when `mine` is true on any rank. Dissemination over
// ceil(log2 P) rounds of one word; steps [step, step + 32).
Status anyRank(Context& ctx, uint64_t step, bool mine, bool* any);

// Allgather of byte blocks (host memory of ctx.dev): (*blocks)[rank] holds
// this rank's block on entry, every block on return. caps[r] bounds block
// r's size (checked on receipt). Syncs first, so a block written by
// primitives is complete before it is sent. Recursive doubling when P is a
// power of two, a ring otherwise. Steps [step, step + 64).
Status allgatherBlocks(Context& ctx, uint64_t step, const std::vector<size_t>& caps,
                       std::vector<device::HostArray<uint8_t>>* blocks);

// Broadcast of a byte block (host memory of ctx.dev) from `root` along a
// binomial tree: on entry the root's *block holds the data, on return every
// rank's does (at most `cap` bytes; a longer one is a RemoteError). log2(P)
// rounds; a rank forwards what it received. Syncs first (as allgatherBlocks).
// Steps [step, step + 64).
Status broadcastBlock(Context& ctx, uint64_t step, int root, size_t cap,
                      device::HostArray<uint8_t>* block);

// Allgather of `mine.size()` words (the same size on every rank) into
// all[r * size + i]. Steps [step, step + 64).
Status allgatherWords(Context& ctx, uint64_t step, const std::vector<uint64_t>& mine,
                      std::vector<uint64_t>* all);

// In-place allreduce of `words` (the same size on every rank) by wrapping
// uint64 addition, so the result is exact and independent of the order of
// summation. Reduce-scatter by recursive halving then allgather by recursive
// doubling (Rabenseifner) over the largest power of two P2 <= P; ranks
// r >= P2 first fold their words into rank r - P2 and get the result back from
// it. Per rank about 2 x 8 x size bytes in 2 log2 P2 (+2) messages.
// Steps [step, step + 64).
Status allreduceSumWords(Context& ctx, uint64_t step, std::vector<uint64_t>* words);

}  // namespace gradcomp::algo::sparse
