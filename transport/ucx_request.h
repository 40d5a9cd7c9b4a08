// Completion records for UCX tag operations. Every operation gets one Op; the
// UCX callback only marks it done (never frees it), so an Op whose handle was
// abandoned stays owned by its transport until UCX is finished with it.
#pragma once

#include <ucp/api/ucp.h>

#include <cstddef>
#include <cstdint>

namespace gradcomp::transport::ucx {

struct Op {
  bool isSend = false;
  int peer = -1;
  uint64_t tag = 0;      // user tag (without the source rank)
  size_t bytes = 0;      // send length or receive capacity
  void* request = nullptr;  // UCX request; null when completed immediately
  bool done = false;
  ucs_status_t status = UCS_OK;
  size_t length = 0;     // message length once done
};

// Wire tag: the sender's rank above the 44 user bits, so that a receive with a
// full mask matches exactly one peer.
uint64_t wireTag(int srcRank, uint64_t tag);
constexpr uint64_t kFullMask = ~uint64_t(0);

// Post a send of op->bytes / a receive of up to op->bytes with the given wire
// tag; the Op is filled in (done when completed at once, status set on an
// immediate error). postRecvProbed receives a message found by ucp_tag_probe_nb.
void postSend(ucp_ep_h ep, uint64_t tag, const void* buf, Op* op);
void postRecv(ucp_worker_h worker, uint64_t tag, uint64_t mask, void* buf, Op* op);
void postRecvProbed(ucp_worker_h worker, ucp_tag_message_h msg, void* buf, Op* op);

// Releases the UCX request of a finished Op (the Op itself stays the caller's).
void freeRequest(Op* op);
// Asks UCX to drop a pending receive (the callback then reports CANCELED).
void cancelRequest(ucp_worker_h worker, Op* op);

}  // namespace gradcomp::transport::ucx
