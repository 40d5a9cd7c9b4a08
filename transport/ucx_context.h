// Internal UCX plumbing shared by the UCX transport and the UCX bootstrap:
// the process-wide ucp_context, worker creation, and the progress/wait loop
// that spins briefly and then sleeps on the worker's event fd.
#pragma once

#include <ucp/api/ucp.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace gradcomp::transport::ucx {

// The process's ucp_contexts (TAG | WAKEUP, UCX_* from the environment),
// each created at first use. Thread-safe. A forked child gets fresh ones: a
// context inherited across fork() is unusable.
//  - Transport: exactly what UCX_TLS etc. select.
//  - Bootstrap: the same but always TCP on every device, because UCX's
//    client-server connections (ucp_listener) need a network transport that
//    can detect peer failure, even when UCX_TLS names only shared memory.
enum class ContextKind { Transport, Bootstrap };
Status context(ContextKind kind, ucp_context_h* out);

// After a peer failure UCX's own warnings (unmatched messages at worker
// destroy, endpoint errors during teardown) are noise that would end the
// user's log after gradcomp's error: from the first failure on, UCX warnings
// and errors go to gradcomp's log at INFO (TRANSPORT) instead of stderr.
// Before any failure UCX prints as it always does. Process-wide, idempotent.
void quietLogsAfterFailure();

// "<ucs_status_string> (<code>)" for messages.
std::string statusText(ucs_status_t s);

// Identity of this host as UCX's shared-memory transports see it: the kernel
// boot id plus the network namespace, so ranks in different namespaces (the
// emulated hosts of tools/netlab) count as different hosts.
std::string hostIdentity();

// A worker with its event fd; destroys the worker on destruction.
class Worker {
 public:
  Worker() = default;
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // `what` names the owner in errors ("transport", "bootstrap"); a
  // non-negative clientId is sent to listeners by client-server endpoints.
  Status create(ContextKind kind, const char* what, int64_t clientId = -1);
  // This worker's address blob, to be sent to peers. netOnly: the address of
  // its network interfaces only (UCP_WORKER_ADDRESS_FLAG_NET_ONLY): an
  // endpoint created from it never uses shared memory; empty of transports
  // when UCX_TLS names no network transport (ep creation then fails).
  Status address(std::string* out, bool netOnly = false) const;
  ucp_worker_h get() const { return worker_; }
  // Destroys the worker now (idempotent).
  void destroy();

 private:
  ucp_worker_h worker_ = nullptr;
  int efd_ = -1;
  friend class Waiter;
};

// One wait loop: call progress() until the caller's condition holds; call
// idle() when an iteration made no progress. idle() busy-polls for spinUs after
// the last progress, then arms the worker and sleeps on its event fd for at
// most a few milliseconds, so that more ranks than cores all advance.
// sinceProgress() is the silence so far, for timeouts.
class Waiter {
 public:
  Waiter(const Worker& worker, int spinUs);
  // One ucp_worker_progress; true when UCX reported work done.
  bool progress();
  // Record progress observed by the caller (e.g. a request completed).
  void noteProgress();
  void idle();
  double sinceProgress() const;

 private:
  using Clock = std::chrono::steady_clock;
  ucp_worker_h worker_;
  int efd_;
  Clock::duration spin_;
  Clock::time_point last_;
};

}  // namespace gradcomp::transport::ucx
