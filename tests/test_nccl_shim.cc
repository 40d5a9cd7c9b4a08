// The forwarding libnccl.so.2 (plugin/shim): loaded by path as an application
// that dlopens "libnccl.so.2" would get it, it forwards NCCL calls to the real
// library named by GRADCOMP_NCCL_LIBRARY (here the test double), with
// libgradcomp.so's interposer able to sit in front of it.
#include <dlfcn.h>
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>
#include <vector>

#include "nccl_double/nccl_double.h"
#include "support/multiproc.h"

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

std::string bin(const std::string& rel) { return binaryDir() + "/" + rel; }

using InitFn = ncclResult_t (*)(ncclComm_t*, int, ncclUniqueId, int);
using AllReduceFn = ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);

}  // namespace

TEST_CASE("the shim forwards nccl* and pnccl* to GRADCOMP_NCCL_LIBRARY", "[nccl][shim]") {
  const std::string dbl = bin("tests/nccl_double/libnccl.so.2");
  auto exits = gradcomp::test::runRanks(1, [&](int) {
    void* shim = dlopen(bin("plugin/shim/lib/libnccl.so.2").c_str(), RTLD_NOW | RTLD_GLOBAL);
    CHILD_CHECK(shim != nullptr);
    void* real = dlopen(dbl.c_str(), RTLD_NOW | RTLD_NOLOAD);  // the shim loaded it
    CHILD_CHECK(real != nullptr && real != shim);
    auto count = reinterpret_cast<ncclDoubleCountFn>(dlsym(real, "ncclDoubleCount"));
    auto at = reinterpret_cast<ncclDoubleAllReduceAtFn>(dlsym(real, "ncclDoubleAllReduceAt"));
    CHILD_CHECK(count && at && dlsym(shim, "ncclDoubleCount") == nullptr);
    auto init = reinterpret_cast<InitFn>(dlsym(shim, "ncclCommInitRank"));
    auto ar = reinterpret_cast<AllReduceFn>(dlsym(shim, "ncclAllReduce"));
    auto par = reinterpret_cast<AllReduceFn>(dlsym(shim, "pncclAllReduce"));
    CHILD_CHECK(init && ar && par);
    ncclUniqueId id{};
    ncclComm_t comm = nullptr;
    CHILD_CHECK(init(&comm, 1, id, 0) == ncclSuccess && comm && count("ncclCommInitRank") == 1);
    std::vector<float> buf(1000, 2.5f);
    auto stream = reinterpret_cast<cudaStream_t>(uintptr_t(0x77));
    CHILD_CHECK(ar(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclAvg, comm, stream) == ncclSuccess);
    CHILD_CHECK(par(buf.data(), buf.data(), 10, ncclFloat32, ncclSum, comm, stream) == ncclSuccess);
    ncclDoubleAllReduceRecord rec{};
    CHILD_CHECK(count("ncclAllReduce") == 2 && at(0, &rec) == 0);
    CHILD_CHECK(rec.count == 1000 && rec.op == ncclAvg && rec.stream == stream && rec.comm == comm);
    // The interposer in front of the shim resolves its real functions through it.
    void* gc = dlopen(bin("plugin/libgradcomp.so").c_str(), RTLD_NOW | RTLD_LOCAL);
    CHILD_CHECK(gc != nullptr);
    auto gar = reinterpret_cast<AllReduceFn>(dlsym(gc, "ncclAllReduce"));
    CHILD_CHECK(gar(buf.data(), buf.data(), 3, ncclFloat32, ncclSum, comm, stream) == ncclSuccess);
    CHILD_CHECK(count("ncclAllReduce") == 3);
    return 0;
  }, {{"GRADCOMP_NCCL_LIBRARY", dbl}, {"NCCL_DOUBLE_DIR", "/tmp"}});
  REQUIRE(gradcomp::test::allSucceeded(exits));
}

TEST_CASE("with libgradcomp.so preloaded, lookups through the shim's handle reach the interposer", "[nccl][shim]") {
  const std::string dbl = bin("tests/nccl_double/libnccl.so.2");
  char tmpl[] = "/tmp/gc_shim_XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  auto exits = gradcomp::test::runRanks(1, [&](int) {
    // LD_PRELOAD puts libgradcomp.so in the global scope before anything else.
    void* gc = dlopen(bin("plugin/libgradcomp.so").c_str(), RTLD_NOW | RTLD_GLOBAL);
    CHILD_CHECK(gc != nullptr);
    // A TensorFlow-stub-like consumer: its own handle, local scope.
    void* shim = dlopen(bin("plugin/shim/lib/libnccl.so.2").c_str(), RTLD_NOW | RTLD_LOCAL);
    void* real = dlopen(dbl.c_str(), RTLD_NOW | RTLD_NOLOAD);
    CHILD_CHECK(shim != nullptr && real != nullptr);
    auto count = reinterpret_cast<ncclDoubleCountFn>(dlsym(real, "ncclDoubleCount"));
    auto init = reinterpret_cast<InitFn>(dlsym(shim, "ncclCommInitRank"));
    auto ar = reinterpret_cast<AllReduceFn>(dlsym(shim, "ncclAllReduce"));
    auto par = reinterpret_cast<AllReduceFn>(dlsym(shim, "pncclAllReduce"));
    auto destroy = reinterpret_cast<ncclResult_t (*)(ncclComm_t)>(dlsym(shim, "ncclCommDestroy"));
    CHILD_CHECK(count && init && ar && par && destroy);
    ncclUniqueId id{};
    ncclComm_t comm = nullptr;
    CHILD_CHECK(init(&comm, 1, id, 0) == ncclSuccess && comm && count("ncclCommInitRank") == 1);
    // Only the interposer issues an allgather at init (the configuration check).
    CHILD_CHECK(count("ncclAllGather") == 1);
    std::vector<float> buf(1000, 2.5f);
    CHILD_CHECK(ar(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm, nullptr) == ncclSuccess);
    CHILD_CHECK(par(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm, nullptr) == ncclSuccess);
    CHILD_CHECK(count("ncclAllReduce") == 2 && buf[0] == 2.5f);
    CHILD_CHECK(destroy(comm) == ncclSuccess && count("ncclCommDestroy") == 1);
    return 0;
  }, {{"GRADCOMP_NCCL_LIBRARY", dbl}, {"NCCL_DOUBLE_DIR", dir}});
  (void)system(("rm -rf '" + dir + "'").c_str());
  REQUIRE(gradcomp::test::allSucceeded(exits));
}

TEST_CASE("the shim without a real NCCL aborts a call naming the function", "[nccl][shim]") {
  auto exits = gradcomp::test::runRanks(1, [&](int) {
    void* shim = dlopen(bin("plugin/shim/lib/libnccl.so.2").c_str(), RTLD_NOW);
    CHILD_CHECK(shim != nullptr);
    auto init = reinterpret_cast<InitFn>(dlsym(shim, "ncclCommInitRank"));
    ncclComm_t comm = nullptr;
    init(&comm, 1, ncclUniqueId{}, 0);  // aborts
    return 0;
  }, {{"GRADCOMP_NCCL_LIBRARY", "/nonexistent/libnccl.so.2"}});
  REQUIRE(exits.size() == 1);
  CHECK(exits[0].signal == SIGABRT);
}
