#include "plugin/net/net_props_fill.h"

#include <deque>
#include <mutex>

namespace gradcomp::net {

const char* keepString(const std::string& s) {
  static std::mutex mu;
  static auto* strings = new std::deque<std::string>();  // push_back never moves elements
  std::lock_guard<std::mutex> lock(mu);
  strings->push_back(s);
  return strings->back().c_str();
}

}  // namespace gradcomp::net
