// GRADCOMP_AUTO_CANDIDATES: the algorithms GRADCOMP_ALGO=auto chooses among,
// a comma list of NAME[:PARAM=VALUE[:PARAM=VALUE...]], e.g.
//   dense,qsgd:BITS=8,qsgd:BITS=4,oktopk
// NAME is a registered algorithm; PARAM a registry parameter of it (without
// GRADCOMP_), validated like the variable. Parameters not given come from the
// call's configuration (environment, config file, overrides), so "oktopk"
// runs at the configured GRADCOMP_DENSITY. The label (the text of the entry)
// names the candidate in reports.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "common/status.h"

namespace gradcomp::algo::autosel {

struct CandidateSpec {
  std::string label;  // "qsgd:BITS=4"
  std::string algo;   // "qsgd"
  std::map<std::string, std::string> params;
  bool isDense() const { return algo == "dense"; }
};

// Errors name `origin` (the variable or flag) and what is accepted: an empty
// list, an unknown algorithm, auto or wagma as a candidate (auto cannot
// choose itself; wagma averages within groups, which is not an allreduce), a
// parameter the algorithm does not read or whose value it rejects, a
// duplicate entry.
Status parseCandidates(const std::string& text, const std::string& origin,
                       std::vector<CandidateSpec>* out);

}  // namespace gradcomp::algo::autosel
