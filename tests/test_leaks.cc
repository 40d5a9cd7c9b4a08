// Leak checks through the public C API between 2 real processes over UCX:
// communicator create/destroy cycles and many allreduce calls (cycling
// through every registered algorithm) must leave the resident set flat.
// RSS comes from /proc/self/statm after a warm-up (UCX, malloc arenas and
// per-algorithm scratch reach their steady size) and at the end.
//
// CI runs reduced counts (50 cycles, ~0.2 s each here; 2,000 calls);
// GC_LEAKS_FULL=1 runs the full numbers (1,000 cycles, 10,000 calls);
// GC_LEAKS_CYCLES / GC_LEAKS_CALLS set the counts directly. Results measured are in docs/reliability.md.
#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "gradcomp/gradcomp.h"
#include "support/multiproc.h"

#if defined(__SANITIZE_ADDRESS__)
#define GC_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GC_TEST_ASAN 1
#endif
#endif
#ifdef GC_TEST_ASAN
#include <sanitizer/lsan_interface.h>
#endif

namespace {

bool fullRun() {
  const char* text = std::getenv("GC_LEAKS_FULL");
  return text && std::string(text) == "1";
}

// GC_LEAKS_<name> (e.g. for a short run under valgrind), else the default.
int countFromEnv(const char* name, int fallback) {
  const char* text = std::getenv(name);
  const int n = text ? std::atoi(text) : 0;
  return n > 0 ? n : fallback;
}

long residentKiB() {
  long size = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return -1;
  const int got = std::fscanf(f, "%ld %ld", &size, &resident);
  std::fclose(f);
  return got == 2 ? resident * (sysconf(_SC_PAGESIZE) / 1024) : -1;
}

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Growth allowed after the warm-up: malloc may still grow an arena by a few
// pages (see boundKiB for the per-iteration part).
constexpr long kSlackKiB = 512;

const std::map<std::string, std::string> kEnv = {{"UCX_TLS", "sm,self"}, {"GRADCOMP_TIMEOUT_S", "30"}};

#define LEAK_CHECK(cond)                                                                 \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "rank %d: %s:%d: check failed: %s (last error: %s)\n", rank,  \
                   __FILE__, __LINE__, #cond, gcLastError());                            \
      return 1;                                                                          \
    }                                                                                    \
  } while (0)

// Bound on growth: the slack plus 64 bytes per iteration (catches anything
// that keeps an allocation per communicator or per call).
long boundKiB(int iterations) { return kSlackKiB + iterations * 64L / 1024; }

// Under AddressSanitizer RSS is no leak signal (freed blocks wait in its
// quarantine, shadow memory grows with use): there LeakSanitizer's
// reachability check, run now in this rank process, replaces the RSS bound.
bool flatOrLeakFree(long growthKiB, long allowedKiB) {
#ifdef GC_TEST_ASAN
  (void)growthKiB, (void)allowedKiB;
  return __lsan_do_recoverable_leak_check() == 0;
#else
  return growthKiB <= allowedKiB;
#endif
}

// Rank 0 publishes each cycle's rendezvous port here (a MAP_SHARED page made
// before fork), a fresh one per communicator. Ports of the churned
// connections sit in TIME_WAIT; the bootstrap context sets
// UCX_TCP_CM_REUSEADDR (transport/ucx_context.cc) so rank 0 can still bind.
struct PortBoard {
  std::atomic<int> cycle{-1};
  std::atomic<int> port{0};
};

// Points this rank's next gcCommInitFromEnv at cycle i's port.
bool usePortOfCycle(int rank, int i, PortBoard* board) {
  if (rank == 0) {
    board->port.store(gradcomp::test::freeLoopbackPort());
    board->cycle.store(i);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (board->cycle.load() != i && std::chrono::steady_clock::now() < deadline) {
    timespec ts{0, 200 * 1000};
    nanosleep(&ts, nullptr);
  }
  if (board->cycle.load() != i || board->port.load() <= 0) return false;
  // GRADCOMP_BOOTSTRAP is read once per process; MASTER_ADDR/PORT at every init.
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(board->port.load()).c_str(), 1);
  return true;
}

int commCycles(int rank, int warmup, int cycles, PortBoard* board) {
  unsetenv("GRADCOMP_BOOTSTRAP");  // before any parameter is read
  long before = 0;
  const auto t0 = std::chrono::steady_clock::now();
  double measured = 0;
  for (int i = 0; i < warmup + cycles; ++i) {
    if (i == warmup) {
      before = residentKiB();
      measured = secondsSince(t0);
    }
    LEAK_CHECK(usePortOfCycle(rank, i, board));
    gcComm_t comm = nullptr;
    LEAK_CHECK(gcCommInitFromEnv(&comm) == gcSuccess);
    LEAK_CHECK(gcCommSize(comm) == 2);
    LEAK_CHECK(gcCommDestroy(comm) == gcSuccess);
  }
  const long after = residentKiB();
  const double took = secondsSince(t0) - measured;
  std::printf("leaks: rank %d: %d comm create/destroy cycles (after %d warm-up): RSS %ld -> %ld KiB "
              "(%+ld KiB, bound %ld), %.2f s (%.1f ms/cycle)\n",
              rank, cycles, warmup, before, after, after - before, boundKiB(cycles), took,
              1000 * took / cycles);
  std::fflush(stdout);
  LEAK_CHECK(before > 0 && after > 0);
  LEAK_CHECK(flatOrLeakFree(after - before, boundKiB(cycles)));
  return 0;
}

int allreduceCalls(int rank, int warmup, int calls) {
  gcComm_t comm = nullptr;
  LEAK_CHECK(gcCommInitFromEnv(&comm) == gcSuccess);
  // Every registered algorithm in turn, each with its own tensor key (so
  // error-feedback residuals and per-tensor state exist for each).
  std::vector<gcAlgoConfig_t> configs;
  std::string names = gcAlgorithmNames();
  for (size_t at = 0; at <= names.size();) {
    size_t comma = names.find(',', at);
    if (comma == std::string::npos) comma = names.size();
    gcAlgoConfig_t cfg = nullptr;
    LEAK_CHECK(gcAlgoConfigCreate(names.substr(at, comma - at).c_str(), &cfg) == gcSuccess);
    configs.push_back(cfg);
    at = comma + 1;
  }
  const size_t n = 1000;
  std::vector<float> in(n), out(n);
  // RSS at the end of the warm-up and half-way: the bound applies to the
  // second half, so one-time growth that comes after the warm-up (a key's
  // first repartition, allocator arenas settling) is not read as a leak,
  // while any per-call leak grows the second half as much as the first.
  long before = 0, mid = 0;
  double measured = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < warmup + calls; ++i) {
    if (i == warmup) {
      before = residentKiB();
      measured = secondsSince(t0);
    }
    if (i == warmup + calls / 2) mid = residentKiB();
    for (size_t j = 0; j < n; ++j) in[j] = float((i + j + rank) % 17) - 8.0f;
    const size_t a = size_t(i) % configs.size();
    LEAK_CHECK(gcAllreduce(in.data(), out.data(), n, gcFloat32, gcSum, configs[a], 100 + a, comm) ==
               gcSuccess);
  }
  const long after = residentKiB();
  const double took = secondsSince(t0) - measured;
  std::printf("leaks: rank %d: %d allreduce calls over %zu algorithms (after %d warm-up): RSS %ld -> "
              "%ld -> %ld KiB (second half %+ld KiB, bound %ld), %.2f s (%.2f ms/call)\n",
              rank, calls, configs.size(), warmup, before, mid, after, after - mid,
              boundKiB(calls / 2), took, 1000 * took / calls);
  std::fflush(stdout);
  for (gcAlgoConfig_t cfg : configs) gcAlgoConfigDestroy(cfg);
  LEAK_CHECK(gcCommDestroy(comm) == gcSuccess);
  LEAK_CHECK(before > 0 && mid > 0 && after > 0);
  LEAK_CHECK(flatOrLeakFree(after - mid, boundKiB(calls / 2)));
  return 0;
}

}  // namespace

TEST_CASE("leaks: communicator create/destroy cycles keep RSS flat", "[leaks][mp]") {
  const int cycles = countFromEnv("GC_LEAKS_CYCLES", fullRun() ? 1000 : 50);
  void* page = mmap(nullptr, sizeof(PortBoard), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                    -1, 0);
  REQUIRE(page != MAP_FAILED);
  PortBoard* board = new (page) PortBoard;
  const auto exits = gradcomp::test::runRanks(
      2, [&](int rank) { return commCycles(rank, 20, cycles, board); }, kEnv,
      fullRun() ? 1200 : 240);
  munmap(page, sizeof(PortBoard));
  REQUIRE(gradcomp::test::allSucceeded(exits));
}

TEST_CASE("leaks: allreduce calls over every algorithm keep RSS flat", "[leaks][mp]") {
  const int calls = countFromEnv("GC_LEAKS_CALLS", fullRun() ? 10000 : 2000);
  const auto exits = gradcomp::test::runRanks(
      2, [&](int rank) { return allreduceCalls(rank, 1000, calls); }, kEnv,
      fullRun() ? 1200 : 240);
  REQUIRE(gradcomp::test::allSucceeded(exits));
}
