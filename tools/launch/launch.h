// Starting N local ranks: shared by gradcomp-run, gradcomp-bench --ranks and
// gradcomp-train. Each rank is a child process with GRADCOMP_RANK,
// GRADCOMP_NRANKS and GRADCOMP_BOOTSTRAP=127.0.0.1:<free port> set (plus
// `extraEnv`); its stdout/stderr lines are prefixed with "[rank] " when
// prefixOutput is set. When one rank exits non-zero or dies by a signal, the
// others get SIGTERM, then SIGKILL after a grace period. Never returns before
// every child is reaped.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace gradcomp::tools {

struct LaunchOptions {
  int nranks = 1;
  bool prefixOutput = true;
  double graceS = 5.0;  // SIGTERM -> SIGKILL delay after the first failure
  std::map<std::string, std::string> extraEnv;
  // rankEnv[r]: variables for rank r only, set after extraEnv (empty: none).
  std::vector<std::map<std::string, std::string>> rankEnv;
};

// argv[0] is looked up in PATH when it has no '/'. Returns the job's exit code:
// 0 when every rank exited 0, else the first failing rank's exit code (128+sig
// for a signal). Writes "gradcomp-run: rank R exited with ..." to stderr for the
// first failure.
int launchLocal(const std::vector<std::string>& argv, const LaunchOptions& options);

// A TCP port on 127.0.0.1 that is free right now (bound and released).
int pickFreePort();

// Path of the running executable (/proc/self/exe), for tools that relaunch themselves.
std::string selfExecutable();

}  // namespace gradcomp::tools
