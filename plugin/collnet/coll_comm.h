// One CollNet group, what connect() returns: the head ranks' UCX transport,
// the algorithm with its error-feedback store, and a worker thread that runs
// the chunks.
//
// NCCL's proxy thread calls iallreduce and then polls test, with several
// chunks in flight per channel. submit() queues the chunk and returns at once
// (no request when kMaxInFlight are queued: NCCL calls again later); the
// worker runs the queue in order, each chunk a synchronous allreduce over the
// transport on the CPU reference backend, reading and writing NCCL's host
// buffers in place. NCCL issues the same iallreduce order on every head rank,
// so the k-th chunk here is the k-th everywhere: one collective, with call
// sequence k. The buffers are NCCL's until test() reports the chunk done.
//
// Errors: a failed chunk (a peer died, GRADCOMP_TIMEOUT_S without progress,
// malformed data) fails itself and every chunk queued after it, and later
// submits fail at once, all with that first error. Nothing waits forever:
// the transport bounds every wait, and the destructor fails the queue and
// joins the worker (at most one chunk's timeout).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>

#include "algorithms/algorithm.h"
#include "algorithms/call_budget.h"
#include "algorithms/error_feedback.h"
#include "plugin/collnet/chunk_key.h"
#include "plugin/collnet/collnet_stats.h"

namespace gradcomp::collnet {

// A registered buffer (regMr's mhandle).
struct Registration {
  char* base = nullptr;
  size_t size = 0;
};

struct Chunk {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  DataType dtype = DataType::Float32;
  RedOp op = RedOp::Sum;
  const Registration* sendReg = nullptr;  // null when NCCL gave no handle
};

class CollComm {
 public:
  static constexpr size_t kMaxInFlight = 64;

  struct Setup {
    int rank = 0, nranks = 0;
    std::unique_ptr<transport::Transport> net;
    std::string algoName;
    param::Overrides config;
    uint64_t efPeriod = 0;
    double wiringSeconds = 0;
  };
  static Status create(Setup setup, std::unique_ptr<CollComm>* out);
  ~CollComm();

  // *request is null when the queue is full (call again).
  Status submit(const Chunk& chunk, void** request);
  // *done once the chunk finished; *bytes its size. A finished or failed
  // request is released here and must not be tested again.
  static Status test(void* request, bool* done, size_t* bytes);

  GroupStats stats() const;

 private:
  struct Job;
  explicit CollComm(Setup setup);
  void run();
  Status runChunk(const Chunk& chunk);
  void release(Job* job);

  const int rank_, nranks_;
  std::unique_ptr<transport::Transport> net_;
  std::unique_ptr<algo::Algorithm> algorithm_;
  const algo::AlgorithmInfo* info_ = nullptr;
  param::Overrides config_;
  // The one call path (algorithms/call_budget.h): signatures checked, a
  // failure agreed; destroyed before net_.
  algo::CallBudget budget_;
  std::unique_ptr<algo::ErrorFeedbackStore> errorFeedback_;  // null: none
  ChunkKeys keys_;
  uint64_t callSeq_ = 0;  // worker thread only

  mutable std::mutex mu_;  // everything below
  std::condition_variable cv_;
  std::deque<Job*> queue_;
  std::unordered_set<Job*> jobs_;  // every request not yet released
  Status failed_;
  bool stopping_ = false;
  GroupStats stats_;
  std::thread worker_;
};

}  // namespace gradcomp::collnet
