// What the CollNet plugin (and the tuner, which steers NCCL to it) does in
// this process, decided once from the same sources as the interposer's
// policy (plugin/nccl/policy.h: GRADCOMP_* variables over the admin file):
// the algorithm (GRADCOMP_ALGO or the file's `algo`), its parameters (the
// file's [params] where the environment is silent), GRADCOMP_MIN_BYTES (the
// tuner's threshold) and GRADCOMP_COLLNET_EF_PERIOD. The file's per-size and
// per-communicator rules and GRADCOMP_COMMS do not apply: a CollNet chunk has
// neither a tensor size nor a communicator identity.
//
// CollNet compresses only with algorithms whose state is per call or keyed
// error feedback: dense, qsgd, rbf, sign (kCollNetAlgorithms). Otherwise, with
// GRADCOMP_ALGO=off, or with a rejected configuration, it is not offered:
// devices() reports 0 and reduceSupport says no, so NCCL never picks it.
#pragma once

#include <cstdint>
#include <string>

#include "common/param.h"
#include "common/status.h"

namespace gradcomp::collnet {

constexpr const char* kCollNetAlgorithms[] = {"dense", "qsgd", "rbf", "sign"};

struct CollNetPolicy {
  bool compressing = false;
  std::string why;   // when not compressing: the reason, for the INFO/WARN line
  std::string algo;
  param::Overrides config;  // the algorithm's parameters beyond the registry
  uint64_t minBytes = 0;
  uint64_t efPeriod = 0;
  // Everything that changes what a head rank sends; compared across head
  // ranks at connect (a hash travels in the CollNet handle).
  std::string configText;
  // A rejected configuration (named variable or file key); with
  // GRADCOMP_STRICT=1 the plugin's init fails with it.
  Status error;
  bool strict = false;
};

// Loaded at the first call, then frozen (like the registry).
const CollNetPolicy& collNetPolicy();

uint64_t configHash(const std::string& text);  // FNV-1a

}  // namespace gradcomp::collnet
