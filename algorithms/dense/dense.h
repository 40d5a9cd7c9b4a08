// Dense (uncompressed) allreduce schedules, shared by dense.cc. Both work in
// place on `buf` (count elements of dtype t, in the backend's device memory)
// and leave the identical sum on every rank; the caller copies send -> recv
// before and divides for ncclAvg after.
//
// Data path (device/backend.h): what a rank sends is copied device -> host
// into a staging buffer (host memory the transport sends from), what it
// receives lands in host memory and is added into buf by a primitive that
// reads it there (host -> device). The host touches only staging buffers and
// syncs once per step, before it sends what the step's primitives produced.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "algorithms/algorithm.h"
#include "device/arrays.h"

namespace gradcomp::algo::dense {

// Ring reduce-scatter + allgather: 2(P-1) steps, each moving one chunk of
// about count/P elements per rank (uneven chunks when P does not divide count;
// empty chunks send nothing). Each chunk transfer is split into a few segments
// so the add of one segment overlaps the arrival of the next.
// Staging buffers an algorithm object keeps across calls (grown, never shrunk).
struct Staging {
  device::HostArray<char> send, recv;
  device::DeviceArray<char> partial;  // reduce-scatter: one chunk's running sum
  void bind(device::Backend& dev) { send.bind(dev), recv.bind(dev), partial.bind(dev); }
};

// stage: recv grown to two chunks (double-buffered reduce-scatter), send to
// the whole buffer (the allgather forwards from host memory).
Status ringAllreduce(Context& ctx, void* buf, size_t count, DataType t, Staging* stage);

// Ring reduce-scatter in NCCL's layout (algorithm.h): P-1 steps; at step s
// rank r sends its running sum of chunk (r - s - 1) to r+1 and receives that
// of chunk (r - s - 2) from r-1, adding its own input; the last step's sum,
// of chunk r, lands in recv. send (count = recvCount * P elements) is only
// read, so recv may be NCCL's in-place slot (send + r * recvCount). Every
// element takes P-1 additions, as in the allreduce's ring. stage: send and
// recv grown to one chunk, partial to one chunk (device).
Status ringReduceScatter(Context& ctx, const void* send, void* recv, size_t recvCount, DataType t,
                         Staging* stage);

// Recursive doubling over the largest power of two P2 <= P: the first
// 2(P - P2) ranks fold pairwise first (even rank hands its data to the odd
// one and gets the result back at the end), so any P works. log2(P2) full-
// buffer exchanges: for small buffers, where latency dominates.
// stage: both grown to the whole buffer.
Status recursiveDoublingAllreduce(Context& ctx, void* buf, size_t count, DataType t,
                                  Staging* stage);

// Element range [begin, begin + size) of chunk c when count elements are split
// over P chunks: the first count % P chunks get one extra element.
struct Chunk {
  size_t begin, size;
};
inline Chunk chunkOf(size_t count, int P, int c) {
  const size_t base = count / size_t(P), extra = count % size_t(P), uc = size_t(c);
  return {uc * base + (uc < extra ? uc : extra), base + (uc < extra ? 1 : 0)};
}

// Transfers go through algorithms/shared/requests.h (shared::RequestSet).

}  // namespace gradcomp::algo::dense
