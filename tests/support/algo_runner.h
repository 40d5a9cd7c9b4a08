// Runs a registered algorithm on P ranks (threads over the in-process
// transport) with a backend chosen per rank, for several calls, and returns
// every rank's result of every call. The call buffers are the rank's
// backend's device memory, as a framework's tensors are.
// Inputs are deterministic in (rank, call, index), in [-1, 1].
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"

namespace gradcomp::testing {

struct AlgoRun {
  std::string algo;
  param::Overrides config;
  int ranks = 3;
  size_t count = 4099;
  DataType dtype = DataType::Float32;
  int calls = 6;
  // Call at which rank 0's element 1 is NaN (-1: none): the algorithms'
  // non-finite fallbacks (quantized: exact sum; sparse: dense).
  int nanCall = -1;
  // Call c's count is counts[c % size] when set (else count).
  std::vector<size_t> counts;
  // Runs each call as the CUDA executor does: CallBudget::prepare, then
  // CallBudget::run with the backend parked (algorithms/call_budget.h).
  bool throughBudget = false;
  // ReduceScatter: count (a multiple of ranks) is the whole tensor; rank r's
  // result is its recvcount elements; odd calls run in NCCL's in-place layout.
  algo::Collective coll = algo::Collective::AllReduce;
  // Ranks per host: the algorithm runs hierarchically when set.
  std::vector<std::vector<int>> hosts;
};

// Rank r's input element i at call c.
inline float inputValue(int r, int c, size_t i) {
  return float(int((i * 2654435761u + uint64_t(c) * 97 + uint64_t(r) * 31) % 2001) - 1000) /
         1000.0f;
}

// results[r][c]: rank r's output bytes after call c (reduce-scatter: its
// shard). Odd calls run in place.
// *rankStatus gets each rank's first error (Ok when it finished).
void runRanks(const AlgoRun& run, const std::function<device::Backend&(int rank)>& backendOf,
              std::vector<std::vector<std::vector<uint8_t>>>* results,
              std::vector<Status>* rankStatus);

// Parameter sets that reach an algorithm's different paths (threshold
// evaluation and reuse, repartition, bit widths, WAGMA's blocking mode).
struct Variant {
  std::string label;
  std::vector<std::pair<std::string, std::string>> params;
};
std::vector<Variant> variantsOf(const std::string& algo);

// For the [gpu] tests: every rank finished on both backends and every call's
// fp32 result of `gpu` is within the CPU-vs-CUDA tolerance of `cpu` (Catch2
// assertions; call from the test thread): 1e-5 relative, except fft, whose
// cuFFT and FFTW roundings differ, 1e-3 of the largest |value|.
void checkMatchesCpu(const AlgoRun& run, const std::vector<std::vector<std::vector<uint8_t>>>& cpu,
                     const std::vector<Status>& cpuStatus,
                     const std::vector<std::vector<std::vector<uint8_t>>>& gpu,
                     const std::vector<Status>& gpuStatus);

}  // namespace gradcomp::testing
