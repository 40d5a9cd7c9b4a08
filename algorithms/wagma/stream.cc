#include "algorithms/wagma/stream.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "algorithms/wagma/group_sum.h"
#include "common/log.h"
#include "transport/failure_monitor.h"

namespace gradcomp::algo::wagma {
namespace {

// Activations use one tag that no collective step reaches (steps stay < 64).
constexpr uint64_t kActivationTag = transport::kTagMask;
// Longest idle poll interval for remote activations; a local arrival wakes the
// thread at once through the condition variable.
constexpr int kMaxIdleUs = 200;
// Activation payload that announces the sender's shutdown (never a version).
constexpr uint64_t kFarewell = ~uint64_t(0);

}  // namespace

WaitAvoidingStream::WaitAvoidingStream(std::unique_ptr<transport::Transport> channel,
                                       const StreamConfig& config, device::Backend& dev)
    : cfg_(config), dev_(dev), net_(std::move(channel)),
      bytes_(config.count * dtypeSize(config.dtype)) {}

Status WaitAvoidingStream::create(std::unique_ptr<transport::Transport> channel,
                                  const StreamConfig& config, device::Backend& dev,
                                  std::unique_ptr<WaitAvoidingStream>* out) {
  GC_REQUIRE(channel, Err::InvalidArgument, "wagma: no channel for the wait-avoiding stream");
  GC_REQUIRE(channel->size() == config.topo.nranks, Err::Internal,
             "wagma: channel has %d ranks, the communicator %d", channel->size(),
             config.topo.nranks);
  GC_REQUIRE(config.period >= 1, Err::InvalidConfig,
             "GRADCOMP_WAGMA_PERIOD=%d is invalid: expected >= 1", config.period);
  const AlgorithmInfo* dense = findAlgorithm("dense");
  GC_REQUIRE(dense, Err::Internal, "wagma: the 'dense' algorithm is not registered");
  std::unique_ptr<WaitAvoidingStream> s(new WaitAvoidingStream(std::move(channel), config, dev));
  s->dense_ = dense->create();
  const Topology& topo = config.topo;
  const int rank = s->net_->rank();
  if (rank < topo.core)
    for (int b = 0; b < topo.logCore; ++b) s->actPeers_.push_back(rank ^ (1 << b));
  if (foldPartner(topo, rank) >= 0) s->actPeers_.push_back(foldPartner(topo, rank));
  s->actIn_.assign(s->actPeers_.size(), 0);
  s->actRecv_.assign(s->actPeers_.size(), 0);
  for (size_t i = 0; i < s->actPeers_.size(); ++i)
    GC_CHECK(s->net_->irecv(s->actPeers_[i], kActivationTag, &s->actIn_[i], sizeof(uint64_t),
                            &s->actRecv_[i]));
  *out = std::move(s);
  return Status::Ok();
}

WaitAvoidingStream::~WaitAvoidingStream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::vector<uint64_t> WaitAvoidingStream::executed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return executed_;
}

Status WaitAvoidingStream::call(const void* fresh, void* out, CallReport* report) {
  const uint64_t t = nextCall_++;
  int w = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) return error_;
    while (w == latest_ || w == inUse_) ++w;  // three slots: one is always free
  }
  // Slot w is neither read by a running collective nor the latest, so the
  // progress thread does not touch it until we publish it below.
  Slot& slot = slots_[w];
  slot.data.bind(dev_);
  if (slot.data.size() < bytes_) slot.data.resize(bytes_);
  // Enqueued before the slot is published: whoever reads it next enqueues
  // after this copy on the backend's one stream.
  GC_CHECK(dev_.copy(slot.data.data(), fresh, bytes_));
  {
    std::lock_guard<std::mutex> lock(mu_);
    slot.call = int64_t(t);
    latest_ = w;
    arrived_ = int64_t(t);
  }
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  // Drive the channel ourselves: our arrival makes version t runnable, and
  // versions < t are done (we took t - 1's result), so one progress round
  // executes it unless it already ran passively. Waiting for the channel is
  // bounded: whoever holds it is in a transport wait (GRADCOMP_TIMEOUT_S) or
  // a short poll.
  Result r;
  {
    std::lock_guard<std::mutex> chan(chan_);
    for (int round = 0; round < 2; ++round) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_.ok()) return error_;
        auto it = results_.find(t);
        if (it != results_.end()) {
          r = std::move(it->second);
          results_.erase(it);
          break;
        }
      }
      GC_REQUIRE(round == 0, Err::Internal, "wagma: version %llu did not run on arrival",
                 (unsigned long long)t);
      bool worked = false;
      GC_CHECK(progress(&worked));
    }
  }
  // Algorithm 2, lines 10-13: W_sum / S when our fresh buffer is in W_sum,
  // else (W_sum + fresh) / (S + 1); c generalizes S to folded groups.
  const int c = r.report.contributors;
  if (r.report.fresh) {
    GC_CHECK(dev_.copy(out, r.sum.data(), bytes_));
    GC_CHECK(dev_.divide(out, cfg_.count, cfg_.dtype, c));
  } else {
    GC_CHECK(dev_.add(out, r.sum.data(), fresh, cfg_.count, cfg_.dtype));
    GC_CHECK(dev_.divide(out, cfg_.count, cfg_.dtype, c + 1));
  }
  if (report) *report = r.report;
  // Complete before returning (the caller's buffer and this call's errors);
  // a later writer of r.sum enqueues after these reads anyway.
  const Status done = dev_.sync();
  std::lock_guard<std::mutex> lock(mu_);
  spare_.push_back(std::move(r.sum));
  return done;
}

void WaitAvoidingStream::run() {
  int idleUs = 5;
  Status s;
  while (true) {
    bool worked = false;
    {
      std::lock_guard<std::mutex> chan(chan_);
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stop_) break;
      }
      s = progress(&worked);
      if (!s.ok()) break;
    }
    if (worked) {
      idleUs = 5;
      continue;
    }
    // Idle: nothing activated. Remote activations are polled at most
    // kMaxIdleUs apart; stop requests wake the thread at once.
    std::unique_lock<std::mutex> lock(mu_);
    if (stop_) break;
    cv_.wait_for(lock, std::chrono::microseconds(idleUs));
    idleUs = std::min(idleUs * 2, kMaxIdleUs);
  }
  std::lock_guard<std::mutex> chan(chan_);
  if (s.ok()) {
    // A stream that failed (in the caller's progress) or whose ranks agreed
    // on a failure says no farewell: that would wait for partners that may
    // be gone, a second deadline after the first.
    std::lock_guard<std::mutex> lock(mu_);
    s = error_;
  }
  if (s.ok()) s = farewell();
  for (transport::Handle h : actRecv_)
    if (h) net_->cancel(h);
  for (PendingSend& p : sends_) net_->cancel(p.handle);
  sends_.clear();
  if (!s.ok()) fail(s);
}

void WaitAvoidingStream::fail(const Status& s) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) return;
    error_ = s;
  }
  GC_WARN("wagma: rank %d's stream stopped: %s", net_->rank(), s.toString().c_str());
  cv_.notify_all();
}

Status WaitAvoidingStream::progress(bool* worked) {
  *worked = false;
  Status s = progressOnce(worked);
  if (!s.ok()) fail(s);
  return s;
}

Status WaitAvoidingStream::progressOnce(bool* worked) {
  GC_CHECK(pollActivations());
  for (auto it = sends_.begin(); it != sends_.end();) {
    bool done = false;
    GC_CHECK(net_->test(it->handle, &done, nullptr));
    it = done ? sends_.erase(it) : std::next(it);
  }
  uint64_t v = 0;
  int slot = -1;
  Result result;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) return error_;
    v = next_;
    const bool own = arrived_ >= int64_t(v);
    if (!own && (isGlobal(v) || activatedUpTo_ < int64_t(v))) return Status::Ok();
    slot = latest_;
    inUse_ = slot;
    if (!spare_.empty()) {
      result.sum = std::move(spare_.back());
      spare_.pop_back();
    }
  }
  GC_CHECK(execute(v, slot, &result));
  {
    std::lock_guard<std::mutex> lock(mu_);
    inUse_ = -1;
    results_[v] = std::move(result);
    executed_.push_back(v);
    next_ = v + 1;
  }
  heardFrom_.erase(heardFrom_.begin(), heardFrom_.upper_bound(v));
  *worked = true;
  return Status::Ok();
}

// Shutdown handshake with every activation partner: send kFarewell, then keep
// draining their activations until their kFarewell arrives. A partner may
// still be finishing versions this rank already executed and send it a late
// activation; the channel must stay open (with a receive posted) until the
// partner is done, or its send would hit a closed endpoint. Bounded by
// GRADCOMP_TIMEOUT_S: a partner that never stops is reported, not waited for.
Status WaitAvoidingStream::farewell() {
  for (int p : actPeers_) {
    sends_.push_back(PendingSend{0, kFarewell});
    GC_CHECK(net_->isend(p, kActivationTag, &sends_.back().payload, sizeof(uint64_t),
                         &sends_.back().handle));
  }
  double timeoutS = 60;
  GC_CHECK(param::getDouble(param::Id::TIMEOUT_S, &timeoutS));
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(timeoutS);
  int idleUs = 5;
  while (true) {
    GC_CHECK(pollActivations());
    bool all = true;
    for (transport::Handle h : actRecv_) all = all && h == 0;
    if (all) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (size_t i = 0; i < actPeers_.size(); ++i) {
        if (!actRecv_[i]) continue;
        const Status own = makeStatus(Err::Timeout,
                                      "wagma shutdown: peer %d did not close its stream within "
                                      "%.1f s (GRADCOMP_TIMEOUT_S); did the ranks make different "
                                      "numbers of calls?",
                                      actPeers_[i], timeoutS);
        // The communicator's failure monitor says whether that partner is gone.
        const std::shared_ptr<transport::FailureMonitor> m = net_->failureMonitor();
        return m ? m->settle(actPeers_[i], transport::monitor::SuspectKind::Silent, timeoutS, own)
                 : own;
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(idleUs));  // bounded poll
    idleUs = std::min(idleUs * 2, kMaxIdleUs);
  }
  for (PendingSend& p : sends_) GC_CHECK(net_->wait(p.handle));
  sends_.clear();
  return Status::Ok();
}

Status WaitAvoidingStream::pollActivations() {
  for (size_t i = 0; i < actPeers_.size(); ++i) {
    if (!actRecv_[i]) continue;  // that partner said farewell
    bool done = false;
    size_t got = 0;
    GC_CHECK(net_->test(actRecv_[i], &done, &got));
    if (!done) continue;
    actRecv_[i] = 0;
    GC_REQUIRE(got == sizeof(uint64_t), Err::RemoteError,
               "wagma: activation from peer %d has %zu bytes, expected 8", actPeers_[i], got);
    const uint64_t w = actIn_[i];
    if (w == kFarewell) continue;  // the partner closed its stream: no more from it
    // A version we already executed: a concurrent or late activator; ignore.
    if (w >= next_) {
      activatedUpTo_ = std::max(activatedUpTo_, int64_t(w));
      heardFrom_[w].push_back(actPeers_[i]);
    }
    GC_CHECK(net_->irecv(actPeers_[i], kActivationTag, &actIn_[i], sizeof(uint64_t),
                         &actRecv_[i]));
  }
  return Status::Ok();
}

Status WaitAvoidingStream::sendActivations(uint64_t v) {
  const Topology& topo = cfg_.topo;
  const int rank = net_->rank();
  std::vector<int> targets;
  if (rank < topo.core)
    for (int b : groupBits(topo, v)) targets.push_back(rank ^ (1 << b));
  if (foldPartner(topo, rank) >= 0) targets.push_back(foldPartner(topo, rank));
  const std::vector<int>& heard = heardFrom_[v];
  for (int p : targets) {
    if (std::find(heard.begin(), heard.end(), p) != heard.end()) continue;
    sends_.push_back(PendingSend{0, v});
    GC_CHECK(net_->isend(p, kActivationTag, &sends_.back().payload, sizeof(uint64_t),
                         &sends_.back().handle));
  }
  return Status::Ok();
}

Status WaitAvoidingStream::execute(uint64_t v, int slot, Result* result) {
  // The slot is pinned by inUse_: the caller writes a different one.
  const Slot& src = slots_[slot];
  result->sum.bind(dev_);
  if (result->sum.size() < bytes_) result->sum.resize(bytes_);
  GC_CHECK(dev_.copy(result->sum.data(), src.data.data(), bytes_));
  CallReport& rep = result->report;
  rep.call = v;
  rep.global = isGlobal(v);
  rep.contributed = src.call;
  rep.fresh = src.call == int64_t(v);
  if (rep.global) {
    GC_REQUIRE(rep.fresh, Err::Internal, "wagma: global version %llu started without arrival",
               (unsigned long long)v);
    Context ctx{*net_, dev_, cfg_.denseConfig, v};
    AllreduceArgs args;
    args.sendBuf = args.recvBuf = result->sum.data();
    args.count = cfg_.count;
    args.dtype = cfg_.dtype;
    args.op = RedOp::Sum;
    args.bufferKey = 1;
    GC_CHECK(dense_->allreduce(ctx, args));
    rep.contributors = cfg_.topo.nranks;
    return Status::Ok();
  }
  GC_CHECK(sendActivations(v));
  GC_CHECK(groupSum(*net_, dev_, cfg_.topo, v,
                    [v](uint64_t step) { return transport::makeTag(v, step); },
                    result->sum.data(), cfg_.count, cfg_.dtype, &stage_));
  rep.contributors = groupContributors(cfg_.topo, net_->rank(), v);
  GC_TRACE(ALGO, "wagma: version %llu done (%s, contributed call %lld, %d buffers)",
           (unsigned long long)v, rep.fresh ? "fresh" : "stale", (long long)src.call,
           rep.contributors);
  return Status::Ok();
}

}  // namespace gradcomp::algo::wagma
