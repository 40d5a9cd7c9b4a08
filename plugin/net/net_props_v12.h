// Device properties of the v12 plugin ABI (NCCL 2.30), as NCCL's
// src/include/plugin/net/net_v12.h lays them out (declared independently):
// up to 8 physical devices per virtual NIC, and rail/plane ids at the end.
// CollNet v12 returns these.
#pragma once

#include "plugin/net/net_common.h"

#define NCCL_NET_MAX_DEVS_PER_NIC_V12 8

extern "C" {

typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC_V12];
} ncclNetVDeviceProps_v12_t;

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
  ncclNetVDeviceProps_v12_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
  int16_t railId;
  int16_t planeId;
} ncclNetProperties_v12_t;

}  // extern "C"

static_assert(offsetof(ncclNetProperties_v12_t, maxP2pBytes) == 104, "ncclNetProperties_v12_t layout");
static_assert(sizeof(ncclNetProperties_v12_t) == 128, "ncclNetProperties_v12_t layout");
