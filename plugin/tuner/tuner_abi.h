// ncclTuner_v3 .. v6: the tuner plugin tables NCCL looks up as
// ncclTunerPlugin_vN, in NCCL_TUNER_PLUGIN's library or, when that is unset,
// in the net plugin library (NCCL 2.22 .. 2.30). Layouts and values as in
// NCCL's src/include/plugin/tuner/tuner_vN.h and nccl_tuner.h, declared
// independently. Versions:
//   v3 (2.22-2.23)  init(nRanks, nNodes, logger, &ctx); getCollInfo; destroy
//   v4 (2.24-2.27)  getCollInfo gains regBuff
//   v5 (2.28-2.29)  init(&ctx, commId, nRanks, nNodes, logger, nvlDomainInfo,
//                   constants); destroy becomes finalize
//   v6 (2.30)       getChunkSize (optional: NULL keeps NCCL's)
// collCostTable is a float[numAlgo][numProto] table of estimated times
// (NCCL_ALGO_PROTO_IGNORE where unavailable); NCCL picks the smallest.
#pragma once

#include "plugin/net/net_common.h"

#define NCCL_ALGO_COLLNET_DIRECT 2
#define NCCL_ALGO_COLLNET_CHAIN 3
#define NCCL_PROTO_SIMPLE 2
#define NCCL_ALGO_PROTO_IGNORE -1.0

extern "C" {

typedef enum {
  ncclFuncBroadcast = 0,
  ncclFuncReduce = 1,
  ncclFuncAllGather = 2,
  ncclFuncReduceScatter = 3,
  ncclFuncAllReduce = 4,
  ncclFuncSendRecv = 5,
  ncclFuncSend = 6,
  ncclFuncRecv = 7,  // later NCCL versions add more; only AllReduce is compared here
} ncclFunc_t;

// v5/v6 init arguments, passed by pointer; gradcomp's tuner reads neither.
typedef struct {
  int nNvlDomains;
  int minRanksPerNvlDomain;
  int maxRanksPerNvlDomain;
} ncclNvlDomainInfo_v5_t;
typedef struct ncclTunerConstants_v5 ncclTunerConstants_v5_t;  // opaque here

typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** context);
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                              float** collCostTable, int numAlgo, int numProto, int* nChannels);
  ncclResult_t (*destroy)(void* context);
} ncclTuner_v3_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** context);
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                              float** collCostTable, int numAlgo, int numProto, int regBuff,
                              int* nChannels);
  ncclResult_t (*destroy)(void* context);
} ncclTuner_v4_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, size_t nRanks, size_t nNodes,
                       ncclDebugLogger_t logFunction, ncclNvlDomainInfo_v5_t* nvlDomainInfo,
                       ncclTunerConstants_v5_t* constants);
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                              float** collCostTable, int numAlgo, int numProto, int regBuff,
                              int* nChannels);
  ncclResult_t (*finalize)(void* context);
} ncclTuner_v5_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, size_t nRanks, size_t nNodes,
                       ncclDebugLogger_t logFunction, ncclNvlDomainInfo_v5_t* nvlDomainInfo,
                       ncclTunerConstants_v5_t* constants);
  ncclResult_t (*getCollInfo)(void* context, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                              float** collCostTable, int numAlgo, int numProto, int regBuff,
                              int* nChannels);
  ncclResult_t (*finalize)(void* context);
  ncclResult_t (*getChunkSize)(void* context, ncclFunc_t collType, size_t nBytes, int algo,
                               int proto, int nChannels, size_t* chunkSize);
} ncclTuner_v6_t;

}  // extern "C"

static_assert(sizeof(ncclTuner_v3_t) == 4 * 8 && sizeof(ncclTuner_v6_t) == 5 * 8, "tuner layouts");
