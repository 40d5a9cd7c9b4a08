// Threads-in-one-process transport. All endpoints of one fabric share a mutex;
// each rank has a condition variable that is signalled when something it may
// be waiting for changes (a message arrives for it, a peer breaks or closes).
//
// Matching: per (dst, src, tag) there is a FIFO of unmatched sends (copied into
// the fabric) and a FIFO of posted receives. A send is delivered straight into
// the oldest posted receive when there is one, else buffered; a receive takes
// the oldest buffered message when there is one, else waits in its FIFO. Both
// FIFOs keep posting order, which is the transport contract.
#include "transport/local_transport.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>

#include "common/log.h"
#include "common/param.h"

namespace gradcomp::transport {
namespace {

using Clock = std::chrono::steady_clock;

struct LocalRequest {
  bool isSend = false;
  int peer = -1;
  uint64_t tag = 0;
  void* buf = nullptr;    // receive buffer
  size_t capacity = 0;    // receive capacity, or send length
  bool done = false;
  size_t length = 0;      // message length once done
  Status status;          // error detected by the matching side
};
using RequestPtr = std::shared_ptr<LocalRequest>;

struct Mailbox {
  std::deque<std::vector<uint8_t>> unmatched;  // sends nobody received yet
  std::deque<RequestPtr> posted;               // receives nobody matched yet
};

}  // namespace

struct LocalFabric {
  explicit LocalFabric(int n) : size(n), wake(n), broken(n), closed(n, false) {}
  const int size;
  std::mutex mu;
  std::vector<std::condition_variable> wake;  // per destination rank
  std::vector<Status> broken;                 // first error of each endpoint
  std::vector<bool> closed;                   // endpoint destroyed
  std::map<std::tuple<int, int, uint64_t>, Mailbox> boxes;  // (dst, src, tag)

  void notifyAll() {
    for (auto& cv : wake) cv.notify_all();
  }
};

namespace {

class LocalTransport final : public Transport {
 public:
  LocalTransport(std::shared_ptr<LocalFabric> fabric, int rank, double timeoutS, Status config)
      : fabric_(std::move(fabric)), rank_(rank), timeoutS_(timeoutS),
        counters_(fabric_->size) {
    if (!config.ok()) broken_ = config;
  }

  ~LocalTransport() override {
    std::lock_guard<std::mutex> lock(fabric_->mu);
    for (auto& [h, req] : requests_)
      if (!req->done && !req->isSend) unpostLocked(req);
    requests_.clear();
    fabric_->closed[rank_] = true;
    fabric_->notifyAll();
  }

  int rank() const override { return rank_; }
  int size() const override { return fabric_->size; }

  Status isend(int peer, uint64_t tag, const void* buf, size_t bytes, Handle* out) override {
    GC_CHECK(checkArgs(peer, buf, bytes, out, "isend"));
    auto req = std::make_shared<LocalRequest>();
    req->isSend = true;
    req->peer = peer;
    req->tag = tag & kTagMask;
    req->capacity = bytes;
    std::lock_guard<std::mutex> lock(fabric_->mu);
    Mailbox& box = fabric_->boxes[{peer, rank_, req->tag}];
    if (!box.posted.empty()) {
      RequestPtr recv = box.posted.front();
      box.posted.pop_front();
      if (bytes > recv->capacity) {
        recv->status = makeStatus(Err::RemoteError,
                                  "message of %zu bytes from peer %d (tag %#llx) exceeds the "
                                  "receive capacity of %zu bytes",
                                  bytes, rank_, (unsigned long long)req->tag, recv->capacity);
      } else if (bytes) {
        memcpy(recv->buf, buf, bytes);
      }
      recv->length = bytes;
      recv->done = true;
      fabric_->wake[peer].notify_all();
    } else {
      const auto* p = static_cast<const uint8_t*>(buf);
      box.unmatched.emplace_back(p, p + bytes);
    }
    req->done = true;  // copy semantics: the caller's buffer is free now
    req->length = bytes;
    *out = insertLocked(std::move(req));
    return Status::Ok();
  }

  Status irecv(int peer, uint64_t tag, void* buf, size_t capacity, Handle* out) override {
    GC_CHECK(checkArgs(peer, buf, capacity, out, "irecv"));
    auto req = std::make_shared<LocalRequest>();
    req->peer = peer;
    req->tag = tag & kTagMask;
    req->buf = buf;
    req->capacity = capacity;
    std::lock_guard<std::mutex> lock(fabric_->mu);
    Mailbox& box = fabric_->boxes[{rank_, peer, req->tag}];
    if (!box.unmatched.empty()) {
      std::vector<uint8_t>& msg = box.unmatched.front();
      if (msg.size() > capacity) {
        req->status = makeStatus(Err::RemoteError,
                                 "message of %zu bytes from peer %d (tag %#llx) exceeds the "
                                 "receive capacity of %zu bytes",
                                 msg.size(), peer, (unsigned long long)req->tag, capacity);
      } else if (!msg.empty()) {
        memcpy(buf, msg.data(), msg.size());
      }
      req->length = msg.size();
      req->done = true;
      box.unmatched.pop_front();
    } else {
      box.posted.push_back(req);
    }
    *out = insertLocked(std::move(req));
    return Status::Ok();
  }

  Status test(Handle h, bool* done, size_t* bytes) override {
    std::lock_guard<std::mutex> lock(fabric_->mu);
    *done = false;
    auto it = requests_.find(h);
    // A signature may be read after a failure, to explain it (transport.h).
    if (!broken_.ok() && (it == requests_.end() || it->second->tag != kSignatureTag)) return broken_;
    GC_REQUIRE(it != requests_.end(), Err::InvalidArgument, "test: unknown handle %llu",
               (unsigned long long)h);
    Status s = checkLocked(*it->second);
    if (!s.ok()) return failLocked(s, &h, 1);
    if (it->second->done) {
      *done = true;
      if (bytes) *bytes = it->second->length;
      completeLocked(it);
    }
    return Status::Ok();
  }

  Status waitAll(const Handle* handles, size_t n, size_t* bytes) override {
    WaitClock waitClock(*this);
    std::unique_lock<std::mutex> lock(fabric_->mu);
    if (!broken_.ok()) return failLocked(broken_, handles, n);
    for (size_t i = 0; i < n; ++i)
      if (!requests_.count(handles[i]))
        return failLocked(makeStatus(Err::InvalidArgument, "waitAll: unknown handle %llu",
                                     (unsigned long long)handles[i]),
                          handles, n);
    auto lastProgress = Clock::now();
    size_t doneCount = 0;
    std::vector<bool> seen(n, false);
    bool watchDue = true;  // once per wake-up
    while (true) {
      for (size_t i = 0; i < n; ++i) {
        if (seen[i]) continue;
        auto it = requests_.find(handles[i]);
        LocalRequest& req = *it->second;
        Status s = checkLocked(req);
        if (!s.ok()) return failLocked(s, handles, n);
        if (req.done) {
          seen[i] = true;
          ++doneCount;
          lastProgress = Clock::now();
          if (bytes) bytes[i] = req.length;
        }
      }
      if (doneCount == n) break;
      if (watchDue) {
        // The watch may test() other handles, which takes the fabric's lock.
        // A message that arrives while it is released notifies nobody who
        // waits, so every handle is looked at again before the next wait.
        watchDue = false;
        lock.unlock();
        const Status watched = checkWaitWatch();
        lock.lock();
        if (!watched.ok()) return failLocked(watched, handles, n);
        continue;
      }
      const auto deadline =
          lastProgress + std::chrono::duration_cast<Clock::duration>(
                             std::chrono::duration<double>(timeoutS_));
      const bool timedOut = fabric_->wake[rank_].wait_until(lock, deadline) == std::cv_status::timeout;
      watchDue = true;
      if (timedOut && Clock::now() >= deadline) {
        for (size_t i = 0; i < n; ++i) {
          if (seen[i]) continue;
          const LocalRequest& req = *requests_.find(handles[i])->second;
          return failLocked(makeStatus(Err::Timeout,
                                       "no progress from peer %d for %.1f s (GRADCOMP_TIMEOUT_S) "
                                       "while receiving up to %zu bytes (tag %#llx)",
                                       req.peer, timeoutS_, req.capacity,
                                       (unsigned long long)req.tag),
                            handles, n);
        }
      }
    }
    for (size_t i = 0; i < n; ++i) completeLocked(requests_.find(handles[i]));
    return Status::Ok();
  }

  void cancel(Handle h) override {
    std::lock_guard<std::mutex> lock(fabric_->mu);
    auto it = requests_.find(h);
    if (it == requests_.end()) return;
    if (!it->second->done && !it->second->isSend) unpostLocked(it->second);
    requests_.erase(it);
  }

  PeerCounters counters(int peer) const override {
    std::lock_guard<std::mutex> lock(fabric_->mu);
    return peer >= 0 && peer < size() ? counters_[peer] : PeerCounters{};
  }
  void resetCounters() override {
    std::lock_guard<std::mutex> lock(fabric_->mu);
    for (auto& c : counters_) c = PeerCounters{};
  }

 private:
  Status checkArgs(int peer, const void* buf, size_t bytes, Handle* out, const char* what) {
    GC_REQUIRE(out, Err::InvalidArgument, "%s: null handle pointer", what);
    *out = 0;
    {
      std::lock_guard<std::mutex> lock(fabric_->mu);
      if (!broken_.ok()) return broken_;
    }
    GC_REQUIRE(peer >= 0 && peer < size(), Err::InvalidArgument,
               "%s: peer %d out of range [0, %d)", what, peer, size());
    GC_REQUIRE(buf || bytes == 0, Err::InvalidArgument, "%s: null buffer for %zu bytes", what,
               bytes);
    return Status::Ok();
  }

  Handle insertLocked(RequestPtr req) {
    const Handle h = nextHandle_++;
    requests_.emplace(h, std::move(req));
    return h;
  }

  // An error for a still-pending request: its own (capacity), or its peer broke
  // or went away before sending.
  Status checkLocked(const LocalRequest& req) const {
    if (!req.status.ok()) return req.status;
    if (req.done) return Status::Ok();
    const Status& peerErr = fabric_->broken[req.peer];
    if (!peerErr.ok())
      return makeStatus(Err::RemoteError, "peer %d failed: %s", req.peer,
                        peerErr.toString().c_str());
    if (fabric_->closed[req.peer])
      return makeStatus(Err::RemoteError, "peer %d closed its endpoint with a receive of up to "
                        "%zu bytes (tag %#llx) still unmatched", req.peer, req.capacity,
                        (unsigned long long)req.tag);
    return Status::Ok();
  }

  void completeLocked(std::unordered_map<Handle, RequestPtr>::iterator it) {
    const LocalRequest& req = *it->second;
    PeerCounters& c = req.tag == kSignatureTag ? scratch_ : counters_[req.peer];
    if (req.isSend) {
      c.bytesSent += req.length;
      c.msgsSent += 1;
    } else {
      c.bytesRecv += req.length;
      c.msgsRecv += 1;
    }
    requests_.erase(it);
  }

  void unpostLocked(const RequestPtr& req) {
    auto bit = fabric_->boxes.find({rank_, req->peer, req->tag});
    if (bit == fabric_->boxes.end()) return;
    auto& posted = bit->second.posted;
    for (auto p = posted.begin(); p != posted.end(); ++p)
      if (*p == req) {
        posted.erase(p);
        break;
      }
  }

  // Breaks the endpoint with its first error, releases the handles, tells peers.
  Status failLocked(const Status& s, const Handle* handles, size_t n) {
    if (broken_.ok()) {
      broken_ = s;
      fabric_->broken[rank_] = s;
      fabric_->notifyAll();
      GC_INFO(TRANSPORT, "local rank %d broken: %s", rank_, s.toString().c_str());
    }
    for (size_t i = 0; i < n; ++i) {
      auto it = requests_.find(handles[i]);
      if (it == requests_.end()) continue;
      if (!it->second->done && !it->second->isSend) unpostLocked(it->second);
      requests_.erase(it);
    }
    return broken_;
  }

  std::shared_ptr<LocalFabric> fabric_;
  const int rank_;
  const double timeoutS_;
  Status broken_;
  Handle nextHandle_ = 1;
  std::unordered_map<Handle, RequestPtr> requests_;
  std::vector<PeerCounters> counters_;
  PeerCounters scratch_;  // kSignatureTag traffic: not counted
};

}  // namespace

std::vector<std::unique_ptr<Transport>> createLocalTransports(int size, double timeoutS) {
  std::vector<std::unique_ptr<Transport>> out;
  if (size <= 0) return out;
  // A bad GRADCOMP_TIMEOUT_S breaks every endpoint from the start, so the first
  // call reports it (this factory has no Status to return).
  Status config;
  if (timeoutS < 0) {
    config = param::getDouble(param::Id::TIMEOUT_S, &timeoutS);
    if (!config.ok()) timeoutS = 0;
  }
  auto fabric = std::make_shared<LocalFabric>(size);
  for (int r = 0; r < size; ++r)
    out.push_back(std::make_unique<LocalTransport>(fabric, r, timeoutS, config));
  return out;
}

}  // namespace gradcomp::transport
