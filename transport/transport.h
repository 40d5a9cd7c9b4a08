// The abstract transport every algorithm is written against (gloo's pair.h
// idea): point-to-point, tagged, nonblocking messages between the ranks of one
// communicator, with per-peer traffic counters. Implementations: UCX between
// processes (ucx_transport.h), threads in one process (local_transport.h, for
// unit tests and the simulator).
//
// Contract:
// - Tags are 44 bits (kTagBits); the transport adds the source rank itself, so
//   a receive matches exactly one peer. Messages with the same (peer, tag) match
//   in posting order.
// - irecv accepts any message of at most `capacity` bytes and reports its length;
//   a longer one is a RemoteError naming the peer (never a silent truncation).
// - Buffers stay owned by the caller and must stay valid until completion.
// - wait/waitAll never spin forever: they yield the CPU, and a request still
//   pending GRADCOMP_TIMEOUT_S after the last progress fails with Err::Timeout
//   naming the peer; a dead peer fails with Err::RemoteError naming it. With a
//   failure monitor (failure_monitor.h) both name the rank the communicator
//   agreed on, and a verdict fails every pending and later operation at once.
//   After an error the transport is broken: every later call fails with that
//   first error.
// - Counters count payload bytes of completed messages per peer (not those on
//   kSignatureTag).
// - waitSeconds() is the time callers spent blocked in waitAll (wait and
//   sendRecv included): the communication part of a collective's time.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace gradcomp::transport {

constexpr int kTagBits = 44;
constexpr uint64_t kTagMask = (uint64_t(1) << kTagBits) - 1;

// Tag for step `step` of collective number `callSeq` (both wrap; FIFO matching
// per (peer, tag) keeps wrapped tags correct).
inline uint64_t makeTag(uint64_t callSeq, uint64_t step) {
  return ((callSeq & 0xFFFFFF) << 20 | (step & 0xFFFFF)) & kTagMask;
}

struct PeerCounters {
  uint64_t bytesSent = 0, bytesRecv = 0, msgsSent = 0, msgsRecv = 0;
};

using Handle = uint64_t;  // 0 is never a valid handle

// Reserved for Transport::barrier (no collective step reaches it).
constexpr uint64_t kBarrierTag = kTagMask - 1;
// Reserved for the host-topology exchange at wiring (host_topology.h).
constexpr uint64_t kTopologyGatherTag = kTagMask - 2;
constexpr uint64_t kTopologyTableTag = kTagMask - 3;
// Reserved for the per-call signatures (algorithms/call_check.h): control
// messages, left out of the counters, and still testable after the transport
// broke (test() on such a handle reads what arrived, to explain the failure).
constexpr uint64_t kSignatureTag = kTagMask - 4;

class FailureMonitor;  // transport/failure_monitor.h
class Transport;

// Something a blocked wait also watches (algorithms/call_check.h: the call's
// signature receives, so that a call whose ranks disagree ends every wait at
// once instead of at the timeout). check() runs on the waiting thread while
// the wait makes no progress, with no lock of the transport held: it may
// call test() on handles that are not among the waited ones, and must be
// cheap (it runs often). A non-Ok status ends the wait with that error: the
// waited handles are released and the transport is broken, as on any error.
class WaitWatch {
 public:
  virtual ~WaitWatch() = default;
  virtual Status check() = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  virtual Status isend(int peer, uint64_t tag, const void* buf, size_t bytes, Handle* out) = 0;
  virtual Status irecv(int peer, uint64_t tag, void* buf, size_t capacity, Handle* out) = 0;
  // Progress once; on completion *done = true, the handle is released and
  // *bytes (nullable) holds the message length.
  virtual Status test(Handle h, bool* done, size_t* bytes) = 0;
  // Complete all handles; bytes (nullable) receives each message length. On
  // error every handle is released.
  virtual Status waitAll(const Handle* handles, size_t n, size_t* bytes) = 0;
  // Abandon a pending operation and release its handle (error paths).
  virtual void cancel(Handle h) = 0;
  // Drives the transport without blocking, for callers that compute between
  // posting and waiting: UCX moves data, and answers rendezvous requests,
  // only when progressed. Never fails (errors surface in the next wait).
  // Transports that move data by themselves (threads, the simulator, whose
  // virtual clock must not depend on when it is called) do nothing.
  virtual void progress() {}

  virtual PeerCounters counters(int peer) const = 0;
  virtual void resetCounters() = 0;

  // The communicator's failure monitor, shared by every transport wired
  // through it (WAGMA's channels); null when there is none.
  virtual std::shared_ptr<FailureMonitor> failureMonitor() const { return nullptr; }
  // How messages to `peer` travel, for logs and tests: for UCX the
  // transports of the endpoint's lanes ("posix,cma", "tcp"); "" unknown.
  virtual std::string route(int /*peer*/) const { return ""; }
  // What the caller runs (static storage, e.g. an algorithm's registry name),
  // named in failure messages: "... in dense (call 18, step 8)".
  virtual void setActivity(const char* what) { activity_ = what; }
  const char* activity() const { return activity_; }

  // The watch every waitAll of this transport runs while it is blocked;
  // nullptr: none. Set and cleared by the thread that drives the transport
  // (one watch at a time). Wrappers forward it to what they wrap.
  virtual void setWaitWatch(WaitWatch* watch) { watch_ = watch; }

  // Helpers over the primitives above.
  Status wait(Handle h, size_t* bytes = nullptr) { return waitAll(&h, 1, bytes); }
  // Every rank has called it once all return Ok (zero-byte messages to rank
  // 0 and back on `tag`); bounded and failed like any wait.
  Status barrier(uint64_t tag = kBarrierTag);
  Status sendRecv(int dst, const void* sendBuf, size_t sendBytes, int src, void* recvBuf,
                  size_t recvCapacity, uint64_t tag, size_t* recvBytes = nullptr);
  PeerCounters totalCounters() const;
  // Seconds spent inside waitAll since creation; monotonic (resetCounters
  // leaves it). Read deltas around a call from the thread driving the transport.
  double waitSeconds() const { return waitSeconds_; }

 protected:
  // Opened at the top of every implementation's waitAll.
  class WaitClock {
   public:
    explicit WaitClock(Transport& t) : t_(t), start_(std::chrono::steady_clock::now()) {}
    ~WaitClock() {
      t_.waitSeconds_ +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    }
    WaitClock(const WaitClock&) = delete;
    WaitClock& operator=(const WaitClock&) = delete;

   private:
    Transport& t_;
    std::chrono::steady_clock::time_point start_;
  };
  // For implementations' waitAll, when a pass made no progress and no lock
  // of theirs is held: the watch's verdict (Ok without a watch).
  Status checkWaitWatch() { return watch_ ? watch_->check() : Status::Ok(); }

 private:
  double waitSeconds_ = 0;
  const char* activity_ = "";
  WaitWatch* watch_ = nullptr;
};

}  // namespace gradcomp::transport
