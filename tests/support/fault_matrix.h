// One cell of the fault-injection matrix: `nranks` real processes over UCX run
// `algorithm` for a few calls; one of them (the faulty rank, chosen from the
// seed) injects `fault` through FaultyTransport from its second call on. The
// survivors record, in memory shared with the test process, how each of
// their calls ended: Ok (checked against the algorithm's Reference) or the
// first error (code, message, how long the failing call took, when it
// returned). After a kill or stop each survivor then tears its communicator
// down at once, as a process that exits would, and records when that was
// done: the faulty rank records when it raised the signal, so the test reads
// detection and teardown times from the fault itself. Survivors then wait for
// each other outside UCX and the first kills a stopped rank. (Garbage cells
// tear down after that wait, so a survivor's exit does not change what the
// others see.)
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
  // UCX_TLS of every rank; "tcp,self" runs with GRADCOMP_UCX_ERR_MODE=PEER,
  // anything else with NONE. Empty: tcp for Kill, shared memory otherwise.
  std::string tls;
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
  // Seconds from the fault (kill/stop signal) until the failed call returned,
  // and until the survivor's teardown finished; < 0 when not measured.
  double detectSeconds = -1, teardownSeconds = -1;
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
// The cases at once, at most `parallel` at a time, each in a process of its
// own (support/multiproc.h: runConcurrently). A case whose process failed
// comes back with no ranks.
std::vector<FaultResult> runFaultCases(const std::vector<FaultCase>& cases, int parallel);

}  // namespace gradcomp::test
