// gradcomp-bench output: the nccl-tests style table on stdout (rank 0) and
// the optional JSON array (-J).
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "tools/gradcomp-bench/options.h"

namespace gradcomp::bench {

// One size, already reduced over ranks.
struct Row {
  uint64_t sizeBytes = 0;
  uint64_t count = 0;
  int ranks = 1;
  double timeUs = 0;        // mean per call, max over ranks
  double wireMax = 0;       // bytes sent per call, max over ranks
  double wireMean = 0;      // bytes sent per call, mean over ranks
  double ringBytes = 0;     // what the dense ring sends per call (max over ranks)
  double interHostMax = 0;  // bytes sent to ranks on other hosts per call, max over ranks
  double interHostMean = 0; // the same, mean over ranks
  int hosts = 1;            // hosts of the communicator's topology
  bool hierarchical = false;  // the algorithm ran the hierarchical schedule
  // --coll reducescatter (allgather): count is the recvcount (sendcount),
  // busbw (P-1)/P.
  bool reduceScatter = false;
  double d2hMax = 0;        // backend device -> host bytes per call, max over ranks
  double h2dMax = 0;        // backend host -> device bytes per call, max over ranks
  double syncsMax = 0;      // backend host synchronizations per call, max over ranks
  bool checked = false;     // -c 1: relErr is valid
  double relErr = 0;        // max over checked calls and ranks
  bool haveWrong = false;   // checked and the algorithm has a Reference
  uint64_t wrong = 0;       // summed over ranks and checked calls
  // --algo auto: the candidate each timed call ran (identical on every
  // rank; runner.cc checks), by label.
  std::map<std::string, uint64_t> choices;

  double algbwGBps() const;
  // algbw * 2(P-1)/P on the uncompressed bytes; reduce-scatter: (P-1)/P.
  double busbwGBps() const;
  bool haveRatio() const { return wireMax > 0; }
  double ratio() const { return ringBytes / wireMax; }
  // The algo column: --algo, or for auto the choices, most frequent first
  // ("oktopk", "dense+oktopk").
  std::string algoText(const std::string& algo) const;
};

// Bytes per call that rank-maximal dense ring allreduce (reduce-scatter then
// allgather) sends for `count` elements over P ranks, chunk j holding
// count/P + (j < count%P) elements. Rank r sends every chunk twice except the
// chunk it owns after the reduce-scatter and the one it receives last in the
// allgather (its successor's, adjacent); so the worst rank skips the adjacent
// pair with the fewest elements. Equals 2(P-1)/P * size when P divides count.
double ringWireBytes(uint64_t count, size_t elemSize, int nranks);

void printHeader(FILE* out, const Options& options, int nranks);
void printRow(FILE* out, const Options& options, const Row& row);
void printFooter(FILE* out, const std::vector<Row>& rows);

Status writeJson(const std::string& path, const Options& options, const std::vector<Row>& rows);

}  // namespace gradcomp::bench
