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
//
// With gpu.enabled (gradcomp-sim --gpu-model, gpu_model.h) every rank's
// primitives go through a GpuModel and the transport times one scenario per
// (design, link rate): scenario i * gpu.gbps.size() + j is gpu.designs[i] at
// gpu.gbps[j] (model.betaSPerByte is not used; alpha, compute scale and host
// overhead are). With gpu.scale s the run prices count * s elements: every
// primitive's bytes and every message's payload times s (payload_framing.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "common/param.h"
#include "common/status.h"
#include "tools/gradcomp-bench/inputs.h"
#include "tools/gradcomp-sim/gpu_model.h"
#include "tools/gradcomp-sim/sim_transport.h"

namespace gradcomp::sim {

struct SimJob {
  std::string algo = "dense";
  // Reduce-scatter and allgather: count % ranks == 0 (the checked layout,
  // algorithm.h); an allgather's algo is from the allgather registry.
  algo::Collective coll = algo::Collective::AllReduce;
  int ranks = 4;
  size_t count = 1 << 20;       // float32 elements per rank
  param::Overrides config;      // algorithm parameters (density, bits, ...)
  CostModel model;
  int warmup = 1, iters = 2;
  bench::InputKind input = bench::InputKind::Gradient;
  uint64_t seed = 1;
  // Hosts of ranksPerHost consecutive ranks (model.ranksPerHost is set from
  // it; 0: one level). hierarchical: every rank runs the algorithm through
  // algo::hierarchy::makeHierarchical on these hosts (P a multiple of it).
  int ranksPerHost = 0;
  bool hierarchical = false;
  size_t stackBytes = 512 << 10;  // per rank thread
  double timeoutS = 600;          // wall time a rank may wait for one message
  struct Gpu {
    bool enabled = false;
    GpuConstants constants;
    std::vector<GpuDesign> designs;
    std::vector<double> gbps;
    double scale = 1;
    std::shared_ptr<const GpuCalibration> calibration;  // --gpu-kbench; nullptr: constants
  } gpu;
};

struct SimResult {
  // Per timed call, averaged over the timed calls.
  double timeS = 0;                       // max over ranks of the virtual time
  double sentMax = 0, sentMean = 0;       // bytes sent per rank
  double recvMax = 0;                     // bytes received by the busiest rank
  double msgsMax = 0, msgsMean = 0;       // messages sent per rank
  double wallS = 0;                       // wall time of the whole job
  // gpu.enabled: per scenario, max over ranks of the virtual time (mean over
  // timed calls); per GpuDesign, the primitives' costs (mean over ranks and
  // timed calls).
  std::vector<double> scenarioTimeS;
  std::vector<GpuCallStats> gpuStats;
  double chargedSentMax = 0;  // bytes sent per rank as charged (payload scaling)
  // Bytes a rank sent to other hosts per call (ranksPerHost > 0), max/mean.
  double interHostMax = 0, interHostMean = 0;
};

// What the simulator changes in a job before running it: wagma runs its
// blocking variant (WAGMA_WAIT=1), because the wait-avoiding stream talks over
// a private UCX channel with its own progress thread that no simulated
// transport sees. runSim applies it itself; tests comparing against another
// transport apply it to their job too.
Status simulatedJob(SimJob* job);

Status runSim(const SimJob& job, SimResult* out);

}  // namespace gradcomp::sim
