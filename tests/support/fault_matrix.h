// One cell of the fault-injection matrix: `nranks` real processes over UCX run
// `algorithm` for a few calls; one of them (the faulty rank, chosen from the
// seed) injects `fault` through FaultyTransport from its second call on. The
// survivors record, in memory shared with the test process, how each of
// their calls ended: Ok (checked against the algorithm's Reference) or the
// first error (code, message, how long the failing call took). They then wait
// for each other outside UCX, so a survivor's exit does not change what the
// others see, and the first survivor kills a stopped rank.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "support/faulty_transport.h"

namespace gradcomp::test {

struct FaultCase {
  std::string algorithm;
  FaultKind fault = FaultKind::Kill;
  int nranks = 3;
  uint64_t seed = 1;      // faulty rank, element count, fault phase, garbage bytes
  double timeoutS = 2.0;  // GRADCOMP_TIMEOUT_S of every rank
  int calls = 4;          // call 0 is clean; the fault fires during calls 1.. (or right after)
  int extraCalls = 10;    // survivors still succeeding keep calling, at most this many more
  // Algorithm parameters (registry names without GRADCOMP_), for the
  // algorithm and its Reference alike.
  std::map<std::string, std::string> config;
};

struct RankOutcome {
  bool faulty = false;
  int exitCode = -1, signal = 0;
  bool hung = false;      // still running at the runRanks deadline
  int errorCode = 0;      // Err of the first failed call; 0: no call failed
  std::string message;    // its Status::toString()
  double failSeconds = 0; // how long the failed call took
  int okCalls = 0;        // calls that returned Ok
  int wrongCalls = 0;     // Ok calls whose output differs from the Reference
  std::string firstWrong; // what differed, for the failure message
};

struct FaultResult {
  int faultyRank = -1;
  size_t count = 0;
  uint64_t faultAtOp = 0;  // the faulty rank's transport operation the fault fired at
  double seconds = 0;      // wall time of the whole case
  std::vector<RankOutcome> ranks;
  std::string summary() const;  // one line per rank
};

FaultResult runFaultCase(const FaultCase& c);

}  // namespace gradcomp::test
