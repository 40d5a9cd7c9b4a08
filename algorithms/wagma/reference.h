// WAGMA's semantics computed centrally (for gradcomp-bench #wrong and tests).
// Ranks end a group call with different values (one average per group), and
// the Reference contract has one expected value per element, so the reference
// simulates every rank's blocking-schedule result in fp64 and reports their
// midpoint with a tolerance of half their spread plus rounding. Global calls
// are checked exactly. In wait-avoiding weights mode a late rank's stale buffer
// may enter an average, so the bound widens to the box of every input since
// the last global call (every average is a convex combination of those). The
// gradient mode is checked against its blocking schedule. Parameters come from
// the environment registry (a Reference has no per-call overrides).
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/wagma/topology.h"

namespace gradcomp::algo::wagma {

class WagmaReference final : public Reference {
 public:
  explicit WagmaReference(int nranks) : nranks_(nranks) {}
  // Bench flags reach the reference here (registry values until called).
  Status configure(const param::Overrides& config) override;
  Status expect(const std::vector<const void*>& inputs, const AllreduceArgs& args,
                std::vector<double>* expected, std::vector<double>* tolerance) override;

 private:
  struct KeyState {
    uint64_t calls = 0;
    std::vector<std::vector<double>> shadow;  // gradient mode, per rank
    std::vector<double> lo, hi;               // input box since the last global call
  };
  const int nranks_;
  bool configured_ = false;
  Topology topo_;
  int period_ = 8;
  bool wait_ = false, gradient_ = false;
  std::map<uint64_t, KeyState> keys_;
};

}  // namespace gradcomp::algo::wagma
