// gradcomp-train: data-parallel SGD on Fashion-MNIST with the gradients (or
// weights) averaged by a gradcomp algorithm. One process is one rank; start the
// job with gradcomp-run -n N -- gradcomp-train ..., or --ranks N.
// Exit codes: 0 done, 1 runtime failure, 2 bad flags.
#include <cblas.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common/log.h"
#include "tools/gradcomp-train/flags.h"
#include "tools/gradcomp-train/gc_collective.h"
#include "tools/gradcomp-train/report.h"
#include "tools/launch/launch.h"

namespace gradcomp::train {
namespace {

Status run(const Flags& flags) {
  // Data before the network: a missing dataset fails fast on every rank with
  // the package to install, instead of as a bootstrap timeout.
  Dataset trainSet, testSet;
  GC_CHECK(loadFashionMnist(flags.dataDir, "train", flags.trainLimit, &trainSet));
  GC_CHECK(loadFashionMnist(flags.dataDir, "t10k", flags.testLimit, &testSet));
  std::unique_ptr<GcCollective> comm;
  GC_CHECK(GcCollective::create(flags.algo, flags.algoParams, flags.sumThenScale, flags.agAlgo,
                                flags.agParams, &comm));
  log::setRank(comm->rank());

  Report report(flags, comm->size(), trainSet.size(), testSet.size());
  if (comm->rank() == 0) {
    // An unwritable -J path fails now, not after the training.
    if (!flags.jsonPath.empty()) GC_CHECK(report.writeJson(flags.jsonPath));
    report.printHeader(stdout);
  }
  Status jsonStatus;
  GC_CHECK(runTraining(flags.train, trainSet, testSet, *comm, [&](const EpochStats& st) {
    if (comm->rank() != 0) return;
    report.add(st, stdout);
    // Rewritten after every epoch so a long run leaves results if it is cut short.
    if (!flags.jsonPath.empty() && jsonStatus.ok()) jsonStatus = report.writeJson(flags.jsonPath);
  }));
  return jsonStatus;
}

}  // namespace
}  // namespace gradcomp::train

int main(int argc, char** argv) {
  using namespace gradcomp;
  openblas_set_num_threads(1);  // one BLAS thread per rank; ranks share the cores
  train::Flags flags;
  const Status parsed = train::parseFlags(argc, argv, &flags);
  if (!parsed.ok()) {
    std::fprintf(stderr, "gradcomp-train: %s\n", parsed.message().c_str());
    return 2;
  }
  if (flags.help) {
    std::fputs(train::usage().c_str(), stdout);
    return 0;
  }
  if (flags.ranks > 0) {
    std::vector<std::string> args{tools::selfExecutable()};
    args.insert(args.end(), flags.rankArgs.begin(), flags.rankArgs.end());
    tools::LaunchOptions launch;
    launch.nranks = flags.ranks;
    launch.extraEnv["OPENBLAS_NUM_THREADS"] = "1";
    return tools::launchLocal(args, launch);
  }
  const Status s = train::run(flags);
  if (!s.ok()) {
    std::fprintf(stderr, "gradcomp-train: %s\n", s.toString().c_str());
    return 1;
  }
  return 0;
}
