// Multi-rank tests as real processes: fork N children that each run `body(rank)`
// with GRADCOMP_RANK/NRANKS/BOOTSTRAP (127.0.0.1, a free port) and `env` set in
// their environment before any UCX call, then _exit with its return value.
// The parent waits at most deadlineS, then kills every child: a hang becomes a
// test failure, never a hung CI. Children get PR_SET_PDEATHSIG=SIGKILL, so
// they die with the test process even when it is killed itself.
#pragma once

#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

// In a rank's body: a failed condition is printed with its line and the
// body returns 1 (Catch2's assertions are not for child processes).
#define CHILD_CHECK(cond)                                                     \
  do {                                                                        \
    if (!(cond)) {                                                            \
      fprintf(stderr, "rank check failed at line %d: %s\n", __LINE__, #cond); \
      return 1;                                                               \
    }                                                                         \
  } while (0)

namespace gradcomp::test {

struct RankExit {
  int exitCode = -1;  // valid when signal == 0
  int signal = 0;     // the signal that ended the child, 0 if it exited
  bool killedAtDeadline = false;
};

std::vector<RankExit> runRanks(int nranks, const std::function<int(int rank)>& body,
                               const std::map<std::string, std::string>& env = {},
                               double deadlineS = 120.0);

// Runs body(i, record_i) for i in [0, n) in child processes, at most
// `parallel` at a time, each with `recordBytes` of zeroed MAP_SHARED memory
// (record_i) for its result, returned in *records once it exited. Bodies may
// call runRanks (each child is single-threaded, so its forks are safe, which
// threads of the test process would not be). Children past deadlineS are
// killed (their exit says so). Nothing in a body may use Catch2 assertions.
std::vector<RankExit> runConcurrently(int n, int parallel, size_t recordBytes,
                                      const std::function<int(int i, void* record)>& body,
                                      std::vector<std::vector<char>>* records,
                                      double deadlineS = 600.0);

// A loopback TCP port that is free right now (the kernel picks it), or -1.
int freeLoopbackPort();

// True when every rank exited 0; otherwise prints which did not (for REQUIRE).
bool allSucceeded(const std::vector<RankExit>& exits);

}  // namespace gradcomp::test
