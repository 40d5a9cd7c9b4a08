#include "plugin/collnet/collnet_policy.h"

#include "common/log.h"
#include "plugin/nccl/policy.h"

namespace gradcomp::collnet {
namespace {

bool collNetAlgorithm(const std::string& name) {
  for (const char* a : kCollNetAlgorithms)
    if (name == a) return true;
  return false;
}

std::string allowedList() {
  std::string out;
  for (const char* a : kCollNetAlgorithms) out += std::string(out.empty() ? "" : ", ") + a;
  return out;
}

CollNetPolicy load() {
  CollNetPolicy p;
  nccl::Policy policy;
  p.error = nccl::loadPolicy(&policy);
  p.strict = policy.strict;
  if (!p.error.ok()) {
    p.why = p.error.message();
    return p;
  }
  int64_t period = 0;
  p.error = param::getInt(param::Id::COLLNET_EF_PERIOD, &period);
  if (p.error.ok()) p.error = nccl::algorithmOverrides(policy, -1, &p.config);
  if (!p.error.ok()) {
    p.why = p.error.message();
    return p;
  }
  p.algo = policy.algo;
  p.minBytes = policy.minBytes;
  p.efPeriod = uint64_t(period);
  bool ef = true;
  (void)param::getBool(param::Id::EF, &ef);
  nccl::CommIdentity anyComm;  // CollNet has no communicator identity
  p.configText = nccl::effectiveConfigText(policy, anyComm, true) +
                 "GRADCOMP_COLLNET_EF_PERIOD=" + std::to_string(p.efPeriod) + "\n" +
                 "GRADCOMP_EF=" + (ef ? "1" : "0") + "\n";
  if (policy.algo == "off") {
    p.why = "GRADCOMP_ALGO=off";
  } else if (!collNetAlgorithm(policy.algo)) {
    p.why = "algorithm '" + policy.algo + "' does not run on CollNet chunks (accepted: " +
            allowedList() + ")";
  } else {
    p.compressing = true;
  }
  return p;
}

}  // namespace

const CollNetPolicy& collNetPolicy() {
  static const CollNetPolicy* policy = [] {
    auto* p = new CollNetPolicy(load());
    if (!p->error.ok())
      GC_WARN("CollNet plugin: %s; CollNet is not offered%s", p->why.c_str(),
              p->strict ? " and GRADCOMP_STRICT=1 makes its init fail" : "");
    else if (!p->compressing)
      GC_INFO(INIT, "CollNet plugin: not offered (%s)", p->why.c_str());
    else
      GC_INFO(INIT, "CollNet plugin: algorithm %s, error feedback %s", p->algo.c_str(),
              p->efPeriod ? ("keyed by call order mod " + std::to_string(p->efPeriod)).c_str()
                          : "off (GRADCOMP_COLLNET_EF_PERIOD=0)");
    return p;
  }();
  return *policy;
}

uint64_t configHash(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace gradcomp::collnet
