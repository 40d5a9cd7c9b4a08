#include "plugin/nccl/cuda_executor_proxy.h"

#include <algorithm>
#include <chrono>

#include "common/log.h"

namespace gradcomp::nccl {
namespace {

using device::exec::loadAcquire;
using device::exec::Slot;
using device::exec::storeRelease;
using Clock = std::chrono::steady_clock;

// Polls `cond` until it holds, `stop` holds, or `timeoutS` passes. Spins
// briefly, then yields, then sleeps in growing steps up to 200 us: cheap when
// the flag is about to flip, and never a busy core when it is far off (more
// ranks than cores). Returns true when cond held.
template <class Cond, class Stop>
bool pollUntil(Cond cond, Stop stop, double timeoutS) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeoutS);
  auto nap = std::chrono::microseconds(1);
  for (int i = 0;; ++i) {
    if (cond()) return true;
    if (stop() || Clock::now() >= deadline) return cond();
    if (i < 64) continue;
    if (i < 256) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(nap);
    if (nap < std::chrono::microseconds(200)) nap *= 2;
  }
}

}  // namespace

ProxyEngine::ProxyEngine(StreamSide& side, std::string name, double timeoutS, ProxyWatch watch,
                         std::function<void()> threadInit)
    : side_(side),
      name_(std::move(name)),
      timeoutS_(timeoutS),
      watch_(std::move(watch)),
      stallS_(watch_.stallS > 0 ? watch_.stallS : stallWindow(timeoutS)),
      cancel_(watch_.cancel ? watch_.cancel : std::make_shared<CallCancel>()) {
  thread_ = std::thread([this, init = std::move(threadInit)] {
    if (init) init();
    proxyLoop();
    std::lock_guard<std::mutex> lock(mu_);
    proxyExited_ = true;
    exitCv_.notify_all();
  });
  watchdog_ = std::thread([this] { watchdogLoop(); });
}

Status CallCancel::check() const {
  if (!cancelled()) return Status::Ok();
  std::lock_guard<std::mutex> lock(mu_);
  return why_;
}

void CallCancel::cancel(const Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (cancelled()) return;
  why_ = why;
  cancelled_.store(true, std::memory_order_release);
}

ProxyEngine::~ProxyEngine() { shutdown(false); }

Status ProxyEngine::asyncError() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void ProxyEngine::fail(const Status& s) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!error_.ok()) return;
  error_ = s;
  failed_ = true;
  GC_WARN("CUDA executor (%s): %s; later calls complete with this error",
          name_.c_str(), s.toString().c_str());
}

Status ProxyEngine::waitSlotFree(int slot, uint64_t seq) {
  const int depth = side_.depth();
  if (seq < uint64_t(depth)) return Status::Ok();
  const uint64_t previous = seq - depth + 1;  // flag value of the slot's last user
  Slot* s = side_.slot(slot);
  Status agreed;
  const bool freed = pollUntil([&] { return loadAcquire(&s->released) >= previous; },
                               [&] { return !(agreed = agreedFailure()).ok(); }, timeoutS_);
  if (!freed && !agreed.ok()) return agreed;
  GC_REQUIRE(freed, Err::Timeout,
             "CUDA executor (%s): all %d slots still in flight after GRADCOMP_TIMEOUT_S = %g s "
             "(the stream has not finished call %llu)",
             name_.c_str(), depth, timeoutS_, (unsigned long long)(seq - depth));
  return Status::Ok();
}

Status ProxyEngine::submit(Job job, void* stream, std::string what) {
  GC_CHECK(asyncError());
  {
    std::lock_guard<std::mutex> lock(mu_);
    GC_REQUIRE(!stopping_, Err::Internal, "CUDA executor (%s): submit after shutdown",
               name_.c_str());
  }
  const uint64_t seq = nextSeq_;
  const int slot = int(seq % uint64_t(side_.depth()));
  GC_CHECK(waitSlotFree(slot, seq));
  // Enqueue both signals before the proxy may see the job: if the second
  // enqueue fails nothing was handed over and the stream's ready for seq is
  // answered by a done-with-error below, so nothing waits forever.
  GC_CHECK(side_.enqueueReady(slot, seq, stream));
  Status s = side_.enqueueWaitDone(slot, seq, stream);
  ++nextSeq_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!s.ok()) job = [s]() { return s; };
    queue_.push_back(Pending{seq, slot, std::move(job), std::move(what)});
  }
  cv_.notify_one();
  return s;
}

Status ProxyEngine::waitIdle() {
  const uint64_t target = nextSeq_;
  Status agreed;
  const bool idle = pollUntil([&] { return completed_.load() >= target; },
                              [&] { return failed_.load() || !(agreed = agreedFailure()).ok(); },
                              timeoutS_);
  GC_CHECK(asyncError());  // idle because the calls failed is no success
  if (idle) return Status::Ok();
  if (!agreed.ok()) return agreed;
  return makeStatus(Err::Timeout,
                    "CUDA executor (%s): %llu of %llu calls still in flight after "
                    "GRADCOMP_TIMEOUT_S = %g s, waiting to prepare a call of a new shape (is the "
                    "GPU stream blocked?)",
                    name_.c_str(), (unsigned long long)(target - completed_.load()),
                    (unsigned long long)target, timeoutS_);
}

Status ProxyEngine::waitReady(const Pending& p) {
  Slot* s = side_.slot(p.slot);
  Status agreed;
  const bool ready = pollUntil([&] { return loadAcquire(&s->ready) >= p.seq + 1; },
                               [&] { return abort_.load() || !(agreed = agreedFailure()).ok(); },
                               timeoutS_);
  if (ready) return Status::Ok();
  if (!agreed.ok()) return agreed;
  if (abort_) {
    return makeStatus(Err::Internal, "CUDA executor (%s): call %llu aborted at shutdown before "
                      "its stream reached it", name_.c_str(), (unsigned long long)p.seq);
  }
  // This rank's own failure: the peers waiting for it learn it as the verdict.
  Status own = makeStatus(Err::Timeout,
                          "CUDA executor (%s): the stream did not reach call %llu within "
                          "GRADCOMP_TIMEOUT_S = %g s (is the GPU stream blocked?)",
                          name_.c_str(), (unsigned long long)p.seq, timeoutS_);
  if (watch_.reportOwnFailure) watch_.reportOwnFailure(own);
  return own;
}

Status ProxyEngine::agreedFailure() const {
  return watch_.agreedFailure ? watch_.agreedFailure() : Status::Ok();
}

Status ProxyEngine::runOne(Pending& p) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) return error_;  // broken transport: complete without running
  }
  if (abort_) {
    return makeStatus(Err::Internal, "CUDA executor (%s): call %llu aborted at shutdown",
                      name_.c_str(), (unsigned long long)p.seq);
  }
  GC_CHECK(waitReady(p));
  {  // the watchdog times the job from here
    std::lock_guard<std::mutex> lock(mu_);
    running_ = true;
    released_ = false;
    current_ = Pending{p.seq, p.slot, nullptr, p.what};
    startedAt_ = Clock::now();
  }
  return p.job();
}

void ProxyEngine::proxyLoop() {
  for (;;) {
    Pending p;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !queue_.empty() || stopping_; });
      if (queue_.empty()) return;  // stopping and drained
      p = std::move(queue_.front());
      queue_.pop_front();
    }
    const Status st = runOne(p);
    if (!st.ok()) fail(st);
    complete(p, st);
    GC_TRACE(PLUGIN, "CUDA executor (%s): call %llu done (%s)", name_.c_str(),
             (unsigned long long)p.seq, st.ok() ? "ok" : st.toString().c_str());
  }
}

void ProxyEngine::complete(const Pending& p, const Status& st) {
  std::lock_guard<std::mutex> lock(mu_);
  const bool mine = !running_ || current_.seq != p.seq || !released_;
  if (running_ && current_.seq == p.seq) {
    running_ = false;
    released_ = true;
  }
  if (!mine) return;  // the watchdog released this call already
  Slot* s = side_.slot(p.slot);
  s->status = st.ok() ? 0 : uint64_t(st.code());
  storeRelease(&s->done, p.seq + 1);  // last: publishes the words above
  completed_.fetch_add(1);
}

void ProxyEngine::releaseQueued(std::unique_lock<std::mutex>& lock) {
  if (queue_.empty()) return;
  std::deque<Pending> stranded;
  stranded.swap(queue_);
  const Status st = error_;
  lock.unlock();
  for (const Pending& p : stranded) {
    Slot* s = side_.slot(p.slot);
    s->status = uint64_t(st.code());
    storeRelease(&s->done, p.seq + 1);
    completed_.fetch_add(1);
  }
  lock.lock();
}

// Wakes a few times per window; needs no CUDA call to release a stream.
void ProxyEngine::watchdogLoop() {
  const auto tick = std::chrono::duration<double>(std::min(0.25, std::max(0.01, stallS_ / 8)));
  uint64_t seenSeq = ~uint64_t(0), seenProgress = 0;
  Clock::time_point movedAt;
  std::unique_lock<std::mutex> lock(mu_);
  while (!proxyExited_) {
    exitCv_.wait_for(lock, tick);
    // Once fired, the proxy may never come back from where it is stuck: the
    // calls queued behind it would park their streams forever (the next
    // bucket of a DDP step). They complete with the error from here, as the
    // proxy would have completed them without running.
    if (watchdogFired_) releaseQueued(lock);
    if (!running_ || released_) continue;
    // Progress: a new call, or the running call's counter moved. The
    // counter is read outside mu_ (it must never wait for the proxy).
    const uint64_t seq = current_.seq;
    const Clock::time_point started = startedAt_;
    lock.unlock();
    const uint64_t progress = watch_.progress ? watch_.progress() : 0;
    lock.lock();
    if (seq != seenSeq) {
      seenSeq = seq;
      seenProgress = progress;
      movedAt = started;
    } else if (progress != seenProgress) {
      seenProgress = progress;
      movedAt = Clock::now();
    }
    if (!running_ || released_ || current_.seq != seq) continue;
    const double still = std::chrono::duration<double>(Clock::now() - movedAt).count();
    if (still < stallS_) continue;
    const double ran = std::chrono::duration<double>(Clock::now() - startedAt_).count();
    const std::string step = watch_.step ? watch_.step() : std::string();
    Status st = makeStatus(
        Err::Timeout,
        "CUDA executor (%s): call %llu%s%s made no progress for %.1f s (the watchdog's window; "
        "GRADCOMP_TIMEOUT_S = %g s) after running %.1f s; stalled on the proxy thread%s%s. The "
        "watchdog released the caller's stream; the communicator is failed",
        name_.c_str(), (unsigned long long)current_.seq, current_.what.empty() ? "" : ", ",
        current_.what.c_str(), still, timeoutS_, ran, step.empty() ? "" : " at ", step.c_str());
    released_ = true;  // from here the proxy leaves this call's words alone
    watchdogFired_ = true;
    exitCv_.notify_all();  // a shutdown waiting for the proxy stops waiting
    if (error_.ok()) {
      error_ = st;
      failed_ = true;
    }
    const Pending stuck{current_.seq, current_.slot, nullptr, {}};
    const Status reason = error_;
    lock.unlock();
    // Cancelled and reported before the stream moves on, as waitReady
    // reports: whoever sees the call released finds its job's later steps
    // refused, the peers told and the error set.
    cancel_->cancel(reason);
    GC_WARN("%s", st.toString().c_str());
    if (watch_.reportOwnFailure) watch_.reportOwnFailure(st);
    Slot* s = side_.slot(stuck.slot);
    s->status = uint64_t(st.code());
    storeRelease(&s->done, stuck.seq + 1);
    completed_.fetch_add(1);
    lock.lock();
    releaseQueued(lock);
  }
}

void ProxyEngine::shutdown(bool abortPending) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (abortPending) abort_ = true;
    stopping_ = true;
    cv_.notify_all();
    // Never an unbounded join: the proxy finishes (each call and each wait of
    // it bounded by the timeout), or the watchdog gives up on it. A proxy the
    // watchdog gave up on may never come back from where it is stuck: wait a
    // bounded time more, then leave it (the process can still exit), and
    // release whatever is still queued behind it.
    exitCv_.wait(lock, [&] { return proxyExited_ || watchdogFired_; });
    if (!proxyExited_ &&
        !exitCv_.wait_for(lock, std::chrono::duration<double>(std::min(timeoutS_, 5.0)),
                          [&] { return proxyExited_; })) {
      GC_WARN("CUDA executor (%s): the proxy thread is still stuck; it is left behind",
              name_.c_str());
      if (thread_.joinable()) thread_.detach();
      abandoned_ = true;
      releaseQueued(lock);
    }
  }
  if (thread_.joinable()) thread_.join();
  if (watchdog_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      proxyExited_ = true;  // also when the proxy was left behind
    }
    exitCv_.notify_all();
    watchdog_.join();
  }
}

}  // namespace gradcomp::nccl
