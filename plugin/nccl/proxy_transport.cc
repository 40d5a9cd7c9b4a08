#include "plugin/nccl/proxy_transport.h"

namespace gradcomp::nccl {

CancellableTransport::CancellableTransport(std::shared_ptr<transport::Transport> inner,
                                           std::shared_ptr<const CallCancel> cancel)
    : inner_(std::move(inner)), cancel_(std::move(cancel)) {}

CancellableTransport::~CancellableTransport() {
  // The inner transport may outlive this one (shared): leave no watch of ours.
  if (inner_) inner_->setWaitWatch(user_.load());
}

Status CancellableTransport::Watch::check() {
  GC_CHECK(t_.cancel_->check());
  transport::WaitWatch* user = t_.user_.load();
  return user ? user->check() : Status::Ok();
}

void CancellableTransport::setWaitWatch(transport::WaitWatch* watch) {
  user_.store(watch);
  inner_->setWaitWatch(watch);
}

Status CancellableTransport::isend(int peer, uint64_t tag, const void* buf, size_t bytes,
                                   transport::Handle* out) {
  GC_CHECK(cancel_->check());
  GC_CHECK(inner_->isend(peer, tag, buf, bytes, out));
  ops_.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

Status CancellableTransport::irecv(int peer, uint64_t tag, void* buf, size_t capacity,
                                   transport::Handle* out) {
  GC_CHECK(cancel_->check());
  GC_CHECK(inner_->irecv(peer, tag, buf, capacity, out));
  ops_.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

Status CancellableTransport::test(transport::Handle h, bool* done, size_t* bytes) {
  *done = false;
  GC_CHECK(cancel_->check());
  GC_CHECK(inner_->test(h, done, bytes));
  if (*done) ops_.fetch_add(1, std::memory_order_relaxed);
  // Completed, but after the cancellation: what arrived must not be used.
  Status late = cancel_->check();
  if (!late.ok()) *done = false;
  return late;
}

Status CancellableTransport::waitAll(const transport::Handle* handles, size_t n, size_t* bytes) {
  Status s = cancel_->check();
  if (!s.ok()) {
    for (size_t i = 0; i < n; ++i) inner_->cancel(handles[i]);  // released, as on any error
    return s;
  }
  inner_->setWaitWatch(&watch_);
  s = inner_->waitAll(handles, n, bytes);
  inner_->setWaitWatch(user_.load());
  if (s.ok()) ops_.fetch_add(n ? n : 1, std::memory_order_relaxed);
  GC_CHECK(cancel_->check());  // completed after the cancellation: refused all the same
  return s;
}

}  // namespace gradcomp::nccl
