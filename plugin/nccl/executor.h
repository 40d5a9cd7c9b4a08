// The seam between the interposer and whatever runs a compressed allreduce.
// The interposer builds one CompressedCall per eligible ncclAllReduce and
// submits it to the executor chosen from where the buffers live:
// - host memory (the test double, CPU-only runs): hostExecutor(), which runs
//   the algorithm synchronously with the CPU reference backend over UCX;
// - device memory: cudaExecutor() (plugin/nccl/cuda_executor.h); without one
//   (no CUDA in the build, no device) such calls pass through to NCCL.
#pragma once

#include <memory>
#include <string>

#include "algorithms/algorithm.h"
#include "algorithms/call_budget.h"
#include "plugin/nccl/cuda_probe.h"
#include "plugin/nccl/nccl_abi.h"

namespace gradcomp::nccl {

struct CompressedCall {
  algo::AllreduceArgs args;
  algo::Algorithm* algorithm = nullptr;
  const char* algorithmName = nullptr;  // for failure messages (static storage)
  transport::Transport* net = nullptr;
  const param::Overrides* config = nullptr;
  uint64_t callSeq = 0;
  algo::ErrorFeedbackStore* errorFeedback = nullptr;
  // What the application asked for (the rule's algorithm, auto for auto);
  // the host executor exchanges and checks it (algorithms/call_check.h).
  const algo::AlgorithmInfo* asked = nullptr;
  const param::Overrides* askedConfig = nullptr;
  // The communicator's call runner for executors that keep none of their own
  // (the host executor): reservations and the call check's signatures.
  algo::CallBudget* budget = nullptr;
  // Owners of what the pointers above point into (the rule's runtime owns
  // the algorithm, auto's candidates, the configurations and the name).
  // Null for a caller that outlives the call (tests). An asynchronous
  // executor's job keeps them until the job is gone, so a communicator
  // destroyed while its job still runs (a proxy stuck past the watchdog,
  // then abandoned) frees nothing the job may touch.
  std::shared_ptr<transport::Transport> ownsNet;
  std::shared_ptr<const void> ownsRuntime;
  std::shared_ptr<algo::ErrorFeedbackStore> ownsResiduals;
};

// Buffers of the executor's own where it runs calls, and the stream to
// submit them on: for calls on no application memory (the self-test). The
// host executor's are host memory (stream null); the CUDA executor's device
// memory on the application buffers' device with a private stream
// (device/cuda/private_buffers.h). upload/download are complete on return;
// call them only while no call on stream() is in flight (the proxy rule:
// they may make driver calls).
class PrivateSpace {
 public:
  virtual ~PrivateSpace() = default;
  virtual void* send() = 0;
  virtual void* recv() = 0;
  virtual cudaStream_t stream() = 0;
  virtual Status upload(const void* host, size_t bytes) = 0;
  virtual Status download(void* host, size_t bytes) = 0;
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual const char* name() const = 0;
  // Runs (or enqueues on `stream`) the collective. An error leaves the
  // communicator's transport unusable; the caller marks it failed.
  virtual Status submit(const CompressedCall& call, cudaStream_t stream) = 0;
  // Asynchronous executors (the CUDA one) finish a call after submit returns:
  // the first failure of any earlier call on `net`'s communicator, else Ok.
  virtual Status asyncError(const transport::Transport* net) {
    (void)net;
    return Status::Ok();
  }
  // The communicator owning `net` goes away: finish (abortPending: fail) every
  // call in flight on it and stop using `net` before returning.
  virtual void release(const transport::Transport* net, bool abortPending) {
    (void)net, (void)abortPending;
  }
  // False when submit returns before the call ran (the caller must not read
  // state the call writes, such as residual norms, right after submit).
  virtual bool synchronous() const { return true; }
  // Asynchronous executors: waits (bounded by GRADCOMP_TIMEOUT_S) until
  // every call submitted on `net`'s communicator has finished; Ok, or the
  // first failure. Synchronous ones: Ok at once.
  virtual Status waitIdle(const transport::Transport* net) {
    (void)net;
    return Status::Ok();
  }
  // Private buffers where this executor runs calls whose application buffers
  // look like `like` (the same device); host memory by default.
  virtual Status makePrivateSpace(const void* like, size_t sendBytes, size_t recvBytes,
                                  std::unique_ptr<PrivateSpace>* out);
};

Executor& hostExecutor();
// The CUDA executor (plugin/nccl/cuda_executor.cc); nullptr in a build
// without CUDA or when no CUDA device is usable.
Executor* cudaExecutor();
// nullptr: no executor for these buffers (the call passes through).
Executor* selectExecutor(MemoryKind send, MemoryKind recv);

// Whether this process can run compressed calls on device memory: "cuda" or
// "none". Part of the configuration every rank agrees on at communicator
// init (wiring.cc), so a job where some ranks lack the executor (a driver too
// old for the static CUDA 13 runtime, no device, a build without CUDA)
// disables compression on every rank instead of hanging. *why (nullable)
// gets the reason for "none".
std::string deviceExecutorAvailability(std::string* why);

}  // namespace gradcomp::nccl
