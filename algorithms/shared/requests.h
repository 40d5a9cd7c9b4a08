// The one request set every algorithm posts its transfers through (dense,
// hierarchy, sparse, quant, cltk, wagma; the call check). It is RAII: what
// it posted and nobody completed, released or cancelled is cancelled in its
// destructor, on every exit path, exceptions included, so no receive can
// write into freed memory and no send can read a dead stack frame
// (docs/design.md, "Every exit path cleans up").
//
// Contract:
// - Posting returns a slot index (stable for the set's life) that names the
//   transfer in wait(), test(), bytes(), peer(), cancel() and release().
// - A receive posted with irecv() must fill exactly `bytes` bytes; one posted
//   with irecvUpTo() may be shorter than its capacity (bytes() reads the
//   length). A receive of another length is a RemoteError that names the
//   peer, the set's `what` and both lengths. (A longer message is the
//   transport's RemoteError: see transport.h.)
// - wait(), waitAll(), test() and testAll() release the handles they
//   complete, on success and on error (the transport's rule); after an error
//   the transport is broken, and the destructor cancels what is left.
// - release() hands a pending handle over to the caller, who must then
//   complete or cancel it; the set forgets it.
// - One set is used by one thread at a time (the transport's rule).
//
// Tags are the caller's (transport::makeTag or a reserved tag); the set
// adds nothing to them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "transport/transport.h"

namespace gradcomp::algo::shared {

class RequestSet {
 public:
  // `what` (static storage, e.g. "dense allreduce") prefixes length errors.
  explicit RequestSet(transport::Transport& net, const char* what = "transfer")
      : net_(net), what_(what) {}
  ~RequestSet() { cancel(); }
  RequestSet(const RequestSet&) = delete;
  RequestSet& operator=(const RequestSet&) = delete;

  // Posts a send of `bytes` bytes from `data` (valid until it completes).
  // *slot (nullable) gets its slot.
  Status isend(int peer, uint64_t tag, const void* data, size_t bytes, size_t* slot = nullptr);
  // Posts a receive that must be exactly `bytes` long.
  Status irecv(int peer, uint64_t tag, void* data, size_t bytes, size_t* slot = nullptr);
  // Posts a receive of at most `capacity` bytes, of any length. *length
  // (nullable) gets the message length when it completes (bytes() too).
  Status irecvUpTo(int peer, uint64_t tag, void* data, size_t capacity, size_t* length = nullptr,
                   size_t* slot = nullptr);

  // Blocks until `slot` completes (Ok at once if it already did, or was
  // cancelled or released). Checks a receive's length.
  Status wait(size_t slot);
  // Blocks until every pending slot completes; every handle is released,
  // also on error. Checks every receive's length (the first mismatch is
  // returned).
  Status waitAll();
  // Progresses once without blocking: *done = true when `slot` is no longer
  // pending (then its length is checked as in wait()). An error releases it.
  Status test(size_t slot, bool* done);
  // test() of every pending slot: *done = true when none is pending.
  Status testAll(bool* done);
  // Drives the transport without blocking (Transport::progress), for callers
  // that compute between posting and waiting.
  void progress() { net_.progress(); }

  // Cancels `slot` if still pending (its buffer may be reused at once).
  void cancel(size_t slot);
  // Cancels every pending slot (what the destructor does).
  void cancel();
  // Hands the pending handle of `slot` to the caller (0 if not pending): the
  // set no longer waits for or cancels it.
  transport::Handle release(size_t slot);

  size_t size() const { return slots_.size(); }
  bool pending(size_t slot) const { return slots_.at(slot).handle != 0; }
  bool anyPending() const;
  int peer(size_t slot) const { return slots_.at(slot).peer; }
  // Length of a completed transfer (0 before completion).
  size_t bytes(size_t slot) const { return slots_.at(slot).got; }
  transport::Transport& net() { return net_; }

 private:
  static constexpr size_t kAny = SIZE_MAX;
  struct Slot {
    transport::Handle handle = 0;  // 0: completed, cancelled or released
    int peer = -1;
    bool recv = false;
    size_t expect = kAny;        // receives: the exact length, or kAny
    size_t got = 0;              // the length at completion
    size_t* length = nullptr;    // irecvUpTo's out-parameter
  };
  Status post(bool recv, int peer, uint64_t tag, void* data, size_t bytes, size_t expect,
              size_t* length, size_t* slot);
  Status complete(Slot& s, size_t got);  // records and checks the length

  transport::Transport& net_;
  const char* what_;
  std::vector<Slot> slots_;
};

}  // namespace gradcomp::algo::shared
