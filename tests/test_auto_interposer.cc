// GRADCOMP_ALGO=auto in the NCCL interposer (libgradcomp.so against the
// test-double libnccl.so.2, real rank processes): dense is NCCL's own
// allreduce, compressing candidates run on the host executor, every rank
// decides alike, the stats JSON and the destroy INFO line report per size
// class, and a bad candidate list or a probe past its limit passes
// everything to NCCL with a message naming the variable.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <regex>
#include <string>
#include <vector>

#include "nccl_double/nccl_double.h"
#include "support/multiproc.h"
#include "support/nccl_api.h"

namespace {

using Api = gradcomp::test::NcclApi;
Api loadApi() { return gradcomp::test::loadNcclApi(); }

// The double's job with auto switched on and its probe given room.
struct Job : gradcomp::test::NcclJob {
  std::map<std::string, std::string> env(std::map<std::string, std::string> extra) const {
    if (!extra.count("GRADCOMP_TIMEOUT_S")) extra["GRADCOMP_TIMEOUT_S"] = "30";
    extra["GRADCOMP_CONFIG"] = "";
    extra["GRADCOMP_ALGO"] = "auto";
    if (!extra.count("GRADCOMP_AUTO_PROBE_MS")) extra["GRADCOMP_AUTO_PROBE_MS"] = "100";
    // Calibrated whatever the load, unless a test says otherwise.
    if (!extra.count("GRADCOMP_AUTO_PROBE_LIMIT_MS")) extra["GRADCOMP_AUTO_PROBE_LIMIT_MS"] = "60000";
    extra["GRADCOMP_STATS"] = dir + "/stats";
    extra["GRADCOMP_DEBUG"] = "INFO";
    extra["GRADCOMP_DEBUG_SUBSYS"] = "PLUGIN,ALGO";
    std::map<std::string, std::string> e = NcclJob::env(extra);
    e["NCCL_DOUBLE_TIMEOUT_S"] = "60";
    return e;
  }
};

std::string readFile(const std::string& path) { return gradcomp::test::readWholeFile(path); }

// The child's stderr goes to DIR/err.rankR (read by the parent).
void captureStderr(const Job& job, int rank) {
  if (!freopen((job.dir + "/err.rank" + std::to_string(rank)).c_str(), "w", stderr)) _exit(92);
}

// A rank of the standard run: 6 calls on a 1 MiB buffer and 6 on a 4 MiB
// one (two size classes), every value rank + 1. exact: check the sums.
int runCalls(const Api& a, const Job& job, int rank, int nranks, bool exact,
             int* ncclCallsForEligible) {
  ncclComm_t comm = nullptr;
  CHILD_CHECK(a.initRank(&comm, nranks, job.id, rank) == ncclSuccess);
  std::vector<float> one(1 << 18), four(1 << 20);
  const float want = float(nranks * (nranks + 1) / 2);
  const int before = a.count("ncclAllReduce");
  for (int c = 0; c < 12; ++c) {
    std::vector<float>& buf = c % 2 ? four : one;
    for (float& x : buf) x = float(rank + 1);
    CHILD_CHECK(a.allReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm,
                            nullptr) == ncclSuccess);
    if (exact) CHILD_CHECK(buf[0] == want && buf[buf.size() - 1] == want && buf[777] == want);
  }
  *ncclCallsForEligible = a.count("ncclAllReduce") - before;
  CHILD_CHECK(a.destroy(comm) == ncclSuccess);
  return 0;
}

// "algo"/"calls" of each class in a stats file, in order: "qsgd:BITS=8 6|dense 6".
std::string classSummary(const std::string& json) {
  std::string out;
  const std::regex cls("\"bytes_min\": ([0-9]+), \"bytes_max\": [0-9]+, \"algo\": \"([^\"]*)\", \"calls\": ([0-9]+)");
  for (auto it = std::sregex_iterator(json.begin(), json.end(), cls); it != std::sregex_iterator(); ++it)
    out += (out.empty() ? "" : "|") + (*it)[1].str() + " " + (*it)[2].str() + " " + (*it)[3].str();
  return out;
}

}  // namespace

TEST_CASE("auto in the interposer: dense alone is NCCL's allreduce, reported per class",
          "[mp][nccl][auto]") {
  Job job;
  auto exits = gradcomp::test::runRanks(2, [&](int rank) {
    captureStderr(job, rank);
    Api a = loadApi();
    int viaNccl = 0;
    if (runCalls(a, job, rank, 2, true, &viaNccl)) return 1;
    CHILD_CHECK(viaNccl == 12);  // every eligible call went to NCCL
    return 0;
  }, job.env({{"GRADCOMP_AUTO_CANDIDATES", "dense"}}));
  REQUIRE(gradcomp::test::allSucceeded(exits));
  for (int r = 0; r < 2; ++r) {
    const std::string stats = readFile(job.dir + "/stats.rank" + std::to_string(r) + ".json");
    INFO(stats);
    CHECK(stats.find("\"auto chose NCCL's allreduce\": 12") != std::string::npos);
    CHECK(stats.find("\"state\": \"calibrated\"") != std::string::npos);
    CHECK(classSummary(stats) == "1048576 dense 6|4194304 dense 6");
    const std::string err = readFile(job.dir + "/err.rank" + std::to_string(r));
    INFO(err);
    CHECK(err.find("auto comm #0 float [1 MiB, 2 MiB): dense, 6 calls (dense 6), predicted ") !=
          std::string::npos);
    CHECK(err.find("auto comm #0 float [4 MiB, 8 MiB): dense, 6 calls (dense 6)") !=
          std::string::npos);
  }
}

TEST_CASE("auto in the interposer: a compressing choice runs on the executor, ranks alike",
          "[mp][nccl][auto]") {
  for (const char* candidates : {"qsgd:BITS=8", "dense,qsgd:BITS=8,qsgd:BITS=4,oktopk"}) {
    INFO(candidates);
    Job job;
    const bool single = std::string(candidates) == "qsgd:BITS=8";
    auto exits = gradcomp::test::runRanks(3, [&](int rank) {
      captureStderr(job, rank);
      Api a = loadApi();
      int viaNccl = 0;
      // qsgd's max-min codes are exact on constant buffers.
      if (runCalls(a, job, rank, 3, single, &viaNccl)) return 1;
      if (single) CHILD_CHECK(viaNccl == 0);
      return 0;
    }, job.env({{"GRADCOMP_AUTO_CANDIDATES", candidates}, {"GRADCOMP_AUTO_REFINE_CALLS", "2"}}));
    REQUIRE(gradcomp::test::allSucceeded(exits));
    std::vector<std::string> summaries;
    for (int r = 0; r < 3; ++r) {
      const std::string stats = readFile(job.dir + "/stats.rank" + std::to_string(r) + ".json");
      INFO(stats);
      summaries.push_back(classSummary(stats));
      const std::regex by("\"by_candidate\": \\{[^}]*\\}");
      CHECK(std::regex_search(stats, by));
      // calls per candidate per class, identical on every rank
      std::string calls;
      const std::regex each("\"([^\"]+)\": \\{\"calls\": ([0-9]+)");
      for (auto it = std::sregex_iterator(stats.begin(), stats.end(), each);
           it != std::sregex_iterator(); ++it)
        calls += (*it)[1].str() + "=" + (*it)[2].str() + ";";
      summaries.back() += " " + calls;
    }
    CHECK(summaries[1] == summaries[0]);
    CHECK(summaries[2] == summaries[0]);
    if (single) CHECK(summaries[0].rfind("1048576 qsgd:BITS=8 6|4194304 qsgd:BITS=8 6", 0) == 0);
  }
}

TEST_CASE("auto in the interposer: a bad GRADCOMP_AUTO_CANDIDATES passes every call to NCCL",
          "[mp][nccl][auto]") {
  Job job;
  auto exits = gradcomp::test::runRanks(2, [&](int rank) {
    captureStderr(job, rank);
    Api a = loadApi();
    int viaNccl = 0;
    if (runCalls(a, job, rank, 2, true, &viaNccl)) return 1;
    CHILD_CHECK(viaNccl == 12);
    return 0;
  }, job.env({{"GRADCOMP_AUTO_CANDIDATES", "dense,bogus"}}));
  REQUIRE(gradcomp::test::allSucceeded(exits));
  for (int r = 0; r < 2; ++r) {
    const std::string err = readFile(job.dir + "/err.rank" + std::to_string(r));
    INFO(err);
    CHECK(err.find("GRADCOMP_AUTO_CANDIDATES: unknown candidate 'bogus'") != std::string::npos);
    CHECK(err.find("running uncompressed") != std::string::npos);
  }
}

TEST_CASE("auto in the interposer: a probe past GRADCOMP_AUTO_PROBE_LIMIT_MS runs NCCL on every rank",
          "[mp][nccl][auto]") {
  Job job;
  auto exits = gradcomp::test::runRanks(2, [&](int rank) {
    captureStderr(job, rank);
    Api a = loadApi();
    int viaNccl = 0;
    if (runCalls(a, job, rank, 2, true, &viaNccl)) return 1;
    CHILD_CHECK(viaNccl == 12);
    return 0;
  }, job.env({{"GRADCOMP_AUTO_PROBE_MS", "10"}, {"GRADCOMP_AUTO_PROBE_LIMIT_MS", "10"}}));
  REQUIRE(gradcomp::test::allSucceeded(exits));
  for (int r = 0; r < 2; ++r) {
    const std::string stats = readFile(job.dir + "/stats.rank" + std::to_string(r) + ".json");
    const std::string err = readFile(job.dir + "/err.rank" + std::to_string(r));
    INFO(stats << "\n" << err);
    CHECK(stats.find("\"state\": \"dense: the calibration probe took ") != std::string::npos);
    CHECK(stats.find("over GRADCOMP_AUTO_PROBE_LIMIT_MS=10") != std::string::npos);
    CHECK(stats.find("\"auto chose NCCL's allreduce\": 12") != std::string::npos);
    CHECK(err.find("auto comm #0: dense: the calibration probe took ") != std::string::npos);
  }
}
