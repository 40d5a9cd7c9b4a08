// Host topology through the public C API between real processes over UCX:
// every rank agrees on the map and the schedule (gcCommGetTopology,
// gcCommRankHost), and bad input (uneven hosts, GRADCOMP_HOSTID on some
// ranks only, ranks asking for different modes) runs flat on every rank with
// one WARN naming the problem, and never hangs: a dense allreduce follows.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gradcomp/gradcomp.h"
#include "support/multiproc.h"

namespace {

#define RANK_CHECK(cond)                                                                   \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stdout, "rank %d: %s:%d: check failed: %s (last error: %s)\n", rank,    \
                   __FILE__, __LINE__, #cond, gcLastError());                              \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Expect {
  int hierarchical;  // on every rank
  int hosts;
  const char* rank0Says;  // in rank 0's stderr ("" nothing to look for)
};

// Each rank sets its own variables (env(rank)), logs stderr to a file, inits,
// checks the topology and runs one dense allreduce.
int topologyRank(int rank, int P, const std::vector<std::pair<std::string, std::string>>& vars,
                 const Expect& e, const std::string& logPrefix) {
  for (const auto& [k, v] : vars) setenv(k.c_str(), v.c_str(), 1);
  const std::string log = logPrefix + std::to_string(rank);
  RANK_CHECK(std::freopen(log.c_str(), "w", stderr) != nullptr);
  gcComm_t comm = nullptr;
  RANK_CHECK(gcCommInitFromEnv(&comm) == gcSuccess);
  gcTopology_t t{};
  RANK_CHECK(gcCommGetTopology(comm, &t) == gcSuccess);
  RANK_CHECK(t.hierarchical == e.hierarchical);
  RANK_CHECK(t.hosts == e.hosts);
  RANK_CHECK(gcCommRankHost(comm, rank) == t.host);
  RANK_CHECK(gcCommRankHost(comm, P) == -1);
  int local = 0;
  for (int r = 0; r < rank; ++r) local += gcCommRankHost(comm, r) == t.host;
  RANK_CHECK(t.localRank == local);
  std::vector<float> buf(1001, float(rank + 1));
  RANK_CHECK(gcAllreduce(buf.data(), buf.data(), buf.size(), gcFloat32, gcSum, nullptr, 0, comm) ==
             gcSuccess);
  RANK_CHECK(buf[0] == float(P * (P + 1) / 2) && buf[1000] == buf[0]);
  gcTraffic_t inter{};
  RANK_CHECK(gcCommGetInterHostTraffic(comm, &inter) == gcSuccess);
  RANK_CHECK(e.hosts > 1 || inter.bytesSent == 0);
  RANK_CHECK(gcCommDestroy(comm) == gcSuccess);
  std::fflush(stderr);
  const std::string err = readFile(log);
  if (rank == 0 && e.rank0Says[0]) RANK_CHECK(err.find(e.rank0Says) != std::string::npos);
  // The WARN is printed once, by rank 0.
  if (rank != 0) RANK_CHECK(err.find("host topology:") == std::string::npos);
  return 0;
}

void runCase(int P, const std::function<std::vector<std::pair<std::string, std::string>>(int)>& vars,
             const Expect& e) {
  char dir[] = "/tmp/gc_api_topology_XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string prefix = std::string(dir) + "/rank";
  const auto exits = gradcomp::test::runRanks(
      P, [&](int rank) { return topologyRank(rank, P, vars(rank), e, prefix); }, {}, 120.0);
  INFO("rank 0 stderr: " << readFile(prefix + "0"));
  CHECK(gradcomp::test::allSucceeded(exits));
  (void)!std::system((std::string("rm -rf ") + dir).c_str());
}

using Vars = std::vector<std::pair<std::string, std::string>>;

}  // namespace

TEST_CASE("api topology: 2 hosts x 2 ranks agree on a hierarchical schedule", "[api][mp][hierarchy]") {
  runCase(4,
          [](int r) {
            return Vars{{"GRADCOMP_HOSTID", "node" + std::to_string(r / 2)}, {"GRADCOMP_DEBUG", "INFO"}};
          },
          {1, 2, "topology rank 0: host 0 of 2 ('node0'), local rank 0 of 2, schedule host"});
  // Interleaved hosts, and hwloc's placement on the INFO line.
  runCase(4,
          [](int r) {
            return Vars{{"GRADCOMP_HOSTID", "n" + std::to_string(r % 2)}, {"GRADCOMP_DEBUG", "INFO"}};
          },
          {1, 2, "NUMA node"});
  // GRADCOMP_HIERARCHY=flat on every rank: flat, without a warning.
  runCase(4,
          [](int r) {
            return Vars{{"GRADCOMP_HOSTID", "n" + std::to_string(r % 2)}, {"GRADCOMP_HIERARCHY", "flat"}};
          },
          {0, 2, ""});
}

TEST_CASE("api topology: bad maps run flat everywhere with one message", "[api][mp][hierarchy]") {
  SECTION("uneven ranks per host") {
    runCase(3, [](int r) { return Vars{{"GRADCOMP_HOSTID", r < 2 ? "a" : "b"}}; },
            {0, 2, "host topology: uneven ranks per host: host 0 ('a') has 2 ranks, host 1 ('b') "
                   "has 1; running every algorithm flat over all 3 ranks"});
  }
  SECTION("GRADCOMP_HOSTID on rank 0 only") {
    runCase(4, [](int r) { return r == 0 ? Vars{{"GRADCOMP_HOSTID", "x"}} : Vars{}; },
            {0, 2, "GRADCOMP_HOSTID differs in format across ranks: set on rank 0 ('x') but not on rank 1"});
  }
  SECTION("ranks ask for different modes") {
    runCase(4,
            [](int r) {
              return Vars{{"GRADCOMP_HOSTID", "n" + std::to_string(r / 2)},
                          {"GRADCOMP_HIERARCHY", r == 3 ? "flat" : "host"}};
            },
            {0, 2, "ranks disagree on GRADCOMP_HIERARCHY: rank 0 has host, rank 3 has flat"});
  }
  SECTION("a malformed GRADCOMP_HOSTID") {
    runCase(4,
            [](int r) {
              return Vars{{"GRADCOMP_HOSTID", r == 2 ? "bad id" : "n" + std::to_string(r / 2)}};
            },
            {0, 3, "rank 2: GRADCOMP_HOSTID='bad_id' is invalid"});
  }
}
