#include "plugin/nccl/real_nccl.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

#include "common/log.h"

namespace gradcomp::nccl {
namespace {

// Base address of libgradcomp.so (or of the test binary), to reject symbols
// that resolve back into ourselves.
const void* ownBase() {
  Dl_info info{};
  static const int anchor = 0;
  if (dladdr(&anchor, &info) == 0) return nullptr;
  return info.dli_fbase;
}

void* lookup(void* handle, const char* name) {
  std::string profiled = std::string("p") + name;
  void* candidates[] = {
      handle ? dlsym(handle, profiled.c_str()) : nullptr,
      handle ? dlsym(handle, name) : nullptr,
      dlsym(RTLD_NEXT, profiled.c_str()),
      dlsym(RTLD_DEFAULT, profiled.c_str()),
      dlsym(RTLD_NEXT, name),
  };
  for (void* fn : candidates) {
    if (fn == nullptr) continue;
    Dl_info info{};
    if (dladdr(fn, &info) != 0 && info.dli_fbase == ownBase()) continue;
    return fn;
  }
  return nullptr;
}

template <typename Fn>
void bind(void* handle, const char* name, Fn* slot) {
  *slot = reinterpret_cast<Fn>(lookup(handle, name));
}

}  // namespace

const RealNccl& real() {
  static RealNccl table;
  static std::once_flag once;
  std::call_once(once, [] {
    void* handle = dlopen("libnccl.so.2", RTLD_NOLOAD | RTLD_LAZY);
    if (handle == nullptr) handle = dlopen("libnccl.so", RTLD_NOLOAD | RTLD_LAZY);
    RealNccl t;
    bind(handle, "ncclAllReduce", &t.allReduce);
    bind(handle, "ncclAllGather", &t.allGather);
    bind(handle, "ncclReduceScatter", &t.reduceScatter);
    bind(handle, "ncclCommInitRank", &t.commInitRank);
    bind(handle, "ncclCommInitRankConfig", &t.commInitRankConfig);
    bind(handle, "ncclCommInitRankScalable", &t.commInitRankScalable);
    bind(handle, "ncclCommInitAll", &t.commInitAll);
    bind(handle, "ncclCommSplit", &t.commSplit);
    bind(handle, "ncclCommShrink", &t.commShrink);
    bind(handle, "ncclCommFinalize", &t.commFinalize);
    bind(handle, "ncclCommDestroy", &t.commDestroy);
    bind(handle, "ncclCommAbort", &t.commAbort);
    bind(handle, "ncclCommGetAsyncError", &t.commGetAsyncError);
    bind(handle, "ncclGetLastError", &t.getLastError);
    bind(handle, "ncclGroupStart", &t.groupStart);
    bind(handle, "ncclGroupEnd", &t.groupEnd);
    bind(handle, "ncclCommCount", &t.commCount);
    bind(handle, "ncclCommUserRank", &t.commUserRank);
    bind(handle, "ncclMemAlloc", &t.memAlloc);
    bind(handle, "ncclMemFree", &t.memFree);
    bind(handle, "ncclGetErrorString", &t.getErrorString);
    if (t.allReduce == nullptr) {
      t.origin = "not found";
      GC_WARN("NCCL interposer: no real ncclAllReduce in this process (libnccl.so.2 not loaded); "
              "NCCL calls will fail with ncclSystemError");
    } else {
      Dl_info info{};
      t.origin = dladdr(reinterpret_cast<void*>(t.allReduce), &info) && info.dli_fname
                     ? info.dli_fname
                     : "unknown object";
      GC_INFO(INIT, "NCCL interposer: real NCCL functions from %s", t.origin);
    }
    // The NOLOAD reference is kept on purpose: the pointers stay valid even if
    // the application dlcloses its own handle.
    table = t;
  });
  return table;
}

}  // namespace gradcomp::nccl
