// ncclCollNetPlugin_v6 .. v12: per-version adapters over collnet.h. NCCL
// (2.13 .. 2.30) takes the newest version it knows from the net plugin
// library, so each NCCL finds its own top version here and uses the table as
// it is (no compat wrapper): the NULL iallgather/ireducescatter of v8+ then
// tell it that CollNet does not do allgather/reduce-scatter, and NULL
// makeVDevice that there are no virtual devices.
#include <mutex>
#include <type_traits>

#include "plugin/collnet/collnet.h"
#include "plugin/collnet/collnet_abi.h"
#include "plugin/net/net_props_fill.h"
#include "plugin/net/plugin_glue.h"

namespace gradcomp::collnet {
namespace {

using net::call;

template <typename Props>
ncclResult_t getProperties(int dev, Props* props) {
  return call([&] {
    net::Properties p;
    GC_CHECK(collnet::properties(dev, &p));
    net::fillProperties(p, dev, props);
    return Status::Ok();
  });
}

// ---- entries shared by every version ----
ncclResult_t devicesEntry(int* n) { return call([&] { return deviceCount(n); }); }
ncclResult_t connectEntry(void* handles[], int nranks, int rank, void* listenComm, void** collComm) {
  return call([&] { return connect(handles, nranks, rank, listenComm, collComm); });
}
ncclResult_t reduceSupportEntry(ncclDataType_t dtype, ncclRedOp_t op, int* supported) {
  return call([&] { return reduceSupport(int(dtype), int(op), supported); });
}
template <typename SizeT>
ncclResult_t regMrEntry(void* comm, void* data, SizeT size, int type, void** mhandle) {
  return call([&] {
    if constexpr (std::is_signed_v<SizeT>)
      GC_REQUIRE(size >= 0, Err::InvalidArgument, "CollNet regMr: negative size %d", int(size));
    return regMr(comm, data, size_t(size), type, mhandle);
  });
}
ncclResult_t regMrDmaBufEntry(void*, void*, size_t, int, uint64_t, int, void** mhandle) {
  *mhandle = nullptr;
  return call([] {
    return makeStatus(Err::InvalidArgument, "CollNet: DMA-BUF registration not supported (host memory only)");
  });
}
ncclResult_t deregMrEntry(void* comm, void* mhandle) { return call([&] { return deregMr(comm, mhandle); }); }
template <typename CountT>
ncclResult_t iallreduceEntry(void* comm, void* send, void* recv, CountT count, ncclDataType_t dtype,
                             ncclRedOp_t op, void* sendMh, void* recvMh, void** request) {
  return call([&] {
    if constexpr (std::is_signed_v<CountT>)
      GC_REQUIRE(count >= 0, Err::InvalidArgument, "CollNet iallreduce: negative count %lld",
                 (long long)count);
    return iallreduce(comm, send, recv, size_t(count), int(dtype), int(op), sendMh, recvMh, request);
  });
}
ncclResult_t iflushEntry(void*, void*, int, void*, void** request) {
  *request = nullptr;  // host memory: nothing to flush
  return ncclSuccess;
}
ncclResult_t testEntry(void* request, int* done, int* size) {
  return call([&] { return test(request, done, size); });
}
ncclResult_t closeCollEntry(void* c) { return call([&] { return closeColl(c); }); }
ncclResult_t closeListenEntry(void* c) { return call([&] { return closeListen(c); }); }

// ---- v6 .. v10: one init per process ----
ncclResult_t initOnce(ncclDebugLogger_t logger) {
  net::installLogger(logger);
  static std::once_flag once;
  ncclResult_t rc = ncclSuccess;
  std::call_once(once, [&] { rc = call([] { return init(); }); });
  return rc;
}
ncclResult_t listenOld(int dev, void* handle, void** l) { return call([&] { return listen(dev, handle, l); }); }

// ---- v11, v12: per-communicator init with a context ----
int gContextToken;  // the context handed to NCCL; the plugin's state is global

ncclResult_t initCtx(void** ctx, uint64_t, ncclDebugLogger_t logger) {
  net::installLogger(logger);
  ncclResult_t rc = call([] { return init(); });
  if (rc == ncclSuccess) *ctx = &gContextToken;
  return rc;
}
ncclResult_t finalizeCtx(void*) {
  finalize();
  return ncclSuccess;
}
ncclResult_t listenCtx(void*, int dev, void* handle, void** l) {
  return call([&] { return listen(dev, handle, l); });
}

}  // namespace
}  // namespace gradcomp::collnet

using namespace gradcomp::collnet;

#define GC_COLLNET_SHARED(regSizeT, countT)                                                       \
  connectEntry, reduceSupportEntry, regMrEntry<regSizeT>, regMrDmaBufEntry, deregMrEntry,       \
      iallreduceEntry<countT>

#define GC_EXPORT extern "C" __attribute__((visibility("default")))

GC_EXPORT const ncclCollNet_v12_t ncclCollNetPlugin_v12 = {
    "gradcomp", initCtx, devicesEntry, getProperties<ncclNetProperties_v12_t>, listenCtx,
    GC_COLLNET_SHARED(size_t, size_t), nullptr, nullptr, iflushEntry, testEntry, closeCollEntry,
    closeListenEntry, nullptr, finalizeCtx};

GC_EXPORT const ncclCollNet_v11_t ncclCollNetPlugin_v11 = {
    "gradcomp", initCtx, devicesEntry, getProperties<ncclNetProperties_v11_t>, listenCtx,
    GC_COLLNET_SHARED(size_t, size_t), nullptr, nullptr, iflushEntry, testEntry, closeCollEntry,
    closeListenEntry, nullptr, finalizeCtx};

GC_EXPORT const ncclCollNet_v10_t ncclCollNetPlugin_v10 = {
    "gradcomp", initOnce, devicesEntry, getProperties<ncclNetProperties_v10_t>, listenOld,
    GC_COLLNET_SHARED(size_t, size_t), nullptr, nullptr, iflushEntry, testEntry, closeCollEntry,
    closeListenEntry, nullptr};

GC_EXPORT const ncclCollNet_v9_t ncclCollNetPlugin_v9 = {
    "gradcomp", initOnce, devicesEntry, getProperties<ncclNetProperties_v9_t>, listenOld,
    GC_COLLNET_SHARED(size_t, size_t), nullptr, nullptr, iflushEntry, testEntry, closeCollEntry,
    closeListenEntry, nullptr};

GC_EXPORT const ncclCollNet_v8_t ncclCollNetPlugin_v8 = {
    "gradcomp", initOnce, devicesEntry, getProperties<ncclNetProperties_v8_t>, listenOld,
    GC_COLLNET_SHARED(size_t, int), nullptr, nullptr, iflushEntry, testEntry, closeCollEntry,
    closeListenEntry};

GC_EXPORT const ncclCollNet_v7_t ncclCollNetPlugin_v7 = {
    "gradcomp", initOnce, devicesEntry, getProperties<ncclNetProperties_v7_t>, listenOld,
    GC_COLLNET_SHARED(int, int), iflushEntry, testEntry, closeCollEntry, closeListenEntry};

GC_EXPORT const ncclCollNet_v6_t ncclCollNetPlugin_v6 = {
    "gradcomp", initOnce, devicesEntry, getProperties<ncclNetProperties_v6_t>, listenOld,
    GC_COLLNET_SHARED(int, int), iflushEntry, testEntry, closeCollEntry, closeListenEntry};
