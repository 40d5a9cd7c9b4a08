// SimTransport: per-destination mailboxes (one mutex and condition variable per
// rank, so 4096 waiting threads sleep without contention) plus the virtual
// clocks of sim_transport.h. A failure on any rank aborts the whole fabric so
// the other threads return at once instead of waiting for the timeout.
#include "tools/gradcomp-sim/sim_transport.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <deque>
#include <mutex>
#include <numeric>
#include <sched.h>
#include <string>
#include <unordered_map>

namespace gradcomp::sim {
namespace {

using transport::Handle;
using transport::kTagBits;
using transport::kTagMask;
using transport::PeerCounters;

// Per-scenario times of a message (inline: millions of messages at P = 1024).
using ScenarioTimes = std::array<double, kMaxScenarios>;

struct Request {
  bool isSend = false;
  int peer = -1;
  uint64_t tag = 0;
  void* buf = nullptr;  // receive buffer
  size_t capacity = 0;  // receive capacity
  bool done = false;    // receive: matched (guarded by the receiver's mutex)
  size_t length = 0;
  size_t charged = 0;   // receive: bytes the model charges (payload scaling)
  ScenarioTimes at;     // send: NIC done; receive: earliest arrival
  bool awaited = false;  // receive: counted in the receiver's Endpoint::awaiting
  Status status;        // capacity error found by the sender
};
using RequestPtr = std::shared_ptr<Request>;

struct Message {
  std::vector<uint8_t> data;
  ScenarioTimes arrive;
  size_t charged = 0;
};

struct Mailbox {
  std::deque<Message> unmatched;
  std::deque<RequestPtr> posted;
};

struct Endpoint {
  std::mutex mu;
  std::condition_variable cv;
  // Receives the owner is blocked on that are not matched yet: a match wakes
  // the owner only when it drops to 0 (one wake per wait, not per message).
  size_t awaiting = 0;
  std::unordered_map<uint64_t, Mailbox> boxes;  // key: src << kTagBits | tag
};

uint64_t boxKey(int src, uint64_t tag) { return uint64_t(src) << kTagBits | (tag & kTagMask); }

double threadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

Status capacityError(size_t bytes, int src, uint64_t tag, size_t capacity) {
  return makeStatus(Err::RemoteError,
                    "message of %zu bytes from peer %d (tag %#llx) exceeds the receive capacity "
                    "of %zu bytes",
                    bytes, src, (unsigned long long)tag, capacity);
}

}  // namespace

struct SimFabric {
  explicit SimFabric(int n) : endpoints(n) {
    for (auto& e : endpoints) e = std::make_unique<Endpoint>();
  }
  std::vector<std::unique_ptr<Endpoint>> endpoints;
  std::atomic<bool> aborted{false};
  std::mutex abortMu;
  Status abortStatus;
  int abortRank = -1;

  void abort(int rank, const Status& s) {
    {
      std::lock_guard<std::mutex> lock(abortMu);
      if (aborted.load()) return;
      abortStatus = s;
      abortRank = rank;
      aborted.store(true);
    }
    for (auto& e : endpoints) {
      std::lock_guard<std::mutex> lock(e->mu);
      e->cv.notify_all();
    }
  }
};

namespace {

class SimEndpoint final : public SimTransport {
 public:
  SimEndpoint(std::shared_ptr<SimFabric> fabric, int rank, const std::vector<CostModel>& models,
              double timeoutS)
      : fabric_(std::move(fabric)), rank_(rank), models_(models), timeoutS_(timeoutS),
        clock_(models.size(), 0.0), sendFree_(models.size(), 0.0),
        recvFree_(models.size(), 0.0), sendFreeIntra_(models.size(), 0.0),
        recvFreeIntra_(models.size(), 0.0), counters_(fabric_->endpoints.size()) {}

  // The peer is on this rank's host (CostModel::ranksPerHost).
  bool sameHost(int peer) const {
    const int L = models_[0].ranksPerHost;
    return L > 0 && rank_ / L == peer / L;
  }

  int rank() const override { return rank_; }
  int size() const override { return int(fabric_->endpoints.size()); }

  double hostCost(int s) const {
    return models_[s].hostSPerByte * std::max(1.0, models_[s].computeScale);
  }

  void beginCall() override {
    for (int s = 0; s < scenarios(); ++s)
      clock_[s] = sendFree_[s] = recvFree_[s] = sendFreeIntra_[s] = recvFreeIntra_[s] = 0;
    if (timed()) cpuMark_ = threadCpuSeconds();
  }
  double endCall() override {
    chargeCompute();
    return clock_[0];
  }
  void abortAll(const Status& why) override { fabric_->abort(rank_, why); }

  int scenarios() const override { return int(models_.size()); }
  double clockOf(int s) override {
    chargeCompute();
    return clock_[s];
  }
  void advanceTo(int s, double t) override { clock_[s] = std::max(clock_[s], t); }
  std::vector<double> endCallAll() override {
    chargeCompute();
    return clock_;
  }
  void excludeCpu(double seconds) override { cpuMark_ += seconds; }
  double chargedBytesSent() const override { return chargedSent_; }

  Status isend(int peer, uint64_t tag, const void* buf, size_t bytes, Handle* out) override {
    GC_CHECK(checkArgs(peer, buf, bytes, out, "isend"));
    chargeCompute();
    tag &= kTagMask;
    const size_t charged = chargedBytes(buf, bytes);
    chargedSent_ += double(charged);
    ScenarioTimes arrive{}, nicDone{};
    const bool intra = sameHost(peer);
    for (int s = 0; s < scenarios(); ++s) {
      const CostModel& m = models_[s];
      // The network stack copies the bytes out first (not inside a host).
      if (!intra) clock_[s] += double(charged) * hostCost(s);
      double& nic = intra ? sendFreeIntra_[s] : sendFree_[s];
      const double start = std::max(clock_[s], nic);
      nic = start + double(charged) * (intra ? m.intraBetaSPerByte : m.betaSPerByte);
      nicDone[s] = nic;
      arrive[s] = nic + (intra ? m.intraAlphaS : m.alphaS);
    }
    Endpoint& dst = *fabric_->endpoints[peer];
    {
      std::lock_guard<std::mutex> lock(dst.mu);
      auto it = dst.boxes.find(boxKey(rank_, tag));
      if (it != dst.boxes.end() && !it->second.posted.empty()) {
        RequestPtr recv = it->second.posted.front();
        it->second.posted.pop_front();
        if (it->second.posted.empty() && it->second.unmatched.empty()) dst.boxes.erase(it);
        if (bytes > recv->capacity)
          recv->status = capacityError(bytes, rank_, tag, recv->capacity);
        else if (bytes)
          std::memcpy(recv->buf, buf, bytes);
        recv->length = bytes;
        recv->charged = charged;
        recv->at = arrive;
        recv->done = true;
        // A futex wake per message (P - 1 of them into a rank waiting for
        // its split-and-reduce receives) was half the wall time at P = 1024.
        if (recv->awaited && --dst.awaiting == 0) dst.cv.notify_one();
      } else {
        const auto* p = static_cast<const uint8_t*>(buf);
        dst.boxes[boxKey(rank_, tag)].unmatched.push_back(
            Message{{p, p + bytes}, arrive, charged});
      }
    }
    auto req = std::make_shared<Request>();
    req->isSend = true;
    req->peer = peer;
    req->tag = tag;
    req->length = bytes;
    req->at = nicDone;
    req->done = true;
    *out = insert(std::move(req));
    markCompute();
    return Status::Ok();
  }

  Status irecv(int peer, uint64_t tag, void* buf, size_t capacity, Handle* out) override {
    GC_CHECK(checkArgs(peer, buf, capacity, out, "irecv"));
    chargeCompute();
    auto req = std::make_shared<Request>();
    req->peer = peer;
    req->tag = tag & kTagMask;
    req->buf = buf;
    req->capacity = capacity;
    Endpoint& me = *fabric_->endpoints[rank_];
    {
      std::lock_guard<std::mutex> lock(me.mu);
      Mailbox& box = me.boxes[boxKey(peer, req->tag)];
      if (!box.unmatched.empty()) {
        Message& msg = box.unmatched.front();
        if (msg.data.size() > capacity)
          req->status = capacityError(msg.data.size(), peer, req->tag, capacity);
        else if (!msg.data.empty())
          std::memcpy(buf, msg.data.data(), msg.data.size());
        req->length = msg.data.size();
        req->charged = msg.charged;
        req->at = msg.arrive;
        req->done = true;
        box.unmatched.pop_front();
        if (box.unmatched.empty() && box.posted.empty()) me.boxes.erase(boxKey(peer, req->tag));
      } else {
        box.posted.push_back(req);
      }
    }
    *out = insert(std::move(req));
    markCompute();
    return Status::Ok();
  }

  Status test(Handle h, bool* done, size_t* bytes) override {
    *done = false;
    GC_CHECK(checkBroken());
    auto it = requests_.find(h);
    GC_REQUIRE(it != requests_.end(), Err::InvalidArgument, "test: unknown handle %llu",
               (unsigned long long)h);
    bool ready;
    {
      std::lock_guard<std::mutex> lock(fabric_->endpoints[rank_]->mu);
      ready = it->second->done;
    }
    if (!ready) {
      sched_yield();  // pollers must not starve the ranks they wait for
      return Status::Ok();
    }
    GC_CHECK(waitAll(&h, 1, bytes));
    *done = true;
    return Status::Ok();
  }

  Status waitAll(const Handle* handles, size_t n, size_t* bytes) override {
    chargeCompute();
    std::vector<RequestPtr> reqs(n);
    for (size_t i = 0; i < n; ++i) {
      auto it = requests_.find(handles[i]);
      if (it == requests_.end())
        return fail(makeStatus(Err::InvalidArgument, "waitAll: unknown handle %llu",
                               (unsigned long long)handles[i]), handles, n);
      reqs[i] = it->second;
    }
    Status s = block(reqs);
    if (!s.ok()) return fail(s, handles, n);
    // Per scenario: receives through the receive NIC in order of arrival;
    // sends are done when their NIC finished.
    std::vector<size_t> order(n);
    for (int s = 0; s < scenarios(); ++s) {
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](size_t a, size_t b) { return reqs[a]->at[s] < reqs[b]->at[s]; });
      double done = clock_[s], cpu = clock_[s];
      for (size_t i : order) {
        const Request& r = *reqs[i];
        if (r.isSend) {
          done = std::max(done, r.at[s]);
        } else {
          const double b = double(r.charged);
          const bool intra = sameHost(r.peer);
          double& nic = intra ? recvFreeIntra_[s] : recvFree_[s];
          nic = std::max(r.at[s], nic + b * (intra ? models_[s].intraBetaSPerByte
                                                    : models_[s].betaSPerByte));
          cpu = std::max(cpu, nic) + (intra ? 0.0 : b * hostCost(s));  // copy-out, in order
          done = std::max(done, cpu);
        }
      }
      clock_[s] = done;
    }
    for (size_t i = 0; i < n; ++i) {
      Request& r = *reqs[i];
      PeerCounters& c = counters_[r.peer];
      (r.isSend ? c.bytesSent : c.bytesRecv) += r.length;
      (r.isSend ? c.msgsSent : c.msgsRecv) += 1;
      if (bytes) bytes[i] = r.length;
      requests_.erase(handles[i]);
    }
    markCompute();
    return Status::Ok();
  }

  void cancel(Handle h) override {
    auto it = requests_.find(h);
    if (it == requests_.end()) return;
    if (!it->second->isSend) unpost(it->second);
    requests_.erase(it);
  }

  PeerCounters counters(int peer) const override {
    return peer >= 0 && peer < size() ? counters_[peer] : PeerCounters{};
  }
  void resetCounters() override {
    chargedSent_ = 0;
    for (auto& c : counters_) c = PeerCounters{};
  }

 private:
  Status checkArgs(int peer, const void* buf, size_t bytes, Handle* out, const char* what) {
    GC_REQUIRE(out, Err::InvalidArgument, "%s: null handle pointer", what);
    *out = 0;
    GC_CHECK(checkBroken());
    GC_REQUIRE(peer >= 0 && peer < size(), Err::InvalidArgument,
               "%s: peer %d out of range [0, %d)", what, peer, size());
    GC_REQUIRE(buf || bytes == 0, Err::InvalidArgument, "%s: null buffer for %zu bytes", what,
               bytes);
    return Status::Ok();
  }

  Status checkBroken() {
    if (!broken_.ok()) return broken_;
    if (fabric_->aborted.load()) {
      std::lock_guard<std::mutex> lock(fabric_->abortMu);
      return makeStatus(Err::RemoteError, "simulated rank %d failed: %s", fabric_->abortRank,
                        fabric_->abortStatus.toString().c_str());
    }
    return Status::Ok();
  }

  // Sleeps until every receive in reqs is matched (sends are done at once).
  Status block(const std::vector<RequestPtr>& reqs) {
    Endpoint& me = *fabric_->endpoints[rank_];
    std::unique_lock<std::mutex> lock(me.mu);
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(timeoutS_));
    me.awaiting = 0;
    for (const RequestPtr& r : reqs)
      if (!r->done) {
        r->awaited = true;
        ++me.awaiting;
      }
    auto stopAwaiting = [&] {  // before returning early: no match may count down
      for (const RequestPtr& r : reqs) r->awaited = false;
      me.awaiting = 0;
    };
    while (me.awaiting > 0) {
      if (fabric_->aborted.load()) {
        stopAwaiting();
        lock.unlock();
        return checkBroken();
      }
      if (me.cv.wait_until(lock, deadline) == std::cv_status::timeout && me.awaiting > 0) {
        stopAwaiting();
        for (const RequestPtr& r : reqs)
          if (!r->done)
            return makeStatus(Err::Timeout,
                              "simulated rank %d: no message from peer %d (tag %#llx, up to %zu "
                              "bytes) within %.0f s of wall time (deadlocked schedule?)",
                              rank_, r->peer, (unsigned long long)r->tag, r->capacity, timeoutS_);
      }
    }
    for (const RequestPtr& r : reqs)
      if (!r->status.ok()) return r->status;
    return Status::Ok();
  }

  Status fail(const Status& s, const Handle* handles, size_t n) {
    for (size_t i = 0; i < n; ++i) cancel(handles[i]);
    if (broken_.ok()) {
      broken_ = s;
      if (s.code() != Err::RemoteError || !fabric_->aborted.load()) fabric_->abort(rank_, s);
    }
    return broken_;
  }

  void unpost(const RequestPtr& req) {
    Endpoint& me = *fabric_->endpoints[rank_];
    std::lock_guard<std::mutex> lock(me.mu);
    auto it = me.boxes.find(boxKey(req->peer, req->tag));
    if (it == me.boxes.end()) return;
    auto& posted = it->second.posted;
    posted.erase(std::remove(posted.begin(), posted.end(), req), posted.end());
    if (posted.empty() && it->second.unmatched.empty()) me.boxes.erase(it);
  }

  Handle insert(RequestPtr req) {
    const Handle h = nextHandle_++;
    requests_.emplace(h, std::move(req));
    return h;
  }

  // Bytes a message of `bytes` is charged as (payload scaling).
  size_t chargedBytes(const void* buf, size_t bytes) const {
    const CostModel& m = models_[0];  // scaling is the same in every scenario
    if (m.payloadScale == 1.0 || bytes == 0) return bytes;
    const size_t f = m.framing ? std::min(bytes, m.framing(static_cast<const uint8_t*>(buf), bytes))
                               : 0;
    return f + size_t(std::llround(double(bytes - f) * m.payloadScale));
  }
  bool timed() const {
    for (const CostModel& m : models_)
      if (m.computeScale > 0) return true;
    return false;
  }
  void chargeCompute() {
    if (!timed()) return;
    const double now = threadCpuSeconds();
    for (int s = 0; s < scenarios(); ++s)
      clock_[s] += std::max(0.0, now - cpuMark_) * models_[s].computeScale;
    cpuMark_ = now;
  }
  void markCompute() {
    if (timed()) cpuMark_ = threadCpuSeconds();
  }

  std::shared_ptr<SimFabric> fabric_;
  const int rank_;
  const std::vector<CostModel> models_;
  const double timeoutS_;
  Status broken_;
  std::vector<double> clock_, sendFree_, recvFree_;  // per scenario
  std::vector<double> sendFreeIntra_, recvFreeIntra_;  // links inside the host
  double cpuMark_ = 0, chargedSent_ = 0;
  Handle nextHandle_ = 1;
  std::unordered_map<Handle, RequestPtr> requests_;
  std::vector<PeerCounters> counters_;
};

}  // namespace

std::vector<std::unique_ptr<SimTransport>> createSimTransports(
    int size, const std::vector<CostModel>& models, double timeoutS) {
  std::vector<std::unique_ptr<SimTransport>> out;
  if (size <= 0 || models.empty() || models.size() > kMaxScenarios) return out;
  auto fabric = std::make_shared<SimFabric>(size);
  for (int r = 0; r < size; ++r)
    out.push_back(std::make_unique<SimEndpoint>(fabric, r, models, timeoutS));
  return out;
}

std::vector<std::unique_ptr<SimTransport>> createSimTransports(int size, const CostModel& model,
                                                               double timeoutS) {
  return createSimTransports(size, std::vector<CostModel>{model}, timeoutS);
}

}  // namespace gradcomp::sim
