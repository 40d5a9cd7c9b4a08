// createUcxBootstrap: rank 0 listens on host:port with a ucp_listener on its
// own worker; every other rank connects (client id = its rank, retried until
// the listener exists), sends a hello with its blob, and receives the table.
// Each allgather has a sequence number in its tags, so it may be repeated.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>

#include "common/log.h"
#include "common/param.h"
#include "transport/bootstrap.h"
#include "transport/bootstrap_wire.h"
#include "transport/ucx_context.h"
#include "transport/ucx_request.h"

namespace gradcomp::transport {
namespace {

using Clock = std::chrono::steady_clock;

class SingleRankExchange final : public AddressExchange {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Status allgather(const std::string& mine, std::vector<std::string>* all) override {
    *all = {mine};
    return Status::Ok();
  }
};

class UcxRendezvous final : public AddressExchange {
 public:
  UcxRendezvous(const LaunchInfo& info, double timeoutS, int spinUs)
      : info_(info), where_(info.host + ":" + std::to_string(info.port)), timeoutS_(timeoutS),
        spinUs_(spinUs) {}
  ~UcxRendezvous() override;

  Status init();
  // Listen-first use (listenUcxRendezvous): a listener on `host` at a port
  // the kernel picks, before rank and size are known; becomeRoot() later
  // makes it rank 0 of `size` ranks. Connection requests wait in UCX until
  // the first allgather progresses the worker.
  Status listenEarly(const std::string& host);
  void becomeRoot(int size) {
    info_.rank = 0;
    info_.size = size;
    for (int r = 0; r < size; ++r) {
      peers_.push_back(std::make_unique<Peer>());
      peers_.back()->rank = r;
    }
  }
  const LaunchInfo& info() const { return info_; }
  int rank() const override { return info_.rank; }
  int size() const override { return info_.size; }
  Status allgather(const std::string& mine, std::vector<std::string>* all) override;
  void abandon() override { abandoned_ = true; }

 private:
  struct Peer {  // an endpoint and the failure UCX reported for it
    int rank = -1;
    ucp_ep_h ep = nullptr;
    ucs_status_t failed = UCS_OK;
  };

  Status resolve(sockaddr_storage* addr, socklen_t* len) const;
  Status listen();
  Status connect();
  Status rootAllgather(const std::string& mine, std::vector<std::string>* all, Clock::time_point deadline);
  Status clientAllgather(const std::string& mine, std::vector<std::string>* all, Clock::time_point deadline);
  // Sends `msg` to `peer`, progressing until done, failed, or past deadline.
  Status send(Peer* peer, const std::string& msg, Clock::time_point deadline, bool* peerFailed);
  // Receives a message matching (tag, mask) if one is there now (probe);
  // *senderTag gets its full tag.
  Status tryReceive(uint64_t tag, uint64_t mask, std::string* msg, bool* got, uint64_t* senderTag,
                    Clock::time_point deadline);
  // Progresses until the op completes, force-closing `peer` (when given) at
  // the deadline; an op UCX still holds after that is leaked, never freed
  // under UCX's feet.
  void finish(std::unique_ptr<ucx::Op> op, Peer* peer, Clock::time_point deadline, ucx::Op* result);
  void closePeer(Peer* peer, bool force);
  static void onConnRequest(ucp_conn_request_h req, void* arg);
  static void onEpError(void* arg, ucp_ep_h ep, ucs_status_t status);

  LaunchInfo info_;
  std::string where_;
  const double timeoutS_;
  const int spinUs_;
  uint32_t seq_ = 0;
  ucx::Worker worker_;
  ucp_listener_h listener_ = nullptr;
  std::vector<std::unique_ptr<Peer>> peers_;  // root: one per rank; client: [0] = root
  bool connected_ = false;  // client: one hello got through
  bool abandoned_ = false;  // close without flushing
};

UcxRendezvous::~UcxRendezvous() {
  for (auto& p : peers_) closePeer(p.get(), abandoned_ || p->failed != UCS_OK);
  if (listener_) ucp_listener_destroy(listener_);
  worker_.destroy();
}

Status UcxRendezvous::resolve(sockaddr_storage* addr, socklen_t* len) const {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(info_.host.c_str(), std::to_string(info_.port).c_str(), &hints, &res);
  GC_REQUIRE(rc == 0 && res, Err::InvalidConfig,
             "bootstrap address %s (%s): cannot resolve host '%s': %s", where_.c_str(),
             info_.addressSource.c_str(), info_.host.c_str(), gai_strerror(rc));
  memcpy(addr, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  freeaddrinfo(res);
  return Status::Ok();
}

Status UcxRendezvous::init() {
  GC_CHECK(worker_.create(ucx::ContextKind::Bootstrap, "bootstrap", info_.rank == 0 ? -1 : info_.rank));
  for (int r = 0; r < (info_.rank == 0 ? info_.size : 1); ++r) {
    peers_.push_back(std::make_unique<Peer>());
    peers_.back()->rank = r;
  }
  return info_.rank == 0 ? listen() : Status::Ok();
}

Status UcxRendezvous::listen() {
  sockaddr_storage addr{};
  socklen_t len = 0;
  GC_CHECK(resolve(&addr, &len));
  // A host name taken from the allocation may resolve to a loopback alias on
  // its own host (Debian's 127.0.1.1): listen on every address of its family.
  if (info_.listenAny) {
    if (addr.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&addr)->sin_addr.s_addr = htonl(INADDR_ANY);
    if (addr.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr = in6addr_any;
  }
  ucp_listener_params_t params{};
  params.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  params.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr);
  params.sockaddr.addrlen = len;
  params.conn_handler.cb = &UcxRendezvous::onConnRequest;
  params.conn_handler.arg = this;
  ucs_status_t st = ucp_listener_create(worker_.get(), &params, &listener_);
  GC_REQUIRE(st == UCS_OK, Err::SystemError,
             "bootstrap: rank 0 cannot listen on %s (%s): %s", where_.c_str(),
             info_.addressSource.c_str(), ucx::statusText(st).c_str());
  if (info_.size > 0) GC_INFO(BOOTSTRAP, "rank 0 listening on %s for %d ranks", where_.c_str(), info_.size);
  return Status::Ok();
}

Status UcxRendezvous::listenEarly(const std::string& host) {
  info_ = LaunchInfo();
  info_.host = host;
  info_.port = 0;
  info_.addressSource = "a local interface address, port picked by the kernel";
  where_ = host + ":0";
  GC_CHECK(worker_.create(ucx::ContextKind::Bootstrap, "bootstrap"));
  GC_CHECK(listen());
  ucp_listener_attr_t attr{};
  attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  ucs_status_t st = ucp_listener_query(listener_, &attr);
  GC_REQUIRE(st == UCS_OK, Err::SystemError, "bootstrap: querying the listener on %s failed: %s",
             host.c_str(), ucx::statusText(st).c_str());
  const auto& ss = attr.sockaddr;
  info_.port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<const sockaddr_in6&>(ss).sin6_port
                                              : reinterpret_cast<const sockaddr_in&>(ss).sin_port);
  where_ = host + ":" + std::to_string(info_.port);
  GC_INFO(BOOTSTRAP, "listening on %s before ranks are known", where_.c_str());
  return Status::Ok();
}

void UcxRendezvous::onConnRequest(ucp_conn_request_h req, void* arg) {
  auto* self = static_cast<UcxRendezvous*>(arg);
  ucp_conn_request_attr_t attr{};
  attr.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ID;
  if (ucp_conn_request_query(req, &attr) != UCS_OK || attr.client_id == 0 ||
      attr.client_id >= static_cast<uint64_t>(self->info_.size)) {
    GC_WARN("bootstrap: rejecting a connection with client id %llu on %s (expected ranks 1..%d)",
            (unsigned long long)attr.client_id, self->where_.c_str(), self->info_.size - 1);
    ucp_listener_reject(self->listener_, req);
    return;
  }
  Peer* peer = self->peers_[attr.client_id].get();
  if (peer->ep) self->closePeer(peer, true);  // the rank reconnected after a failed try
  peer->failed = UCS_OK;
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.conn_request = req;
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = &UcxRendezvous::onEpError;
  params.err_handler.arg = peer;
  ucs_status_t st = ucp_ep_create(self->worker_.get(), &params, &peer->ep);
  if (st != UCS_OK) {
    peer->ep = nullptr;
    GC_WARN("bootstrap: cannot accept rank %d on %s: %s", peer->rank, self->where_.c_str(),
            ucx::statusText(st).c_str());
  }
}

void UcxRendezvous::onEpError(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto* peer = static_cast<Peer*>(arg);
  if (peer->failed == UCS_OK) peer->failed = status;
}

void UcxRendezvous::closePeer(Peer* peer, bool force) {
  if (!peer->ep) return;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  ucs_status_ptr_t req = ucp_ep_close_nbx(peer->ep, &param);
  peer->ep = nullptr;
  if (!req || UCS_PTR_IS_ERR(req)) return;
  // Bounded: a flush to a vanished peer must not hold up shutdown.
  const auto until = Clock::now() + std::chrono::seconds(1);
  ucx::Waiter waiter(worker_, spinUs_);
  while (ucp_request_check_status(req) == UCS_INPROGRESS && Clock::now() < until)
    if (!waiter.progress()) waiter.idle();
  ucp_request_free(req);
}

Status UcxRendezvous::connect() {
  sockaddr_storage addr{};
  socklen_t len = 0;
  GC_CHECK(resolve(&addr, &len));
  Peer* root = peers_[0].get();
  root->failed = UCS_OK;
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                      UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER | UCP_EP_PARAMS_FLAGS_SEND_CLIENT_ID;
  params.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr);
  params.sockaddr.addrlen = len;
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = &UcxRendezvous::onEpError;
  params.err_handler.arg = root;
  ucs_status_t st = ucp_ep_create(worker_.get(), &params, &root->ep);
  if (st != UCS_OK) {
    root->ep = nullptr;
    root->failed = st;
  }
  return Status::Ok();
}

void UcxRendezvous::finish(std::unique_ptr<ucx::Op> op, Peer* peer, Clock::time_point deadline,
                           ucx::Op* result) {
  ucx::Waiter waiter(worker_, spinUs_);
  while (!op->done && (!peer || peer->failed == UCS_OK) && Clock::now() < deadline)
    if (!waiter.progress()) waiter.idle();
  if (!op->done) {
    if (peer) {
      closePeer(peer, true);  // completes the send with an error
    } else {
      ucx::cancelRequest(worker_.get(), op.get());
    }
    for (int i = 0; i < 10000 && !op->done; ++i) ucp_worker_progress(worker_.get());
  }
  *result = *op;
  result->request = nullptr;
  if (op->done) {
    ucx::freeRequest(op.get());
  } else {
    GC_WARN("bootstrap: UCX kept a request after cancellation; leaking it");
    op.release();
  }
}

Status UcxRendezvous::send(Peer* peer, const std::string& msg, Clock::time_point deadline,
                           bool* peerFailed) {
  *peerFailed = false;
  GC_REQUIRE(peer->ep, Err::RemoteError, "bootstrap: no connection to rank %d (%s)", peer->rank,
             ucx::statusText(peer->failed).c_str());
  auto op = std::make_unique<ucx::Op>();
  op->isSend = true;
  op->peer = peer->rank;
  op->bytes = msg.size();
  const uint64_t tag = info_.rank == 0 ? wire::tableTag(seq_) : wire::helloTag(seq_, info_.rank);
  ucx::postSend(peer->ep, tag, msg.data(), op.get());
  ucx::Op result;
  finish(std::move(op), peer, deadline, &result);
  const ucs_status_t st = result.status != UCS_OK ? result.status : peer->failed;
  if (st != UCS_OK || !result.done) {
    *peerFailed = st != UCS_OK;
    return makeStatus(*peerFailed ? Err::RemoteError : Err::Timeout,
                      "bootstrap: sending %zu bytes to rank %d failed: %s", msg.size(), peer->rank,
                      st != UCS_OK ? ucx::statusText(st).c_str() : "no completion before the deadline");
  }
  return Status::Ok();
}

Status UcxRendezvous::tryReceive(uint64_t tag, uint64_t mask, std::string* msg, bool* got,
                                 uint64_t* senderTag, Clock::time_point deadline) {
  *got = false;
  ucp_tag_recv_info_t info{};
  ucp_tag_message_h handle = ucp_tag_probe_nb(worker_.get(), tag, mask, 1, &info);
  if (!handle) return Status::Ok();
  // The probe removed the message, so it must be received; one longer than
  // any valid message becomes a truncation error, not a huge allocation.
  const size_t cap = wire::kMaxBlob * 2 + 4096;
  msg->resize(std::min(info.length, cap));
  auto op = std::make_unique<ucx::Op>();
  op->bytes = msg->size();
  ucx::postRecvProbed(worker_.get(), handle, msg->empty() ? nullptr : &(*msg)[0], op.get());
  ucx::Op result;
  finish(std::move(op), nullptr, deadline, &result);
  GC_REQUIRE(result.done && result.status == UCS_OK, Err::RemoteError,
             "bootstrap: receiving a %zu-byte message (tag %#llx) failed: %s", info.length,
             (unsigned long long)info.sender_tag,
             result.done ? ucx::statusText(result.status).c_str() : "timed out");
  msg->resize(result.length);
  *senderTag = info.sender_tag;
  *got = true;
  return Status::Ok();
}

Status UcxRendezvous::allgather(const std::string& mine, std::vector<std::string>* all) {
  GC_REQUIRE(mine.size() <= wire::kMaxBlob, Err::InvalidArgument,
             "bootstrap allgather: %zu bytes exceed the %zu-byte limit", mine.size(), wire::kMaxBlob);
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeoutS_));
  Status s = info_.rank == 0 ? rootAllgather(mine, all, deadline)
                             : clientAllgather(mine, all, deadline);
  ++seq_;
  return s;
}

Status UcxRendezvous::rootAllgather(const std::string& mine, std::vector<std::string>* all,
                                    Clock::time_point deadline) {
  const int n = info_.size;
  std::vector<std::string> blobs(n);
  std::vector<bool> have(n, false);
  blobs[0] = mine;
  have[0] = true;
  int missing = n - 1;
  const uint64_t rankMask = (uint64_t(1) << wire::kRankBits) - 1;
  ucx::Waiter waiter(worker_, spinUs_);
  while (missing > 0) {
    bool progressed = waiter.progress();
    std::string msg;
    bool got = false;
    uint64_t senderTag = 0;
    GC_CHECK(tryReceive(wire::helloTag(seq_, 0), ~rankMask, &msg, &got, &senderTag, deadline));
    if (got) {
      progressed = true;
      const int r = static_cast<int>(senderTag & rankMask);
      GC_REQUIRE(r > 0 && r < n, Err::RemoteError,
                 "bootstrap: hello from rank %d, but there are %d ranks (two jobs on %s?)", r, n,
                 where_.c_str());
      if (have[r]) {
        GC_INFO(BOOTSTRAP, "duplicate hello from rank %d (it reconnected); ignored", r);
      } else {
        GC_CHECK(wire::unpackHello(msg, r, n, seq_, &blobs[r]));
        have[r] = true;
        --missing;
      }
      continue;
    }
    if (Clock::now() >= deadline) {
      std::string list;
      for (int r = 1; r < n; ++r)
        if (!have[r]) list += (list.empty() ? "" : ", ") + std::to_string(r);
      return makeStatus(Err::Timeout,
                        "bootstrap: rank 0 on %s: rank%s %s of %d did not arrive within %.1f s "
                        "(GRADCOMP_TIMEOUT_S)",
                        where_.c_str(), missing > 1 ? "s" : "", list.c_str(), n, timeoutS_);
    }
    if (!progressed) waiter.idle();
  }
  const std::string table = wire::packTable(seq_, blobs);
  for (int r = 1; r < n; ++r) {
    bool failed = false;
    GC_CHECK(send(peers_[r].get(), table, deadline, &failed));
  }
  *all = std::move(blobs);
  return Status::Ok();
}

Status UcxRendezvous::clientAllgather(const std::string& mine, std::vector<std::string>* all,
                                      Clock::time_point deadline) {
  Peer* root = peers_[0].get();
  const std::string hello = wire::packHello(info_.rank, info_.size, seq_, mine);
  std::string lastError;
  ucx::Waiter waiter(worker_, spinUs_);
  while (true) {
    if (!root->ep) GC_CHECK(connect());
    bool failed = false;
    Status s = root->ep ? send(root, hello, deadline, &failed)
                        : makeStatus(Err::RemoteError, "%s", ucx::statusText(root->failed).c_str());
    if (s.ok()) break;
    // Until rank 0 has answered once, a refused connection means its listener
    // is not up yet: retry. Afterwards rank 0 is gone.
    if (connected_)
      return makeStatus(Err::RemoteError, "bootstrap: rank 0 at %s failed: %s", where_.c_str(),
                        s.message().c_str());
    lastError = s.message();
    closePeer(root, true);
    const auto retryAt = std::min(deadline, Clock::now() + std::chrono::milliseconds(50));
    while (Clock::now() < retryAt)
      if (!waiter.progress()) waiter.idle();
    GC_REQUIRE(Clock::now() < deadline, Err::Timeout,
               "bootstrap: rank %d cannot reach rank 0 at %s (%s) within %.1f s "
               "(GRADCOMP_TIMEOUT_S): %s",
               info_.rank, where_.c_str(), info_.addressSource.c_str(), timeoutS_,
               lastError.c_str());
  }
  while (true) {
    std::string msg;
    bool got = false;
    uint64_t senderTag = 0;
    const bool progressed = waiter.progress();
    GC_CHECK(tryReceive(wire::tableTag(seq_), ucx::kFullMask, &msg, &got, &senderTag, deadline));
    if (got) {
      connected_ = true;
      return wire::unpackTable(msg, info_.size, seq_, all);
    }
    GC_REQUIRE(root->failed == UCS_OK, Err::RemoteError,
               "bootstrap: rank 0 at %s failed before sending the table: %s", where_.c_str(),
               ucx::statusText(root->failed).c_str());
    GC_REQUIRE(Clock::now() < deadline, Err::Timeout,
               "bootstrap: rank %d: no table from rank 0 at %s within %.1f s (GRADCOMP_TIMEOUT_S); "
               "rank 0 waits for every rank, so another rank is missing",
               info_.rank, where_.c_str(), timeoutS_);
    if (!progressed) waiter.idle();
  }
}

}  // namespace
}  // namespace gradcomp::transport

namespace gradcomp::transport {

Status createUcxBootstrap(const LaunchInfo& info, std::unique_ptr<AddressExchange>* out) {
  GC_REQUIRE(info.size >= 1 && info.rank >= 0 && info.rank < info.size, Err::InvalidArgument,
             "createUcxBootstrap: rank %d of %d is not a valid rank", info.rank, info.size);
  if (info.size == 1) {
    *out = std::make_unique<SingleRankExchange>();
    return Status::Ok();
  }
  GC_REQUIRE(!info.host.empty() && info.port > 0, Err::InvalidConfig,
             "no bootstrap address: set GRADCOMP_BOOTSTRAP=host:port or MASTER_ADDR and MASTER_PORT");
  double timeoutS = 0;
  int64_t spinUs = 0;
  GC_CHECK(param::getDouble(param::Id::TIMEOUT_S, &timeoutS));
  GC_CHECK(param::getInt(param::Id::WAIT_SPIN_US, &spinUs));
  auto r = std::make_unique<UcxRendezvous>(info, timeoutS, static_cast<int>(spinUs));
  GC_CHECK(r->init());
  *out = std::move(r);
  return Status::Ok();
}

}  // namespace gradcomp::transport

namespace gradcomp::transport {
namespace {

class EarlyListener final : public RendezvousListener {
 public:
  std::unique_ptr<UcxRendezvous> rendezvous;
  std::string host() const override { return rendezvous->info().host; }
  int port() const override { return rendezvous->info().port; }
};

}  // namespace

Status listenUcxRendezvous(const std::string& host, std::unique_ptr<RendezvousListener>* out) {
  double timeoutS = 0;
  int64_t spinUs = 0;
  GC_CHECK(param::getDouble(param::Id::TIMEOUT_S, &timeoutS));
  GC_CHECK(param::getInt(param::Id::WAIT_SPIN_US, &spinUs));
  auto l = std::make_unique<EarlyListener>();
  l->rendezvous = std::make_unique<UcxRendezvous>(LaunchInfo(), timeoutS, static_cast<int>(spinUs));
  GC_CHECK(l->rendezvous->listenEarly(host));
  *out = std::move(l);
  return Status::Ok();
}

Status joinUcxRendezvous(std::unique_ptr<RendezvousListener> listener, const LaunchInfo& info,
                         std::unique_ptr<AddressExchange>* out) {
  GC_REQUIRE(info.size >= 1 && info.rank >= 0 && info.rank < info.size, Err::InvalidArgument,
             "joinUcxRendezvous: rank %d of %d is not a valid rank", info.rank, info.size);
  auto* early = dynamic_cast<EarlyListener*>(listener.get());
  GC_REQUIRE(early != nullptr && early->rendezvous, Err::InvalidArgument,
             "joinUcxRendezvous: the listener is not one from listenUcxRendezvous (or was used)");
  if (info.rank != 0 || info.size == 1) {
    listener.reset();  // only rank 0's listener serves
    return createUcxBootstrap(info, out);
  }
  early->rendezvous->becomeRoot(info.size);
  *out = std::move(early->rendezvous);
  return Status::Ok();
}

}  // namespace gradcomp::transport
