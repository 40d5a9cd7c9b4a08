// The admin's TOML file (GRADCOMP_CONFIG=FILE), read with toml++ in
// header-only mode (no run-time dependency of libgradcomp.so on it):
//
//   algo = "dense"             # like GRADCOMP_ALGO
//   comms = "size:8,name:dp*"  # like GRADCOMP_COMMS
//   min_bytes = "1M"           # like GRADCOMP_MIN_BYTES (string or integer)
//   [params]                   # algorithm parameters, registry names
//   DENSITY = 0.01
//   [[rule]]                   # first match wins
//   comms = "size:16"          # optional, default every communicator
//   min_bytes = "64M"          # optional range [min_bytes, max_bytes)
//   max_bytes = "1G"
//   algo = "off"               # optional, default the top-level algo
//   params = { DENSITY = 0.001 }
//
// Unknown keys are errors naming the file, the key and what is accepted.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace gradcomp::nccl {

struct FileRule {
  std::optional<std::string> comms, minBytes, maxBytes, algo;
  std::map<std::string, std::string> params;
  std::string origin;  // "FILE rule 1 (line 12)"
};

struct ConfigFile {
  std::optional<std::string> algo, comms, minBytes, rsAlgo, agAlgo, selftest, shadow;
  std::map<std::string, std::string> params;
  std::vector<FileRule> rules;
};

Status loadConfigFile(const std::string& path, ConfigFile* out);
// Same, from text (tests); `origin` names it in errors.
Status parseConfigText(const std::string& text, const std::string& origin, ConfigFile* out);

}  // namespace gradcomp::nccl
