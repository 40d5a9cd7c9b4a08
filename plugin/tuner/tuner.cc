#include "plugin/tuner/tuner.h"

#include <algorithm>

#include "common/log.h"
#include "plugin/collnet/collnet.h"
#include "plugin/collnet/collnet_policy.h"
#include "plugin/tuner/tuner_abi.h"

namespace gradcomp::tuner {

void initContext(size_t nRanks, size_t nNodes, Context* ctx) {
  const collnet::CollNetPolicy& p = collnet::collNetPolicy();
  ctx->nRanks = nRanks;
  ctx->nNodes = nNodes;
  ctx->minBytes = p.minBytes;
  ctx->steer = p.compressing && collnet::offered();
  GC_INFO(INIT, "tuner: %d ranks on %d nodes: %s", int(nRanks), int(nNodes),
          ctx->steer ? "allreduces of GRADCOMP_MIN_BYTES and more go to CollNet when NCCL offers it"
                     : "no changes (gradcomp's CollNet is not offered in this process)");
}

int steerCollInfo(const Context& ctx, int collType, size_t nBytes, float* table, int numAlgo,
                  int numProto) {
  if (!ctx.steer || collType != ncclFuncAllReduce || nBytes < ctx.minBytes) return -1;
  if (numProto <= NCCL_PROTO_SIMPLE) return -1;
  int best = -1;
  for (int a : {NCCL_ALGO_COLLNET_DIRECT, NCCL_ALGO_COLLNET_CHAIN}) {
    if (a >= numAlgo) continue;
    float cost = table[a * numProto + NCCL_PROTO_SIMPLE];
    if (cost < 0) continue;  // NCCL_ALGO_PROTO_IGNORE: not available for this call
    if (best < 0 || cost < table[best * numProto + NCCL_PROTO_SIMPLE]) best = a;
  }
  if (best < 0) return -1;
  table[best * numProto + NCCL_PROTO_SIMPLE] = 0.0f;
  GC_TRACE(PLUGIN, "tuner: allreduce of %zu bytes -> %s", nBytes,
           best == NCCL_ALGO_COLLNET_DIRECT ? "CollNetDirect" : "CollNetChain");
  return best;
}

void adjustChunkSize(const Context& ctx, int collType, size_t nBytes, int algo, int proto,
                     size_t* chunkSize) {
  if (!ctx.steer || collType != ncclFuncAllReduce || nBytes < ctx.minBytes) return;
  if (proto != NCCL_PROTO_SIMPLE ||
      (algo != NCCL_ALGO_COLLNET_DIRECT && algo != NCCL_ALGO_COLLNET_CHAIN))
    return;
  *chunkSize = std::max(*chunkSize, kSteeredChunkBytes);
}

}  // namespace gradcomp::tuner
