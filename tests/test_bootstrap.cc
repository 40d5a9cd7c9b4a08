// Bootstrap: rank/size/address from each launcher's variables (parsed in a
// child process, because parameters are frozen at first read), malformed
// values rejected naming the variable, the wire format's validation, and real
// rendezvous over the UCX listener with 1, 2, 3 and 8 ranks.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstring>
#include <thread>

#include "support/multiproc.h"
#include "transport/bootstrap.h"
#include "transport/bootstrap_wire.h"
#include "transport/launcher_env.h"

using namespace gradcomp;
using namespace gradcomp::transport;

namespace {

using Env = std::map<std::string, std::string>;

struct Parsed {
  Err code = Err::Internal;
  std::string message, host, source;
  int rank = -1, size = -1, port = -1;
  bool listenAny = false;
};

// Every variable launchInfoFromEnvironment may read.
const char* const kLaunchVars[] = {
    "GRADCOMP_RANK", "GRADCOMP_NRANKS", "GRADCOMP_BOOTSTRAP", "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_MCA_ess_base_jobid",
    "PMIX_NAMESPACE", "PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS", "SLURM_PROCID", "SLURM_NTASKS",
    "SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_ID", "SLURM_STEP_ID",
    "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "PBS_NODEFILE", "RANK", "WORLD_SIZE",
    "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE", "MASTER_ADDR", "MASTER_PORT"};

// Runs launchInfoFromEnvironment in a child whose rank-related environment is
// exactly `env`, and returns what it saw.
Parsed parseInChild(const Env& env) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  auto exits = test::runRanks(
      1,
      [&](int) {
        close(fds[0]);
        for (const char* v : kLaunchVars) unsetenv(v);
        for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
        LaunchInfo info;
        Status s = launchInfoFromEnvironment(&info);
        std::string out = std::to_string(static_cast<int>(s.code())) + "\n" + s.message() + "\n" +
                          std::to_string(info.rank) + "\n" + std::to_string(info.size) + "\n" +
                          info.host + "\n" + std::to_string(info.port) + "\n" + info.source +
                          "\n" + (info.listenAny ? "1" : "0") + "\n";
        return write(fds[1], out.data(), out.size()) == ssize_t(out.size()) ? 0 : 1;
      },
      {}, 30);
  close(fds[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) > 0;) text.append(buf, n);
  close(fds[0]);
  REQUIRE(test::allSucceeded(exits));
  std::vector<std::string> lines;
  for (size_t pos = 0, nl; (nl = text.find('\n', pos)) != std::string::npos; pos = nl + 1)
    lines.push_back(text.substr(pos, nl - pos));
  REQUIRE(lines.size() == 8);
  Parsed p;
  p.code = static_cast<Err>(std::stoi(lines[0]));
  p.message = lines[1];
  p.rank = std::stoi(lines[2]);
  p.size = std::stoi(lines[3]);
  p.host = lines[4];
  p.port = std::stoi(lines[5]);
  p.source = lines[6];
  p.listenAny = lines[7] == "1";
  return p;
}

void expectInfo(const Parsed& p, int rank, int size, const std::string& host, int port,
                const std::string& sourceWord) {
  INFO(p.message);
  CHECK(p.code == Err::Ok);
  CHECK(p.rank == rank);
  CHECK(p.size == size);
  CHECK(p.host == host);
  CHECK(p.port == port);
  CHECK_THAT(p.source, Catch::Contains(sourceWord));
}

void expectError(const Parsed& p, const std::string& variable) {
  INFO(p.message);
  CHECK(p.code == Err::InvalidConfig);
  CHECK_THAT(p.message, Catch::Contains(variable));
}

}  // namespace

TEST_CASE("launch info: each launcher's variables", "[bootstrap]") {
  expectInfo(parseInChild({{"GRADCOMP_RANK", "2"}, {"GRADCOMP_NRANKS", "4"},
                           {"GRADCOMP_BOOTSTRAP", "10.1.2.3:5000"}}),
             2, 4, "10.1.2.3", 5000, "GRADCOMP_RANK");
  expectInfo(parseInChild({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "3"},
                           {"MASTER_ADDR", "node7"}, {"MASTER_PORT", "29500"}}),
             1, 3, "node7", 29500, "OMPI_COMM_WORLD_RANK");
  expectInfo(parseInChild({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"GRADCOMP_BOOTSTRAP", "h:1"}}),
             0, 2, "h", 1, "PMI_RANK");
  expectInfo(parseInChild({{"SLURM_PROCID", "7"}, {"SLURM_NTASKS", "8"},
                           {"GRADCOMP_BOOTSTRAP", "[::1]:65535"}}),
             7, 8, "::1", 65535, "SLURM_PROCID");
  expectInfo(parseInChild({{"RANK", "3"}, {"WORLD_SIZE", "5"}, {"MASTER_ADDR", "127.0.0.1"},
                           {"MASTER_PORT", "1234"}}),
             3, 5, "127.0.0.1", 1234, "WORLD_SIZE");
}

TEST_CASE("launch info: precedence and defaults", "[bootstrap]") {
  // GRADCOMP_* beats every launcher; Open MPI beats Slurm; GRADCOMP_BOOTSTRAP
  // beats MASTER_ADDR/PORT.
  expectInfo(parseInChild({{"GRADCOMP_RANK", "1"}, {"GRADCOMP_NRANKS", "2"},
                           {"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "9"},
                           {"GRADCOMP_BOOTSTRAP", "a:10"}, {"MASTER_ADDR", "b"},
                           {"MASTER_PORT", "20"}}),
             1, 2, "a", 10, "GRADCOMP");
  expectInfo(parseInChild({{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "6"},
                           {"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "3"},
                           {"GRADCOMP_BOOTSTRAP", "a:10"}}),
             2, 3, "a", 10, "OMPI");
  // An incomplete launcher pair is skipped: the next complete one wins.
  expectInfo(parseInChild({{"PMI_RANK", "1"}, {"RANK", "1"}, {"WORLD_SIZE", "2"},
                           {"GRADCOMP_BOOTSTRAP", "a:10"}}),
             1, 2, "a", 10, "WORLD_SIZE");
  // Nothing set: one standalone rank, no address needed.
  Parsed alone = parseInChild({});
  expectInfo(alone, 0, 1, "", -1, "default");
}

TEST_CASE("launch info: malformed values are rejected naming the variable", "[bootstrap]") {
  expectError(parseInChild({{"GRADCOMP_RANK", "x"}, {"GRADCOMP_NRANKS", "2"}}), "GRADCOMP_RANK");
  expectError(parseInChild({{"GRADCOMP_RANK", "2"}, {"GRADCOMP_NRANKS", "2"},
                            {"GRADCOMP_BOOTSTRAP", "a:1"}}),
              "GRADCOMP_RANK=2");
  expectError(parseInChild({{"GRADCOMP_RANK", "0"}}), "GRADCOMP_NRANKS");
  expectError(parseInChild({{"OMPI_COMM_WORLD_RANK", "abc"}, {"OMPI_COMM_WORLD_SIZE", "2"}}),
              "OMPI_COMM_WORLD_RANK='abc'");
  expectError(parseInChild({{"PMI_RANK", "0"}, {"PMI_SIZE", "0"}}), "PMI_SIZE");
  Parsed slurm = parseInChild({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "4"}});
  expectError(slurm, "SLURM_PROCID=5");
  CHECK_THAT(slurm.message, Catch::Contains("SLURM_NTASKS=4"));
  expectError(parseInChild({{"RANK", "-1"}, {"WORLD_SIZE", "2"}}), "RANK='-1'");
  expectError(parseInChild({{"RANK", "0"}, {"WORLD_SIZE", "2x"}}), "WORLD_SIZE='2x'");
  for (const char* bad : {"nohostport", "host:", ":80", "host:0", "host:65536", "host:8o",
                          "fe80::1:80", "[::1]80"})
    expectError(parseInChild({{"GRADCOMP_RANK", "0"}, {"GRADCOMP_NRANKS", "2"},
                              {"GRADCOMP_BOOTSTRAP", bad}}),
                std::string("GRADCOMP_BOOTSTRAP='") + bad + "'");
  expectError(parseInChild({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"},
                            {"MASTER_PORT", "http"}}),
              "MASTER_PORT");
  expectError(parseInChild({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}),
              "MASTER_PORT");
  expectError(parseInChild({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "1"}}),
              "MASTER_ADDR");
  Parsed none = parseInChild({{"RANK", "0"}, {"WORLD_SIZE", "2"}});
  expectError(none, "no bootstrap address for rank 0 of 2 (from RANK/WORLD_SIZE)");
  CHECK_THAT(none.message, Catch::Contains("set MASTER_ADDR and MASTER_PORT"));
  CHECK_THAT(none.message, Catch::Contains("GRADCOMP_BOOTSTRAP=host:port"));
}

TEST_CASE("launch info: torchrun is the innermost launcher, its agent holds MASTER_PORT",
          "[bootstrap]") {
  const Env slurmAndTorch = {{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"},
                             {"RANK", "5"}, {"WORLD_SIZE", "8"},
                             {"MASTER_ADDR", "head"}, {"MASTER_PORT", "29500"}};
  // Plain RANK/WORLD_SIZE rank below Slurm; torchrun's workers (TORCHELASTIC_RUN_ID) above it.
  expectInfo(parseInChild(slurmAndTorch), 1, 2, "head", 29500, "SLURM_PROCID");
  Env torch = slurmAndTorch;
  torch["TORCHELASTIC_RUN_ID"] = "job7";
  expectInfo(parseInChild(torch), 5, 8, "head", 29500, "(torchrun)");
  torch["OMPI_COMM_WORLD_RANK"] = "0";
  torch["OMPI_COMM_WORLD_SIZE"] = "2";
  expectInfo(parseInChild(torch), 5, 8, "head", 29500, "(torchrun)");
  torch["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  expectInfo(parseInChild(torch), 5, 8, "head", 29501, "(torchrun)");
  torch["MASTER_PORT"] = "65535";
  expectError(parseInChild(torch), "MASTER_PORT=65535");
}

namespace {

int derivedPortFor(const std::string& jobKey) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : jobKey) h = (h ^ c) * 1099511628211ull;
  return 20000 + int(h % 12768);
}

}  // namespace

TEST_CASE("launch info: the rendezvous is derived from the launcher's job", "[bootstrap]") {
  // mpirun on one host (the variables Open MPI 4.1 sets): loopback, a port from its job id.
  Env ompi = {{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
              {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"OMPI_MCA_ess_base_jobid", "754843649"},
              {"PMIX_NAMESPACE", "754843649"}, {"SLURM_JOB_ID", "99"}, {"SLURM_STEP_ID", "3"}};
  Parsed p = parseInChild(ompi);
  expectInfo(p, 1, 2, "127.0.0.1", derivedPortFor("754843649"), "OMPI_COMM_WORLD_RANK");
  CHECK_FALSE(p.listenAny);
  CHECK(p.port >= 20000);
  CHECK(p.port <= 32767);
  ompi["OMPI_COMM_WORLD_RANK"] = "0";
  CHECK(parseInChild(ompi).port == p.port);  // every rank of the job agrees
  ompi["OMPI_MCA_ess_base_jobid"] = "754843650";
  CHECK(parseInChild(ompi).port == derivedPortFor("754843650"));
  ompi.erase("OMPI_MCA_ess_base_jobid");  // Open MPI 5: PMIx namespace only
  CHECK(parseInChild(ompi).port == derivedPortFor("754843649"));

  // srun over two nodes: the first host of the step, every address on rank 0.
  Env slurm = {{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "8"}, {"SLURM_STEP_NUM_NODES", "2"},
               {"SLURM_NNODES", "1"}, {"SLURM_STEP_NODELIST", "gpu[07-08]"},
               {"SLURM_JOB_NODELIST", "gpu[01-08]"}, {"SLURM_JOB_ID", "4242"},
               {"SLURM_STEP_ID", "1"}};
  p = parseInChild(slurm);
  expectInfo(p, 3, 8, "gpu07", derivedPortFor("4242.1"), "SLURM_PROCID");
  CHECK(p.listenAny);
  slurm["SLURM_STEP_NUM_NODES"] = "1";
  expectInfo(parseInChild(slurm), 3, 8, "127.0.0.1", derivedPortFor("4242.1"), "SLURM");
  // srun --mpi=pmi2: PMI ranks, Slurm's job and step.
  Env pmi = {{"PMI_RANK", "1"}, {"PMI_SIZE", "4"}, {"SLURM_JOB_NODELIST", "n[3-4]"},
             {"SLURM_JOB_ID", "7"}, {"SLURM_STEP_ID", "0"}};
  expectInfo(parseInChild(pmi), 1, 4, "n3", derivedPortFor("7.0"), "PMI_RANK");

  // mpirun across PBS nodes: the first line of PBS_NODEFILE.
  char path[] = "/tmp/gc_pbs_nodes_XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  const std::string nodes = "  node5\nnode6\n";
  REQUIRE(write(fd, nodes.data(), nodes.size()) == ssize_t(nodes.size()));
  close(fd);
  Env pbs = {{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"},
             {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"OMPI_MCA_ess_base_jobid", "11"},
             {"PBS_NODEFILE", path}};
  p = parseInChild(pbs);
  expectInfo(p, 2, 4, "node5", derivedPortFor("11"), "OMPI");
  CHECK(p.listenAny);
  unlink(path);
  expectError(parseInChild(pbs), "PBS_NODEFILE");
}

TEST_CASE("launch info: an underivable rendezvous names what to set", "[bootstrap]") {
  // Several hosts and no host list.
  Parsed p = parseInChild({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                           {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}, {"OMPI_MCA_ess_base_jobid", "5"}});
  expectError(p, "no allocation host list");
  CHECK_THAT(p.message, Catch::Contains("set MASTER_ADDR and MASTER_PORT"));
  // Explicit GRADCOMP_RANK/NRANKS without an address: nothing to derive one from.
  expectError(parseInChild({{"GRADCOMP_RANK", "1"}, {"GRADCOMP_NRANKS", "2"},
                            {"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}}),
              "(from GRADCOMP_RANK/GRADCOMP_NRANKS): no launcher's variables to derive one from");
  // No job id to take a port from.
  expectError(parseInChild({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"},
                            {"SLURM_STEP_NUM_NODES", "1"}}),
              "no job id from Slurm");
  expectError(parseInChild({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"MPI_LOCALNRANKS", "2"}}),
              "no job id from PMI");
  // A malformed host list names its variable.
  expectError(parseInChild({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"},
                            {"SLURM_STEP_NUM_NODES", "2"}, {"SLURM_STEP_NODELIST", "gpu[07-08"},
                            {"SLURM_JOB_ID", "1"}, {"SLURM_STEP_ID", "0"}}),
              "SLURM_STEP_NODELIST='gpu[07-08'");
}

TEST_CASE("launch info: the first host of a Slurm hostlist", "[bootstrap]") {
  auto first = [](const std::string& list) {
    std::string host;
    Status s = firstHostOfHostlist(list, "LIST", &host);
    return s.ok() ? host : "error: " + s.message();
  };
  CHECK(first("gpu[07-09,12],login1") == "gpu07");
  CHECK(first("login1,gpu[07-09]") == "login1");
  CHECK(first("rack[2-3]-node[010-011]") == "rack2-node010");
  CHECK(first("node[5]") == "node5");
  CHECK(first("solo") == "solo");
  CHECK_THAT(first(",a"), Catch::StartsWith("error: LIST=',a'"));
  CHECK_THAT(first("a[x-y]"), Catch::Contains("must start with a number"));
  CHECK_THAT(first("a]"), Catch::Contains("']' without '['"));
}

TEST_CASE("bootstrap wire: malformed messages are RemoteErrors, never trusted lengths",
          "[bootstrap]") {
  std::string blob;
  const std::string hello = wire::packHello(3, 4, 7, "addr");
  REQUIRE(wire::unpackHello(hello, 3, 4, 7, &blob).ok());
  CHECK(blob == "addr");
  CHECK(wire::unpackHello(hello.substr(0, 10), 3, 4, 7, &blob).code() == Err::RemoteError);
  std::string corrupt = hello;
  corrupt[0] ^= 1;
  CHECK(wire::unpackHello(corrupt, 3, 4, 7, &blob).code() == Err::RemoteError);
  CHECK(wire::unpackHello(hello, 3, 4, 8, &blob).code() == Err::RemoteError);
  CHECK(wire::unpackHello(hello, 3, 5, 7, &blob).code() == Err::InvalidConfig);

  std::vector<std::string> blobs = {"a", "", std::string(1000, 'z')}, out;
  const std::string table = wire::packTable(2, blobs);
  REQUIRE(wire::unpackTable(table, 3, 2, &out).ok());
  CHECK(out == blobs);
  for (size_t cut : {size_t(0), size_t(5), size_t(12), size_t(20), table.size() - 1})
    CHECK(wire::unpackTable(table.substr(0, cut), 3, 2, &out).code() == Err::RemoteError);
  std::string huge = table;
  const uint32_t bogus = 0xFFFFFFF0u;  // first length field far beyond the message
  memcpy(&huge[12], &bogus, 4);
  Status s = wire::unpackTable(huge, 3, 2, &out);
  CHECK(s.code() == Err::RemoteError);
  CHECK(wire::unpackTable(table + "x", 3, 2, &out).code() == Err::RemoteError);
}

namespace {

// Every rank bootstraps and runs three allgathers of rank-specific blobs of
// different lengths; each result must be exactly every rank's blob.
int rendezvousBody(int rank) {
  LaunchInfo info;
  std::unique_ptr<AddressExchange> ex;
  Status s = launchInfoFromEnvironment(&info);
  if (s.ok()) s = createUcxBootstrap(info, &ex);
  if (!s.ok()) {
    fprintf(stderr, "rank %d: %s\n", rank, s.toString().c_str());
    return 1;
  }
  if (ex->rank() != rank || ex->size() != info.size) return 2;
  for (int round = 0; round < 3; ++round) {
    auto blobOf = [round](int r) { return std::string(r * 37 + round, char('a' + (r + round) % 26)); };
    std::vector<std::string> all;
    s = ex->allgather(blobOf(rank), &all);
    if (!s.ok()) {
      fprintf(stderr, "rank %d round %d: %s\n", rank, round, s.toString().c_str());
      return 3;
    }
    if (static_cast<int>(all.size()) != info.size) return 4;
    for (int r = 0; r < info.size; ++r)
      if (all[r] != blobOf(r)) return 5;
  }
  return 0;
}

}  // namespace

TEST_CASE("bootstrap rendezvous: 1 2 3 and 8 ranks with repeated allgathers", "[bootstrap][mp]") {
  for (int n : {1, 2, 3, 8}) {
    INFO(n << " ranks");
    CHECK(test::allSucceeded(test::runRanks(n, rendezvousBody, {{"GRADCOMP_TIMEOUT_S", "30"}}, 60)));
  }
}

TEST_CASE("bootstrap rendezvous: ranks that start before the listener retry", "[bootstrap][mp]") {
  auto exits = test::runRanks(
      3,
      [](int rank) {
        // Rank 0 comes late so the others meet a closed port first.
        if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(500));
        return rendezvousBody(rank);
      },
      {{"GRADCOMP_TIMEOUT_S", "30"}}, 60);
  CHECK(test::allSucceeded(exits));
}

TEST_CASE("bootstrap rendezvous: a missing rank is named after the timeout", "[bootstrap][mp]") {
  auto exits = test::runRanks(
      3,
      [](int rank) {
        if (rank == 2) return 0;  // never joins
        LaunchInfo info;
        std::unique_ptr<AddressExchange> ex;
        Status s = launchInfoFromEnvironment(&info);
        if (s.ok()) s = createUcxBootstrap(info, &ex);
        std::vector<std::string> all;
        if (s.ok()) s = ex->allgather("x", &all);
        fprintf(stderr, "rank %d: %s\n", rank, s.toString().c_str());
        // Rank 0 times out naming the missing rank. Rank 1 either times out
        // too or sees rank 0 give up first; both name rank 0's address.
        if (rank == 0) {
          if (s.code() != Err::Timeout) return 10;
          if (s.message().find("GRADCOMP_TIMEOUT_S") == std::string::npos) return 11;
          if (s.message().find("rank 2 of 3") == std::string::npos) return 12;
          return 0;
        }
        if (s.code() != Err::Timeout && s.code() != Err::RemoteError) return 13;
        if (s.message().find("rank 0 at 127.0.0.1:") == std::string::npos) return 14;
        return 0;
      },
      {{"GRADCOMP_TIMEOUT_S", "1"}}, 30);
  CHECK(test::allSucceeded(exits));
}

TEST_CASE("bootstrap rendezvous: derived from Slurm's variables set by hand", "[bootstrap][mp]") {
  // One host (loopback) and two "hosts" whose first is 127.0.0.1 (rank 0
  // listens on every address): the real UCX rendezvous on a derived port.
  const std::string job = std::to_string(getpid()) + std::to_string(rand() % 1000);
  for (const char* nodes : {"1", "2"}) {
    INFO("SLURM_STEP_NUM_NODES=" << nodes);
    auto exits = test::runRanks(
        2,
        [&](int rank) {
          for (const char* v : kLaunchVars) unsetenv(v);
          setenv("SLURM_PROCID", std::to_string(rank).c_str(), 1);
          setenv("SLURM_NTASKS", "2", 1);
          setenv("SLURM_STEP_NUM_NODES", nodes, 1);
          setenv("SLURM_STEP_NODELIST", "127.0.0.1,otherhost", 1);
          setenv("SLURM_JOB_ID", job.c_str(), 1);
          setenv("SLURM_STEP_ID", nodes, 1);
          return rendezvousBody(rank);
        },
        {{"GRADCOMP_TIMEOUT_S", "30"}}, 60);
    CHECK(test::allSucceeded(exits));
  }
}
