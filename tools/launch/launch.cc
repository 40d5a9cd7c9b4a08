// launchLocal: fork/exec N ranks, relay their output line by line with a
// "[rank] " prefix (pipes + poll in this process), stop the job at the first
// failure (SIGTERM, then SIGKILL after the grace period), reap everyone.
#include "tools/launch/launch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace gradcomp::tools {
namespace {

using Clock = std::chrono::steady_clock;

volatile sig_atomic_t gStopSignal = 0;  // SIGINT/SIGTERM received by the launcher
void onStopSignal(int sig) { gStopSignal = sig; }

void writeAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;  // the reader went away: drop output, keep supervising
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// One rank's output stream: a pipe read end and the partial line so far.
struct Stream {
  int fd = -1;
  int outFd = 1;  // where prefixed lines go
  std::string partial;
};

struct Rank {
  pid_t pid = -1;
  bool running = false;
  Stream streams[2];  // stdout, stderr
};

void emit(int rank, Stream& s, bool flushPartial) {
  const std::string prefix = "[" + std::to_string(rank) + "] ";
  size_t start = 0;
  for (size_t nl; (nl = s.partial.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::string line = prefix + s.partial.substr(start, nl + 1 - start);
    writeAll(s.outFd, line.data(), line.size());
  }
  s.partial.erase(0, start);
  if (flushPartial && !s.partial.empty()) {
    std::string line = prefix + s.partial + "\n";
    writeAll(s.outFd, line.data(), line.size());
    s.partial.clear();
  }
}

[[noreturn]] void execRank(int rank, const std::vector<std::string>& argv,
                           const LaunchOptions& options, int port, pid_t parent, int outFd,
                           int errFd) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a killed launcher
  if (getppid() != parent) _exit(127);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGPIPE, SIG_DFL);
  if (outFd >= 0) dup2(outFd, STDOUT_FILENO);
  if (errFd >= 0) dup2(errFd, STDERR_FILENO);
  setenv("GRADCOMP_RANK", std::to_string(rank).c_str(), 1);
  setenv("GRADCOMP_NRANKS", std::to_string(options.nranks).c_str(), 1);
  setenv("GRADCOMP_BOOTSTRAP", ("127.0.0.1:" + std::to_string(port)).c_str(), 1);
  for (const auto& [name, value] : options.extraEnv) setenv(name.c_str(), value.c_str(), 1);
  if (size_t(rank) < options.rankEnv.size())
    for (const auto& [name, value] : options.rankEnv[size_t(rank)])
      setenv(name.c_str(), value.c_str(), 1);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execvp(args[0], args.data());
  fprintf(stderr, "gradcomp-run: cannot execute '%s': %s\n", args[0], strerror(errno));
  _exit(127);
}

int exitCodeOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string describe(int status) {
  if (WIFSIGNALED(status))
    return "signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  return "exit code " + std::to_string(WEXITSTATUS(status));
}

}  // namespace

int pickFreePort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

std::string selfExecutable() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  return std::string(buf, static_cast<size_t>(n));
}

int launchLocal(const std::vector<std::string>& argv, const LaunchOptions& options) {
  if (argv.empty() || options.nranks < 1) {
    fprintf(stderr, "gradcomp-run: %s\n", argv.empty() ? "no command to run" : "nranks must be >= 1");
    return 2;
  }
  const int port = pickFreePort();
  if (port < 0) {
    fprintf(stderr, "gradcomp-run: cannot find a free TCP port on 127.0.0.1: %s\n", strerror(errno));
    return 1;
  }
  struct sigaction stop{}, oldInt{}, oldTerm{}, oldPipe{};
  stop.sa_handler = onStopSignal;
  sigemptyset(&stop.sa_mask);
  gStopSignal = 0;
  sigaction(SIGINT, &stop, &oldInt);
  sigaction(SIGTERM, &stop, &oldTerm);
  struct sigaction ignore{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &oldPipe);
  fflush(stdout);
  fflush(stderr);

  const pid_t self = getpid();
  std::vector<Rank> ranks(options.nranks);
  int firstFailure = -1, jobCode = 0, running = 0;
  for (int r = 0; r < options.nranks; ++r) {
    int pipes[2][2] = {{-1, -1}, {-1, -1}};
    if (options.prefixOutput)
      for (auto& p : pipes)
        if (pipe2(p, O_CLOEXEC) != 0) p[0] = p[1] = -1;
    pid_t pid = fork();
    if (pid == 0) execRank(r, argv, options, port, self, pipes[0][1], pipes[1][1]);
    for (int k = 0; k < 2; ++k) {
      if (pipes[k][1] >= 0) close(pipes[k][1]);
      ranks[r].streams[k].fd = pipes[k][0];
      ranks[r].streams[k].outFd = k == 0 ? STDOUT_FILENO : STDERR_FILENO;
    }
    if (pid < 0) {
      fprintf(stderr, "gradcomp-run: fork for rank %d failed: %s\n", r, strerror(errno));
      if (firstFailure < 0) firstFailure = r, jobCode = 1;
      break;
    }
    ranks[r].pid = pid;
    ranks[r].running = true;
    ++running;
  }

  bool terminating = firstFailure >= 0;
  Clock::time_point killAt = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                std::chrono::duration<double>(options.graceS));
  bool killed = false;
  auto stopOthers = [&]() {
    for (Rank& rk : ranks)
      if (rk.running) kill(rk.pid, SIGTERM);
    killAt = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(options.graceS));
  };
  if (terminating) stopOthers();

  int openStreams = 0;
  for (Rank& rk : ranks)
    for (Stream& s : rk.streams) openStreams += s.fd >= 0;
  // Runs until every rank is reaped and its pipes are drained; a grandchild
  // holding a pipe open is given up on once all ranks are gone.
  Clock::time_point drainUntil = Clock::time_point::max();
  while (running > 0 || (openStreams > 0 && Clock::now() < drainUntil)) {
    std::vector<pollfd> fds;
    std::vector<std::pair<int, int>> owners;
    for (int r = 0; r < options.nranks; ++r)
      for (int k = 0; k < 2; ++k)
        if (ranks[r].streams[k].fd >= 0) {
          fds.push_back({ranks[r].streams[k].fd, POLLIN, 0});
          owners.emplace_back(r, k);
        }
    int rc = poll(fds.data(), fds.size(), 20);
    for (size_t i = 0; rc > 0 && i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Stream& s = ranks[owners[i].first].streams[owners[i].second];
      char buf[65536];
      ssize_t n = read(s.fd, buf, sizeof(buf));
      if (n > 0) {
        s.partial.append(buf, static_cast<size_t>(n));
        emit(owners[i].first, s, false);
      } else if (n == 0 || errno != EINTR) {
        emit(owners[i].first, s, true);
        close(s.fd);
        s.fd = -1;
        --openStreams;
      }
    }
    for (int r = 0; r < options.nranks; ++r) {
      Rank& rk = ranks[r];
      int status = 0;
      if (!rk.running || waitpid(rk.pid, &status, WNOHANG) != rk.pid) continue;
      rk.running = false;
      --running;
      const int code = exitCodeOf(status);
      if (code != 0 && firstFailure < 0 && !terminating) {
        firstFailure = r;
        jobCode = code;
        fprintf(stderr, "gradcomp-run: rank %d exited with %s; stopping the other ranks\n", r,
                describe(status).c_str());
        terminating = true;
        stopOthers();
      }
    }
    if (gStopSignal && !terminating) {
      fprintf(stderr, "gradcomp-run: got signal %d; stopping all ranks\n", static_cast<int>(gStopSignal));
      jobCode = 128 + gStopSignal;
      terminating = true;
      stopOthers();
    }
    if (terminating && !killed && running > 0 && Clock::now() >= killAt) {
      for (Rank& rk : ranks)
        if (rk.running) kill(rk.pid, SIGKILL);
      killed = true;
    }
    if (running == 0 && drainUntil == Clock::time_point::max())
      drainUntil = Clock::now() + std::chrono::seconds(1);
  }
  for (Rank& rk : ranks)
    for (Stream& s : rk.streams)
      if (s.fd >= 0) {
        emit(static_cast<int>(&rk - ranks.data()), s, true);
        close(s.fd);
      }
  sigaction(SIGINT, &oldInt, nullptr);
  sigaction(SIGTERM, &oldTerm, nullptr);
  sigaction(SIGPIPE, &oldPipe, nullptr);
  return jobCode;
}

}  // namespace gradcomp::tools
