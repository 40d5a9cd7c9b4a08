// ncclNetPlugin_v6 .. v11: thin per-version adapters over the one
// implementation in ucx_net.h. Every entry goes through call()
// (plugin_glue.h): exceptions caught, a Status mapped to ncclResult_t and
// logged once, through NCCL's logger once NCCL gave one.
#include <mutex>
#include <type_traits>

#include "common/log.h"
#include "plugin/net/net_props_fill.h"
#include "plugin/net/net_v10.h"
#include "plugin/net/net_v11.h"
#include "plugin/net/net_v6_v9.h"
#include "plugin/net/plugin_glue.h"
#include "plugin/net/ucx_net.h"

namespace gradcomp::net {
namespace {

template <typename Props>
ncclResult_t getProperties(int dev, Props* props) {
  return call([&] {
    Properties p;
    GC_CHECK(properties(dev, &p));
    fillProperties(p, dev, props);
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
ncclResult_t listenV11(void*, int dev, void* handle, void** l) {
  return call([&] { return listen(dev, handle, l); });
}
ncclResult_t connectV11(void*, int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v11_t** devComm) {
  if (devComm) *devComm = nullptr;
  return call([&] { return connect(dev, handle, sendComm); });
}

// ---- v6 .. v10: one init per process ----
ncclResult_t initOnce(ncclDebugLogger_t logger) {
  installLogger(logger);
  static std::once_flag once;
  ncclResult_t rc = ncclSuccess;
  std::call_once(once, [&] { rc = call([] { return init(); }); });
  return rc;
}
ncclResult_t initV10(ncclDebugLogger_t logger, ncclProfilerCallback_t) { return initOnce(logger); }
ncclResult_t listenV10(int dev, void* handle, void** l) {
  return call([&] { return listen(dev, handle, l); });
}
ncclResult_t connectV10(int dev, ncclNetCommConfig_v10_t*, void* handle, void** sendComm,
                        ncclNetDeviceHandle_v10_t** devComm) {
  if (devComm) *devComm = nullptr;
  return call([&] { return connect(dev, handle, sendComm); });
}

// ---- v6 .. v9: no profiler handles; int sizes before v9 ----
ncclResult_t connectV7(int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v7_t** devComm) {
  if (devComm) *devComm = nullptr;
  return call([&] { return connect(dev, handle, sendComm); });
}
ncclResult_t connectV6(int dev, void* handle, void** sendComm) { return connectV7(dev, handle, sendComm, nullptr); }
ncclResult_t acceptV6(void* l, void** recvComm) { return acceptEntry(l, recvComm, nullptr); }
// NCCL's own compat layers range-check before narrowing; a negative int size
// is an error here, never a huge size_t.
template <typename SizeT>
bool negative(SizeT v) {
  if constexpr (std::is_signed_v<SizeT>) return v < 0;
  return false;
}
template <typename SizeT>
ncclResult_t regMrOld(void* comm, void* data, SizeT size, int type, void** mh) {
  return call([&] {
    GC_REQUIRE(!negative(size), Err::InvalidArgument, "net plugin: regMr of a negative size");
    return regMr(comm, data, size_t(size), type, mh);
  });
}
template <typename SizeT>
ncclResult_t isendOld(void* comm, void* data, SizeT size, int tag, void*, void** req) {
  return call([&] {
    GC_REQUIRE(!negative(size), Err::InvalidArgument, "net plugin: isend of a negative size");
    return isend(comm, data, size_t(size), tag, req);
  });
}
template <typename SizeT>
ncclResult_t irecvOld(void* comm, int n, void** data, SizeT* sizes, int* tags, void**, void** req) {
  return call([&] {
    GC_REQUIRE(n >= 1 && n <= kMaxRecvs, Err::InvalidArgument,
               "net plugin: irecv with n=%d buffers (accepted 1..%d)", n, kMaxRecvs);
    size_t wide[kMaxRecvs];
    for (int i = 0; i < n; ++i) {
      GC_REQUIRE(!negative(sizes[i]), Err::InvalidArgument, "net plugin: irecv of a negative size");
      wide[i] = size_t(sizes[i]);
    }
    return irecv(comm, n, data, wide, tags, req);
  });
}

}  // namespace
}  // namespace gradcomp::net

using namespace gradcomp::net;

// NCCL_NET=gradcomp selects these by name.
extern "C" __attribute__((visibility("default"))) const ncclNet_v11_t ncclNetPlugin_v11 = {
    "gradcomp",     initV11,     devicesEntry,   getProperties<ncclNetProperties_v11_t>, listenV11, connectV11,
    acceptEntry,    regMrEntry,  nullptr,        deregMrEntry,     isendEntry,    irecvEntry,
    iflushEntry,    testEntry,   closeSendEntry, closeRecvEntry,   closeListenEntry,
    nullptr,        nullptr,     nullptr,        finalizeV11,      nullptr,
};

extern "C" __attribute__((visibility("default"))) const ncclNet_v10_t ncclNetPlugin_v10 = {
    "gradcomp",     initV10,     devicesEntry,   getProperties<ncclNetProperties_v10_t>, listenV10, connectV10,
    acceptEntry,    regMrEntry,  nullptr,        deregMrEntry,     isendEntry,    irecvEntry,
    iflushEntry,    testEntry,   closeSendEntry, closeRecvEntry,   closeListenEntry,
    nullptr,        nullptr,     nullptr,
};

// NCCL 2.13 - 2.25 load the library only through these (and only then find
// its CollNet tables).
#define GC_NET_OLD_DATA_ENTRIES(regSizeT, sizeT)                                              \
  regMrOld<regSizeT>, nullptr, deregMrEntry, isendOld<sizeT>, irecvOld<sizeT>, iflushEntry, \
      testEntry, closeSendEntry, closeRecvEntry, closeListenEntry

extern "C" __attribute__((visibility("default"))) const ncclNet_v9_t ncclNetPlugin_v9 = {
    "gradcomp", initOnce, devicesEntry, getProperties<ncclNetProperties_v9_t>, listenV10,
    connectV7, acceptEntry, GC_NET_OLD_DATA_ENTRIES(size_t, size_t), nullptr, nullptr, nullptr};

extern "C" __attribute__((visibility("default"))) const ncclNet_v8_t ncclNetPlugin_v8 = {
    "gradcomp", initOnce, devicesEntry, getProperties<ncclNetProperties_v8_t>, listenV10,
    connectV7, acceptEntry, GC_NET_OLD_DATA_ENTRIES(size_t, int), nullptr, nullptr};

extern "C" __attribute__((visibility("default"))) const ncclNet_v7_t ncclNetPlugin_v7 = {
    "gradcomp", initOnce, devicesEntry, getProperties<ncclNetProperties_v7_t>, listenV10,
    connectV7, acceptEntry, GC_NET_OLD_DATA_ENTRIES(int, int), nullptr, nullptr};

extern "C" __attribute__((visibility("default"))) const ncclNet_v6_t ncclNetPlugin_v6 = {
    "gradcomp", initOnce, devicesEntry, getProperties<ncclNetProperties_v6_t>, listenV10,
    connectV6, acceptV6, GC_NET_OLD_DATA_ENTRIES(int, int)};
