// Fills any version's device properties (ncclNetProperties_v6_t .. v12_t)
// from the version-neutral net::Properties; the net and CollNet adapters of
// every version use it. NCCL keeps the name and pciPath pointers for the
// life of the process: they point into a string pool that is never freed.
#pragma once

#include <cstring>
#include <string>
#include <type_traits>

#include "plugin/net/net_props_v12.h"
#include "plugin/net/net_props_v6_v9.h"
#include "plugin/net/net_v10.h"
#include "plugin/net/net_v11.h"
#include "plugin/net/ucx_net.h"

namespace gradcomp::net {

const char* keepString(const std::string& s);

template <typename Props>
void fillProperties(const Properties& p, int dev, Props* props) {
  constexpr bool v6 = std::is_same_v<Props, ncclNetProperties_v6_t>;
  constexpr bool v7 = std::is_same_v<Props, ncclNetProperties_v7_t>;
  constexpr bool v8 = std::is_same_v<Props, ncclNetProperties_v8_t>;
  constexpr bool v11 = std::is_same_v<Props, ncclNetProperties_v11_t>;
  constexpr bool v12 = std::is_same_v<Props, ncclNetProperties_v12_t>;
  memset(props, 0, sizeof *props);
  props->name = const_cast<char*>(keepString(p.name));
  props->pciPath = p.pciPath.empty() ? nullptr : const_cast<char*>(keepString(p.pciPath));
  props->guid = p.guid;
  props->ptrSupport = p.ptrSupport;
  props->speed = p.speedMbps;
  props->port = 1;
  props->latency = 0;
  props->maxComms = p.maxComms;
  props->maxRecvs = p.maxRecvs;
  if constexpr (!v6) {
    props->netDeviceType = NCCL_NET_DEVICE_HOST;
    props->netDeviceVersion = 0;
  }
  if constexpr (!v6 && !v7 && !v8) {  // v9 and later
    props->vProps.ndevs = 1;
    props->vProps.devs[0] = dev;
    props->maxP2pBytes = NCCL_MAX_NET_SIZE_BYTES;
    props->maxCollBytes = NCCL_MAX_NET_SIZE_BYTES;
  }
  if constexpr (v11 || v12) props->maxMultiRequestSize = 1;
  if constexpr (v12) {
    props->railId = -1;
    props->planeId = -1;
  }
  (void)dev;
}

}  // namespace gradcomp::net
