// ncclNetPlugin_v11 and ncclNetPlugin_v10: thin per-version adapters over the
// one implementation in ucx_net.h. Every entry goes through call()
// (plugin_glue.h): exceptions caught, a Status mapped to ncclResult_t and
// logged once, through NCCL's logger once NCCL gave one.
#include <cstring>
#include <deque>
#include <mutex>
#include <string>

#include "common/log.h"
#include "plugin/net/net_v10.h"
#include "plugin/net/net_v11.h"
#include "plugin/net/plugin_glue.h"
#include "plugin/net/ucx_net.h"

namespace gradcomp::net {
namespace {

// NCCL keeps the name/pciPath pointers: they live as long as the process.
template <typename Props>
ncclResult_t fillProperties(int dev, Props* props) {
  return call([&] {
    Properties p;
    GC_CHECK(properties(dev, &p));
    static std::mutex mu;
    // deque: push_back never moves existing strings (NCCL holds their c_str()).
    static std::deque<std::string>* strings = new std::deque<std::string>();
    std::lock_guard<std::mutex> lock(mu);
    memset(props, 0, sizeof *props);
    strings->push_back(p.name);
    props->name = const_cast<char*>(strings->back().c_str());
    if (!p.pciPath.empty()) {
      strings->push_back(p.pciPath);
      props->pciPath = const_cast<char*>(strings->back().c_str());
    }
    props->guid = p.guid;
    props->ptrSupport = p.ptrSupport;
    props->regIsGlobal = 0;
    props->forceFlush = 0;
    props->speed = p.speedMbps;
    props->port = 1;
    props->latency = 0;
    props->maxComms = p.maxComms;
    props->maxRecvs = p.maxRecvs;
    props->netDeviceType = NCCL_NET_DEVICE_HOST;
    props->netDeviceVersion = 0;
    props->vProps.ndevs = 1;
    props->vProps.devs[0] = dev;
    props->maxP2pBytes = NCCL_MAX_NET_SIZE_BYTES;
    props->maxCollBytes = NCCL_MAX_NET_SIZE_BYTES;
    return Status::Ok();
  });
}

// ---- shared entries (same signature in v10 and v11) ----
ncclResult_t devicesEntry(int* n) { return call([&] { return deviceCount(n); }); }
ncclResult_t acceptEntry(void* l, void** recvComm, ncclNetDeviceHandle_v11_t** devComm) {
  if (devComm) *devComm = nullptr;
  return call([&] { return accept(l, recvComm); });
}
ncclResult_t regMrEntry(void* comm, void* data, size_t size, int type, void** mh) {
  return call([&] { return regMr(comm, data, size, type, mh); });
}
ncclResult_t deregMrEntry(void* comm, void* mh) { return call([&] { return deregMr(comm, mh); }); }
ncclResult_t isendEntry(void* comm, void* data, size_t size, int tag, void*, void*, void** req) {
  return call([&] { return isend(comm, data, size, tag, req); });
}
ncclResult_t irecvEntry(void* comm, int n, void** data, size_t* sizes, int* tags, void**, void**,
                        void** req) {
  // *req may hold NCCL_NET_OPTIONAL_RECV_COMPLETION on entry: a hint we may
  // ignore (we always report completion); it is overwritten either way.
  return call([&] { return irecv(comm, n, data, sizes, tags, req); });
}
ncclResult_t iflushEntry(void*, int, void**, int*, void**, void** req) {
  *req = nullptr;  // host memory: nothing to flush
  return ncclSuccess;
}
ncclResult_t testEntry(void* req, int* done, int* sizes) {
  return call([&] { return test(req, done, sizes); });
}
ncclResult_t closeSendEntry(void* c) { return call([&] { return closeSend(c); }); }
ncclResult_t closeRecvEntry(void* c) { return call([&] { return closeRecv(c); }); }
ncclResult_t closeListenEntry(void* c) { return call([&] { return closeListen(c); }); }

// ---- v11: per-communicator init with a context ----
int gContextToken;  // the context handed to NCCL; the plugin's state is global

ncclResult_t initV11(void** ctx, uint64_t, ncclNetCommConfig_v11_t*, ncclDebugLogger_t logger,
                     ncclProfilerCallback_t) {
  installLogger(logger);
  ncclResult_t rc = call([] { return init(); });
  if (rc == ncclSuccess) *ctx = &gContextToken;
  return rc;
}
ncclResult_t finalizeV11(void*) {
  finalize();
  return ncclSuccess;
}
ncclResult_t getPropertiesV11(int dev, ncclNetProperties_v11_t* p) {
  ncclResult_t rc = fillProperties(dev, p);
  if (rc == ncclSuccess) p->maxMultiRequestSize = 1;
  return rc;
}
ncclResult_t listenV11(void*, int dev, void* handle, void** l) {
  return call([&] { return listen(dev, handle, l); });
}
ncclResult_t connectV11(void*, int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v11_t** devComm) {
  if (devComm) *devComm = nullptr;
  return call([&] { return connect(dev, handle, sendComm); });
}

// ---- v10: one init per process ----
ncclResult_t initV10(ncclDebugLogger_t logger, ncclProfilerCallback_t) {
  installLogger(logger);
  static std::once_flag once;
  ncclResult_t rc = ncclSuccess;
  std::call_once(once, [&] { rc = call([] { return init(); }); });
  return rc;
}
ncclResult_t getPropertiesV10(int dev, ncclNetProperties_v10_t* p) { return fillProperties(dev, p); }
ncclResult_t listenV10(int dev, void* handle, void** l) {
  return call([&] { return listen(dev, handle, l); });
}
ncclResult_t connectV10(int dev, ncclNetCommConfig_v10_t*, void* handle, void** sendComm,
                        ncclNetDeviceHandle_v10_t** devComm) {
  if (devComm) *devComm = nullptr;
  return call([&] { return connect(dev, handle, sendComm); });
}

}  // namespace
}  // namespace gradcomp::net

using namespace gradcomp::net;

// NCCL_NET=gradcomp selects these by name.
extern "C" __attribute__((visibility("default"))) const ncclNet_v11_t ncclNetPlugin_v11 = {
    "gradcomp",     initV11,     devicesEntry,   getPropertiesV11, listenV11,     connectV11,
    acceptEntry,    regMrEntry,  nullptr,        deregMrEntry,     isendEntry,    irecvEntry,
    iflushEntry,    testEntry,   closeSendEntry, closeRecvEntry,   closeListenEntry,
    nullptr,        nullptr,     nullptr,        finalizeV11,      nullptr,
};

extern "C" __attribute__((visibility("default"))) const ncclNet_v10_t ncclNetPlugin_v10 = {
    "gradcomp",     initV10,     devicesEntry,   getPropertiesV10, listenV10,     connectV10,
    acceptEntry,    regMrEntry,  nullptr,        deregMrEntry,     isendEntry,    irecvEntry,
    iflushEntry,    testEntry,   closeSendEntry, closeRecvEntry,   closeListenEntry,
    nullptr,        nullptr,     nullptr,
};
