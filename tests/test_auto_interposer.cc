// GRADCOMP_ALGO=auto in the NCCL interposer (libgradcomp.so against the
// test-double libnccl.so.2, real rank processes): dense is NCCL's own
// allreduce, compressing candidates run on the host executor, every rank
// decides alike, the stats JSON and the destroy INFO line report per size
// class, and a bad candidate list or a probe past its limit passes
// everything to NCCL with a message naming the variable.
#include <dlfcn.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "nccl_double/nccl_double.h"
#include "support/multiproc.h"

namespace {

struct Api {
  ncclResult_t (*allReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*initRank)(ncclComm_t*, int, ncclUniqueId, int);
  ncclResult_t (*destroy)(ncclComm_t);
  ncclDoubleCountFn count;
};

std::string binaryDir() {
  if (const char* d = getenv("GC_TEST_BINARY_DIR")) return d;
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return ".";
  std::string path(exe, size_t(n));
  path = path.substr(0, path.rfind('/'));
  return path.substr(0, path.rfind('/'));
}

// In a child: the double (global, as an application linked to NCCL has it),
// then libgradcomp.so; exits the child on failure.
Api loadApi() {
  void* dbl = dlopen((binaryDir() + "/tests/nccl_double/libnccl.so.2").c_str(), RTLD_NOW | RTLD_GLOBAL);
  void* gc = dlopen((binaryDir() + "/plugin/libgradcomp.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!dbl || !gc) {
    fprintf(stderr, "dlopen failed: %s\n", dlerror());
    _exit(90);
  }
  auto sym = [&](void* h, const char* name) {
    void* p = dlsym(h, name);
    if (!p) {
      fprintf(stderr, "missing %s\n", name);
      _exit(91);
    }
    return p;
  };
  Api a{};
  a.allReduce = reinterpret_cast<decltype(a.allReduce)>(sym(gc, "ncclAllReduce"));
  a.initRank = reinterpret_cast<decltype(a.initRank)>(sym(gc, "ncclCommInitRank"));
  a.destroy = reinterpret_cast<decltype(a.destroy)>(sym(gc, "ncclCommDestroy"));
  a.count = reinterpret_cast<ncclDoubleCountFn>(sym(dbl, "ncclDoubleCount"));
  return a;
}

struct Job {
  std::string dir;
  ncclUniqueId id{};
  Job() {
    char tmpl[] = "/tmp/gc_auto_XXXXXX";
    dir = mkdtemp(tmpl);
    for (size_t i = 0; i < sizeof id.internal; ++i) id.internal[i] = char(rand());
  }
  ~Job() { (void)system(("rm -rf '" + dir + "'").c_str()); }
  std::map<std::string, std::string> env(std::map<std::string, std::string> extra) const {
    extra["NCCL_DOUBLE_DIR"] = dir;
    extra["NCCL_DOUBLE_TIMEOUT_S"] = "60";
    extra["GRADCOMP_TIMEOUT_S"] = "30";
    extra["GRADCOMP_CONFIG"] = "";
    extra["GRADCOMP_ALGO"] = "auto";
    if (!extra.count("GRADCOMP_AUTO_PROBE_MS")) extra["GRADCOMP_AUTO_PROBE_MS"] = "100";
    // Calibrated whatever the load, unless a test says otherwise.
    if (!extra.count("GRADCOMP_AUTO_PROBE_LIMIT_MS")) extra["GRADCOMP_AUTO_PROBE_LIMIT_MS"] = "60000";
    extra["GRADCOMP_STATS"] = dir + "/stats";
    extra["GRADCOMP_DEBUG"] = "INFO";
    extra["GRADCOMP_DEBUG_SUBSYS"] = "PLUGIN,ALGO";
    return extra;
  }
};

#define CHILD_CHECK(cond)                                                     \
  do {                                                                        \
    if (!(cond)) {                                                            \
      fprintf(stderr, "rank check failed at line %d: %s\n", __LINE__, #cond); \
      return 1;                                                               \
    }                                                                         \
  } while (0)

std::string readFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

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
