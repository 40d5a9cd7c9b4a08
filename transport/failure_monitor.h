// The failure monitor of one communicator: fast death detection and agreement
// on the culprit (docs/reliability.md).
//
// Every rank keeps one TCP connection to rank 0 (the monitor root), opened
// while the transport is wired (its address travels in the same exchange)
// and served by a thread per rank that only sleeps in poll(). Nothing is sent
// on the happy path: no heartbeat, no round per call.
// - Death: a process that dies (crash, SIGKILL, OOM kill) has its sockets
//   closed by the kernel; the root sees the connection close without a Bye
//   and tells every rank at once ("rank 2 (host, pid 4242) failed: connection
//   closed"). A client that loses the root the same way decides so itself.
// - Error: a rank that fails a collective by itself (a malformed message, a
//   call that disagrees with its peers' signatures) reports it
//   (agreeOnOwnFailure) and the root tells every rank, as for a death.
// - Stall: a transport wait that gives up (GRADCOMP_TIMEOUT_S without progress,
//   or a broken UCX link) reports its suspicion and waits at most kAgreementS
//   for the root's verdict (monitor_root.h says how the root finds the
//   culprit). The root acknowledges every suspicion at once: a client that
//   gets neither verdict nor acknowledgement names rank 0 itself (stopped or
//   hung: every client concludes the same); one that got the acknowledgement
//   but no verdict returns its own suspicion. The first decision wins; every
//   rank's transport fails with it, naming the same rank.
// Orderly teardown (the destructor) says Bye, so leaving is never a failure.
// Disabled (every query answers "no failure", settle() returns at once) with
// GRADCOMP_MONITOR=0, for one rank, or when the root cannot be reached.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "transport/monitor_wire.h"

namespace gradcomp::transport {

constexpr double kAgreementS = 1.5;  // a suspecting rank waits this long for the verdict

class FailureMonitor {
 public:
  // Before the communicator's address exchange: the root starts listening.
  // Never fails: a root that cannot listen runs without a monitor (INFO line).
  static std::shared_ptr<FailureMonitor> prepare(int rank, int size, double timeoutS);
  // The same with GRADCOMP_MONITOR given (tests).
  static std::shared_ptr<FailureMonitor> prepare(int rank, int size, double timeoutS, bool wanted);
  ~FailureMonitor();  // says Bye, stops the thread
  FailureMonitor(const FailureMonitor&) = delete;
  FailureMonitor& operator=(const FailureMonitor&) = delete;

  // This rank's part of the address exchange (printable, no NUL).
  const std::string& blob() const { return blob_; }
  // After the exchange: every rank's blob, and which ranks share this host.
  // A client connects to the root (bounded by min(GRADCOMP_TIMEOUT_S, 5 s)).
  void start(const std::vector<std::string>& blobs, const std::vector<bool>& sameHost);

  int rank() const { return rank_; }
  bool enabled() const { return enabled_.load(); }
  // A failure was decided (cheap; any thread).
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // "rank 2 (host, pid 4242) failed: <cause>", with its code; Ok while none.
  Status verdict() const;
  int failedRank() const;
  // "rank 2 (host, pid 4242)".
  std::string who(int rank) const;

  // A transport wait gave up on `peer` (`own` is its error): reports the
  // suspicion, waits at most kAgreementS for the verdict and returns it, or
  // `own` (saying no verdict came) when none did.
  Status settle(int peer, monitor::SuspectKind kind, double silenceS, const Status& own);
  // This rank failed by itself (e.g. its GPU stream never reached a call):
  // the others learn it as the verdict. Returns at once.
  void reportSelf(const Status& why);
  // This rank failed a collective by itself (an error, not a wait on a peer):
  // reports it like reportSelf, waits at most kAgreementS for the verdict and
  // returns it, so that this rank and every other one fail the call with the
  // same message (the first rank's report wins). `own` itself (saying no
  // verdict came) when none came; `own` at once without a monitor; the
  // verdict at once when there already is one.
  Status agreeOnOwnFailure(const Status& own);
  // Transport waits in progress on this rank, from any of its threads (the
  // collective's, WAGMA's stream): beginWait(peer) returns the token its
  // endWait takes. A probe's answer names the peer of the oldest wait still
  // in progress (-1: none), for the root's chain: one thread ending its wait
  // must not hide another's (a rank whose stream waited on a stopped peer
  // was blamed itself when its collective's wait ended meanwhile).
  uint64_t beginWait(int peer);
  void endWait(uint64_t token);
  int waitingOn() const;

  // Tests only: vanish without a Bye (a crash, as the others see it), or stop
  // answering probes (a stopped process).
  void crashForTest();
  void freezeForTest() { frozen_ = true; }

 private:
  FailureMonitor(int rank, int size, double timeoutS);
  void rootLoop();
  void clientLoop();
  bool connectToRoot(const std::vector<bool>& sameHost);
  void setVerdict(int rank, Err code, const std::string& cause);
  void send(const monitor::Message& m);  // client -> root, bounded
  void wake();
  void stopThread();

  const int rank_, size_;
  const double timeoutS_;
  const int ownerPid_;
  std::atomic<bool> enabled_{false};
  std::string blob_;
  monitor::RankInfo mine_;
  std::vector<monitor::RankInfo> table_;

  int listenFd_ = -1;  // root
  int rootFd_ = -1;    // client
  int wakeFd_ = -1;    // eventfd: stop, or local events for the root thread
  std::unique_ptr<std::thread> thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> frozen_{false};
  mutable std::mutex waitsMu_;
  std::vector<std::pair<uint64_t, int>> waits_;  // (token, peer), oldest first
  uint64_t nextWait_ = 0;
  std::atomic<bool> rootGone_{false};  // client: the root left in order (or vanished)
  std::atomic<uint64_t> suspicions_{0};  // client: nonce of the last Suspect sent
  std::atomic<uint64_t> acked_{0};       // client: the highest nonce the root acknowledged

  std::mutex sendMu_;  // writes to rootFd_ (transport threads and the monitor thread)

  mutable std::mutex mu_;  // everything below
  std::condition_variable cv_;
  std::atomic<bool> failed_{false};
  Status verdict_;
  int failedRank_ = -1;
  std::deque<monitor::Message> local_;  // root: this rank's own reports for its thread
};

}  // namespace gradcomp::transport
