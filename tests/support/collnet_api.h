// The CollNet tables of libgradcomp.so (ncclCollNetPlugin_v6 .. v12), loaded
// the way NCCL loads them (dlopen + dlsym of the versioned symbol) and seen
// through one version-neutral view, so a test drives any version with the
// same code: the per-version differences (init with or without a context,
// int or size_t sizes and counts, properties layouts) are in from() only.
#pragma once

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>

#include "plugin/collnet/collnet_abi.h"

namespace gradcomp::test {

// GC_TEST_BINARY_DIR when CTest passes it, else two levels above this test
// executable (<build>/tests/test_x).
inline std::string buildDir() {
  if (const char* d = getenv("GC_TEST_BINARY_DIR")) return d;
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return ".";
  std::string path(exe, size_t(n));
  path = path.substr(0, path.rfind('/'));
  return path.substr(0, path.rfind('/'));
}

// dlopen of the built libgradcomp.so (RTLD_LOCAL, as NCCL opens plugins);
// exits the (child) process when it cannot be loaded.
inline void* openGradcomp() {
  void* h = dlopen((buildDir() + "/plugin/libgradcomp.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    _exit(90);
  }
  return h;
}

struct CollNetApi {
  int version = 0;
  const char* name = nullptr;
  bool hasGatherScatter = false;  // v8+: the members exist (gradcomp leaves them NULL)
  bool gatherScatterNull = false;
  std::shared_ptr<void*> ctx = std::make_shared<void*>(nullptr);  // v11+: init's context
  std::function<ncclResult_t(ncclDebugLogger_t)> init;
  std::function<ncclResult_t(int*)> devices;
  // ptrSupport and maxCollBytes (0 before v9) of device `dev`.
  std::function<ncclResult_t(int dev, int* ptrSupport, size_t* maxCollBytes)> properties;
  std::function<ncclResult_t(int dev, void* handle, void** listenComm)> listen;
  std::function<ncclResult_t(void** handles, int nranks, int rank, void* l, void** coll)> connect;
  std::function<ncclResult_t(ncclDataType_t, ncclRedOp_t, int*)> reduceSupport;
  std::function<ncclResult_t(void* coll, void* data, size_t size, int type, void** mh)> regMr;
  std::function<ncclResult_t(void* coll, void* mh)> deregMr;
  std::function<ncclResult_t(void* coll, void* send, void* recv, size_t count, ncclDataType_t,
                             ncclRedOp_t, void* sendMh, void* recvMh, void** request)>
      iallreduce;
  std::function<ncclResult_t(void* coll, void* data, int size, void* mh, void** request)> iflush;
  std::function<ncclResult_t(void* request, int* done, int* size)> test;
  std::function<ncclResult_t(void* coll)> closeColl;
  std::function<ncclResult_t(void* l)> closeListen;
  std::function<ncclResult_t()> finalize;  // v11+; a no-op before
};

template <typename P>
P propsType(ncclResult_t (*)(int, P*));

// V: the table's version (6 .. 12), T its type.
template <int V, typename T>
CollNetApi collNetApi(const T* t) {
  CollNetApi a;
  a.version = V;
  a.name = t->name;
  auto ctx = a.ctx;
  if constexpr (V >= 11) {
    a.init = [t, ctx](ncclDebugLogger_t log) { return t->init(ctx.get(), 42, log); };
    a.listen = [t, ctx](int dev, void* h, void** l) { return t->listen(*ctx, dev, h, l); };
    a.finalize = [t, ctx] { return t->finalize(*ctx); };
  } else {
    a.init = [t](ncclDebugLogger_t log) { return t->init(log); };
    a.listen = [t](int dev, void* h, void** l) { return t->listen(dev, h, l); };
    a.finalize = [] { return ncclSuccess; };
  }
  a.devices = t->devices;
  a.properties = [t](int dev, int* ptr, size_t* maxColl) {
    decltype(propsType(t->getProperties)) p;
    ncclResult_t rc = t->getProperties(dev, &p);
    *ptr = p.ptrSupport;
    *maxColl = 0;
    if constexpr (V >= 9) *maxColl = p.maxCollBytes;
    return rc;
  };
  a.connect = t->connect;
  a.reduceSupport = t->reduceSupport;
  // v6/v7 take int sizes and v6..v8 int counts: the implicit conversions
  // are what NCCL's own compat layers do (with a range check before).
  a.regMr = [t](void* c, void* d, size_t n, int type, void** mh) { return t->regMr(c, d, n, type, mh); };
  a.deregMr = t->deregMr;
  a.iallreduce = [t](void* c, void* s, void* r, size_t n, ncclDataType_t dt, ncclRedOp_t op,
                     void* smh, void* rmh, void** req) {
    return t->iallreduce(c, s, r, n, dt, op, smh, rmh, req);
  };
  a.iflush = t->iflush;
  a.test = t->test;
  a.closeColl = t->closeColl;
  a.closeListen = t->closeListen;
  if constexpr (V >= 8) {
    a.hasGatherScatter = true;
    a.gatherScatterNull = t->iallgather == nullptr && t->ireducescatter == nullptr;
  }
  return a;
}

// ncclCollNetPlugin_v<version> of `lib`; exits the (child) process when absent.
inline CollNetApi loadCollNet(void* lib, int version) {
  void* sym = dlsym(lib, ("ncclCollNetPlugin_v" + std::to_string(version)).c_str());
  if (sym == nullptr) {
    fprintf(stderr, "ncclCollNetPlugin_v%d not found\n", version);
    _exit(91);
  }
  switch (version) {
    case 6: return collNetApi<6>(static_cast<const ncclCollNet_v6_t*>(sym));
    case 7: return collNetApi<7>(static_cast<const ncclCollNet_v7_t*>(sym));
    case 8: return collNetApi<8>(static_cast<const ncclCollNet_v8_t*>(sym));
    case 9: return collNetApi<9>(static_cast<const ncclCollNet_v9_t*>(sym));
    case 10: return collNetApi<10>(static_cast<const ncclCollNet_v10_t*>(sym));
    case 11: return collNetApi<11>(static_cast<const ncclCollNet_v11_t*>(sym));
    default: return collNetApi<12>(static_cast<const ncclCollNet_v12_t*>(sym));
  }
}

}  // namespace gradcomp::test
