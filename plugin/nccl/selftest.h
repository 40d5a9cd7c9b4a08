// The self-test a flagged communicator runs before its first compressed call
// touches a user buffer (GRADCOMP_SELFTEST; docs/usage.md, "Enabling
// gradcomp on a new cluster").
//
// - What: every algorithm the communicator may use (each rule's algorithm,
//   auto's candidates, the reduce-scatter algorithms, GRADCOMP_AG_ALGO's
//   allgather), one call each of kSelfTestCount float32 values (an odd
//   count: every schedule's uneven last chunk and slice; a reduce-scatter
//   and an allgather round it down to a multiple of the ranks, the output
//   of an allgather), sum, through the executor that real calls of this
//   communicator take (its call runner, call check, backend and transport),
//   on private buffers holding an input every rank can regenerate for every
//   other rank. Each rank checks its own result against the algorithm's
//   Reference. Fresh algorithm instances, no error feedback, its own
//   CallBudget and call numbers far above the job's: it leaves no state
//   behind but its record in the stats.
// - Verdict per rank: ok, wrong (beyond the Reference's tolerance), error,
//   or timeout (not finished within GRADCOMP_SELFTEST_TIMEOUT_S; the test's
//   thread is abandoned and keeps what it uses alive until it returns).
// - Agreement: the verdicts are allgathered over the real NCCL communicator
//   (a channel that does not depend on the path under test). If any rank
//   failed, every rank disables compression on the communicator (its calls
//   pass through to NCCL for the rest of the job) with one WARN naming the
//   failing rank, the algorithm and what failed; a pass logs one INFO line
//   with its time.
// - Executors: each runs the test on buffers of its own
//   (Executor::makePrivateSpace): the host executor in host memory; the CUDA
//   executor in device memory on the application buffers' device with a
//   private non-blocking stream, submitted on that stream exactly as a real
//   call (parked stream, proxy, watchdog), its outcome read when the engine
//   is idle (Executor::waitIdle), the result copied back only then. The
//   CUDA path compiles in CI but has not run on a GPU yet.
#pragma once

#include <string>

#include "common/status.h"
#include "plugin/nccl/comm_state.h"
#include "plugin/nccl/executor.h"
#include "plugin/nccl/policy.h"

namespace gradcomp::nccl {

constexpr size_t kSelfTestCount = (size_t(1) << 18) + 37;

// Whether the communicator's first compressed call on `exec` runs the
// self-test first (GRADCOMP_SELFTEST: on; auto on a device executor).
bool selfTestWanted(const Policy& policy, const Executor& exec);

// Runs the self-test and the agreement above; every rank of the
// communicator calls it at the same call. Caller holds st.mu. On a failed
// test it disables the communicator (st.wiring) and returns Ok; an error
// means the agreement itself failed (NCCL).
// `like`: the call's application buffer (the device of the private buffers).
Status runSelfTest(const Policy& policy, CommState& st, Executor& exec, const void* like);

}  // namespace gradcomp::nccl
