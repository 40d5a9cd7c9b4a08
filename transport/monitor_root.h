// The failure monitor root's decision logic (rank 0's monitor thread; see
// failure_monitor.h). Pure logic over events and a clock, so it is unit-tested
// without sockets. The first confirmed failure wins and is decided once:
// - a rank's connection closes without a Bye: its process is gone
//   ("connection closed");
// - a rank reports its own failure (SuspectKind::Self): that failure;
// - a rank suspects a peer (no progress, or a broken link): the root probes
//   the suspect. No answer within kProbeS: it is stopped or hung. An answer
//   names the peer the suspect is itself waiting for: the root follows that
//   edge (a survivor waiting on another survivor is a victim, not the
//   culprit). An answer with no wait, kIdleAnswers times kRecheckS apart: the
//   suspect is alive but not inside a collective (it made another call, or is
//   stuck outside gradcomp). A cycle of waits decides nothing (each survivor
//   then reports its own suspicion).
// Every step is bounded, so a decision comes within kProbeS + a few
// round trips (or kIdleAnswers * kRecheckS) of the suspicion.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "transport/monitor_wire.h"

namespace gradcomp::transport::monitor {

constexpr double kProbeS = 1.0;
constexpr double kRecheckS = 0.25;
constexpr int kIdleAnswers = 3;

class RootEngine {
 public:
  using Clock = std::chrono::steady_clock;
  struct Hooks {
    // Sends a probe; false when there is no connection to that rank.
    std::function<bool(int rank, uint64_t nonce)> ping;
    // The decision (called once).
    std::function<void(int rank, Err code, const std::string& cause)> decide;
    // The peer rank 0's own transport waits on (-1: none), for probes of rank 0.
    std::function<int()> rootWaitingOn;
  };
  RootEngine(int size, Hooks hooks) : size_(size), hooks_(std::move(hooks)), left_(size_t(size)) {}

  void onClosed(int rank);              // closed without a Bye
  void onLeft(int rank);                // said Bye
  void onSuspect(int reporter, const Message& m);
  void onPong(int rank, const Message& m);
  void tick(Clock::time_point now);
  // When tick() must run next (time_point::max() when nothing is pending).
  Clock::time_point nextDeadline() const;
  bool decided() const { return decided_; }

 private:
  struct Origin {
    int reporter = -1;
    SuspectKind kind = SuspectKind::Silent;
    double seconds = 0;
    std::string detail;
  };
  struct Probe {
    Origin origin;
    std::vector<int> chain;  // reporter, then each rank that waits on the next
    uint64_t nonce = 0;
    Clock::time_point sent;
    bool answered = false;        // waiting for the recheck, not for a pong
    Clock::time_point recheckAt;
    int idleAnswers = 0;
  };
  void probe(int target, Probe p);
  void send(int target, Probe& p);
  void answer(int target, int waitingOn);
  std::string origin(const Probe& p) const;      // what the first suspicion said
  std::string reportedBy(const Probe& p) const;  // " (reported by rank 1, which waited for ...)"
  std::string cause(const Probe& p, const std::string& finding) const;
  void decide(int rank, Err code, const std::string& cause);

  const int size_;
  Hooks hooks_;
  std::vector<bool> left_;
  bool decided_ = false;
  uint64_t nonce_ = 0;
  std::map<int, Probe> probes_;  // by target
};

}  // namespace gradcomp::transport::monitor
