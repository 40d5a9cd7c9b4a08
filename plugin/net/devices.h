// Network devices the plugin offers NCCL: up IPv4 interfaces from
// getifaddrs (loopback only when nothing else is up, or when named in
// GRADCOMP_NET_IFNAME), with their PCI path and speed from sysfs.
#pragma once

#include <netinet/in.h>

#include <string>
#include <vector>

#include "common/status.h"

namespace gradcomp::net {

struct Device {
  std::string name;     // interface name, e.g. eth0
  std::string pciPath;  // /sys/devices/pci.../0000:3b:00.0; empty for virtual ones
  int speedMbps = 10000;
  sockaddr_in addr{};   // the listener binds here
};

Status enumerateDevices(std::vector<Device>* out);

}  // namespace gradcomp::net
