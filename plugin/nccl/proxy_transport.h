// The transport a proxy's job runs on (cuda_executor.cc): the communicator's
// transport seen through its engine's CallCancel (cuda_executor_proxy.h).
// - It counts what moves (operations posted, completed) for the watchdog's
//   progress: an atomic read from the watchdog thread, no lock.
// - Once the call is cancelled (the watchdog released the caller's stream),
//   it refuses every later step with the cancellation's reason: posts, tests
//   and waits fail; a wait that returns after the cancellation fails too, so
//   nothing that arrives late is decoded into a buffer the caller's stream
//   has moved past; a wait blocked meanwhile ends at its next watch check
//   (Transport::WaitWatch). cancel() and progress() always go through: they
//   release what was posted.
// One per communicator, for its life, at a stable address: algorithm state
// keeps references to the transport it ran on (the hierarchy's views).
// Shared: the inner transport is owned (or not, for a caller that outlives
// every job) through the shared_ptr it is given.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "plugin/nccl/cuda_executor_proxy.h"
#include "transport/transport.h"

namespace gradcomp::nccl {

class CancellableTransport final : public transport::Transport {
 public:
  CancellableTransport(std::shared_ptr<transport::Transport> inner,
                       std::shared_ptr<const CallCancel> cancel);
  ~CancellableTransport() override;

  // Operations posted and completed so far (any thread).
  uint64_t operations() const { return ops_.load(std::memory_order_relaxed); }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  Status isend(int peer, uint64_t tag, const void* buf, size_t bytes,
               transport::Handle* out) override;
  Status irecv(int peer, uint64_t tag, void* buf, size_t capacity,
               transport::Handle* out) override;
  Status test(transport::Handle h, bool* done, size_t* bytes) override;
  Status waitAll(const transport::Handle* handles, size_t n, size_t* bytes) override;
  void cancel(transport::Handle h) override { inner_->cancel(h); }
  void progress() override { inner_->progress(); }
  transport::PeerCounters counters(int peer) const override { return inner_->counters(peer); }
  void resetCounters() override { inner_->resetCounters(); }
  std::shared_ptr<transport::FailureMonitor> failureMonitor() const override {
    return inner_->failureMonitor();
  }
  std::string route(int peer) const override { return inner_->route(peer); }
  void setActivity(const char* what) override {
    Transport::setActivity(what);
    inner_->setActivity(what);
  }
  void setWaitWatch(transport::WaitWatch* watch) override;

 private:
  // The watch the inner transport runs during a wait here: the cancellation
  // first, then the caller's own watch.
  class Watch final : public transport::WaitWatch {
   public:
    explicit Watch(const CancellableTransport& t) : t_(t) {}
    Status check() override;

   private:
    const CancellableTransport& t_;
  };

  const std::shared_ptr<transport::Transport> inner_;
  const std::shared_ptr<const CallCancel> cancel_;
  std::atomic<uint64_t> ops_{0};
  std::atomic<transport::WaitWatch*> user_{nullptr};
  Watch watch_{*this};
};

}  // namespace gradcomp::nccl
