#include "plugin/net/ucx_net.h"

#include <arpa/inet.h>
#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <mutex>
#include <vector>

#include "common/log.h"
#include "plugin/net/devices.h"
#include "plugin/net/net_common.h"
#include "transport/ucx_cuda_env.h"

namespace gradcomp::net {
namespace {

constexpr uint32_t kHandleMagic = 0x67634e31;  // "gcN1"

// What travels in NCCL's opaque connection handle.
struct Handle {
  uint32_t magic;
  uint32_t connTag;
  sockaddr_in addr;
};
static_assert(sizeof(Handle) <= NCCL_NET_HANDLE_MAXSIZE, "handle fits NCCL_NET_HANDLE_MAXSIZE");

struct Comm;

struct Sub {
  void* ucx = nullptr;  // UCX request, null once completed or never posted
  bool done = false;
  ucs_status_t status = UCS_OK;
  size_t size = 0;
  ucp_tag_recv_info_t info{};
};

struct Request {
  Comm* comm = nullptr;
  bool used = false;
  int n = 0;
  Sub subs[kMaxRecvs];
};

struct Comm {
  enum Kind { Send, Recv } kind;
  ucp_ep_h ep = nullptr;
  uint32_t connTag = 0;
  std::string peer;  // "10.0.0.2:41234", for messages
  bool failed = false;
  std::string failure;
  Request requests[NCCL_NET_MAX_REQUESTS];
};

struct Listen {
  int dev = 0;
  uint32_t connTag = 0;
  ucp_listener_h listener = nullptr;
  std::deque<ucp_conn_request_h> pending;
  bool accepted = false;
};

struct Global {
  std::mutex mu;
  int refs = 0;
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  bool cudaMemory = false;
  std::vector<Device> devices;
  uint32_t nextTag = 1;
};

Global& g() {
  static Global* global = new Global();  // outlives static destructors (NCCL's atexit)
  return *global;
}

std::string addrText(const sockaddr_in& a) {
  char ip[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
  return std::string(ip) + ":" + std::to_string(ntohs(a.sin_port));
}

// The handle arrives from the peer through NCCL's bootstrap: everything UCX
// will read from it (family, port, address length) is checked first.
Status parseHandle(const void* handle, Handle* h) {
  memcpy(h, handle, sizeof *h);
  GC_REQUIRE(h->magic == kHandleMagic, Err::InvalidArgument,
             "net plugin: connection handle is not gradcomp's (magic %#x)", h->magic);
  GC_REQUIRE(h->addr.sin_family == AF_INET && h->addr.sin_port != 0, Err::InvalidArgument,
             "net plugin: connection handle carries address family %d port %u (expected "
             "AF_INET with a non-zero port)", int(h->addr.sin_family), unsigned(ntohs(h->addr.sin_port)));
  return Status::Ok();
}

uint64_t ucxTag(uint32_t connTag, int tag) { return uint64_t(connTag) << 32 | uint32_t(tag); }

void onEpError(void* arg, ucp_ep_h, ucs_status_t status) {
  Comm* c = static_cast<Comm*>(arg);
  if (c->failed) return;
  c->failed = true;
  c->failure = std::string(c->kind == Comm::Send ? "send" : "receive") + " connection to peer " +
               c->peer + " failed: " + ucs_status_string(status);
}

void onSend(void*, ucs_status_t status, void* user) {
  Sub* s = static_cast<Sub*>(user);
  s->status = status;
  s->done = true;
}

void onRecv(void*, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user) {
  Sub* s = static_cast<Sub*>(user);
  s->status = status;
  if (status == UCS_OK && info) s->size = info->length;
  s->done = true;
}

void onConnRequest(ucp_conn_request_h request, void* arg) {
  static_cast<Listen*>(arg)->pending.push_back(request);
}

Status ucxStatus(ucs_status_t s, const char* what) {
  GC_REQUIRE(s == UCS_OK, Err::SystemError, "net plugin: %s failed: %s", what, ucs_status_string(s));
  return Status::Ok();
}

Request* takeRequest(Comm* c) {
  for (Request& r : c->requests) {
    if (r.used) continue;
    r = Request();
    r.comm = c;
    r.used = true;
    return &r;
  }
  return nullptr;
}

void releaseRequest(Request* r) {
  for (int i = 0; i < r->n; ++i) {
    Sub& s = r->subs[i];
    if (s.ucx == nullptr) continue;
    if (!s.done) ucp_request_cancel(g().worker, s.ucx);
    ucp_request_free(s.ucx);
    s.ucx = nullptr;
  }
  r->used = false;
}

// Completes `ucx` (a status-pointer from a close or similar), bounded.
void waitBounded(ucs_status_ptr_t ucx, double seconds) {
  if (ucx == nullptr || UCS_PTR_IS_ERR(ucx)) return;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (ucp_request_check_status(ucx) == UCS_INPROGRESS &&
         std::chrono::steady_clock::now() < deadline)
    ucp_worker_progress(g().worker);
  if (ucp_request_check_status(ucx) != UCS_INPROGRESS) ucp_request_free(ucx);
  // else: leave it to UCX; freeing an in-flight close is not allowed
}

Status closeComm(Comm* c) {
  for (Request& r : c->requests)
    if (r.used) releaseRequest(&r);
  if (c->ep) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = c->failed ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    waitBounded(ucp_ep_close_nbx(c->ep, &p), 5.0);
  }
  delete c;
  return Status::Ok();
}

ucp_ep_params_t epParams(Comm* c) {
  ucp_ep_params_t p{};
  p.field_mask = UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  p.err_handler.cb = onEpError;
  p.err_handler.arg = c;
  return p;
}

}  // namespace

Status init() {
  Global& s = g();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.refs++ > 0) return Status::Ok();
  Status st = [&]() -> Status {
    GC_CHECK(enumerateDevices(&s.devices));
    ucp_config_t* config = nullptr;
    GC_CHECK(ucxStatus(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read"));
    // A UCX with CUDA modules: gradcomp's safe defaults (transport/ucx_cuda_env.h).
    if (Status cuda = transport::ucx::applyUcxCudaDefaults(config, "net plugin"); !cuda.ok()) {
      ucp_config_release(config);
      return cuda;
    }
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    params.features = UCP_FEATURE_TAG;
    params.mt_workers_shared = 0;
    ucs_status_t rc = ucp_init(&params, config, &s.context);
    ucp_config_release(config);
    GC_CHECK(ucxStatus(rc, "ucp_init"));
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // every call holds s.mu
    GC_CHECK(ucxStatus(ucp_worker_create(s.context, &wp, &s.worker), "ucp_worker_create"));
    ucp_context_attr_t attr{};
    attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    if (ucp_context_query(s.context, &attr) == UCS_OK)
      s.cudaMemory = attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA);
    return Status::Ok();
  }();
  if (!st.ok()) {
    s.refs = 0;
    if (s.worker) ucp_worker_destroy(s.worker);
    if (s.context) ucp_cleanup(s.context);
    s.worker = nullptr;
    s.context = nullptr;
    return st;
  }
  GC_INFO(NET, "net plugin: UCX %s, %zu device(s), CUDA memory %s", ucp_get_version_string(),
          s.devices.size(), s.cudaMemory ? "supported" : "not supported (host staging)");
  return Status::Ok();
}

void finalize() {
  Global& s = g();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.refs == 0 || --s.refs > 0) return;
  // Comms NCCL forgot to close keep the worker alive; they are leaked on purpose.
}

Status deviceCount(int* n) {
  std::lock_guard<std::mutex> lock(g().mu);
  *n = int(g().devices.size());
  return Status::Ok();
}

Status properties(int dev, Properties* out) {
  Global& s = g();
  std::lock_guard<std::mutex> lock(s.mu);
  GC_REQUIRE(dev >= 0 && size_t(dev) < s.devices.size(), Err::InvalidArgument,
             "net plugin: device %d out of range (0..%zu)", dev, s.devices.size());
  const Device& d = s.devices[size_t(dev)];
  out->name = d.name;
  out->pciPath = d.pciPath;
  out->guid = uint64_t(dev);
  out->ptrSupport = NCCL_PTR_HOST | (s.cudaMemory ? NCCL_PTR_CUDA : 0);
  out->speedMbps = d.speedMbps;
  out->maxComms = 65536;
  out->maxRecvs = kMaxRecvs;
  return Status::Ok();
}

Status listen(int dev, void* handle, void** listenComm) {
  Global& s = g();
  std::lock_guard<std::mutex> lock(s.mu);
  GC_REQUIRE(s.worker, Err::Internal, "net plugin: listen before init");
  GC_REQUIRE(dev >= 0 && size_t(dev) < s.devices.size(), Err::InvalidArgument,
             "net plugin: listen on device %d out of range", dev);
  auto* l = new Listen();
  l->dev = dev;
  l->connTag = s.nextTag++;
  sockaddr_in addr = s.devices[size_t(dev)].addr;
  addr.sin_port = 0;
  ucp_listener_params_t p{};
  p.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  p.sockaddr.addr = reinterpret_cast<const sockaddr*>(&addr);
  p.sockaddr.addrlen = sizeof addr;
  p.conn_handler.cb = onConnRequest;
  p.conn_handler.arg = l;
  ucs_status_t rc = ucp_listener_create(s.worker, &p, &l->listener);
  if (rc != UCS_OK) {
    delete l;
    return makeStatus(Err::SystemError, "net plugin: UCX listener on %s (%s) failed: %s",
                      s.devices[size_t(dev)].name.c_str(), addrText(addr).c_str(), ucs_status_string(rc));
  }
  ucp_listener_attr_t attr{};
  attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  GC_CHECK(ucxStatus(ucp_listener_query(l->listener, &attr), "ucp_listener_query"));
  Handle h{};
  h.magic = kHandleMagic;
  h.connTag = l->connTag;
  h.addr = *reinterpret_cast<const sockaddr_in*>(&attr.sockaddr);
  memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
  memcpy(handle, &h, sizeof h);
  *listenComm = l;
  GC_TRACE(NET, "net plugin: listening on %s tag %u", addrText(h.addr).c_str(), h.connTag);
  return Status::Ok();
}

Status connect(int dev, const void* handle, void** sendComm) {
  (void)dev;  // the route to the peer's address decides the local interface
  Global& s = g();
  std::lock_guard<std::mutex> lock(s.mu);
  Handle h;
  GC_CHECK(parseHandle(handle, &h));
  auto* c = new Comm();
  c->kind = Comm::Send;
  c->connTag = h.connTag;
  c->peer = addrText(h.addr);
  ucp_ep_params_t p = epParams(c);
  p.field_mask |= UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
  p.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  p.sockaddr.addr = reinterpret_cast<const sockaddr*>(&h.addr);
  p.sockaddr.addrlen = sizeof h.addr;
  ucs_status_t rc = ucp_ep_create(s.worker, &p, &c->ep);
  if (rc != UCS_OK) {
    std::string peer = c->peer;
    delete c;
    return makeStatus(Err::RemoteError, "net plugin: connect to %s failed: %s", peer.c_str(),
                      ucs_status_string(rc));
  }
  // UCX queues sends until wire-up completes, so the comm is usable at once.
  *sendComm = c;
  return Status::Ok();
}

Status accept(void* listenComm, void** recvComm) {
  Global& s = g();
  std::lock_guard<std::mutex> lock(s.mu);
  auto* l = static_cast<Listen*>(listenComm);
  *recvComm = nullptr;
  ucp_worker_progress(s.worker);
  if (l->pending.empty()) return Status::Ok();
  ucp_conn_request_h req = l->pending.front();
  l->pending.pop_front();
  GC_REQUIRE(!l->accepted, Err::InvalidArgument,
             "net plugin: a second connection arrived on a listen handle (one per listen)");
  auto* c = new Comm();
  c->kind = Comm::Recv;
  c->connTag = l->connTag;
  ucp_conn_request_attr_t attr{};
  attr.field_mask = UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR;
  if (ucp_conn_request_query(req, &attr) == UCS_OK && attr.client_address.ss_family == AF_INET)
    c->peer = addrText(*reinterpret_cast<const sockaddr_in*>(&attr.client_address));
  else
    c->peer = "(unknown address)";
  ucp_ep_params_t p = epParams(c);
  p.field_mask |= UCP_EP_PARAM_FIELD_CONN_REQUEST;
  p.conn_request = req;
  ucs_status_t rc = ucp_ep_create(s.worker, &p, &c->ep);
  if (rc != UCS_OK) {
    delete c;
    return makeStatus(Err::RemoteError, "net plugin: accepting a connection failed: %s",
                      ucs_status_string(rc));
  }
  l->accepted = true;
  *recvComm = c;
  return Status::Ok();
}

Status regMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  (void)comm;
  (void)data;
  (void)size;
  GC_REQUIRE(type == NCCL_PTR_HOST || (type == NCCL_PTR_CUDA && g().cudaMemory), Err::InvalidArgument,
             "net plugin: memory type %d not supported (the UCX found at run time has no CUDA "
             "transport; NCCL stages through host memory)", type);
  // UCX registers (and caches) buffers itself in the tag protocols.
  static int marker;
  *mhandle = &marker;
  return Status::Ok();
}

Status deregMr(void*, void*) { return Status::Ok(); }

Status isend(void* sendComm, void* data, size_t size, int tag, void** request) {
  Global& s = g();
  std::lock_guard<std::mutex> lock(s.mu);
  auto* c = static_cast<Comm*>(sendComm);
  *request = nullptr;
  GC_REQUIRE(!c->failed, Err::RemoteError, "net plugin: %s", c->failure.c_str());
  Request* r = takeRequest(c);
  if (r == nullptr) return Status::Ok();  // all in flight: NCCL retries
  r->n = 1;
  Sub& sub = r->subs[0];
  sub.size = size;
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = onSend;
  p.user_data = &sub;
  ucs_status_ptr_t ptr = ucp_tag_send_nbx(c->ep, data, size, ucxTag(c->connTag, tag), &p);
  if (UCS_PTR_IS_ERR(ptr)) {
    r->used = false;
    return makeStatus(Err::RemoteError, "net plugin: send of %zu bytes to %s failed: %s", size,
                      c->peer.c_str(), ucs_status_string(UCS_PTR_STATUS(ptr)));
  }
  if (ptr == nullptr) sub.done = true;
  sub.ucx = ptr;
  *request = r;
  return Status::Ok();
}

Status irecv(void* recvComm, int n, void** data, const size_t* sizes, const int* tags, void** request) {
  Global& s = g();
  std::lock_guard<std::mutex> lock(s.mu);
  auto* c = static_cast<Comm*>(recvComm);
  *request = nullptr;
  GC_REQUIRE(n >= 1 && n <= kMaxRecvs, Err::InvalidArgument,
             "net plugin: irecv with n=%d buffers (accepted 1..%d)", n, kMaxRecvs);
  GC_REQUIRE(!c->failed, Err::RemoteError, "net plugin: %s", c->failure.c_str());
  Request* r = takeRequest(c);
  if (r == nullptr) return Status::Ok();
  r->n = n;
  for (int i = 0; i < n; ++i) {
    Sub& sub = r->subs[i];
    ucp_request_param_t p{};
    // NO_IMM_CMPL: always a request and a callback with the length (UCX 1.13
    // leaves recv_info.tag_info unfilled on immediate completion).
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                     UCP_OP_ATTR_FIELD_RECV_INFO | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    p.cb.recv = onRecv;
    p.user_data = &sub;
    p.recv_info.tag_info = &sub.info;
    ucs_status_ptr_t ptr =
        ucp_tag_recv_nbx(s.worker, data[i], sizes[i], ucxTag(c->connTag, tags[i]), ~uint64_t(0), &p);
    if (UCS_PTR_IS_ERR(ptr)) {
      releaseRequest(r);
      return makeStatus(Err::SystemError, "net plugin: receive from %s failed: %s",
                        c->peer.c_str(), ucs_status_string(UCS_PTR_STATUS(ptr)));
    }
    if (ptr == nullptr) {  // not expected with NO_IMM_CMPL; keep the info path anyway
      sub.done = true;
      sub.size = sub.info.length;
    }
    sub.ucx = ptr;
  }
  *request = r;
  return Status::Ok();
}

Status test(void* request, int* done, int* sizes) {
  Global& s = g();
  std::lock_guard<std::mutex> lock(s.mu);
  auto* r = static_cast<Request*>(request);
  *done = 0;
  ucp_worker_progress(s.worker);
  bool all = true;
  for (int i = 0; i < r->n; ++i) {
    const Sub& sub = r->subs[i];
    if (sub.done && sub.status != UCS_OK) {
      Comm* c = r->comm;
      std::string peer = c->peer;
      ucs_status_t st = sub.status;
      releaseRequest(r);
      return makeStatus(st == UCS_ERR_MESSAGE_TRUNCATED ? Err::InvalidArgument : Err::RemoteError,
                        "net plugin: %s with peer %s failed: %s",
                        c->kind == Comm::Send ? "send" : "receive", peer.c_str(),
                        ucs_status_string(st));
    }
    all = all && sub.done;
  }
  if (all) {
    for (int i = 0; sizes && i < r->n; ++i) sizes[i] = int(r->subs[i].size);
    releaseRequest(r);
    *done = 1;
    return Status::Ok();
  }
  if (r->comm->failed) {
    std::string why = r->comm->failure;
    releaseRequest(r);
    return makeStatus(Err::RemoteError, "net plugin: %s", why.c_str());
  }
  return Status::Ok();
}

Status closeSend(void* sendComm) {
  std::lock_guard<std::mutex> lock(g().mu);
  return closeComm(static_cast<Comm*>(sendComm));
}

Status closeRecv(void* recvComm) {
  std::lock_guard<std::mutex> lock(g().mu);
  return closeComm(static_cast<Comm*>(recvComm));
}

Status closeListen(void* listenComm) {
  std::lock_guard<std::mutex> lock(g().mu);
  auto* l = static_cast<Listen*>(listenComm);
  for (ucp_conn_request_h req : l->pending) ucp_listener_reject(l->listener, req);
  if (l->listener) ucp_listener_destroy(l->listener);
  delete l;
  return Status::Ok();
}

Status decodeHandle(const void* handle, uint32_t* connTag, std::string* peer) {
  Handle h;
  GC_CHECK(parseHandle(handle, &h));
  *connTag = h.connTag;
  *peer = addrText(h.addr);
  return Status::Ok();
}

}  // namespace gradcomp::net
