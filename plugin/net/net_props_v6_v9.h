// Device properties of the older plugin ABIs, as NCCL's
// src/include/plugin/net/net_v6.h .. net_v9.h lay them out (declared
// independently; the static_asserts pin the layouts on LP64). The CollNet
// tables v6..v9 return these; so do the net tables of the same versions.
#pragma once

#include "plugin/net/net_common.h"

extern "C" {

// v6: NCCL 2.13 - 2.18 (CollNet v6 is still accepted by 2.30).
typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int speed;  // Mbps
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
} ncclNetProperties_v6_t;

// v7 (2.19): adds the offload type and version.
typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
} ncclNetProperties_v7_t;

// v8 (2.20 - 2.23): adds regIsGlobal after ptrSupport.
typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
} ncclNetProperties_v8_t;

// v9 (2.24 - 2.25): forceFlush, virtual-device properties and size limits;
// the same layout as v10 (net_v10.h).
typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC];
} ncclNetVDeviceProps_v9_t;

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v9_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
} ncclNetProperties_v9_t;

}  // extern "C"

static_assert(sizeof(ncclNetProperties_v6_t) == 48, "ncclNetProperties_v6_t layout");
static_assert(sizeof(ncclNetProperties_v7_t) == 56, "ncclNetProperties_v7_t layout");
static_assert(sizeof(ncclNetProperties_v8_t) == 64, "ncclNetProperties_v8_t layout");
static_assert(offsetof(ncclNetProperties_v9_t, maxCollBytes) == 96, "ncclNetProperties_v9_t layout");
