// Forks one child per rank; see multiproc.h for the contract.
#include "support/multiproc.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

namespace gradcomp::test {
namespace {

[[noreturn]] void runChild(int rank, int nranks, int port, pid_t parent,
                           const std::function<int(int rank)>& body,
                           const std::map<std::string, std::string>& env) {
  // No orphans: if the test process dies (a CTest timeout kills it), the
  // kernel kills its ranks too. A parent already gone before prctl is caught
  // by the getppid check.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(126);
  // The test framework's crash handlers belong to the parent; a crashing rank
  // should just die by its signal.
  for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTERM, SIGINT})
    signal(sig, SIG_DFL);
  setenv("GRADCOMP_RANK", std::to_string(rank).c_str(), 1);
  setenv("GRADCOMP_NRANKS", std::to_string(nranks).c_str(), 1);
  setenv("GRADCOMP_BOOTSTRAP", ("127.0.0.1:" + std::to_string(port)).c_str(), 1);
  for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
  int rc = 1;
  try {
    rc = body(rank);
  } catch (const std::exception& e) {
    fprintf(stderr, "rank %d: exception: %s\n", rank, e.what());
    rc = 101;
  } catch (...) {
    // Catch2 REQUIRE failures inside a child land here.
    fprintf(stderr, "rank %d: body threw (assertion failed?)\n", rank);
    rc = 102;
  }
  fflush(stdout);
  fflush(stderr);
  _exit(rc);  // skip atexit handlers and static destructors shared with the parent
}

void record(int status, RankExit* out) {
  if (WIFEXITED(status)) {
    out->exitCode = WEXITSTATUS(status);
    out->signal = 0;
  } else if (WIFSIGNALED(status)) {
    out->signal = WTERMSIG(status);
  }
}

}  // namespace

std::vector<RankExit> runRanks(int nranks, const std::function<int(int rank)>& body,
                               const std::map<std::string, std::string>& env, double deadlineS) {
  std::vector<RankExit> exits(nranks > 0 ? nranks : 0);
  std::vector<pid_t> pids(exits.size(), -1);
  const int port = freeLoopbackPort();
  const pid_t parent = getpid();
  fflush(stdout);  // buffered output would otherwise be written by every child
  fflush(stderr);
  for (int r = 0; r < nranks; ++r) {
    pid_t pid = fork();
    if (pid == 0) runChild(r, nranks, port, parent, body, env);
    if (pid < 0) {
      perror("runRanks: fork");
      exits[r].exitCode = 127;
      continue;
    }
    pids[r] = pid;
  }

  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(deadlineS));
  int running = 0;
  for (pid_t p : pids) running += p > 0;
  // Poll for exits: waitpid(WNOHANG) plus a short sleep keeps the deadline exact
  // without signal-handler plumbing.
  while (running > 0 && Clock::now() < deadline) {
    bool reaped = false;
    for (int r = 0; r < nranks; ++r) {
      if (pids[r] <= 0) continue;
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        record(status, &exits[r]);
        pids[r] = -1;
        --running;
        reaped = true;
      }
    }
    if (!reaped && running > 0) {
      timespec ts{0, 2 * 1000 * 1000};
      nanosleep(&ts, nullptr);
    }
  }
  for (int r = 0; r < nranks; ++r) {
    if (pids[r] <= 0) continue;
    kill(pids[r], SIGKILL);
    int status = 0;
    waitpid(pids[r], &status, 0);
    record(status, &exits[r]);
    exits[r].killedAtDeadline = true;
  }
  return exits;
}

std::vector<RankExit> runConcurrently(int n, int parallel, size_t recordBytes,
                                      const std::function<int(int i, void* record)>& body,
                                      std::vector<std::vector<char>>* records, double deadlineS) {
  std::vector<RankExit> exits(n > 0 ? size_t(n) : 0);
  records->assign(exits.size(), std::vector<char>());
  const size_t stride = (recordBytes + 63) / 64 * 64;
  const size_t total = std::max<size_t>(stride * exits.size(), 64);
  void* page = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) return exits;
  char* base = static_cast<char*>(page);
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(deadlineS));
  const pid_t parent = getpid();
  std::vector<pid_t> pids(exits.size(), -1);
  int next = 0, running = 0;
  while (next < n || running > 0) {
    while (next < n && running < std::max(1, parallel)) {
      fflush(stdout);
      fflush(stderr);
      const pid_t pid = fork();
      if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(126);
        int rc = 1;
        try {
          rc = body(next, base + stride * size_t(next));
        } catch (...) {
          rc = 102;
        }
        fflush(stdout);
        fflush(stderr);
        _exit(rc);
      }
      pids[size_t(next)] = pid;
      if (pid < 0) exits[size_t(next)].exitCode = 127;
      else ++running;
      ++next;
    }
    bool reaped = false;
    for (int i = 0; i < next; ++i) {
      int status = 0;
      if (pids[size_t(i)] <= 0 || waitpid(pids[size_t(i)], &status, WNOHANG) != pids[size_t(i)]) continue;
      record(status, &exits[size_t(i)]);
      pids[size_t(i)] = -1;
      --running;
      reaped = true;
    }
    if (Clock::now() >= deadline) {
      for (int i = 0; i < next; ++i) {
        if (pids[size_t(i)] <= 0) continue;
        kill(pids[size_t(i)], SIGKILL);
        int status = 0;
        waitpid(pids[size_t(i)], &status, 0);
        record(status, &exits[size_t(i)]);
        exits[size_t(i)].killedAtDeadline = true;
        pids[size_t(i)] = -1;
        --running;
      }
      break;  // the cells not started yet keep exit code -1
    }
    if (!reaped) {
      timespec ts{0, 5 * 1000 * 1000};
      nanosleep(&ts, nullptr);
    }
  }
  for (size_t i = 0; i < exits.size(); ++i)
    (*records)[i].assign(base + stride * i, base + stride * i + recordBytes);
  munmap(page, total);
  return exits;
}

// A port below Linux's ephemeral range (32768-60999 by default), free when
// checked. Inside that range the kernel may hand the port to any outgoing
// connection before rank 0 listens on it, including a retrying rank's own
// connect to it (TCP self-connect): "Address already in use" at rank 0.
// A small race with other tests picking the same port remains (random start).
int freeLoopbackPort() {
  constexpr int kFirst = 20000, kSpan = 12000;
  // Distinct per call: cells of the fault matrix start their jobs concurrently.
  static std::atomic<unsigned> calls{0};
  unsigned seed = unsigned(getpid()) * 2654435761u ^ unsigned(time(nullptr)) ^ (calls++ * 40503u);
  for (int attempt = 0; attempt < 200; ++attempt) {
    seed = seed * 1103515245u + 12345u;
    const int port = kFirst + int((seed >> 8) % kSpan);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(uint16_t(port));
    const bool free = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    close(fd);
    if (free) return port;
  }
  return -1;
}

bool allSucceeded(const std::vector<RankExit>& exits) {
  bool ok = true;
  for (size_t r = 0; r < exits.size(); ++r) {
    const RankExit& e = exits[r];
    if (e.signal == 0 && e.exitCode == 0 && !e.killedAtDeadline) continue;
    ok = false;
    if (e.killedAtDeadline)
      fprintf(stderr, "rank %zu: killed at the deadline (hung)\n", r);
    else if (e.signal)
      fprintf(stderr, "rank %zu: died by signal %d\n", r, e.signal);
    else
      fprintf(stderr, "rank %zu: exited with code %d\n", r, e.exitCode);
  }
  return ok;
}

}  // namespace gradcomp::test
