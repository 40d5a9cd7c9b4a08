// ncclTunerPlugin_v3 .. v6: per-version adapters over tuner.h. The context
// NCCL keeps per communicator is a tuner::Context.
#include "plugin/net/plugin_glue.h"
#include "plugin/tuner/tuner.h"
#include "plugin/tuner/tuner_abi.h"

namespace gradcomp::tuner {
namespace {

using net::call;

ncclResult_t makeContext(size_t nRanks, size_t nNodes, ncclDebugLogger_t logger, void** ctx) {
  net::installLogger(logger);
  return call([&] {
    auto* c = new Context();
    initContext(nRanks, nNodes, c);
    *ctx = c;
    return Status::Ok();
  });
}

ncclResult_t initV3(size_t nRanks, size_t nNodes, ncclDebugLogger_t logger, void** ctx) {
  return makeContext(nRanks, nNodes, logger, ctx);
}
ncclResult_t initV5(void** ctx, uint64_t, size_t nRanks, size_t nNodes, ncclDebugLogger_t logger,
                    ncclNvlDomainInfo_v5_t*, ncclTunerConstants_v5_t*) {
  return makeContext(nRanks, nNodes, logger, ctx);
}

ncclResult_t getCollInfoV4(void* ctx, ncclFunc_t coll, size_t nBytes, int, float** table,
                           int numAlgo, int numProto, int, int*) {
  // nChannels untouched: NCCL keeps its own choice.
  return call([&] {
    (void)steerCollInfo(*static_cast<Context*>(ctx), coll, nBytes, reinterpret_cast<float*>(table),
                        numAlgo, numProto);
    return Status::Ok();
  });
}
ncclResult_t getCollInfoV3(void* ctx, ncclFunc_t coll, size_t nBytes, int pipeOps, float** table,
                           int numAlgo, int numProto, int* nChannels) {
  return getCollInfoV4(ctx, coll, nBytes, pipeOps, table, numAlgo, numProto, 0, nChannels);
}

ncclResult_t getChunkSizeV6(void* ctx, ncclFunc_t coll, size_t nBytes, int algo, int proto, int,
                            size_t* chunkSize) {
  adjustChunkSize(*static_cast<Context*>(ctx), coll, nBytes, algo, proto, chunkSize);
  return ncclSuccess;
}

ncclResult_t destroy(void* ctx) {
  delete static_cast<Context*>(ctx);
  return ncclSuccess;
}

}  // namespace
}  // namespace gradcomp::tuner

using namespace gradcomp::tuner;

#define GC_EXPORT extern "C" __attribute__((visibility("default")))

GC_EXPORT const ncclTuner_v6_t ncclTunerPlugin_v6 = {"gradcomp", initV5, getCollInfoV4, destroy,
                                                     getChunkSizeV6};
GC_EXPORT const ncclTuner_v5_t ncclTunerPlugin_v5 = {"gradcomp", initV5, getCollInfoV4, destroy};
GC_EXPORT const ncclTuner_v4_t ncclTunerPlugin_v4 = {"gradcomp", initV3, getCollInfoV4, destroy};
GC_EXPORT const ncclTuner_v3_t ncclTunerPlugin_v3 = {"gradcomp", initV3, getCollInfoV3, destroy};
