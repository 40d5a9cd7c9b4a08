// The tuner plugin's decisions (tuner_adapters.cc maps ncclTuner_v3 .. v6
// onto them). It exists to make NCCL use gradcomp's CollNet: NCCL estimates
// CollNet as one more algorithm and usually prefers its ring or tree, so the
// compressed path would rarely run.
//
// Steering: for an allreduce of at least GRADCOMP_MIN_BYTES, when this
// process's CollNet plugin is offered (collnet::offered(): init ran with a
// compressing configuration), the cheapest available CollNet entry
// (CollNetDirect or CollNetChain, SIMPLE protocol; NCCL marks them
// unavailable where its constraints exclude them) gets cost 0, so NCCL picks
// it. getChunkSize (v6) raises a steered call's chunk to kSteeredChunkBytes
// (fewer, larger chunks: less per-chunk overhead in the compressed
// allreduce; NCCL clamps it to its staging step). Everything else: no change.
//
// Every input is the same on every rank of a communicator (configuration,
// collective, size, NCCL's availability), so ranks choose alike, given the
// deployment rule that every rank has the same GRADCOMP_* settings.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gradcomp::tuner {

constexpr size_t kSteeredChunkBytes = size_t(512) << 10;

struct Context {
  bool steer = false;  // CollNet offered and compressing in this process
  uint64_t minBytes = 0;
  size_t nRanks = 0, nNodes = 0;
};

// Fills ctx from the CollNet policy; never fails (a tuner that cannot
// decide changes nothing).
void initContext(size_t nRanks, size_t nNodes, Context* ctx);

// table: float[numAlgo][numProto]. Returns the algorithm chosen (-1: none).
int steerCollInfo(const Context& ctx, int collType, size_t nBytes, float* table, int numAlgo,
                  int numProto);

void adjustChunkSize(const Context& ctx, int collType, size_t nBytes, int algo, int proto,
                     size_t* chunkSize);

}  // namespace gradcomp::tuner
