// Shadow mode (GRADCOMP_SHADOW=1; docs/usage.md, "Enabling gradcomp on a new
// cluster"): every call gradcomp would compress returns NCCL's own result,
// bit-identical to a run without gradcomp, and the compressed algorithm also
// runs on a copy of its input, so an admin sees what compression would do to
// a production job at no risk to it.
//
// Per call, on the host executor (synchronous, so on the calling thread after
// NCCL's call): the input copied before NCCL runs (in place overwrites it),
// the rule's algorithm run on the copy into a private buffer through the
// executor and call runner real calls take (its residuals and state carry
// from call to call as in a compressed run), then per bucket (the buffer's
// key, as the stats' buckets): wire bytes against a ring's dense bytes, the
// relative L2 error against NCCL's result, whether every rank's compressed
// allreduce result is the same (an 8-byte hash per rank, allgathered over
// NCCL; not for reduce-scatter, whose shards differ, nor wagma, whose groups
// do), and both calls' times. A failed compressed call never fails the
// user's: it is counted, logged once, and shadowing stops on that
// communicator (its transport is broken).
// Not covered yet: the CUDA executor and auto (their calls pass through,
// logged once).
#pragma once

#include <functional>

#include "plugin/nccl/comm_state.h"
#include "plugin/nccl/executor.h"

namespace gradcomp::nccl {

// Caller holds st.mu; `passThrough` is the real NCCL call. Returns its result.
ncclResult_t runShadow(CommState& st, Executor& exec, RuleRuntime& rt,
                       const algo::AllreduceArgs& args, size_t bytes, cudaStream_t stream,
                       const std::function<ncclResult_t()>& passThrough);

}  // namespace gradcomp::nccl
