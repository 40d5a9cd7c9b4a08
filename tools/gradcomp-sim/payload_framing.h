// Which bytes of a message do not grow with the tensor (SimTransport's
// payload scaling, sim_transport.h): gradcomp-sim --gpu-model runs a count
// n / s and prices the messages of count n, so a message's payload is
// charged s times, its framing once.
//
// Framing, recognized from the bytes themselves (no algorithm reports it):
// - a message of at most kControlBytes bytes: control words (flags, counts,
//   call stats), all framing;
// - a sparse wire message (algorithms/sparse/wire_format.h: magic "GCSP",
//   version 1, 40 + payload bytes as its header says): its 40-byte header;
// - a block bundle of the recursive-doubling allgather
//   (algorithms/sparse/collectives.cc: d = 1, 2, 4, ... u64 block lengths
//   that add up to the rest of the message, then the blocks, each a wire
//   message or control words): the lengths plus the framing of each block.
// Anything else (codes, dense values) is payload. A message whose payload
// happens to look like framing is priced wrongly; with the magic and the
// exact length sums that needs a coincidence of 64-bit words.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gradcomp::sim {

constexpr size_t kControlBytes = 16;

size_t payloadFraming(const uint8_t* data, size_t bytes);

}  // namespace gradcomp::sim
