// One rank of a gradcomp-bench job: communicator from the environment
// (GRADCOMP_RANK/NRANKS/BOOTSTRAP, set by --ranks or any launcher), then per
// size one call sequence on a fresh algorithm config and bufferKey.
//
// Measurement, per size:
// - w warm-up then n timed calls; call c sends the inputs f(seed, rank, i, c),
//   regenerated before the call. Before each timed call a one-element dense
//   allreduce lines the ranks up, the traffic counters are reset, and only the
//   gcAllreduce itself is timed; time = mean per timed call, max over ranks.
// - wire = bytes this rank sent per timed call (gcCommGetTraffic), max and
//   mean over ranks.
// - With -c 1 every call of the sequence is checked between calls (check.h).
// - Per-rank figures are combined with one dense float64 allreduce in which
//   each rank fills its own slots (a gather through the public API).
#pragma once

#include "common/status.h"
#include "tools/gradcomp-bench/options.h"

namespace gradcomp::bench {

// Runs every size; rank 0 prints the table and writes the JSON file.
// *wrongTotal receives the #wrong summed over all rows.
Status runRank(const Options& options, uint64_t* wrongTotal);

}  // namespace gradcomp::bench
