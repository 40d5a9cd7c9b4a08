// The host side of the CUDA executor: one proxy thread per communicator and
// the slot protocol of device/cuda/exec_slots.h. Plain C++ (no CUDA): the
// same engine runs against a GPU stream (cuda_executor.cc) and against a host
// thread standing in for the stream (tests/test_executor_protocol.cc).
//
// Roles:
// - the calling thread (submit) picks slot seq % depth, enqueues "ready" and
//   "wait for done, then released" on the caller's stream, hands the job to
//   the proxy and returns. It never waits for the GPU, except when all
//   `depth` slots are still in flight (backpressure, like NCCL's full work
//   FIFO), and then at most GRADCOMP_TIMEOUT_S.
// - the proxy thread takes jobs in submission order, waits (yielding, at most
//   GRADCOMP_TIMEOUT_S) for the stream's ready flag -- the caller's inputs are
//   then complete in device memory --, runs the job (the algorithm on the
//   caller's buffers, ending with its backend's sync) and writes done,
//   always: on error and timeout too, so the stream moves on.
// - after the first failure every later call completes with that error
//   without running (the transport is broken), asyncError() reports it and
//   submit() refuses new calls.
// - a watchdog thread releases a call whose job has made no progress for the
//   stall window (ProxyWatch::progress did not move: no transport operation,
//   no primitive enqueued), 2 x GRADCOMP_TIMEOUT_S + 4 s by default: every
//   wait inside a job is bounded by GRADCOMP_TIMEOUT_S without progress
//   (transport waits, the backend's sync), plus at most 2 x 1.5 s for the
//   failure monitor's agreements, so their clearer errors always come first,
//   and a long call that keeps moving is never stopped. The watchdog catches
//   what no inner bound covers (the proxy stuck in a driver call). It
//   cancels the engine's CallCancel first (the job's transport refuses every
//   later step: proxy_transport.h), then writes the slot's status and done
//   words -- plain stores to mapped memory, no CUDA call -- so the caller's
//   stream goes on, and fails the engine with a message naming the call, its
//   step (the primitive enqueued last) and the thread; the calls queued
//   behind it are completed with that error too (the stuck proxy would never
//   reach them). The stuck proxy is abandoned at shutdown if it has not come
//   back; shutdown never joins without a bound. What a job touches is owned
//   by the job itself (shared ownership, cuda_executor.cc), so a job that
//   comes back after its communicator was destroyed finds it all alive, and
//   frees it when it ends.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"
#include "device/cuda/exec_slots.h"

namespace gradcomp::nccl {

// What runs on the caller's stream: a GPU (CudaSignals) or a test stand-in.
class StreamSide {
 public:
  virtual ~StreamSide() = default;
  virtual int depth() const = 0;
  virtual device::exec::Slot* slot(int i) = 0;
  // Enqueue on `stream`: ready = seq + 1, after the work enqueued before.
  virtual Status enqueueReady(int i, uint64_t seq, void* stream) = 0;
  // Enqueue on `stream`: wait until done >= seq + 1, then released = seq + 1.
  virtual Status enqueueWaitDone(int i, uint64_t seq, void* stream) = 0;
};

// Set once, when the watchdog gives up on a call: the communicator is failed
// from then on and whatever its stuck job still tries afterwards is refused
// (proxy_transport.h checks it at every transport step). Shared: a job keeps
// it past its engine. Any thread.
class CallCancel {
 public:
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }
  // Ok while not cancelled, else why.
  Status check() const;
  // The first reason wins.
  void cancel(const Status& why);

 private:
  std::atomic<bool> cancelled_{false};
  mutable std::mutex mu_;
  Status why_;
};

// The communicator's failure monitor, seen through two callbacks (either may
// be empty): a failure the ranks agreed on ends the proxy's waits for the
// stream at once instead of after their own timeout, and a failure of this
// rank's own (the stream never reached a call) is reported to the others.
struct ProxyWatch {
  std::function<Status()> agreedFailure;             // Ok while there is none
  std::function<void(const Status&)> reportOwnFailure;
  std::function<std::string()> step;  // what the running call does now (watchdog)
  // A counter that moves while the running call makes progress (transport
  // operations, primitives enqueued); the start of a call counts too. Read
  // on the watchdog thread only: cheap, never blocking (no lock a stuck
  // primitive may hold). Empty: only a call's start counts.
  std::function<uint64_t()> progress;
  // The watchdog's window without progress, in seconds; 0: stallWindow().
  double stallS = 0;
  // What the watchdog cancels when it gives up on a call (null: the engine
  // makes its own): given here when the job's transport is made first.
  std::shared_ptr<CallCancel> cancel;
};

class ProxyEngine {
 public:
  // Runs on the proxy thread once the stream reached the call; its kernels
  // have completed when it returns (the CUDA executor ends it with a sync).
  using Job = std::function<Status()>;

  // The watchdog's default window: 2 x GRADCOMP_TIMEOUT_S + 4 s (see the top).
  static double stallWindow(double timeoutS) { return 2 * timeoutS + 4.0; }

  // name: for messages ("communicator #3"); timeoutS: GRADCOMP_TIMEOUT_S;
  // threadInit (may be empty): runs first on the proxy thread (CPU binding).
  ProxyEngine(StreamSide& side, std::string name, double timeoutS, ProxyWatch watch = {},
              std::function<void()> threadInit = {});
  ~ProxyEngine();  // shutdown(false)
  ProxyEngine(const ProxyEngine&) = delete;
  ProxyEngine& operator=(const ProxyEngine&) = delete;

  // Calling thread. Ok = enqueued; the outcome arrives through asyncError()
  // (and the next submit). `what` names the call in the watchdog's message.
  Status submit(Job job, void* stream, std::string what = {});
  // Calling thread: waits (yielding, at most GRADCOMP_TIMEOUT_S) until every
  // call submitted so far has its done flag, so none parks a stream: before
  // work that may take the driver's locks (a new shape's plans and memory).
  // Ok when idle; the engine's failure, the ranks' agreed failure or Timeout.
  Status waitIdle();
  // Ok, or the first failure of any call so far.
  Status asyncError() const;
  // Stops the proxy: drain runs every queued call (each still bounded by the
  // timeout), abort completes them with an error without running them.
  // Either way every queued call gets its done flag. Idempotent.
  void shutdown(bool abortPending);

  // True after a shutdown that left a stuck proxy thread behind: the engine
  // and what its jobs use must then never be destroyed (the thread may wake).
  bool abandoned() const { return abandoned_.load(); }
  // Cancelled when the watchdog fires (before the stuck call's stream is
  // released): a job captures it and refuses its further work once set.
  std::shared_ptr<const CallCancel> cancellation() const { return cancel_; }
  double stallS() const { return stallS_; }

  uint64_t submitted() const { return nextSeq_; }
  uint64_t completed() const { return completed_.load(); }

 private:
  struct Pending {
    uint64_t seq;
    int slot;
    Job job;
    std::string what;
  };
  void proxyLoop();
  void watchdogLoop();
  // Writes the slot's status and done (once per call: proxy or watchdog).
  void complete(const Pending& p, const Status& st);
  // Under mu_ (held by `lock`, released while writing): completes every
  // queued call with error_ (a failed engine completes them without running).
  void releaseQueued(std::unique_lock<std::mutex>& lock);
  Status runOne(Pending& p);
  Status waitReady(const Pending& p);
  Status agreedFailure() const;
  Status waitSlotFree(int slot, uint64_t seq);
  void fail(const Status& s);

  StreamSide& side_;
  const std::string name_;
  const double timeoutS_;
  const ProxyWatch watch_;
  const double stallS_;
  const std::shared_ptr<CallCancel> cancel_;
  uint64_t nextSeq_ = 0;  // calling thread only (the interposer serializes a comm)

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;
  bool stopping_ = false;
  std::atomic<bool> abort_{false};
  Status error_;
  std::atomic<bool> failed_{false};
  std::atomic<uint64_t> completed_{0};
  // The call the proxy runs (under mu_): its start, and whether it is done.
  bool running_ = false;
  Pending current_;
  std::chrono::steady_clock::time_point startedAt_;
  bool released_ = false;      // the running call's done was written
  bool proxyExited_ = false;   // proxyLoop returned
  bool watchdogFired_ = false;
  std::atomic<bool> abandoned_{false};
  std::condition_variable exitCv_;
  std::thread thread_;
  std::thread watchdog_;
};

}  // namespace gradcomp::nccl
