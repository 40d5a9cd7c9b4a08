// The net plugin ABI (ncclNetPlugin_v11 and _v10 from libgradcomp.so; v6..v9
// in the last test) driven between two real processes the way NCCL's proxy
// drives it: listen, hand the handle to the peer (a file here; NCCL uses its
// bootstrap), non-blocking connect/accept, isend/irecv/test. Rank 1 listens
// and receives, rank 0 connects and sends.
#include <dlfcn.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdarg>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <type_traits>
#include <vector>

#include "plugin/net/net_v10.h"
#include "plugin/net/net_v11.h"
#include "plugin/net/net_v6_v9.h"
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

std::string libPath() { return binaryDir() + "/plugin/libgradcomp.so"; }

void testLogger(ncclDebugLogLevel level, unsigned long, const char*, int, const char* fmt, ...) {
  if (level > NCCL_LOG_WARN) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "[test logger] ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

// One version-neutral view of the two tables, so each test runs on both.
struct Net {
  const ncclNet_v11_t* v11 = nullptr;
  const ncclNet_v10_t* v10 = nullptr;
  void* ctx = nullptr;

  ncclResult_t init() {
    return v11 ? v11->init(&ctx, 42, nullptr, testLogger, nullptr) : v10->init(testLogger, nullptr);
  }
  ncclResult_t devices(int* n) { return v11 ? v11->devices(n) : v10->devices(n); }
  ncclResult_t listen(int dev, void* h, void** l) { return v11 ? v11->listen(ctx, dev, h, l) : v10->listen(dev, h, l); }
  ncclResult_t connect(int dev, void* h, void** s) {
    ncclNetDeviceHandle_v11_t* dh = nullptr;
    return v11 ? v11->connect(ctx, dev, h, s, &dh) : v10->connect(dev, nullptr, h, s, &dh);
  }
  ncclResult_t accept(void* l, void** r) {
    ncclNetDeviceHandle_v11_t* dh = nullptr;
    return v11 ? v11->accept(l, r, &dh) : v10->accept(l, r, &dh);
  }
  ncclResult_t regMr(void* c, void* d, size_t n, void** mh) {
    return v11 ? v11->regMr(c, d, n, NCCL_PTR_HOST, mh) : v10->regMr(c, d, n, NCCL_PTR_HOST, mh);
  }
  ncclResult_t isend(void* c, void* d, size_t n, int tag, void* mh, void** req) {
    return v11 ? v11->isend(c, d, n, tag, mh, nullptr, req) : v10->isend(c, d, n, tag, mh, nullptr, req);
  }
  ncclResult_t irecv(void* c, int n, void** d, size_t* sizes, int* tags, void** mh, void** req) {
    return v11 ? v11->irecv(c, n, d, sizes, tags, mh, nullptr, req) : v10->irecv(c, n, d, sizes, tags, mh, nullptr, req);
  }
  ncclResult_t test(void* req, int* done, int* sizes) { return v11 ? v11->test(req, done, sizes) : v10->test(req, done, sizes); }
  ncclResult_t closeSend(void* c) { return v11 ? v11->closeSend(c) : v10->closeSend(c); }
  ncclResult_t closeRecv(void* c) { return v11 ? v11->closeRecv(c) : v10->closeRecv(c); }
  ncclResult_t closeListen(void* c) { return v11 ? v11->closeListen(c) : v10->closeListen(c); }
  void finalize() { if (v11) v11->finalize(ctx); }
};

Net loadNet(int version) {
  void* h = dlopen(libPath().c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    _exit(90);
  }
  Net net;
  if (version == 11) net.v11 = static_cast<const ncclNet_v11_t*>(dlsym(h, "ncclNetPlugin_v11"));
  else net.v10 = static_cast<const ncclNet_v10_t*>(dlsym(h, "ncclNetPlugin_v10"));
  if (!net.v11 && !net.v10) _exit(91);
  return net;
}

using Clock = std::chrono::steady_clock;
bool pastDeadline(Clock::time_point start, double s) {
  return std::chrono::duration<double>(Clock::now() - start).count() > s;
}

// Rank 1 publishes its handle; rank 0 waits for it (bounded).
bool publish(const std::string& dir, const char* handle) {
  std::string tmp = dir + "/handle.tmp", path = dir + "/handle";
  std::ofstream(tmp, std::ios::binary).write(handle, NCCL_NET_HANDLE_MAXSIZE);
  return rename(tmp.c_str(), path.c_str()) == 0;
}
bool fetchHandle(const std::string& dir, char* handle) {
  std::string path = dir + "/handle";
  auto start = Clock::now();
  struct stat st;
  while (stat(path.c_str(), &st) != 0) {
    if (pastDeadline(start, 30)) return false;
    usleep(1000);
  }
  std::ifstream(path, std::ios::binary).read(handle, NCCL_NET_HANDLE_MAXSIZE);
  return true;
}

// Completes a request, bounded; *rc the first non-success result.
ncclResult_t complete(Net& net, void* req, int* sizes, double seconds = 60) {
  auto start = Clock::now();
  int done = 0;
  while (!done) {
    ncclResult_t rc = net.test(req, &done, sizes);
    if (rc != ncclSuccess) return rc;
    if (pastDeadline(start, seconds)) return ncclInternalError;
    if (!done) sched_yield();
  }
  return ncclSuccess;
}

// Connected pair: rank 0 gets *send, rank 1 gets *recv (and its listen comm).
int connectPair(Net& net, int rank, const std::string& dir, void** send, void** recv, void** listen) {
  int ndev = 0;
  CHILD_CHECK(net.init() == ncclSuccess);
  CHILD_CHECK(net.devices(&ndev) == ncclSuccess && ndev >= 1);
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  auto start = Clock::now();
  if (rank == 1) {
    CHILD_CHECK(net.listen(0, handle, listen) == ncclSuccess);
    CHILD_CHECK(publish(dir, handle));
    *recv = nullptr;
    while (*recv == nullptr) {  // non-blocking accept: NULL means "call again"
      CHILD_CHECK(net.accept(*listen, recv) == ncclSuccess);
      CHILD_CHECK(!pastDeadline(start, 30));
      sched_yield();
    }
  } else {
    CHILD_CHECK(fetchHandle(dir, handle));
    *send = nullptr;
    while (*send == nullptr) {
      CHILD_CHECK(net.connect(0, handle, send) == ncclSuccess);
      CHILD_CHECK(!pastDeadline(start, 30));
    }
  }
  return 0;
}

template <typename P>
P propsType(ncclResult_t (*)(int, P*));
template <typename S>
S sizeType(ncclResult_t (*)(void*, int, void**, S*, int*, void**, void**));

unsigned char pattern(size_t i, int tag) { return static_cast<unsigned char>((i * 131 + tag * 7) & 0xff); }

struct TmpDir {
  std::string path;
  TmpDir() {
    char t[] = "/tmp/gc_net_XXXXXX";
    path = mkdtemp(t);
  }
  ~TmpDir() { (void)system(("rm -rf '" + path + "'").c_str()); }
};

}  // namespace

TEST_CASE("net plugin: properties name gradcomp devices with host pointers", "[net]") {
  for (int version : {11, 10}) {
    auto exits = gradcomp::test::runRanks(1, [&](int) {
      Net net = loadNet(version);
      CHILD_CHECK(strcmp(version == 11 ? net.v11->name : net.v10->name, "gradcomp") == 0);
      CHILD_CHECK(net.init() == ncclSuccess);
      int n = 0;
      CHILD_CHECK(net.devices(&n) == ncclSuccess && n >= 1);
      if (version == 11) {
        ncclNetProperties_v11_t p;
        CHILD_CHECK(net.v11->getProperties(0, &p) == ncclSuccess);
        CHILD_CHECK(p.name && strlen(p.name) > 0 && (p.ptrSupport & NCCL_PTR_HOST) && p.speed > 0);
        CHILD_CHECK(p.maxRecvs >= 2 && p.maxMultiRequestSize == 1 && p.vProps.ndevs == 1);
        CHILD_CHECK(net.v11->getProperties(n, &p) != ncclSuccess);  // out of range: an error
      } else {
        ncclNetProperties_v10_t p;
        CHILD_CHECK(net.v10->getProperties(0, &p) == ncclSuccess);
        CHILD_CHECK(p.name && (p.ptrSupport & NCCL_PTR_HOST) && p.maxRecvs >= 2);
      }
      void* mh = nullptr;
      char buf[8];
      CHILD_CHECK(net.regMr(nullptr, buf, sizeof buf, &mh) == ncclSuccess && mh != nullptr);
      net.finalize();
      return 0;
    });
    REQUIRE(gradcomp::test::allSucceeded(exits));
  }
}

TEST_CASE("net plugin: 1 B to 64 MiB, multi-buffer receives, many requests in flight", "[mp][net]") {
  for (int version : {11, 10}) {
    INFO("ncclNetPlugin_v" << version);
    TmpDir dir;
    auto exits = gradcomp::test::runRanks(2, [&](int rank) {
      Net net = loadNet(version);
      void *send = nullptr, *recv = nullptr, *listen = nullptr;
      if (connectPair(net, rank, dir.path, &send, &recv, &listen) != 0) return 1;
      void* mh = nullptr;
      // 1) one message per size, tag = size index; receiver's buffer is larger.
      std::vector<size_t> sizes{0, 1, 7, 4096, 65537, 1 << 20, (size_t(64) << 20)};
      std::vector<unsigned char> buf((size_t(64) << 20) + 64);
      for (size_t k = 0; k < sizes.size(); ++k) {
        int tag = int(k) + 1;
        void* req = nullptr;
        int got = -1;
        if (rank == 0) {
          for (size_t i = 0; i < sizes[k]; ++i) buf[i] = pattern(i, tag);
          CHILD_CHECK(net.regMr(send, buf.data(), buf.size(), &mh) == ncclSuccess);
          while (req == nullptr) CHILD_CHECK(net.isend(send, buf.data(), sizes[k], tag, mh, &req) == ncclSuccess);
          CHILD_CHECK(complete(net, req, &got) == ncclSuccess && got == int(sizes[k]));
        } else {
          void* data = buf.data();
          size_t cap = buf.size();
          while (req == nullptr) CHILD_CHECK(net.irecv(recv, 1, &data, &cap, &tag, &mh, &req) == ncclSuccess);
          CHILD_CHECK(complete(net, req, &got) == ncclSuccess);
          if (got != int(sizes[k])) fprintf(stderr, "size %zu: received %d\n", sizes[k], got);
          CHILD_CHECK(got == int(sizes[k]));
          for (size_t i = 0; i < sizes[k]; i += (sizes[k] > 4096 ? 997 : 1)) CHILD_CHECK(buf[i] == pattern(i, tag));
          if (sizes[k]) CHILD_CHECK(buf[sizes[k] - 1] == pattern(sizes[k] - 1, tag));
        }
      }
      // 2) n = 3 receives in one request; the sender sends the tags in reverse.
      {
        std::vector<std::vector<unsigned char>> parts{std::vector<unsigned char>(100),
                                                      std::vector<unsigned char>(5000),
                                                      std::vector<unsigned char>(300000)};
        int tags[3] = {101, 102, 103};
        if (rank == 0) {
          std::vector<void*> reqs;
          for (int i = 2; i >= 0; --i) {
            for (size_t j = 0; j < parts[i].size(); ++j) parts[i][j] = pattern(j, tags[i]);
            void* req = nullptr;
            while (req == nullptr) CHILD_CHECK(net.isend(send, parts[i].data(), parts[i].size(), tags[i], mh, &req) == ncclSuccess);
            reqs.push_back(req);
          }
          for (void* r : reqs) CHILD_CHECK(complete(net, r, nullptr) == ncclSuccess);
        } else {
          void* data[3];
          size_t caps[3];
          for (int i = 0; i < 3; ++i) {
            data[i] = parts[i].data();
            caps[i] = parts[i].size();
          }
          void* req = nullptr;
          int got[3] = {-1, -1, -1};
          while (req == nullptr) CHILD_CHECK(net.irecv(recv, 3, data, caps, tags, nullptr, &req) == ncclSuccess);
          CHILD_CHECK(complete(net, req, got) == ncclSuccess);
          for (int i = 0; i < 3; ++i) {
            CHILD_CHECK(got[i] == int(parts[i].size()));
            CHILD_CHECK(parts[i].back() == pattern(parts[i].size() - 1, tags[i]));
          }
        }
      }
      // 3) 32 requests in flight at once (NCCL_NET_MAX_REQUESTS), same tag:
      //    they match in posting order; a 33rd returns no request (retry).
      {
        const int kN = NCCL_NET_MAX_REQUESTS;
        std::vector<std::vector<int>> msgs(kN, std::vector<int>(1024));
        std::vector<void*> reqs(kN, nullptr);
        int tag = 7;
        for (int m = 0; m < kN; ++m) {
          if (rank == 0) {
            for (int& v : msgs[m]) v = m;
            CHILD_CHECK(net.isend(send, msgs[m].data(), 4096, tag, mh, &reqs[m]) == ncclSuccess && reqs[m]);
          } else {
            void* data = msgs[m].data();
            size_t cap = 4096;
            CHILD_CHECK(net.irecv(recv, 1, &data, &cap, &tag, nullptr, &reqs[m]) == ncclSuccess && reqs[m]);
          }
        }
        if (rank == 1) {
          void* extra = reinterpret_cast<void*>(0x1);  // NCCL_NET_OPTIONAL_RECV_COMPLETION hint
          void* data = msgs[0].data();
          size_t cap = 4;
          CHILD_CHECK(net.irecv(recv, 1, &data, &cap, &tag, nullptr, &extra) == ncclSuccess && extra == nullptr);
        }
        for (int m = kN - 1; m >= 0; --m) CHILD_CHECK(complete(net, reqs[m], nullptr) == ncclSuccess);
        if (rank == 1)
          for (int m = 0; m < kN; ++m) CHILD_CHECK(msgs[m][0] == m && msgs[m][1023] == m);
      }
      // Orderly close: the receiver acknowledges the last message first.
      if (rank == 0) {
        CHILD_CHECK(net.closeSend(send) == ncclSuccess);
      } else {
        CHILD_CHECK(net.closeRecv(recv) == ncclSuccess);
        CHILD_CHECK(net.closeListen(listen) == ncclSuccess);
      }
      net.finalize();
      return 0;
    }, {}, 120);
    REQUIRE(gradcomp::test::allSucceeded(exits));
  }
}

TEST_CASE("net plugin: a killed peer fails pending receives instead of hanging", "[mp][net]") {
  TmpDir dir;
  auto exits = gradcomp::test::runRanks(2, [&](int rank) {
    Net net = loadNet(11);
    void *send = nullptr, *recv = nullptr, *listen = nullptr;
    if (connectPair(net, rank, dir.path, &send, &recv, &listen) != 0) return 1;
    int tag = 5;
    std::vector<char> buf(1 << 20);
    if (rank == 0) {
      // One message proves the connection; then die without closing.
      void* req = nullptr;
      while (req == nullptr) CHILD_CHECK(net.isend(send, buf.data(), 16, tag, nullptr, &req) == ncclSuccess);
      CHILD_CHECK(complete(net, req, nullptr) == ncclSuccess);
      // Local completion is not delivery: wait until the receiver has it.
      auto start = Clock::now();
      struct stat st;
      while (stat((dir.path + "/received").c_str(), &st) != 0 && !pastDeadline(start, 30)) usleep(1000);
      kill(getpid(), SIGKILL);
    }
    void* data = buf.data();
    size_t cap = buf.size();
    void* req = nullptr;
    int got = -1;
    while (req == nullptr) CHILD_CHECK(net.irecv(recv, 1, &data, &cap, &tag, nullptr, &req) == ncclSuccess);
    CHILD_CHECK(complete(net, req, &got) == ncclSuccess && got == 16);
    std::ofstream(dir.path + "/received") << "1";
    // The death may be noticed before the receive is posted (irecv fails) or
    // while it is pending (test fails); either is an error naming the peer.
    req = nullptr;
    auto start = Clock::now();
    ncclResult_t rc = ncclSuccess;
    while (req == nullptr && rc == ncclSuccess) rc = net.irecv(recv, 1, &data, &cap, &tag, nullptr, &req);
    if (rc == ncclSuccess) rc = complete(net, req, &got, 50);
    double waited = std::chrono::duration<double>(Clock::now() - start).count();
    fprintf(stderr, "dead peer detected after %.2f s: result %d\n", waited, int(rc));
    CHILD_CHECK(rc == ncclRemoteError);  // not ncclInternalError (= our 50 s bound)
    CHILD_CHECK(net.closeRecv(recv) == ncclSuccess && net.closeListen(listen) == ncclSuccess);
    return 0;
  }, {}, 90);
  REQUIRE(exits.size() == 2);
  CHECK(exits[0].signal == SIGKILL);
  CHECK(exits[1].exitCode == 0);
}

namespace {

// Rank 0 connects and sends, rank 1 listens and receives, through table T
// (ncclNet_v6 .. v9: no context, int sizes before v9, no device handles in v6).
template <typename T>
int oldTablePair(const T* t, int rank, const std::string& dir) {
  constexpr bool v6 = std::is_same_v<T, ncclNet_v6_t>;
  CHILD_CHECK(strcmp(t->name, "gradcomp") == 0 && t->init(testLogger) == ncclSuccess);
  int ndev = 0;
  CHILD_CHECK(t->devices(&ndev) == ncclSuccess && ndev >= 1);
  decltype(propsType(t->getProperties)) props;
  CHILD_CHECK(t->getProperties(0, &props) == ncclSuccess && (props.ptrSupport & NCCL_PTR_HOST) &&
              props.speed > 0 && props.maxRecvs >= 2);
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void *comm = nullptr, *listen = nullptr, *mh = nullptr, *req = nullptr;
  auto start = Clock::now();
  if (rank == 1) {
    CHILD_CHECK(t->listen(0, handle, &listen) == ncclSuccess && publish(dir, handle));
    while (comm == nullptr) {
      if constexpr (v6) CHILD_CHECK(t->accept(listen, &comm) == ncclSuccess);
      else CHILD_CHECK(t->accept(listen, &comm, nullptr) == ncclSuccess);
      CHILD_CHECK(!pastDeadline(start, 30));
    }
  } else {
    CHILD_CHECK(fetchHandle(dir, handle));
    while (comm == nullptr) {
      if constexpr (v6) CHILD_CHECK(t->connect(0, handle, &comm) == ncclSuccess);
      else CHILD_CHECK(t->connect(0, handle, &comm, nullptr) == ncclSuccess);
      CHILD_CHECK(!pastDeadline(start, 30));
    }
  }
  std::vector<unsigned char> buf(70001);
  CHILD_CHECK(t->regMr(comm, buf.data(), int(buf.size()), NCCL_PTR_HOST, &mh) == ncclSuccess);
  int tag = 9, got = -1, done = 0;
  if (rank == 0) {
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = pattern(i, tag);
    while (req == nullptr) CHILD_CHECK(t->isend(comm, buf.data(), int(buf.size()), tag, mh, &req) == ncclSuccess);
  } else {
    void* data = buf.data();
    decltype(sizeType(t->irecv)) size = decltype(size)(buf.size());
    while (req == nullptr) CHILD_CHECK(t->irecv(comm, 1, &data, &size, &tag, &mh, &req) == ncclSuccess);
  }
  while (!done) {
    CHILD_CHECK(t->test(req, &done, &got) == ncclSuccess);
    CHILD_CHECK(!pastDeadline(start, 60));
  }
  CHILD_CHECK(got == int(buf.size()));
  if (rank == 1)
    for (size_t i = 0; i < buf.size(); i += 997) CHILD_CHECK(buf[i] == pattern(i, tag));
  if (rank == 1) {  // the sender closes after the receiver has the data
    std::ofstream(dir + "/received") << "1";
    CHILD_CHECK(t->closeRecv(comm) == ncclSuccess && t->closeListen(listen) == ncclSuccess);
  } else {
    struct stat st;
    while (stat((dir + "/received").c_str(), &st) != 0 && !pastDeadline(start, 30)) usleep(1000);
    CHILD_CHECK(t->closeSend(comm) == ncclSuccess);
  }
  return 0;
}

}  // namespace

TEST_CASE("net plugin: tables v6..v9 (NCCL 2.13-2.25) connect and carry a message", "[mp][net]") {
  for (int version : {6, 7, 8, 9}) {
    INFO("ncclNetPlugin_v" << version);
    TmpDir dir;
    auto exits = gradcomp::test::runRanks(2, [&](int rank) {
      void* h = dlopen(libPath().c_str(), RTLD_NOW | RTLD_LOCAL);
      CHILD_CHECK(h != nullptr);
      void* sym = dlsym(h, ("ncclNetPlugin_v" + std::to_string(version)).c_str());
      CHILD_CHECK(sym != nullptr);
      switch (version) {
        case 6: return oldTablePair(static_cast<const ncclNet_v6_t*>(sym), rank, dir.path);
        case 7: return oldTablePair(static_cast<const ncclNet_v7_t*>(sym), rank, dir.path);
        case 8: return oldTablePair(static_cast<const ncclNet_v8_t*>(sym), rank, dir.path);
        default: return oldTablePair(static_cast<const ncclNet_v9_t*>(sym), rank, dir.path);
      }
    }, {}, 90);
    REQUIRE(gradcomp::test::allSucceeded(exits));
  }
}
