// The interposer in libgradcomp.so against the test-double libnccl.so.2, in
// real rank processes (support/nccl_api.h). The double records what reaches
// the "real" NCCL; host buffers make the host executor eligible.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "support/multiproc.h"
#include "support/nccl_api.h"

namespace {

using Api = gradcomp::test::NcclApi;
using Job = gradcomp::test::NcclJob;
Api loadApi() { return gradcomp::test::loadNcclApi(); }
std::string readFile(const std::string& path) { return gradcomp::test::readWholeFile(path); }

// The last recorded AllReduce equals these arguments exactly.
bool lastCallIs(const Api& a, int before, const void* s, void* r, size_t n, int dt, int op,
                ncclComm_t comm, cudaStream_t stream) {
  int calls = a.count("ncclAllReduce");
  ncclDoubleAllReduceRecord rec{};
  if (calls != before + 1 || a.allReduceAt(calls - 1, &rec) != 0) return false;
  return rec.sendbuff == s && rec.recvbuff == r && rec.count == n && rec.datatype == dt &&
         rec.op == op && rec.comm == comm && rec.stream == stream;
}

// Occurrences of `needle` in `text`.
int countOf(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// Every number following "key": in json (null excluded); false if one is unparsable.
bool numbersAfter(const std::string& json, const std::string& key, std::vector<double>* out) {
  const std::string needle = "\"" + key + "\": ";
  for (size_t at = json.find(needle); at != std::string::npos; at = json.find(needle, at + 1)) {
    const char* p = json.c_str() + at + needle.size();
    char* end = nullptr;
    double v = strtod(p, &end);
    if (end == p) return false;
    out->push_back(v);
  }
  return true;
}


cudaStream_t fakeStream() { return reinterpret_cast<cudaStream_t>(uintptr_t(0x5170)); }

}  // namespace

TEST_CASE("with GRADCOMP_ALGO unset every call reaches NCCL unchanged", "[mp][nccl]") {
  Job job;
  auto exits = gradcomp::test::runRanks(2, [&](int rank) {
    Api a = loadApi();
    ncclComm_t comm = nullptr;
    CHILD_CHECK(a.initRank(&comm, 2, job.id, rank) == ncclSuccess && comm != nullptr);
    std::vector<float> buf(1 << 20, float(rank + 1));
    int before = a.count("ncclAllReduce");
    CHILD_CHECK(a.allReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm, fakeStream()) == ncclSuccess);
    CHILD_CHECK(lastCallIs(a, before, buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm, fakeStream()));
    CHILD_CHECK(buf[12345] == 3.0f);
    // Off still takes part in the init exchange (a peer may have compression
    // on): exactly one small allgather per communicator, nothing per call.
    CHILD_CHECK(a.count("ncclAllGather") == 1);
    CHILD_CHECK(a.destroy(comm) == ncclSuccess && a.count("ncclCommDestroy") == 1);
    return 0;
  }, job.env({}));
  REQUIRE(gradcomp::test::allSucceeded(exits));
}

TEST_CASE("non-eligible calls pass through with their arguments unchanged", "[mp][nccl]") {
  Job job;
  auto exits = gradcomp::test::runRanks(2, [&](int rank) {
    Api a = loadApi();
    ncclComm_t comm = nullptr;
    CHILD_CHECK(a.initRank(&comm, 2, job.id, rank) == ncclSuccess);
    std::vector<char> send(8 << 20, 0), recv(8 << 20, 0);
    struct Case { size_t count; int dtype; int op; bool group; const char* what; };
    const Case cases[] = {
        {1000, ncclFloat32, ncclSum, false, "small buffer"},
        {1 << 20, ncclInt32, ncclSum, false, "int32"},
        {1 << 20, ncclFloat64, ncclSum, false, "float64"},
        {1 << 20, ncclFloat32, ncclMax, false, "max"},
        {1 << 20, ncclFloat32, ncclProd, false, "prod"},
        {1 << 20, ncclFloat32, 5, false, "PreMulSum (user op)"},
        {1 << 20, ncclFloat32, ncclSum, true, "inside a group"},
    };
    for (const Case& c : cases) {
      int before = a.count("ncclAllReduce");
      if (c.group) CHILD_CHECK(a.groupStart() == ncclSuccess);
      CHILD_CHECK(a.allReduce(send.data(), recv.data(), c.count, ncclDataType_t(c.dtype),
                              ncclRedOp_t(c.op), comm, fakeStream()) == ncclSuccess);
      if (c.group) CHILD_CHECK(a.groupEnd() == ncclSuccess);
      if (!lastCallIs(a, before, send.data(), recv.data(), c.count, c.dtype, c.op, comm, fakeStream())) {
        fprintf(stderr, "case '%s' did not reach NCCL unchanged\n", c.what);
        return 1;
      }
    }
    CHILD_CHECK(a.destroy(comm) == ncclSuccess);
    return 0;
  }, job.env({{"GRADCOMP_ALGO", "dense"}, {"GRADCOMP_MIN_BYTES", "1M"}}));
  REQUIRE(gradcomp::test::allSucceeded(exits));
}

TEST_CASE("unselected communicators pass through", "[mp][nccl]") {
  Job job;
  auto exits = gradcomp::test::runRanks(2, [&](int rank) {
    Api a = loadApi();
    ncclComm_t comm = nullptr;
    CHILD_CHECK(a.initRank(&comm, 2, job.id, rank) == ncclSuccess);
    std::vector<float> buf(1 << 20, 1.0f);
    int before = a.count("ncclAllReduce");
    CHILD_CHECK(a.allReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm, nullptr) == ncclSuccess);
    CHILD_CHECK(lastCallIs(a, before, buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm, nullptr));
    CHILD_CHECK(buf[7] == 2.0f);
    CHILD_CHECK(a.destroy(comm) == ncclSuccess);
    return 0;
  }, job.env({{"GRADCOMP_ALGO", "dense"}, {"GRADCOMP_COMMS", "size:4,index:7"}}));
  REQUIRE(gradcomp::test::allSucceeded(exits));
}

TEST_CASE("eligible calls reach the executor and give NCCL's result", "[mp][nccl]") {
  Job job;
  const std::string stats = job.dir + "/stats";
  auto exits = gradcomp::test::runRanks(3, [&](int rank) {
    Api a = loadApi();
    ncclComm_t comm = nullptr;
    CHILD_CHECK(a.initRank(&comm, 3, job.id, rank) == ncclSuccess);
    const size_t n = (1 << 20) + 7;  // 4 MiB + 28 B of float32
    std::vector<float> send(n), recv(n, -1.0f);
    for (size_t i = 0; i < n; ++i) send[i] = float((i % 1000) * (rank + 1));  // exact in fp32
    int before = a.count("ncclAllReduce");
    CHILD_CHECK(a.allReduce(send.data(), recv.data(), n, ncclFloat32, ncclSum, comm, nullptr) == ncclSuccess);
    for (size_t i = 0; i < n; i += 4099) CHILD_CHECK(recv[i] == float((i % 1000) * 6));
    CHILD_CHECK(recv[n - 1] == float(((n - 1) % 1000) * 6));
    CHILD_CHECK(a.allReduce(send.data(), send.data(), n, ncclFloat32, ncclAvg, comm, nullptr) == ncclSuccess);
    CHILD_CHECK(send[999] == float(999 * 2));  // (1+2+3)/3 = 2
    CHILD_CHECK(a.count("ncclAllReduce") == before);  // neither reached NCCL
    ncclResult_t err = ncclInternalError;
    CHILD_CHECK(a.asyncError(comm, &err) == ncclSuccess && err == ncclSuccess);
    CHILD_CHECK(a.destroy(comm) == ncclSuccess);
    std::string json = readFile(stats + ".rank" + std::to_string(rank) + ".json");
    CHILD_CHECK(json.find("\"calls_compressed\": 2") != std::string::npos);
    CHILD_CHECK(json.find("\"compressing\": true") != std::string::npos);
    CHILD_CHECK(json.find("\"logical_bytes\": " + std::to_string(2 * n * 4)) != std::string::npos);
    CHILD_CHECK(json.find("\"bytes_in\": " + std::to_string(n * 4)) != std::string::npos);  // 2 buckets
    // Phase times per bucket: total, time blocked on peers, the rest.
    std::vector<double> total, waited, compute;
    CHILD_CHECK(numbersAfter(json, "seconds", &total) && numbersAfter(json, "comm_seconds", &waited) &&
                numbersAfter(json, "compute_seconds", &compute));
    CHILD_CHECK(total.size() == 2 && waited.size() == 2 && compute.size() == 2);
    for (size_t i = 0; i < 2; ++i) {
      CHILD_CHECK(total[i] > 0 && waited[i] >= 0 && compute[i] >= 0);
      CHILD_CHECK(waited[i] <= total[i]);
      CHILD_CHECK(std::fabs(waited[i] + compute[i] - total[i]) <= 1e-6 * (1 + total[i]));
    }
    return 0;
  }, job.env({{"GRADCOMP_ALGO", "dense"}, {"GRADCOMP_STATS", stats}}));
  REQUIRE(gradcomp::test::allSucceeded(exits));
}

// wagma keys its per-tensor state by AllreduceArgs::bufferKey alone: the
// interposer must name each output buffer a tensor of its own (it once
// passed 0, so a second tensor of another size failed "a key names one tensor").
TEST_CASE("each output buffer is its own tensor for state kept per key", "[mp][nccl]") {
  Job job;
  auto exits = gradcomp::test::runRanks(2, [&](int rank) {
    Api a = loadApi();
    ncclComm_t comm = nullptr;
    CHILD_CHECK(a.initRank(&comm, 2, job.id, rank) == ncclSuccess);
    std::vector<float> big(1 << 20, float(rank + 1)), small(1 << 18, float(rank + 1));
    for (std::vector<float>* buf : {&big, &small, &big}) {
      std::fill(buf->begin(), buf->end(), float(rank + 1));
      CHILD_CHECK(a.allReduce(buf->data(), buf->data(), buf->size(), ncclFloat32, ncclAvg, comm,
                              nullptr) == ncclSuccess);
      CHILD_CHECK((*buf)[0] == 1.5f && buf->back() == 1.5f);  // the 2-rank group average
    }
    CHILD_CHECK(a.destroy(comm) == ncclSuccess);
    return 0;
    // Blocking: the wait-avoiding mode may answer with a late peer's older
    // contribution, which a value check cannot predict.
  }, job.env({{"GRADCOMP_ALGO", "wagma"}, {"GRADCOMP_WAGMA_WAIT", "1"}}));
  REQUIRE(gradcomp::test::allSucceeded(exits));
}

// Buffer addresses are rank-local: here rank 0 runs two tensors of one size
// through one buffer while rank 1 gives each its own. State that steers the
// schedule (warm-up and leader call counts) must not follow addresses, or the
// ranks take different paths in the same call (it once timed out like that).
TEST_CASE("ranks whose buffers differ still take the same schedule", "[mp][nccl]") {
  for (const char* algo : {"oktopk", "cltk", "qsgd", "auto"}) {
    INFO(algo);
    Job job;
    auto exits = gradcomp::test::runRanks(2, [&](int rank) {
      Api a = loadApi();
      ncclComm_t comm = nullptr;
      CHILD_CHECK(a.initRank(&comm, 2, job.id, rank) == ncclSuccess);
      const size_t n = 1 << 18;
      std::vector<float> first(n), second(n);
      for (int call = 0; call < 6; ++call) {
        std::vector<float>& buf = rank == 0 || call % 2 == 0 ? first : second;
        for (size_t i = 0; i < n; ++i) buf[i] = float((i * 7 + size_t(call)) % 64) / 64.0f;
        CHILD_CHECK(a.allReduce(buf.data(), buf.data(), n, ncclFloat32, ncclSum, comm, nullptr) ==
                    ncclSuccess);
      }
      ncclResult_t err = ncclInternalError;
      CHILD_CHECK(a.asyncError(comm, &err) == ncclSuccess && err == ncclSuccess);
      CHILD_CHECK(a.destroy(comm) == ncclSuccess);
      return 0;
    }, job.env({{"GRADCOMP_ALGO", algo}, {"GRADCOMP_WARMUP_CALLS", "1"},
                {"GRADCOMP_DENSITY", "0.01"}, {"GRADCOMP_TIMEOUT_S", "5"}}));
    REQUIRE(gradcomp::test::allSucceeded(exits));
  }
}

TEST_CASE("a configuration mismatch disables compression on every rank", "[mp][nccl]") {
  Job job;
  const std::string log = job.dir + "/stderr", stats = job.dir + "/stats";
  auto exits = gradcomp::test::runRanks(2, [&](int rank) {
    // Rank 1 disagrees on one key; every rank must pass the call through.
    if (rank == 1) setenv("GRADCOMP_MIN_BYTES", "2M", 1);
    if (!freopen((log + std::to_string(rank)).c_str(), "w", stderr)) return 1;
    Api a = loadApi();
    ncclComm_t comm = nullptr;
    CHILD_CHECK(a.initRank(&comm, 2, job.id, rank) == ncclSuccess);
    std::vector<float> buf(1 << 20, 1.0f);  // 4 MiB: eligible under both settings
    int before = a.count("ncclAllReduce");
    CHILD_CHECK(a.allReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm, nullptr) == ncclSuccess);
    CHILD_CHECK(lastCallIs(a, before, buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm, nullptr));
    CHILD_CHECK(buf[0] == 2.0f);
    CHILD_CHECK(a.destroy(comm) == ncclSuccess);
    fflush(stderr);
    std::string text = readFile(log + std::to_string(rank));
    CHILD_CHECK(text.find("GRADCOMP_MIN_BYTES") != std::string::npos);
    CHILD_CHECK(text.find("compression disabled on this communicator on every rank") != std::string::npos);
    // The stats name the category and count the calls it sent to NCCL.
    std::string json = readFile(stats + ".rank" + std::to_string(rank) + ".json");
    CHILD_CHECK(json.find("\"disabled_kind\": \"config mismatch\"") != std::string::npos);
    CHILD_CHECK(json.find("\"pass_reasons\": {\"compression disabled on this communicator\": 1}") != std::string::npos);
    return 0;
  }, job.env({{"GRADCOMP_ALGO", "dense"}, {"GRADCOMP_MIN_BYTES", "1M"}, {"GRADCOMP_STATS", stats}}));
  REQUIRE(gradcomp::test::allSucceeded(exits));
}

TEST_CASE("compression on one rank and off on another: both pass through, no hang", "[mp][nccl]") {
  Job job;
  const std::string log = job.dir + "/stderr";
  ncclUniqueId second = job.id;
  second.internal[0] ^= 0x5a;  // another communicator, created inside a group
  auto exits = gradcomp::test::runRanks(2, [&](int rank) {
    // Rank 0 has compression off; rank 1 on. Blocking init exchanges at init,
    // the grouped init at its first ncclAllReduce outside a group.
    setenv("GRADCOMP_ALGO", rank == 0 ? "off" : "oktopk", 1);
    if (!freopen((log + std::to_string(rank)).c_str(), "w", stderr)) return 1;
    Api a = loadApi();
    ncclComm_t comm = nullptr, grouped = nullptr;
    CHILD_CHECK(a.initRank(&comm, 2, job.id, rank) == ncclSuccess);
    CHILD_CHECK(a.groupStart() == ncclSuccess);
    CHILD_CHECK(a.initRank(&grouped, 2, second, rank) == ncclSuccess);
    CHILD_CHECK(a.groupEnd() == ncclSuccess);
    for (ncclComm_t c : {comm, grouped}) {
      std::vector<float> buf(1 << 20, float(rank + 1));  // 4 MiB: eligible on rank 1
      int before = a.count("ncclAllReduce");
      CHILD_CHECK(a.allReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, c, nullptr) == ncclSuccess);
      CHILD_CHECK(lastCallIs(a, before, buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, c, nullptr));
      CHILD_CHECK(buf[0] == 3.0f && buf[buf.size() - 1] == 3.0f);
    }
    CHILD_CHECK(a.destroy(grouped) == ncclSuccess && a.destroy(comm) == ncclSuccess);
    fflush(stderr);
    std::string text = readFile(log + std::to_string(rank));
    // One WARN per communicator, naming the key.
    CHILD_CHECK(countOf(text, "(2 ranks): configuration differs across ranks: key 'GRADCOMP_ALGO'") == 2);
    CHILD_CHECK(countOf(text, "compression disabled on this communicator on every rank") == 2);
    return 0;
  }, job.env({}), 60);
  REQUIRE(gradcomp::test::allSucceeded(exits));
}

TEST_CASE("bad GRADCOMP values: a clear message and uncompressed, or a failed init when strict", "[mp][nccl]") {
  const char* cases[][3] = {
      {"GRADCOMP_ALGO", "nosuch", "unknown algorithm"},
      {"GRADCOMP_MIN_BYTES", "lots", "GRADCOMP_MIN_BYTES"},
      {"GRADCOMP_COMMS", "size:x", "GRADCOMP_COMMS"},
      {"GRADCOMP_CONFIG", "/nonexistent/gradcomp.toml", "cannot open"},
  };
  for (const auto& c : cases) {
    for (bool strict : {false, true}) {
      Job job;
      const std::string log = job.dir + "/stderr";
      std::map<std::string, std::string> env{{"GRADCOMP_ALGO", "dense"}};
      env[c[0]] = c[1];
      if (strict) env["GRADCOMP_STRICT"] = "1";
      INFO(c[0] << "=" << c[1] << (strict ? " strict" : ""));
      auto exits = gradcomp::test::runRanks(2, [&](int rank) {
        if (!freopen((log + std::to_string(rank)).c_str(), "w", stderr)) return 1;
        Api a = loadApi();
        ncclComm_t comm = nullptr;
        ncclResult_t rc = a.initRank(&comm, 2, job.id, rank);
        fflush(stderr);
        std::string text = readFile(log + std::to_string(rank));
        if (text.find(c[2]) == std::string::npos) {
          fprintf(stdout, "rank %d: no '%s' in its log:\n%s\n", rank, c[2], text.c_str());
          return 1;
        }
        if (strict) {
          CHILD_CHECK(rc == ncclInvalidUsage && a.count("ncclCommInitRank") == 0);
          return 0;
        }
        CHILD_CHECK(rc == ncclSuccess);
        std::vector<float> buf(1 << 20, 1.0f);
        int before = a.count("ncclAllReduce");
        CHILD_CHECK(a.allReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm, nullptr) == ncclSuccess);
        CHILD_CHECK(a.count("ncclAllReduce") == before + 1 && buf[0] == 2.0f);
        CHILD_CHECK(a.destroy(comm) == ncclSuccess);
        return 0;
      }, job.env(env));
      REQUIRE(gradcomp::test::allSucceeded(exits));
    }
  }
}

TEST_CASE("config file rules pick algorithms per size; split communicators are tracked", "[mp][nccl]") {
  Job job;
  const std::string file = job.dir + "/gradcomp.toml";
  std::ofstream(file) << "algo = \"dense\"\nmin_bytes = \"1M\"\n"
                         "[[rule]]\nmin_bytes = \"16M\"\nalgo = \"off\"\n";
  auto exits = gradcomp::test::runRanks(2, [&](int rank) {
    Api a = loadApi();
    ncclComm_t world = nullptr, sub = nullptr;
    CHILD_CHECK(a.initRank(&world, 2, job.id, rank) == ncclSuccess);
    CHILD_CHECK(a.split(world, 0, rank, &sub, nullptr) == ncclSuccess && sub != nullptr);
    std::vector<float> big(5 << 20, 1.0f), mid(1 << 20, 1.0f);  // 20 MiB, 4 MiB
    int before = a.count("ncclAllReduce");
    CHILD_CHECK(a.allReduce(big.data(), big.data(), big.size(), ncclFloat32, ncclSum, sub, nullptr) == ncclSuccess);
    CHILD_CHECK(a.count("ncclAllReduce") == before + 1);  // rule: off above 16M
    CHILD_CHECK(a.allReduce(mid.data(), mid.data(), mid.size(), ncclFloat32, ncclSum, sub, nullptr) == ncclSuccess);
    CHILD_CHECK(a.count("ncclAllReduce") == before + 1);  // compressed
    CHILD_CHECK(big[3] == 2.0f && mid[3] == 2.0f);
    CHILD_CHECK(a.destroy(sub) == ncclSuccess && a.destroy(world) == ncclSuccess);
    return 0;
  }, job.env({{"GRADCOMP_CONFIG", file}}));
  REQUIRE(gradcomp::test::allSucceeded(exits));
}

TEST_CASE("a dead peer on a compressed call fails the communicator, reported by ncclCommGetAsyncError", "[mp][nccl]") {
  Job job;
  auto exits = gradcomp::test::runRanks(2, [&](int rank) {
    Api a = loadApi();
    ncclComm_t comm = nullptr;
    CHILD_CHECK(a.initRank(&comm, 2, job.id, rank) == ncclSuccess);
    if (rank == 1) _exit(0);  // dies after wiring, before the collective
    std::vector<float> buf(1 << 20, 1.0f);
    ncclResult_t rc = a.allReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm, nullptr);
    CHILD_CHECK(rc == ncclRemoteError || rc == ncclSystemError || rc == ncclInternalError);
    ncclResult_t err = ncclSuccess;
    CHILD_CHECK(a.asyncError(comm, &err) == ncclSuccess && err == rc);
    std::string msg = a.lastError(comm);
    CHILD_CHECK(msg.find("compressed allreduce failed") != std::string::npos);
    CHILD_CHECK(msg.find("1") != std::string::npos);  // names the peer
    // Later calls keep failing instead of passing through.
    CHILD_CHECK(a.allReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclSum, comm, nullptr) == rc);
    CHILD_CHECK(a.abort(comm) == ncclSuccess);
    return 0;
  }, job.env({{"GRADCOMP_ALGO", "dense"}, {"GRADCOMP_TIMEOUT_S", "3"}}), 60);
  REQUIRE(gradcomp::test::allSucceeded(exits));
}

// GRADCOMP_HIERARCHY under the interposer: the host map is agreed at wiring
// over the wired transport and the rule's algorithm runs hierarchically
// (dense inside each faked host, the algorithm across hosts); the result is
// NCCL's, exact for these integer inputs, on every rank.
TEST_CASE("interposer: faked hosts run the hierarchical schedule with NCCL's result",
          "[mp][nccl][hierarchy]") {
  Job job;
  const std::string logs = job.dir + "/log.rank";
  auto exits = gradcomp::test::runRanks(4, [&](int rank) {
    setenv("GRADCOMP_HOSTID", rank < 2 ? "hostA" : "hostB", 1);
    const std::string log = logs + std::to_string(rank);
    CHILD_CHECK(freopen(log.c_str(), "w", stderr) != nullptr);
    Api a = loadApi();
    ncclComm_t comm = nullptr;
    CHILD_CHECK(a.initRank(&comm, 4, job.id, rank) == ncclSuccess);
    const size_t n = (1 << 18) + 3;
    std::vector<float> send(n), recv(n, -1.0f);
    for (size_t i = 0; i < n; ++i) send[i] = float((i % 1000) * (rank + 1));
    const int before = a.count("ncclAllReduce");
    for (int call = 0; call < 2; ++call) {
      CHILD_CHECK(a.allReduce(send.data(), recv.data(), n, ncclFloat32, ncclSum, comm, nullptr) == ncclSuccess);
      for (size_t i = 0; i < n; i += 997) CHILD_CHECK(recv[i] == float((i % 1000) * 10));
      CHILD_CHECK(recv[n - 1] == float(((n - 1) % 1000) * 10));
    }
    CHILD_CHECK(a.count("ncclAllReduce") == before);  // compressed path, not NCCL's
    CHILD_CHECK(a.destroy(comm) == ncclSuccess);
    fflush(stderr);
    const std::string err = readFile(log);
    CHILD_CHECK(err.find("local rank " + std::to_string(rank % 2) + " of 2, schedule host") !=
                std::string::npos);
    return 0;
  }, job.env({{"GRADCOMP_ALGO", "dense"}, {"GRADCOMP_DEBUG", "INFO"},
              {"GRADCOMP_DEBUG_SUBSYS", "INIT"}}));
  INFO("rank 0 stderr: " << readFile(logs + "0"));
  REQUIRE(gradcomp::test::allSucceeded(exits));
}
