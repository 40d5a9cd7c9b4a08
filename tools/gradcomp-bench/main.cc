// gradcomp-bench: this project's all_reduce_perf. See options.h for the flags,
// runner.h for what is measured and check.h for how results are checked.
//
// Exit codes: 0 success; 1 a run-time failure or wrong results; 2 a bad flag
// or GRADCOMP_* value (one line naming it and what is accepted, before any
// rank starts). With --ranks N the exit code is the launched job's.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>

#include "common/param.h"
#include "tools/gradcomp-bench/options.h"
#include "tools/gradcomp-bench/runner.h"
#include "tools/launch/launch.h"

namespace {

using gradcomp::Err;
using gradcomp::Status;

int fail(const Status& s, const char* where) {
  fprintf(stderr, "gradcomp-bench: %s%s\n", where, s.message().c_str());
  const bool usage = s.code() == Err::InvalidArgument || s.code() == Err::InvalidConfig;
  return usage ? 2 : 1;
}

// True when this process is a rank of a launched job: GRADCOMP_NRANKS or one
// of the launcher variables the bootstrap falls back to (param_list.h).
bool inLaunchedJob() {
  if (gradcomp::param::isSet(gradcomp::param::Id::NRANKS)) return true;
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "WORLD_SIZE"})
    if (getenv(var)) return true;
  return false;
}

int run(int argc, char** argv) {
  gradcomp::bench::Options options;
  Status s = gradcomp::bench::parseOptions(argc, argv, &options);
  if (!s.ok()) return fail(s, "");
  if (options.help) {
    fputs(gradcomp::bench::usage().c_str(), stdout);
    return 0;
  }
  // --backend is GRADCOMP_API_BACKEND for this process and the ranks it starts.
  if (!options.backend.empty()) setenv("GRADCOMP_API_BACKEND", options.backend.c_str(), 1);
  if (!options.hierarchy.empty()) setenv("GRADCOMP_HIERARCHY", options.hierarchy.c_str(), 1);
  // Every GRADCOMP_* variable is checked before a rank starts or waits.
  s = gradcomp::param::validateEnvironment();
  if (!s.ok()) return fail(s, "");
  if (!options.jsonPath.empty()) {
    FILE* f = fopen(options.jsonPath.c_str(), "a");
    if (!f) {
      fprintf(stderr, "gradcomp-bench: -J='%s' is invalid: cannot open for writing: %s\n",
              options.jsonPath.c_str(), strerror(errno));
      return 2;
    }
    fclose(f);
  }

  if (options.ranks == 0 && !inLaunchedJob()) options.ranks = 1;
  if (options.ranks > 0) {
    std::vector<std::string> rankArgv{gradcomp::tools::selfExecutable()};
    rankArgv.insert(rankArgv.end(), options.rankArgs.begin(), options.rankArgs.end());
    gradcomp::tools::LaunchOptions launch;
    launch.nranks = options.ranks;
    launch.prefixOutput = false;  // only rank 0 prints the table; errors name their rank
    for (int r = 0; options.hosts > 0 && r < options.ranks; ++r)
      launch.rankEnv.push_back(
          {{"GRADCOMP_HOSTID", "bench-host" + std::to_string(r / (options.ranks / options.hosts))}});
    return gradcomp::tools::launchLocal(rankArgv, launch);
  }

  uint64_t wrong = 0;
  s = gradcomp::bench::runRank(options, &wrong);
  if (!s.ok()) {
    int64_t rank = -1;
    const bool known = gradcomp::param::getInt(gradcomp::param::Id::RANK, &rank).ok() && rank >= 0;
    const std::string where = "rank " + (known ? std::to_string(rank) : std::string("?")) + ": ";
    return fail(s, where.c_str());
  }
  return wrong ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::bad_alloc&) {
    fprintf(stderr, "gradcomp-bench: out of memory (try a smaller -e/--maxbytes or fewer --ranks)\n");
  } catch (const std::exception& e) {
    fprintf(stderr, "gradcomp-bench: %s\n", e.what());
  }
  return 1;
}
