// One simulated job: P ranks as threads (small pthread stacks), each running
// the registered algorithm's real schedule over a SimTransport on inputs from
// gradcomp-bench's generator (tools/gradcomp-bench/inputs.h, so the simulator
// and a measured gradcomp-bench run see the same data for the same seed).
//
// Per call c (warmup + iters calls, one bufferKey, so stateful algorithms such
// as oktopk's threshold reuse reach their steady state): every rank fills its
// input, starts its virtual clock at 0 (all ranks begin together) and runs the
// allreduce. Per timed call: time = max over ranks of the final clock; bytes /
// messages = what each rank sent (payload bytes, the transport's counters).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/param.h"
#include "common/status.h"
#include "tools/gradcomp-bench/inputs.h"
#include "tools/gradcomp-sim/sim_transport.h"

namespace gradcomp::sim {

struct SimJob {
  std::string algo = "dense";
  int ranks = 4;
  size_t count = 1 << 20;       // float32 elements per rank
  param::Overrides config;      // algorithm parameters (density, bits, ...)
  CostModel model;
  int warmup = 1, iters = 2;
  bench::InputKind input = bench::InputKind::Gradient;
  uint64_t seed = 1;
  size_t stackBytes = 512 << 10;  // per rank thread
  double timeoutS = 600;          // wall time a rank may wait for one message
};

struct SimResult {
  // Per timed call, averaged over the timed calls.
  double timeS = 0;                       // max over ranks of the virtual time
  double sentMax = 0, sentMean = 0;       // bytes sent per rank
  double recvMax = 0;                     // bytes received by the busiest rank
  double msgsMax = 0, msgsMean = 0;       // messages sent per rank
  double wallS = 0;                       // wall time of the whole job
};

// What the simulator changes in a job before running it: wagma runs its
// blocking variant (WAGMA_WAIT=1), because the wait-avoiding stream talks over
// a private UCX channel with its own progress thread that no simulated
// transport sees. runSim applies it itself; tests comparing against another
// transport apply it to their job too.
Status simulatedJob(SimJob* job);

Status runSim(const SimJob& job, SimResult* out);

}  // namespace gradcomp::sim
