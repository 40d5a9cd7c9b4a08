// gradcomp-bench command line: nccl-tests' all_reduce_perf flags plus the
// algorithm, its registry parameters, the rank count and the input
// distribution. Parsing never touches the network, so a bad flag is reported
// before any rank is started.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/algorithm.h"
#include "common/dtype.h"
#include "common/status.h"
#include "tools/gradcomp-bench/inputs.h"

namespace gradcomp::bench {

struct Options {
  uint64_t minBytes = 32u << 20;  // -b
  uint64_t maxBytes = 32u << 20;  // -e
  uint64_t stepFactor = 2;        // -f
  int iters = 20;                 // -n
  int warmupIters = 5;            // -w
  bool check = true;              // -c
  DataType dtype = DataType::Float32;
  RedOp op = RedOp::Sum;
  std::string algo = "dense";
  // --coll: allreduce (default), reducescatter (nccl-tests'
  // reduce_scatter_perf: the size is the whole input, count the recvcount) or
  // allgather (all_gather_perf: the size is the whole output, count the sendcount).
  algo::Collective coll = algo::Collective::AllReduce;
  // Registry parameters for the algorithm: name without GRADCOMP_ prefix ->
  // text, already validated against the registry spec.
  using Params = std::vector<std::pair<std::string, std::string>>;
  Params params;
  int ranks = 0;  // --ranks N: launch N local ranks; 0: run as one rank of a job
  // --hosts H (with --ranks N, H divides N): rank r gets GRADCOMP_HOSTID=
  // "bench-host<r / (N/H)>", faking H hosts of N/H ranks each. 0: not set.
  int hosts = 0;
  std::string hierarchy;  // --hierarchy: sets GRADCOMP_HIERARCHY (empty: as set)
  InputKind input = InputKind::Gradient;
  uint64_t seed = 1;
  std::string jsonPath;  // -J
  std::string backend;  // --backend cpu|cpu-device: sets GRADCOMP_API_BACKEND (empty: as set)
  bool help = false;
  // argv without --ranks/--hosts and their values: what each launched rank runs.
  std::vector<std::string> rankArgs;
};

// Parses argv[1..]. Errors are InvalidArgument/InvalidConfig with one line
// naming the flag and what it accepts (the caller prints it and exits 2).
Status parseOptions(int argc, char** argv, Options* out);

std::string usage();

// The flag a registry parameter gets: GRADCOMP_DENSITY -> "--density",
// DENSE_RD_MAX_BYTES -> "--dense-rd-max-bytes".
std::string paramFlag(const char* paramName);

// The sizes a run visits: minBytes, minBytes*f, ... <= maxBytes, each rounded
// down to a whole number of elements (as nccl-tests does); for a
// reduce-scatter over `nranks`, to a whole number of elements per rank.
std::vector<uint64_t> benchSizes(const Options& options, int nranks = 1);

}  // namespace gradcomp::bench
