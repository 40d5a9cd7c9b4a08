// ncclCollNet_v6 .. v12: the CollNet plugin tables NCCL looks up as
// ncclCollNetPlugin_vN in the net plugin library (NCCL 2.13 .. 2.30). Layouts
// as in NCCL's src/include/plugin/net/net_vN.h, declared independently.
// Differences between versions:
//   v6  (2.13-2.18)  iallreduce count int, regMr size int
//   v7  (2.19)       properties gain the offload type (v7 props)
//   v8  (2.20-2.23)  regMr size_t; iallgather/ireducescatter (NULL allowed)
//   v9  (2.24-2.25)  iallreduce count size_t; makeVDevice (NULL allowed)
//   v10 (2.26-2.27)  v10 properties (same layout as v9)
//   v11 (2.28-2.29)  init per communicator (context, commId); listen takes
//                    the context; finalize(ctx)
//   v12 (2.30)       v12 properties (8 devices per NIC, rail/plane ids)
// Every version shares connect(handles[], nranks, rank, listenComm,
// collComm), reduceSupport, iflush (int size) and test (int* size).
#pragma once

#include "plugin/net/net_props_v12.h"
#include "plugin/net/net_props_v6_v9.h"
#include "plugin/net/net_v10.h"
#include "plugin/net/net_v11.h"

extern "C" {

typedef struct {
  void* mhandle;
  void* address;
  uint32_t size;
} ncclNetSGE_v8_t;

typedef struct {
  void* mhandle;
  void* address;
  size_t size;
} ncclNetSGE_v9_t;  // v10, v11 and v12 have the same layout

// Members every version has, in this order, after its own init/devices/
// getProperties/listen (NCCL_COLLNET_COMMON_* below keeps the tables short).
#define GC_COLLNET_CONNECT_TO_DEREG(regSizeT)                                                     \
  ncclResult_t (*connect)(void* handles[], int nranks, int rank, void* listenComm,             \
                          void** collComm);                                                      \
  ncclResult_t (*reduceSupport)(ncclDataType_t dataType, ncclRedOp_t redOp, int* supported);  \
  ncclResult_t (*regMr)(void* collComm, void* data, regSizeT size, int type, void** mhandle);  \
  ncclResult_t (*regMrDmaBuf)(void* collComm, void* data, size_t size, int type,               \
                              uint64_t offset, int fd, void** mhandle);                         \
  ncclResult_t (*deregMr)(void* collComm, void* mhandle);

#define GC_COLLNET_IALLREDUCE(countT)                                                             \
  ncclResult_t (*iallreduce)(void* collComm, void* sendData, void* recvData, countT count,      \
                             ncclDataType_t dataType, ncclRedOp_t redOp, void* sendMhandle,     \
                             void* recvMhandle, void** request);

#define GC_COLLNET_GATHER_SCATTER(sgeT)                                                           \
  ncclResult_t (*iallgather)(void* collComm, void* sendData, int nRecvParts, sgeT* recvParts,  \
                             size_t bytesPerRank, size_t windowOffset, size_t windowBytes,      \
                             void* sendMhandle, void** request);                                \
  ncclResult_t (*ireducescatter)(void* collComm, int nSendParts, sgeT* sendParts,               \
                                 void* recvData, size_t bytesPerRank, size_t windowOffset,      \
                                 size_t windowBytes, ncclDataType_t dataType,                   \
                                 ncclRedOp_t redOp, void* recvMhandle, void** request);

#define GC_COLLNET_FLUSH_TO_CLOSE                                                                 \
  ncclResult_t (*iflush)(void* collComm, void* data, int size, void* mhandle, void** request); \
  ncclResult_t (*test)(void* request, int* done, int* size);                                   \
  ncclResult_t (*closeColl)(void* collComm);                                                   \
  ncclResult_t (*closeListen)(void* listenComm);

#define GC_COLLNET_V6_HEAD(propsT)                                    \
  const char* name;                                                   \
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);                \
  ncclResult_t (*devices)(int* ndev);                                 \
  ncclResult_t (*getProperties)(int dev, propsT* props);              \
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);

#define GC_COLLNET_V11_HEAD(propsT)                                                         \
  const char* name;                                                                        \
  ncclResult_t (*init)(void** ctx, uint64_t commId, ncclDebugLogger_t logFunction);       \
  ncclResult_t (*devices)(int* ndev);                                                      \
  ncclResult_t (*getProperties)(int dev, propsT* props);                                   \
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);

typedef struct {
  GC_COLLNET_V6_HEAD(ncclNetProperties_v6_t)
  GC_COLLNET_CONNECT_TO_DEREG(int)
  GC_COLLNET_IALLREDUCE(int)
  GC_COLLNET_FLUSH_TO_CLOSE
} ncclCollNet_v6_t;

typedef struct {
  GC_COLLNET_V6_HEAD(ncclNetProperties_v7_t)
  GC_COLLNET_CONNECT_TO_DEREG(int)
  GC_COLLNET_IALLREDUCE(int)
  GC_COLLNET_FLUSH_TO_CLOSE
} ncclCollNet_v7_t;

typedef struct {
  GC_COLLNET_V6_HEAD(ncclNetProperties_v8_t)
  GC_COLLNET_CONNECT_TO_DEREG(size_t)
  GC_COLLNET_IALLREDUCE(int)
  GC_COLLNET_GATHER_SCATTER(ncclNetSGE_v8_t)
  GC_COLLNET_FLUSH_TO_CLOSE
} ncclCollNet_v8_t;

typedef struct {
  GC_COLLNET_V6_HEAD(ncclNetProperties_v9_t)
  GC_COLLNET_CONNECT_TO_DEREG(size_t)
  GC_COLLNET_IALLREDUCE(size_t)
  GC_COLLNET_GATHER_SCATTER(ncclNetSGE_v9_t)
  GC_COLLNET_FLUSH_TO_CLOSE
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v9_t* props);
} ncclCollNet_v9_t;

typedef struct {
  GC_COLLNET_V6_HEAD(ncclNetProperties_v10_t)
  GC_COLLNET_CONNECT_TO_DEREG(size_t)
  GC_COLLNET_IALLREDUCE(size_t)
  GC_COLLNET_GATHER_SCATTER(ncclNetSGE_v9_t)
  GC_COLLNET_FLUSH_TO_CLOSE
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v10_t* props);
} ncclCollNet_v10_t;

typedef struct {
  GC_COLLNET_V11_HEAD(ncclNetProperties_v11_t)
  GC_COLLNET_CONNECT_TO_DEREG(size_t)
  GC_COLLNET_IALLREDUCE(size_t)
  GC_COLLNET_GATHER_SCATTER(ncclNetSGE_v9_t)
  GC_COLLNET_FLUSH_TO_CLOSE
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v11_t* props);
  ncclResult_t (*finalize)(void* ctx);
} ncclCollNet_v11_t;

typedef struct {
  GC_COLLNET_V11_HEAD(ncclNetProperties_v12_t)
  GC_COLLNET_CONNECT_TO_DEREG(size_t)
  GC_COLLNET_IALLREDUCE(size_t)
  GC_COLLNET_GATHER_SCATTER(ncclNetSGE_v9_t)
  GC_COLLNET_FLUSH_TO_CLOSE
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v12_t* props);
  ncclResult_t (*finalize)(void* ctx);
} ncclCollNet_v12_t;

}  // extern "C"

// 8-byte members only: the member counts pin the layouts.
static_assert(sizeof(ncclCollNet_v6_t) == 15 * 8, "ncclCollNet_v6_t layout");
static_assert(sizeof(ncclCollNet_v7_t) == 15 * 8, "ncclCollNet_v7_t layout");
static_assert(sizeof(ncclCollNet_v8_t) == 17 * 8, "ncclCollNet_v8_t layout");
static_assert(sizeof(ncclCollNet_v9_t) == 18 * 8, "ncclCollNet_v9_t layout");
static_assert(sizeof(ncclCollNet_v10_t) == 18 * 8, "ncclCollNet_v10_t layout");
static_assert(sizeof(ncclCollNet_v11_t) == 19 * 8, "ncclCollNet_v11_t layout");
static_assert(sizeof(ncclCollNet_v12_t) == 19 * 8, "ncclCollNet_v12_t layout");
static_assert(offsetof(ncclCollNet_v11_t, iallreduce) == offsetof(ncclCollNet_v9_t, iallreduce),
              "iallreduce keeps its slot");
