#include "plugin/collnet/collnet.h"

#include <arpa/inet.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <vector>

#include "common/log.h"
#include "plugin/collnet/coll_comm.h"
#include "plugin/collnet/collnet_policy.h"
#include "plugin/nccl/policy.h"
#include "plugin/net/devices.h"
#include "plugin/net/net_common.h"
#include "transport/bootstrap.h"
#include "transport/ucx_transport.h"

namespace gradcomp::collnet {
namespace {

constexpr uint32_t kHandleMagic = 0x67634331;  // "gcC1"

// What travels in NCCL's opaque CollNet handle.
struct Handle {
  uint32_t magic;
  uint32_t reserved;
  sockaddr_in addr;     // the listener (rank 0's is the rendezvous)
  uint64_t configHash;  // collNetPolicy().configText
};
static_assert(sizeof(Handle) <= NCCL_NET_HANDLE_MAXSIZE, "handle fits NCCL_NET_HANDLE_MAXSIZE");

struct Global {
  std::mutex mu;
  int refs = 0;
  bool offered = false;
  std::vector<net::Device> devices;
};

Global& g() {
  static Global* global = new Global();  // outlives static destructors (NCCL's atexit)
  return *global;
}

struct ListenComm {
  int dev = 0;
  std::unique_ptr<transport::RendezvousListener> listener;  // moved out by connect
};

std::string ipText(const sockaddr_in& a) {
  char ip[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
  return ip;
}

// Handles come from peers through NCCL: check what the rendezvous will use.
Status parseHandle(const void* raw, int rank, Handle* h) {
  GC_REQUIRE(raw != nullptr, Err::InvalidArgument, "CollNet connect: handle of rank %d is null", rank);
  memcpy(h, raw, sizeof *h);
  GC_REQUIRE(h->magic == kHandleMagic, Err::InvalidArgument,
             "CollNet connect: the handle of rank %d is not gradcomp's (magic %#x): do all head "
             "ranks load libnccl-net-gradcomp.so?", rank, h->magic);
  GC_REQUIRE(h->addr.sin_family == AF_INET && h->addr.sin_port != 0, Err::InvalidArgument,
             "CollNet connect: the handle of rank %d carries address family %d port %u", rank,
             int(h->addr.sin_family), unsigned(ntohs(h->addr.sin_port)));
  return Status::Ok();
}

// Every rank sees the same handles, so all take the same branch; the texts
// are exchanged only to name the first differing key.
Status checkSameConfig(transport::AddressExchange& exchange, const std::vector<Handle>& hs) {
  bool same = true;
  for (const Handle& h : hs) same = same && h.configHash == hs[0].configHash;
  if (same) return Status::Ok();
  std::vector<std::string> texts;
  GC_CHECK(exchange.allgather(collNetPolicy().configText, &texts));
  std::string diff = nccl::firstDifference(texts);
  return makeStatus(Err::InvalidConfig,
                    "CollNet: configuration differs across the %zu head ranks: %s; connect fails on "
                    "every head rank and NCCL runs without CollNet",
                    hs.size(), diff.empty() ? "configuration hashes differ" : diff.c_str());
}

// Wires the transport; every rank learns every rank's outcome.
Status wire(transport::AddressExchange& exchange, std::unique_ptr<transport::Transport>* net) {
  Status made = transport::createUcxTransport(exchange, transport::UcxOptions{}, net);
  std::vector<std::string> verdicts;
  GC_CHECK(exchange.allgather(made.ok() ? "ok" : made.toString(), &verdicts));
  for (size_t r = 0; r < verdicts.size(); ++r)
    GC_REQUIRE(verdicts[r] == "ok", Err::RemoteError, "CollNet: UCX wiring failed on head rank %zu: %s",
               r, verdicts[r].c_str());
  return Status::Ok();
}

}  // namespace

Status init() {
  const CollNetPolicy& p = collNetPolicy();
  if (!p.error.ok() && p.strict) return p.error;
  Global& s = g();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.refs++ > 0) return Status::Ok();
  if (p.compressing) {
    Status st = net::enumerateDevices(&s.devices);
    if (!st.ok()) {
      s.refs = 0;
      return st;
    }
  }
  s.offered = p.compressing && !s.devices.empty();
  return Status::Ok();
}

void finalize() {
  Global& s = g();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.refs > 0) --s.refs;  // devices and the offer stay: NCCL may init again
}

bool offered() {
  std::lock_guard<std::mutex> lock(g().mu);
  return g().offered;
}

Status deviceCount(int* n) {
  std::lock_guard<std::mutex> lock(g().mu);
  *n = g().offered ? int(g().devices.size()) : 0;
  return Status::Ok();
}

Status properties(int dev, net::Properties* out) {
  Global& s = g();
  std::lock_guard<std::mutex> lock(s.mu);
  GC_REQUIRE(s.offered && dev >= 0 && size_t(dev) < s.devices.size(), Err::InvalidArgument,
             "CollNet: device %d out of range (%zu offered)", dev, s.offered ? s.devices.size() : 0);
  const net::Device& d = s.devices[size_t(dev)];
  out->name = d.name;
  out->pciPath = d.pciPath;
  out->guid = uint64_t(dev);
  out->ptrSupport = NCCL_PTR_HOST;
  out->speedMbps = d.speedMbps;
  out->maxComms = 65536;
  out->maxRecvs = 1;
  return Status::Ok();
}

Status reduceSupport(int ncclDtype, int ncclOp, int* supported) {
  DataType dtype;
  RedOp op;
  *supported = offered() && nccl::eligibleDtype(ncclDtype, &dtype) && nccl::eligibleOp(ncclOp, &op);
  return Status::Ok();
}

Status listen(int dev, void* handle, void** listenComm) {
  *listenComm = nullptr;
  std::string ip;
  {
    Global& s = g();
    std::lock_guard<std::mutex> lock(s.mu);
    GC_REQUIRE(s.offered && dev >= 0 && size_t(dev) < s.devices.size(), Err::InvalidArgument,
               "CollNet: listen on device %d out of range (%zu offered)", dev,
               s.offered ? s.devices.size() : 0);
    ip = ipText(s.devices[size_t(dev)].addr);
  }
  auto l = std::make_unique<ListenComm>();
  l->dev = dev;
  GC_CHECK(transport::listenUcxRendezvous(ip, &l->listener));
  Handle h{};
  h.magic = kHandleMagic;
  h.addr.sin_family = AF_INET;
  h.addr.sin_port = htons(uint16_t(l->listener->port()));
  GC_REQUIRE(inet_pton(AF_INET, ip.c_str(), &h.addr.sin_addr) == 1, Err::Internal,
             "CollNet: device address '%s' is not IPv4", ip.c_str());
  h.configHash = configHash(collNetPolicy().configText);
  memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
  memcpy(handle, &h, sizeof h);
  GC_INFO(NET, "CollNet: listening on %s:%d (device %d)", ip.c_str(), l->listener->port(), dev);
  *listenComm = l.release();
  return Status::Ok();
}

Status connect(void* const* handles, int nranks, int rank, void* listenComm, void** collComm) {
  *collComm = nullptr;
  auto* l = static_cast<ListenComm*>(listenComm);
  GC_REQUIRE(l != nullptr && l->listener, Err::InvalidArgument,
             "CollNet connect: the listen comm is null or was already connected");
  GC_REQUIRE(handles != nullptr && nranks >= 1 && rank >= 0 && rank < nranks, Err::InvalidArgument,
             "CollNet connect: rank %d of %d is not valid", rank, nranks);
  const CollNetPolicy& p = collNetPolicy();
  GC_REQUIRE(p.compressing, Err::InvalidConfig, "CollNet connect while CollNet is not offered (%s)",
             p.why.c_str());
  const auto start = std::chrono::steady_clock::now();
  std::vector<Handle> hs(static_cast<size_t>(nranks));
  for (int r = 0; r < nranks; ++r) GC_CHECK(parseHandle(handles[r], r, &hs[size_t(r)]));
  transport::LaunchInfo info;
  info.rank = rank;
  info.size = nranks;
  info.host = ipText(hs[0].addr);
  info.port = ntohs(hs[0].addr.sin_port);
  info.source = "NCCL CollNet connect";
  info.addressSource = "the CollNet handle of head rank 0";
  std::unique_ptr<transport::AddressExchange> exchange;
  GC_CHECK(transport::joinUcxRendezvous(std::move(l->listener), info, &exchange));
  GC_CHECK(checkSameConfig(*exchange, hs));
  CollComm::Setup setup;
  GC_CHECK(wire(*exchange, &setup.net));
  setup.rank = rank;
  setup.nranks = nranks;
  setup.algoName = p.algo;
  setup.config = p.config;
  setup.efPeriod = p.efPeriod;
  setup.wiringSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::unique_ptr<CollComm> comm;
  GC_CHECK(CollComm::create(std::move(setup), &comm));
  GC_INFO(INIT, "CollNet: head rank %d/%d connected (%s) in %.3f s", rank, nranks, p.algo.c_str(),
          comm->stats().wiringSeconds);
  *collComm = comm.release();
  return Status::Ok();
}

Status regMr(void*, void* data, size_t size, int type, void** mhandle) {
  *mhandle = nullptr;
  GC_REQUIRE(type == NCCL_PTR_HOST, Err::InvalidArgument,
             "CollNet: memory type %d not supported (host memory only: NCCL stages through host "
             "buffers)", type);
  auto* r = new Registration();
  r->base = static_cast<char*>(data);
  r->size = size;
  *mhandle = r;
  return Status::Ok();
}

Status deregMr(void*, void* mhandle) {
  delete static_cast<Registration*>(mhandle);
  return Status::Ok();
}

Status iallreduce(void* collComm, void* sendData, void* recvData, size_t count, int ncclDtype,
                  int ncclOp, void* sendMhandle, void* recvMhandle, void** request) {
  *request = nullptr;
  GC_REQUIRE(collComm != nullptr, Err::InvalidArgument, "CollNet iallreduce on a null collComm");
  Chunk c;
  GC_REQUIRE(nccl::eligibleDtype(ncclDtype, &c.dtype) && nccl::eligibleOp(ncclOp, &c.op),
             Err::InvalidArgument,
             "CollNet iallreduce: data type %d / reduction %d not supported (reduceSupport said no)",
             ncclDtype, ncclOp);
  c.send = sendData;
  c.recv = recvData;
  c.count = count;
  c.sendReg = static_cast<const Registration*>(sendMhandle);
  const size_t bytes = count * dtypeSize(c.dtype);
  auto inside = [bytes](const void* p, const void* mh) {
    auto* r = static_cast<const Registration*>(mh);
    const char* q = static_cast<const char*>(p);
    return r == nullptr || (q >= r->base && bytes <= r->size && size_t(q - r->base) <= r->size - bytes);
  };
  GC_REQUIRE(inside(sendData, sendMhandle) && inside(recvData, recvMhandle), Err::InvalidArgument,
             "CollNet iallreduce: %zu bytes at send %p / recv %p lie outside their registered "
             "buffers", bytes, sendData, recvData);
  return static_cast<CollComm*>(collComm)->submit(c, request);
}

Status test(void* request, int* done, int* size) {
  *done = 0;
  GC_REQUIRE(request != nullptr, Err::InvalidArgument, "CollNet test of a null request");
  bool finished = false;
  size_t bytes = 0;
  GC_CHECK(CollComm::test(request, &finished, &bytes));
  *done = finished ? 1 : 0;
  if (finished && size) *size = int(bytes);
  return Status::Ok();
}

Status closeColl(void* collComm) {
  delete static_cast<CollComm*>(collComm);
  return Status::Ok();
}

Status closeListen(void* listenComm) {
  delete static_cast<ListenComm*>(listenComm);
  return Status::Ok();
}

}  // namespace gradcomp::collnet
