// Agreement of small vectors across the ranks of a transport: the only way
// measured values enter GRADCOMP_ALGO=auto's model and choices, so every rank
// holds the same numbers (never rank-local data alone).
#pragma once

#include <cstdint>
#include <vector>

#include "algorithms/algorithm.h"

namespace gradcomp::algo::autosel {

// Tag sequences of auto's own exchanges: the call's sequence number plus a
// band, so they never share tags with a schedule's messages in flight.
constexpr uint64_t kAgreementBand = uint64_t(1) << 23;

// Collective: every rank passes `mine` (the same length everywhere); out[r]
// is rank r's vector, bit for bit, on every rank. One dense fp64 sum over
// P * K slots, each rank filling its own and zeros elsewhere (x + 0 is exact).
// `dense` is the dense algorithm instance to run it with; buffers live in
// ctx.dev's memory; tags from ctx.callSeq.
Status allgatherWords(Context& ctx, Algorithm& dense, const std::vector<double>& mine,
                      std::vector<std::vector<double>>* out);

// allgatherWords, then the slot-wise max (auto_model.h slotMax).
Status agreeMax(Context& ctx, Algorithm& dense, const std::vector<double>& mine,
                std::vector<double>* out);

}  // namespace gradcomp::algo::autosel
