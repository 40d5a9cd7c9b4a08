// gradcomp-train command line. Parsing never touches the network or the data,
// so a bad flag is reported before any rank starts. Algorithm parameters use
// the bench's scheme: each registry parameter the chosen --algo reads is a flag
// --<lowercase-dashed-name> (DENSE_RD_MAX_BYTES -> --dense-rd-max-bytes), and
// --param NAME=VALUE reaches any registry parameter by name.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "tools/gradcomp-train/trainer.h"

namespace gradcomp::train {

struct Flags {
  TrainOptions train;
  std::string algo = "dense";
  // Registry names without GRADCOMP_ prefix -> text, validated by the registry.
  std::vector<std::pair<std::string, std::string>> algoParams;
  // --ag-algo (ZeRO-3's parameter allgather: dense, cast, blockq; empty:
  // none) and its parameters, registry names as for algoParams. Its
  // parameters are flags with an ag- prefix (BITS -> --ag-bits, AG_BLOCK ->
  // --ag-block), or --ag-param NAME=VALUE, apart from --algo's (--bits).
  std::string agAlgo;
  std::vector<std::pair<std::string, std::string>> agParams;
  bool sumThenScale = false;  // --op sum
  // --momentum-correction: "auto" (on for top-k selection methods when the
  // optimizer has momentum and gradients are averaged), "on" or "off";
  // resolved into train.momentumCorrection once --algo is known.
  std::string momentumCorrection = "auto";
  std::string dataDir = kDefaultDataDir;
  size_t trainLimit = 0, testLimit = 0;  // 0 = whole set
  std::string jsonPath;                  // -J
  int ranks = 0;  // --ranks N: launch N local ranks of this command; 0: be one rank
  bool help = false;
  // argv without --ranks and its value: what each launched rank runs.
  std::vector<std::string> rankArgs;
};

// Parses argv[1..]. Errors name the flag and what it accepts (the caller
// prints the message and exits 2).
Status parseFlags(int argc, char** argv, Flags* out);

std::string usage();

// GRADCOMP_DENSITY or DENSITY -> "--density"; DENSE_RD_MAX_BYTES -> "--dense-rd-max-bytes".
std::string paramFlag(const std::string& paramName);
// The --ag-algo flag of a registry parameter: BITS -> "--ag-bits", AG_BLOCK -> "--ag-block".
std::string agParamFlag(const std::string& paramName);

}  // namespace gradcomp::train
