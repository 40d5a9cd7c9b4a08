// Per-job statistics a user and an admin can read.
// - statsLine: the one INFO line per communicator at destroy/abort.
// - writeStatsFile: with GRADCOMP_STATS=PREFIX, PREFIX.rank<R>.json (R: this
//   process's rank in its first communicator) with every communicator this
//   process created and per-bucket figures. Rewritten at each destroy/abort
//   and at exit, so a job that never destroys its communicators still has it.
#pragma once

#include <string>
#include <vector>

#include "plugin/nccl/comm_state.h"

namespace gradcomp::nccl {

// Caller holds state.mu.
std::string statsLine(const CommState& state, const char* how);
// GRADCOMP_ALGO=auto: one INFO line per size class of each auto runtime
// (algorithm chosen, calls, predicted and measured time), or its state when
// it runs dense; caller holds state.mu.
std::vector<std::string> autoStatsLines(const CommState& state);
// JSON of one communicator; caller holds state.mu.
std::string statsJson(const CommState& state);
// No-op when GRADCOMP_STATS is unset.
Status writeStatsFile();
void registerStatsAtExit();

}  // namespace gradcomp::nccl
