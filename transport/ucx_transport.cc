// The UCX transport: tag send/receive on one worker, completion records per
// handle, and the wait loop that turns silence and dead peers into errors.
#include "transport/ucx_transport.h"

#include <algorithm>
#include <map>
#include <memory>
#include <unordered_map>

#include "common/log.h"
#include "common/param.h"
#include "transport/failure_monitor.h"
#include "transport/ucx_context.h"
#include "transport/ucx_endpoints.h"
#include "transport/ucx_request.h"

namespace gradcomp::transport {
namespace {

using ucx::Op;

constexpr int kProgressBurst = 64;  // ucp_worker_progress calls per progress()

class UcxTransport final : public Transport {
 public:
  UcxTransport(int rank, int size, double timeoutS, int spinUs)
      : rank_(rank), size_(size), timeoutS_(timeoutS), spinUs_(spinUs), counters_(size) {}

  ~UcxTransport() override { shutdown(); }

  Status init(AddressExchange& exchange, const std::string& errMode,
              std::shared_ptr<FailureMonitor> shared) {
    GC_CHECK(worker_.create(ucx::ContextKind::Transport, "UCX transport"));
    std::string address, netAddress;
    GC_CHECK(worker_.address(&address));
    GC_CHECK(worker_.address(&netAddress, /*netOnly=*/true));
    bool netBetweenHosts = true;
    GC_CHECK(param::getBool(param::Id::NET_BETWEEN_HOSTS, &netBetweenHosts));
    const bool ownMonitor = !shared;
    monitor_ = ownMonitor ? FailureMonitor::prepare(rank_, size_, timeoutS_) : std::move(shared);
    // Blob = kernel identity, NUL, GRADCOMP_HOSTID (or nothing), NUL,
    // monitor text, NUL, length of the worker address in decimal, NUL, worker
    // address, network-only address (both binary, last): peers learn who
    // shares this host (and so may use shared memory), how to reach the
    // monitor, and how to reach this rank over the network.
    const std::string kernel = ucx::hostIdentity(), hostId = configuredHostId();
    std::vector<std::string> all;
    GC_CHECK(exchange.allgather(kernel + '\0' + hostId + '\0' +
                                    (ownMonitor ? monitor_->blob() : "") + '\0' +
                                    std::to_string(address.size()) + '\0' + address + netAddress,
                                &all));
    GC_REQUIRE(static_cast<int>(all.size()) == size_, Err::Internal,
               "address exchange returned %zu addresses for %d ranks", all.size(), size_);
    std::vector<std::string> addresses(size_), netAddresses(size_), monitors(size_);
    std::vector<bool> sameHost(size_), sameKernel(size_);
    for (int p = 0; p < size_; ++p) {
      const std::string& blob = all[p];
      size_t nul[4];
      size_t at = 0;
      bool framed = true;
      for (size_t& n : nul) {
        n = framed ? blob.find('\0', at) : std::string::npos;
        framed = n != std::string::npos;
        at = framed ? n + 1 : at;
      }
      size_t fullLen = 0;
      framed = framed && nul[3] > nul[2] + 1 && nul[3] - nul[2] - 1 <= 9 &&
               blob.find_first_not_of("0123456789", nul[2] + 1) == nul[3];
      if (framed) fullLen = std::stoul(blob.substr(nul[2] + 1, nul[3] - nul[2] - 1));
      GC_REQUIRE(framed && fullLen > 0 && nul[3] + 1 + fullLen <= blob.size(), Err::RemoteError,
                 "rank %d sent a malformed address blob (%zu bytes)", p, blob.size());
      const std::string peerKernel = blob.substr(0, nul[0]);
      const std::string peerHostId = blob.substr(nul[0] + 1, nul[1] - nul[0] - 1);
      sameKernel[p] = peerKernel == kernel;
      // GRADCOMP_HOSTID, where both set it, says who shares a host (emulated
      // hosts of several namespaces share memory; several of one namespace
      // do not); else the kernel does. One set and one not: other hosts.
      sameHost[p] = hostId.empty() && peerHostId.empty() ? sameKernel[p]
                    : peerHostId == hostId;
      monitors[p] = blob.substr(nul[1] + 1, nul[2] - nul[1] - 1);
      addresses[p] = blob.substr(nul[3] + 1, fullLen);
      netAddresses[p] = blob.substr(nul[3] + 1 + fullLen);
    }
    if (ownMonitor) monitor_->start(monitors, sameKernel);  // loopback reaches the same kernel only
    GC_CHECK(eps_.connect(worker_.get(), rank_, addresses, netAddresses, sameHost, errMode,
                          netBetweenHosts));
    logRoutes(sameHost);
    return Status::Ok();
  }

  std::string route(int peer) const override { return eps_.route(peer); }

  std::shared_ptr<FailureMonitor> failureMonitor() const override { return monitor_; }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Status isend(int peer, uint64_t tag, const void* buf, size_t bytes, Handle* out) override {
    GC_CHECK(checkPost(true, peer, tag, buf, bytes, out));
    ucp_ep_h ep = nullptr;
    GC_CHECK(eps_.get(peer, &ep));
    auto op = std::make_unique<Op>();
    op->isSend = true;
    op->peer = peer;
    op->tag = tag & kTagMask;
    op->bytes = bytes;
    ucx::postSend(ep, ucx::wireTag(rank_, op->tag), buf, op.get());
    return admit(std::move(op), out);
  }

  Status irecv(int peer, uint64_t tag, void* buf, size_t capacity, Handle* out) override {
    GC_CHECK(checkPost(false, peer, tag, buf, capacity, out));
    auto op = std::make_unique<Op>();
    op->peer = peer;
    op->tag = tag & kTagMask;
    op->bytes = capacity;
    ucx::postRecv(worker_.get(), ucx::wireTag(peer, op->tag), ucx::kFullMask, buf, op.get());
    return admit(std::move(op), out);
  }

  Status test(Handle h, bool* done, size_t* bytes) override {
    *done = false;
    auto it = ops_.find(h);
    // A signature may be read after a failure, to explain it (transport.h).
    const bool control = it != ops_.end() && it->second->tag == kSignatureTag;
    if (!broken_.ok() && !control) return fail(broken_, &h, 1);
    GC_REQUIRE(it != ops_.end(), Err::InvalidArgument, "test: unknown handle %llu",
               (unsigned long long)h);
    ucp_worker_progress(worker_.get());
    Status s = opError(*it->second);
    if (!s.ok()) return fail(control ? s : settleLink(*it->second, s), &h, 1);
    if (monitor_->failed() && !control)
      return fail(withContext(monitor_->verdict(), *it->second), &h, 1);
    if (it->second->done) {
      *done = true;
      if (bytes) *bytes = it->second->length;
      complete(it);
    }
    return Status::Ok();
  }

  // A bounded burst: each ucp_worker_progress handles a batch of events.
  void progress() override {
    if (!broken_.ok()) return;
    for (int i = 0; i < kProgressBurst && ucp_worker_progress(worker_.get()) != 0; ++i) {
    }
  }

  Status waitAll(const Handle* handles, size_t n, size_t* bytes) override {
    WaitClock waitClock(*this);
    if (!broken_.ok()) return fail(broken_, handles, n);
    std::vector<Op*> ops(n);
    for (size_t i = 0; i < n; ++i) {
      auto it = ops_.find(handles[i]);
      if (it == ops_.end())
        return fail(makeStatus(Err::InvalidArgument, "waitAll: unknown handle %llu",
                               (unsigned long long)handles[i]),
                    handles, n);
      ops[i] = it->second.get();
    }
    ucx::Waiter waiter(worker_, spinUs_);
    size_t remaining = n;
    std::vector<bool> seen(n, false);
    WaitingNote note(*monitor_);
    while (true) {
      bool advanced = waiter.progress();
      for (size_t i = 0; i < n; ++i) {
        if (seen[i]) continue;
        Status s = opError(*ops[i]);
        if (!s.ok()) return fail(settleLink(*ops[i], s), handles, n);
        if (ops[i]->done) {
          seen[i] = true;
          --remaining;
          advanced = true;
          if (bytes) bytes[i] = ops[i]->length;
        }
      }
      if (remaining == 0) break;
      const Op& pending = **std::find_if(ops.begin(), ops.end(), [](Op* o) { return !o->done; });
      // A failure the communicator agreed on ends every wait at once.
      if (monitor_->failed()) return fail(withContext(monitor_->verdict(), pending), handles, n);
      if (advanced) {
        waiter.noteProgress();
        continue;
      }
      const double silent = waiter.sinceProgress();
      if (silent >= timeoutS_) {
        const Status own = makeStatus(Err::Timeout,
                                      "no progress from %s for %.1f s (GRADCOMP_TIMEOUT_S) while %s",
                                      monitor_->who(pending.peer).c_str(), silent,
                                      describe(pending).c_str());
        const Status agreed =
            monitor_->settle(pending.peer, monitor::SuspectKind::Silent, silent, own);
        return fail(monitor_->failed() ? withContext(monitor_->verdict(), pending) : agreed, handles, n);
      }
      // The call's signatures (call_check.h): a call that disagrees ends here.
      const Status watched = checkWaitWatch();
      if (!watched.ok()) return fail(watched, handles, n);
      note.waitingOn(pending.peer);
      waiter.idle();
    }
    for (size_t i = 0; i < n; ++i) complete(ops_.find(handles[i]));
    return Status::Ok();
  }

  void cancel(Handle h) override {
    auto it = ops_.find(h);
    if (it != ops_.end()) abandon(it);
  }

  PeerCounters counters(int peer) const override {
    return peer >= 0 && peer < size_ ? counters_[peer] : PeerCounters{};
  }
  void resetCounters() override { std::fill(counters_.begin(), counters_.end(), PeerCounters{}); }

 private:
  using OpMap = std::unordered_map<Handle, std::unique_ptr<Op>>;

  Status checkPost(bool isSend, int peer, uint64_t tag, const void* buf, size_t bytes, Handle* out) {
    const char* what = isSend ? "isend" : "irecv";
    GC_REQUIRE(out, Err::InvalidArgument, "%s: null handle pointer", what);
    *out = 0;
    if (!broken_.ok()) return broken_;
    GC_REQUIRE(peer >= 0 && peer < size_, Err::InvalidArgument, "%s: peer %d out of range [0, %d)",
               what, peer, size_);
    GC_REQUIRE(buf || bytes == 0, Err::InvalidArgument, "%s: null buffer for %zu bytes", what,
               bytes);
    const std::string doing = "was about to start " + describe(isSend, peer, tag, bytes);
    if (monitor_->failed()) return fail(withContext(monitor_->verdict(), doing), nullptr, 0);
    if (peer != rank_ && eps_.failure(peer) != UCS_OK) {
      const Status agreed =
          monitor_->settle(peer, monitor::SuspectKind::Link, 0, peerFailed(peer, nullptr));
      return fail(monitor_->failed() ? withContext(monitor_->verdict(), doing) : agreed, nullptr, 0);
    }
    return Status::Ok();
  }

  // Publishes the peer a wait is blocked on (for the monitor root's probes)
  // and clears it when the wait ends.
  class WaitingNote {
   public:
    explicit WaitingNote(FailureMonitor& m) : m_(m) {}
    ~WaitingNote() {
      if (peer_ >= 0) m_.endWait(token_);
    }
    void waitingOn(int peer) {
      if (peer == peer_) return;
      if (peer_ >= 0) m_.endWait(token_);
      token_ = m_.beginWait(peer_ = peer);
    }

   private:
    FailureMonitor& m_;
    int peer_ = -1;
    uint64_t token_ = 0;
  };

  // "receiving 3328 bytes from rank 3 in dense (call 18, step 8; tag 0x1200008)"
  std::string describe(const Op& op) const {
    return describe(op.isSend, op.peer, op.tag, op.bytes);
  }
  std::string describe(bool isSend, int peer, uint64_t tag, size_t bytes) const {
    tag &= kTagMask;
    char text[320];
    snprintf(text, sizeof text, "%s %zu bytes %s rank %d%s%s (call %llu, step %llu; tag %#llx)",
             isSend ? "sending" : "receiving", bytes, isSend ? "to" : "from", peer,
             activity()[0] ? " in " : "", activity(), (unsigned long long)(tag >> 20),
             (unsigned long long)(tag & 0xFFFFF), (unsigned long long)tag);
    return text;
  }

  // The agreed failure, with what this rank was doing when it learnt it.
  Status withContext(const Status& verdict, const Op& op) const {
    return withContext(verdict, "was " + describe(op));
  }
  Status withContext(const Status& verdict, const std::string& doing) const {
    return Status(verdict.code(), verdict.message() + "; rank " + std::to_string(rank_) + " " + doing);
  }

  // UCX reported the link to op's peer broken: a suspicion the monitor
  // settles (the peer may be alive and have closed its side after failing
  // itself). Other errors (a truncated message) are this rank's own finding.
  Status settleLink(const Op& op, const Status& s) {
    if (op.done && op.status == UCS_ERR_MESSAGE_TRUNCATED) return s;
    Status agreed = monitor_->settle(op.peer, monitor::SuspectKind::Link, 0, s);
    return monitor_->failed() ? withContext(monitor_->verdict(), op) : agreed;
  }

  Status admit(std::unique_ptr<Op> op, Handle* out) {
    Status s = opError(*op);
    if (!s.ok()) {
      s = settleLink(*op, s);
      freeOrKeep(std::move(op));
      return fail(s, nullptr, 0);
    }
    *out = nextHandle_++;
    ops_.emplace(*out, std::move(op));
    return Status::Ok();
  }

  Status peerFailed(int peer, const Op* op) const {
    const ucs_status_t st = op && op->status != UCS_OK ? op->status : eps_.failure(peer);
    if (!op)
      return makeStatus(Err::RemoteError, "the link to %s failed: %s", monitor_->who(peer).c_str(),
                        ucx::statusText(st).c_str());
    return makeStatus(Err::RemoteError, "the link to %s failed: %s while %s",
                      monitor_->who(peer).c_str(), ucx::statusText(st).c_str(),
                      describe(*op).c_str());
  }

  // The error of one operation: its own UCX status, or its peer's endpoint
  // failure (a receive is not tied to an endpoint, so UCX cannot fail it).
  Status opError(const Op& op) const {
    if (op.done && op.status == UCS_ERR_MESSAGE_TRUNCATED)
      return makeStatus(Err::RemoteError,
                        "message from peer %d (tag %#llx) is longer than the receive capacity of "
                        "%zu bytes (%s)",
                        op.peer, (unsigned long long)op.tag, op.bytes,
                        ucx::statusText(op.status).c_str());
    if (op.done && op.status != UCS_OK) return peerFailed(op.peer, &op);
    if (!op.done && op.peer != rank_ && eps_.failure(op.peer) != UCS_OK)
      return peerFailed(op.peer, &op);
    return Status::Ok();
  }

  void complete(OpMap::iterator it) {
    Op& op = *it->second;
    PeerCounters& c = op.tag == kSignatureTag ? scratch_ : counters_[op.peer];
    if (op.isSend) {
      c.bytesSent += op.length;
      c.msgsSent += 1;
    } else {
      c.bytesRecv += op.length;
      c.msgsRecv += 1;
    }
    ucx::freeRequest(&op);
    ops_.erase(it);
  }

  // Releases a handle whose operation may still be owned by UCX.
  void abandon(OpMap::iterator it) {
    std::unique_ptr<Op> op = std::move(it->second);
    ops_.erase(it);
    if (!op->done) ucx::cancelRequest(worker_.get(), op.get());
    freeOrKeep(std::move(op));
  }

  void freeOrKeep(std::unique_ptr<Op> op) {
    if (op->done) {
      ucx::freeRequest(op.get());
    } else {
      zombies_.push_back(std::move(op));  // its callback may still run
    }
    sweepZombies();
  }

  void sweepZombies() {
    for (size_t i = 0; i < zombies_.size();) {
      if (zombies_[i]->done) {
        ucx::freeRequest(zombies_[i].get());
        zombies_[i] = std::move(zombies_.back());
        zombies_.pop_back();
      } else {
        ++i;
      }
    }
  }

  // Records the first error (the transport is broken from then on) and
  // releases the given handles.
  Status fail(const Status& s, const Handle* handles, size_t n) {
    if (broken_.ok()) {
      broken_ = s;
      ucx::quietLogsAfterFailure();
      GC_INFO(TRANSPORT, "UCX transport rank %d broken: %s", rank_, s.toString().c_str());
    }
    for (size_t i = 0; i < n; ++i) {
      auto it = ops_.find(handles[i]);
      if (it != ops_.end()) abandon(it);
    }
    return broken_;
  }

  void shutdown() {
    if (!worker_.get()) return;
    while (!ops_.empty()) abandon(ops_.begin());
    eps_.close(!broken_.ok() || (monitor_ && monitor_->failed()), std::min(timeoutS_, 5.0));
    for (int i = 0; i < 100 && !zombies_.empty(); ++i) {
      ucp_worker_progress(worker_.get());
      sweepZombies();
    }
    worker_.destroy();  // UCX releases whatever requests are left with it
    zombies_.clear();
  }

  const int rank_, size_;
  const double timeoutS_;
  const int spinUs_;
  ucx::Worker worker_;
  // This rank's GRADCOMP_HOSTID, "" when unset: with the kernel's identity
  // (boot id and network namespace) it decides who shares a host, for
  // routes and error modes.
  static std::string configuredHostId() {
    std::string id;
    if (param::isSet(param::Id::HOSTID) && param::getString(param::Id::HOSTID, &id).ok()) return id;
    return "";
  }

  // One INFO line (INIT) per rank, in NCCL's "via" style: how many peers on
  // this host and on others, and the UCX transports their endpoints use.
  void logRoutes(const std::vector<bool>& sameHost) const {
    if (!log::enabled(log::Level::Info, log::INIT)) return;
    std::map<std::string, int> local, remote;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      std::string r = eps_.route(p);
      ++(sameHost[p] ? local : remote)[r.empty() ? "?" : r];
    }
    auto join = [](const std::map<std::string, int>& m) {
      std::string out;
      for (const auto& [r, n] : m)
        out += (out.empty() ? "" : "; ") + std::to_string(n) + " via " + r;
      return out.empty() ? std::string("none") : out;
    };
    GC_INFO(INIT, "rank %d routes: same host %s, other hosts %s", rank_, join(local).c_str(),
            join(remote).c_str());
  }

  ucx::Endpoints eps_;
  std::shared_ptr<FailureMonitor> monitor_;  // never null after init
  Status broken_;
  Handle nextHandle_ = 1;
  OpMap ops_;
  std::vector<std::unique_ptr<Op>> zombies_;
  std::vector<PeerCounters> counters_;
  PeerCounters scratch_;  // kSignatureTag traffic: not counted
};

}  // namespace

Status createUcxTransport(AddressExchange& exchange, const UcxOptions& options,
                          std::unique_ptr<Transport>* out) {
  double timeoutS = options.timeoutS;
  if (timeoutS < 0) GC_CHECK(param::getDouble(param::Id::TIMEOUT_S, &timeoutS));
  int64_t spinUs = options.spinUs;
  if (spinUs < 0) GC_CHECK(param::getInt(param::Id::WAIT_SPIN_US, &spinUs));
  std::string errMode;
  GC_CHECK(param::getString(param::Id::UCX_ERR_MODE, &errMode));
  const int rank = exchange.rank(), size = exchange.size();
  GC_REQUIRE(size >= 1 && rank >= 0 && rank < size, Err::InvalidArgument,
             "createUcxTransport: rank %d / size %d from the address exchange", rank, size);
  auto t = std::make_unique<UcxTransport>(rank, size, timeoutS, static_cast<int>(spinUs));
  GC_CHECK(t->init(exchange, errMode, options.monitor));
  *out = std::move(t);
  return Status::Ok();
}

}  // namespace gradcomp::transport
