// gradcomp-run -n N [--no-prefix] [--] CMD ARGS...
// Runs N ranks of CMD on this machine with GRADCOMP_RANK, GRADCOMP_NRANKS and
// GRADCOMP_BOOTSTRAP set; exits with the first failing rank's code.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tools/launch/launch.h"

namespace {

constexpr int kMaxRanks = 4096;

void usage(FILE* out) {
  fprintf(out,
          "NAME\n"
          "  gradcomp-run - run N local ranks of a command (an mpirun for one machine)\n"
          "\n"
          "SYNOPSIS\n"
          "  gradcomp-run -n N [--no-prefix] [--] CMD [ARGS...]\n"
          "\n"
          "DESCRIPTION\n"
          "  Runs N ranks of CMD on this machine. Each rank gets GRADCOMP_RANK, GRADCOMP_NRANKS\n"
          "  and GRADCOMP_BOOTSTRAP=127.0.0.1:<free port>; its output lines are prefixed\n"
          "  with \"[rank] \". When a rank fails, the others get SIGTERM, then SIGKILL.\n"
          "  gradcomp-bench and gradcomp-train also run as ranks of mpirun, srun or\n"
          "  torchrun without it (docs/usage.md, \"Standalone tools under a launcher\").\n"
          "\n"
          "OPTIONS\n"
          "  -n N, --np N   number of ranks (1..%d)\n"
          "  --no-prefix    pass rank output through unprefixed\n"
          "  -h, --help     this help\n"
          "\n"
          "EXIT STATUS\n"
          "  0 when every rank exits 0, else the first failing rank's exit code (128+signal\n"
          "  when it was killed); 2 for a usage error.\n",
          kMaxRanks);
}

int usageError(const std::string& message) {
  fprintf(stderr, "gradcomp-run: %s (see gradcomp-run --help)\n", message.c_str());
  return 2;
}

bool parseRanks(const char* text, int* out) {
  char* end = nullptr;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (!text[0] || *end || errno || v < 1 || v > kMaxRanks) return false;
  *out = static_cast<int>(v);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  gradcomp::tools::LaunchOptions options;
  options.nranks = -1;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "-h" || arg == "--help") {
      usage(stdout);
      return 0;
    }
    if (arg == "--no-prefix") {
      options.prefixOutput = false;
      continue;
    }
    // -n N, -nN, --np N, --np=N
    std::string flag, value;
    bool haveValue = false;
    if (arg == "-n" || arg == "--np") {
      flag = arg;
      if (i + 1 < argc) value = argv[++i], haveValue = true;
    } else if (arg.rfind("--np=", 0) == 0) {
      flag = "--np", value = arg.substr(5), haveValue = true;
    } else if (arg.rfind("-n", 0) == 0 && arg.size() > 2 && arg[2] != '-') {
      flag = "-n", value = arg.substr(2), haveValue = true;
    } else if (arg[0] == '-') {
      return usageError("unknown option '" + arg + "'");
    } else {
      break;  // the command starts here
    }
    if (!haveValue) return usageError(flag + ": missing the number of ranks");
    if (!parseRanks(value.c_str(), &options.nranks))
      return usageError(flag + ": expected a number of ranks in 1.." + std::to_string(kMaxRanks) +
                        ", got '" + value + "'");
  }
  if (options.nranks < 0) return usageError("missing -n N (the number of ranks)");
  if (i >= argc) return usageError("missing the command to run");
  std::vector<std::string> command(argv + i, argv + argc);
  return gradcomp::tools::launchLocal(command, options);
}
