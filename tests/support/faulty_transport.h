// A Transport wrapper that injects one rank's fault for the fault-injection
// matrix (tests/test_faults_matrix.cc). It forwards everything to the real
// transport and counts posted operations (isend + irecv); once armed, at
// operation number `atOp` it
// - Kill / Stop: posts that operation, then raises SIGKILL / SIGSTOP, so the
//   rank dies (or freezes) with traffic in flight at a chosen phase;
// - GarbageLength: from then on replaces every outgoing payload by random
//   bytes of a different length (shorter, empty or longer than the receiver
//   expects): framing that a correct receiver must reject, never use;
// - GarbagePayload: from then on keeps each payload's length but overwrites
//   its bytes (all of them, or a few at random positions): well-framed nonsense
//   that decoders must survive (values inside valid framing are
//   indistinguishable from real gradients; see docs/reliability.md).
// Garbage buffers are owned here until their send completes or is cancelled.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <unordered_map>
#include <vector>

#include "transport/transport.h"

namespace gradcomp::test {

enum class FaultKind { Kill, Stop, GarbageLength, GarbagePayload };
const char* faultKindName(FaultKind kind);

class FaultyTransport : public transport::Transport {
 public:
  FaultyTransport(std::unique_ptr<transport::Transport> inner, FaultKind kind, uint64_t seed);

  // The fault fires at operation number atOp (counted from construction).
  void arm(uint64_t atOp) { atOp_ = atOp; armed_ = true; }
  // Kill / Stop now if the armed operation was never reached.
  void fireNow();
  // Runs right before a Kill / Stop signal is raised (the harness records the time).
  void onFire(std::function<void()> hook) { onFire_ = std::move(hook); }
  uint64_t operations() const { return ops_; }
  bool fired() const { return armed_ && ops_ > atOp_; }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  Status isend(int peer, uint64_t tag, const void* buf, size_t bytes,
               transport::Handle* out) override;
  Status irecv(int peer, uint64_t tag, void* buf, size_t capacity,
               transport::Handle* out) override;
  Status test(transport::Handle h, bool* done, size_t* bytes) override;
  void progress() override { inner_->progress(); }
  Status waitAll(const transport::Handle* handles, size_t n, size_t* bytes) override;
  void cancel(transport::Handle h) override;
  std::shared_ptr<transport::FailureMonitor> failureMonitor() const override {
    return inner_->failureMonitor();
  }
  void setActivity(const char* what) override {
    Transport::setActivity(what);
    inner_->setActivity(what);
  }
  void setWaitWatch(transport::WaitWatch* watch) override { inner_->setWaitWatch(watch); }
  transport::PeerCounters counters(int peer) const override { return inner_->counters(peer); }
  void resetCounters() override { inner_->resetCounters(); }

 private:
  bool firing() const { return armed_ && ops_ >= atOp_; }
  void afterPost();  // counts the operation; Kill / Stop fire here
  std::vector<uint8_t> garbageFor(const void* buf, size_t bytes);

  std::unique_ptr<transport::Transport> inner_;
  FaultKind kind_;
  std::mt19937_64 rng_;
  bool armed_ = false;
  uint64_t atOp_ = 0;
  uint64_t ops_ = 0;
  std::unordered_map<transport::Handle, std::vector<uint8_t>> garbage_;
  std::function<void()> onFire_;
};

}  // namespace gradcomp::test
