// gradcomp-sim --gpu-model: per-call time of each algorithm under each GPU
// design (gpu_model.h) and NCCL's ring, for every P and link rate, as a
// markdown table plus a breakdown, and as JSON (docs/results/gpu_model.md).
//
// One replay per (algorithm, P) times every design and link rate at once
// (SimTransport scenarios). The count reported is `count`; a replay runs
// count / m elements, m the smallest integer that divides count, keeps the
// run count a multiple of the algorithm's alignment (quantized: P chunks of
// whole buckets, as at the full count; otherwise 1024) and fits P ranks in
// the memory budget; primitive bytes and message payloads are scaled by m
// (payload_framing.h). When no such m exists the run count is halved until
// it fits and the row is marked unaligned (*), as is a dense row whose run
// count gets another schedule than the full count (fewer ring segments).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/gradcomp-sim/sim_run.h"

namespace gradcomp::sim {

struct GpuTableSpec {
  std::vector<std::string> algos;
  std::vector<int> ranks;
  uint64_t count = 0;      // elements per rank the table is for
  uint64_t memBudget = 0;  // bytes for all simulated ranks of one replay
  SimJob base;             // parameters, alpha, calls, seed; base.gpu: constants, designs, rates
  std::string jsonPath;
};

// The count a replay runs for `count` (see above); *aligned = false when the
// alignment could not be kept.
size_t gpuRunCount(const std::string& algo, int P, uint64_t count, uint64_t memBudget,
                   const param::Overrides& config, bool* aligned);

// Runs the replays and prints the tables; 0 on success, 1 when a replay failed.
int runGpuTable(const GpuTableSpec& spec);

}  // namespace gradcomp::sim
