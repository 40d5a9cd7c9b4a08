// The few NCCL ABI types the interposer, the net plugin, the shim and the test
// double need, declared here so that nothing outside device/cuda includes CUDA
// headers (nccl.h pulls in cuda_runtime.h). Layouts and values are those of
// NCCL 2.28 (nccl.h, ncclConfig_v22800); static_asserts below pin the sizes.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

typedef struct ncclComm* ncclComm_t;
typedef struct CUstream_st* cudaStream_t;  // same type as CUstream

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

// ncclConfig_t as of NCCL 2.28 (version 22800). Fields past `version` may be
// read only when config->version says they exist (commName: >= 22700).
typedef struct {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
  int trafficClass;
  const char* commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
} ncclConfig_t;

#define GC_NCCL_CONFIG_COMMNAME_VERSION 22700

typedef enum {
  ncclInt8 = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclFloat32 = 7,
  ncclFloat64 = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
} ncclDataType_t;

// Values >= ncclNumOps (5) are user-created ops (PreMulSum), never eligible.
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;

#ifdef __cplusplus
}
static_assert(sizeof(ncclUniqueId) == 128, "ncclUniqueId is 128 bytes");
static_assert(offsetof(ncclConfig_t, commName) == 48, "ncclConfig_v22800 layout");
static_assert(sizeof(ncclConfig_t) == 80, "ncclConfig_v22800 size");
#endif
