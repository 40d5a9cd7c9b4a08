// See nccl_api.h.
#include "support/nccl_api.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace gradcomp::test {
namespace {

// GC_TEST_BINARY_DIR when CTest passes it, else two levels above this test
// executable (<build>/tests/test_x).
std::string binaryDir() {
  if (const char* d = getenv("GC_TEST_BINARY_DIR")) return d;
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return ".";
  std::string path(exe, size_t(n));
  path = path.substr(0, path.rfind('/'));
  return path.substr(0, path.rfind('/'));
}

}  // namespace

NcclApi loadNcclApi() {
  void* dbl = dlopen((binaryDir() + "/tests/nccl_double/libnccl.so.2").c_str(), RTLD_NOW | RTLD_GLOBAL);
  void* gc = dlopen((binaryDir() + "/plugin/libgradcomp.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!dbl || !gc) {
    fprintf(stderr, "dlopen failed: %s\n", dlerror());
    _exit(90);
  }
  NcclApi a{};
  auto sym = [&](void* h, const char* name) {
    void* p = dlsym(h, name);
    if (!p) {
      fprintf(stderr, "missing %s\n", name);
      _exit(91);
    }
    return p;
  };
  a.allReduce = reinterpret_cast<decltype(a.allReduce)>(sym(gc, "ncclAllReduce"));
  a.reduceScatter = reinterpret_cast<decltype(a.reduceScatter)>(sym(gc, "ncclReduceScatter"));
  a.allGather = reinterpret_cast<decltype(a.allGather)>(sym(gc, "ncclAllGather"));
  a.initRank = reinterpret_cast<decltype(a.initRank)>(sym(gc, "ncclCommInitRank"));
  a.initRankConfig = reinterpret_cast<decltype(a.initRankConfig)>(sym(gc, "ncclCommInitRankConfig"));
  a.split = reinterpret_cast<decltype(a.split)>(sym(gc, "ncclCommSplit"));
  a.destroy = reinterpret_cast<decltype(a.destroy)>(sym(gc, "ncclCommDestroy"));
  a.abort = reinterpret_cast<decltype(a.abort)>(sym(gc, "ncclCommAbort"));
  a.asyncError = reinterpret_cast<decltype(a.asyncError)>(sym(gc, "ncclCommGetAsyncError"));
  a.lastError = reinterpret_cast<decltype(a.lastError)>(sym(gc, "ncclGetLastError"));
  a.groupStart = reinterpret_cast<decltype(a.groupStart)>(sym(gc, "ncclGroupStart"));
  a.groupEnd = reinterpret_cast<decltype(a.groupEnd)>(sym(gc, "ncclGroupEnd"));
  a.count = reinterpret_cast<ncclDoubleCountFn>(sym(dbl, "ncclDoubleCount"));
  a.allReduceAt = reinterpret_cast<ncclDoubleAllReduceAtFn>(sym(dbl, "ncclDoubleAllReduceAt"));
  return a;
}

NcclJob::NcclJob() {
  char tmpl[] = "/tmp/gc_nccl_XXXXXX";
  dir = mkdtemp(tmpl);
  for (size_t i = 0; i < sizeof id.internal; ++i) id.internal[i] = char(rand());
}

NcclJob::~NcclJob() { (void)system(("rm -rf '" + dir + "'").c_str()); }

std::map<std::string, std::string> NcclJob::env(std::map<std::string, std::string> extra) const {
  extra["NCCL_DOUBLE_DIR"] = dir;
  extra["NCCL_DOUBLE_TIMEOUT_S"] = "30";
  if (!extra.count("GRADCOMP_TIMEOUT_S")) extra["GRADCOMP_TIMEOUT_S"] = "20";
  return extra;
}

std::string readWholeFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace gradcomp::test
