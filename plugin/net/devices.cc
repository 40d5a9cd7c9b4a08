#include "plugin/net/devices.h"

#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <stdlib.h>

#include <fstream>
#include <sstream>

#include "common/param.h"

namespace gradcomp::net {
namespace {

// GRADCOMP_NET_IFNAME: "eth,ib" keeps names starting with eth or ib; "^docker"
// drops names starting with docker. Empty: everything.
bool nameAllowed(const std::string& filter, const std::string& name, bool* named) {
  *named = false;
  if (filter.empty()) return true;
  bool exclude = filter[0] == '^';
  std::stringstream ss(exclude ? filter.substr(1) : filter);
  std::string prefix;
  bool match = false;
  while (std::getline(ss, prefix, ','))
    if (!prefix.empty() && name.compare(0, prefix.size(), prefix) == 0) match = true;
  *named = match && !exclude;
  return exclude ? !match : match;
}

std::string pciPathOf(const std::string& ifname) {
  char resolved[PATH_MAX];
  std::string link = "/sys/class/net/" + ifname + "/device";
  if (realpath(link.c_str(), resolved) == nullptr) return "";
  return resolved;
}

int speedOf(const std::string& ifname) {
  std::ifstream f("/sys/class/net/" + ifname + "/speed");
  int speed = -1;
  if (f >> speed && speed > 0) return speed;
  return 10000;  // virtual interfaces report nothing; NCCL only uses it to rank NICs
}

}  // namespace

Status enumerateDevices(std::vector<Device>* out) {
  out->clear();
  std::string filter;
  GC_CHECK(param::getString(param::Id::NET_IFNAME, &filter));
  ifaddrs* list = nullptr;
  GC_REQUIRE(getifaddrs(&list) == 0, Err::SystemError, "getifaddrs failed: %m");
  std::vector<Device> loopback;
  for (ifaddrs* ifa = list; ifa; ifa = ifa->ifa_next) {
    if (!ifa->ifa_addr || ifa->ifa_addr->sa_family != AF_INET || !(ifa->ifa_flags & IFF_UP)) continue;
    std::string name = ifa->ifa_name;
    bool named = false;
    if (!nameAllowed(filter, name, &named)) continue;
    bool duplicate = false;
    for (const Device& d : *out) duplicate = duplicate || d.name == name;
    for (const Device& d : loopback) duplicate = duplicate || d.name == name;
    if (duplicate) continue;
    Device d;
    d.name = name;
    d.addr = *reinterpret_cast<const sockaddr_in*>(ifa->ifa_addr);
    d.pciPath = pciPathOf(name);
    d.speedMbps = speedOf(name);
    if ((ifa->ifa_flags & IFF_LOOPBACK) && !named) loopback.push_back(d);
    else out->push_back(d);
  }
  freeifaddrs(list);
  if (out->empty()) *out = loopback;
  return Status::Ok();
}

}  // namespace gradcomp::net
