// ncclNet_v6 .. v9: the net plugin tables of NCCL 2.13 - 2.25, as NCCL's
// src/include/plugin/net/net_v6.h .. net_v9.h lay them out (declared
// independently). gradcomp exports them so that those NCCL versions load
// libnccl-net-gradcomp.so at all: NCCL takes the CollNet tables only from the
// library whose net plugin it loaded. Differences:
//   v6 (2.13-2.18)  int sizes; connect/accept without device handles
//   v7 (2.19)       device handles; getDeviceMr, irecvConsumed
//   v8 (2.20-2.23)  regMr size_t; regIsGlobal
//   v9 (2.24-2.25)  isend/irecv size_t; makeVDevice
#pragma once

#include "plugin/net/net_props_v6_v9.h"

extern "C" {

typedef ncclNetDeviceHandle_v10_t ncclNetDeviceHandle_v7_t;  // same layout since v7

#define GC_NET_OLD_HEAD(propsT)                                      \
  const char* name;                                                  \
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);               \
  ncclResult_t (*devices)(int* ndev);                                \
  ncclResult_t (*getProperties)(int dev, propsT* props);             \
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);

#define GC_NET_OLD_CONNECT                                                                       \
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm,                             \
                          ncclNetDeviceHandle_v7_t** sendDevComm);                             \
  ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v7_t** recvDevComm);

#define GC_NET_OLD_DATA(regSizeT, sizeT)                                                          \
  ncclResult_t (*regMr)(void* comm, void* data, regSizeT size, int type, void** mhandle);      \
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,  \
                              int fd, void** mhandle);                                          \
  ncclResult_t (*deregMr)(void* comm, void* mhandle);                                          \
  ncclResult_t (*isend)(void* sendComm, void* data, sizeT size, int tag, void* mhandle,        \
                        void** request);                                                        \
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, sizeT* sizes, int* tags,           \
                        void** mhandles, void** request);                                       \
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,      \
                         void** request);                                                       \
  ncclResult_t (*test)(void* request, int* done, int* sizes);                                  \
  ncclResult_t (*closeSend)(void* sendComm);                                                   \
  ncclResult_t (*closeRecv)(void* recvComm);                                                   \
  ncclResult_t (*closeListen)(void* listenComm);

#define GC_NET_OLD_DEVICE_MR                                                    \
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle); \
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);

typedef struct {
  GC_NET_OLD_HEAD(ncclNetProperties_v6_t)
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm);
  GC_NET_OLD_DATA(int, int)
} ncclNet_v6_t;

typedef struct {
  GC_NET_OLD_HEAD(ncclNetProperties_v7_t)
  GC_NET_OLD_CONNECT
  GC_NET_OLD_DATA(int, int)
  GC_NET_OLD_DEVICE_MR
} ncclNet_v7_t;

typedef struct {
  GC_NET_OLD_HEAD(ncclNetProperties_v8_t)
  GC_NET_OLD_CONNECT
  GC_NET_OLD_DATA(size_t, int)
  GC_NET_OLD_DEVICE_MR
} ncclNet_v8_t;

typedef struct {
  GC_NET_OLD_HEAD(ncclNetProperties_v9_t)
  GC_NET_OLD_CONNECT
  GC_NET_OLD_DATA(size_t, size_t)
  GC_NET_OLD_DEVICE_MR
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v9_t* props);
} ncclNet_v9_t;

}  // extern "C"

static_assert(sizeof(ncclNet_v6_t) == 17 * 8 && sizeof(ncclNet_v7_t) == 19 * 8 &&
                  sizeof(ncclNet_v8_t) == 19 * 8 && sizeof(ncclNet_v9_t) == 20 * 8,
              "ncclNet_v6..v9 layouts");
