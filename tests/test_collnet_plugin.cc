// The CollNet plugin (ncclCollNetPlugin_v6 .. v12 of libgradcomp.so) driven
// between real processes the way NCCL's proxy drives it on head ranks:
// listen, handles exchanged out of band (files here; NCCL's bootstrap), a
// collective connect, regMr of a host staging region (registered twice, by
// the send and the receive side, as NCCL does), iallreduce on chunks of
// 32-512 KiB placed in staging slot (chunk index mod 8) with up to 8 in
// flight, test polling, closeColl. Every chunk's result is checked against
// the algorithm's Reference (#wrong must be 0) and the wire bytes (from the
// GRADCOMP_STATS file) against dense; a killed head rank must fail the
// pending requests of the others within the timeout.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>

#include <array>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstring>
#include <fstream>
#include <mutex>
#include <regex>
#include <sstream>

#include "algorithms/algorithm.h"
#include "device/backend.h"
#include "plugin/collnet/chunk_key.h"
#include "support/collnet_api.h"
#include "support/multiproc.h"

namespace {

using namespace gradcomp;
using test::CollNetApi;
using Clock = std::chrono::steady_clock;

std::mutex gLogMu;
std::string gWarnings;  // WARN lines the plugin sent through NCCL's logger

void testLogger(ncclDebugLogLevel level, unsigned long, const char*, int, const char* fmt, ...) {
  if (level > NCCL_LOG_WARN) return;
  char line[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(stderr, "[nccl logger] %s\n", line);
  std::lock_guard<std::mutex> lock(gLogMu);
  gWarnings += std::string(line) + "\n";
}

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct TmpDir {
  std::string path;
  TmpDir() {
    char t[] = "/tmp/gc_collnet_XXXXXX";
    path = mkdtemp(t);
  }
  ~TmpDir() { (void)system(("rm -rf '" + path + "'").c_str()); }
};

// Environment of every head rank: loopback device, the algorithm, stats.
std::map<std::string, std::string> headEnv(const std::string& algo, const std::string& dir) {
  return {{"GRADCOMP_ALGO", algo}, {"GRADCOMP_NET_IFNAME", "lo"}, {"GRADCOMP_CONFIG", ""},
          {"GRADCOMP_STATS", dir + "/stats"}, {"GRADCOMP_TIMEOUT_S", "30"}};
}

// ---- NCCL's side of a head rank ----

constexpr size_t kSlots = 8;                // NCCL_STEPS
constexpr size_t kSlotBytes = 512 << 10;   // NCCL's default step (NCCL_BUFFSIZE / 8)
// One training step's chunks, bytes: 32-512 KiB, two per staging slot.
const std::vector<size_t> kStepChunkBytes = {512 << 10, 32 << 10, 128 << 10, 500 << 10, 64 << 10,
                                             256 << 10, 40 << 10, 96 << 10, 480 << 10, 36 << 10,
                                             200 << 10, 512 << 10, 72 << 10, 300 << 10, 48 << 10,
                                             160 << 10};

// Rank r's element i of chunk k: multiples of 1/64 up to 15.6 in magnitude,
// exact in fp16 and bf16, so sums are exact.
float inputValue(int r, uint64_t k, size_t i) {
  return float(int((i * 2654435761u + k * 40503 + uint64_t(r) * 977) % 2001) - 1000) / 64.0f;
}

std::vector<uint8_t> input(int r, uint64_t k, size_t count, DataType dt) {
  std::vector<float> f(count);
  for (size_t i = 0; i < count; ++i) f[i] = inputValue(r, k, i);
  std::vector<uint8_t> out(count * dtypeSize(dt));
  (void)device::cpuBackend().convert(out.data(), dt, f.data(), DataType::Float32, count);
  return out;
}

// Writes this rank's handle to dir, waits (bounded) for everyone's.
bool exchangeHandles(const std::string& dir, int rank, int nranks, const char* mine,
                     std::vector<std::array<char, NCCL_NET_HANDLE_MAXSIZE>>* all) {
  std::string path = dir + "/handle." + std::to_string(rank);
  std::ofstream(path + ".tmp", std::ios::binary).write(mine, NCCL_NET_HANDLE_MAXSIZE);
  if (rename((path + ".tmp").c_str(), path.c_str()) != 0) return false;
  all->resize(size_t(nranks));
  auto start = Clock::now();
  for (int r = 0; r < nranks; ++r) {
    std::string p = dir + "/handle." + std::to_string(r);
    struct stat st;
    while (stat(p.c_str(), &st) != 0) {
      if (since(start) > 30) return false;
      usleep(1000);
    }
    std::ifstream(p, std::ios::binary).read((*all)[size_t(r)].data(), NCCL_NET_HANDLE_MAXSIZE);
  }
  return true;
}

// init, listen on device 0, handles out of band, connect, closeListen.
// Returns the connect result (*coll set on success).
ncclResult_t connectHead(CollNetApi& api, const std::string& dir, int rank, int nranks, void** coll) {
  *coll = nullptr;
  if (api.init(testLogger) != ncclSuccess) return ncclInternalError;
  int ndev = 0;
  if (api.devices(&ndev) != ncclSuccess || ndev < 1) return ncclInternalError;
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* listen = nullptr;
  if (api.listen(0, handle, &listen) != ncclSuccess) return ncclInternalError;
  std::vector<std::array<char, NCCL_NET_HANDLE_MAXSIZE>> handles;
  if (!exchangeHandles(dir, rank, nranks, handle, &handles)) return ncclInternalError;
  std::vector<void*> ptrs;
  for (auto& h : handles) ptrs.push_back(h.data());
  ncclResult_t rc = api.connect(ptrs.data(), nranks, rank, listen, coll);
  if (rc == ncclSuccess) rc = api.closeListen(listen);  // as NCCL does after connect
  return rc;
}

// The staging region: 8 send slots, then 8 receive slots.
struct Staging {
  std::vector<uint64_t> region = std::vector<uint64_t>(2 * kSlots * kSlotBytes / 8);
  void *sendMh = nullptr, *recvMh = nullptr;
  char* send(size_t slot) { return reinterpret_cast<char*>(region.data()) + slot * kSlotBytes; }
  char* recv(size_t slot) { return send(kSlots + slot); }
};

struct HeadRun {
  std::string algo;
  int version = 11;
  DataType dtype = DataType::Float32;
  int nranks = 4;
  int steps = 3;
  uint64_t efPeriod = 0;
};

// Chunk k's elements and the output check against the Reference.
struct Expectation {
  size_t count = 0;
  std::vector<double> expected, tolerance;
};

uint64_t countWrong(const Expectation& e, DataType dt, const void* out) {
  std::vector<double> got(e.count), rounded(e.expected);
  std::vector<uint8_t> narrow(e.count * dtypeSize(dt));
  (void)device::cpuBackend().convert(got.data(), DataType::Float64, out, dt, e.count);
  (void)device::cpuBackend().convert(narrow.data(), dt, rounded.data(), DataType::Float64, e.count);
  (void)device::cpuBackend().convert(rounded.data(), DataType::Float64, narrow.data(), dt, e.count);
  uint64_t wrong = 0;
  for (size_t i = 0; i < e.count; ++i)
    wrong += !(got[i] == rounded[i] || std::fabs(got[i] - e.expected[i]) <= e.tolerance[i]);
  return wrong;
}

// One head rank: connect, run run.steps steps of chunks through iallreduce
// with up to 8 in flight, check each, close. Exit code 0 when #wrong is 0.
int runHead(int rank, const HeadRun& run, const std::string& dir) {
  CollNetApi api = test::loadCollNet(test::openGradcomp(), run.version);
  void* coll = nullptr;
  CHILD_CHECK(connectHead(api, dir, rank, run.nranks, &coll) == ncclSuccess && coll != nullptr);
  Staging st;
  const size_t regionBytes = st.region.size() * 8;
  CHILD_CHECK(api.regMr(coll, st.region.data(), regionBytes, NCCL_PTR_HOST, &st.sendMh) == ncclSuccess);
  CHILD_CHECK(api.regMr(coll, st.region.data(), regionBytes, NCCL_PTR_HOST, &st.recvMh) == ncclSuccess);
  const algo::AlgorithmInfo* info = algo::findAlgorithm(run.algo);
  CHILD_CHECK(info != nullptr && info->reference);
  auto reference = info->reference(run.nranks);
  CHILD_CHECK(reference->configure(param::Overrides{}).ok());

  const uint64_t total = uint64_t(run.steps) * kStepChunkBytes.size();
  const size_t elt = dtypeSize(run.dtype);
  void* requests[kSlots] = {};
  Expectation expect[kSlots];
  uint64_t next = 0, completed = 0, wrong = 0, maxInFlight = 0, inFlight = 0;
  auto start = Clock::now();
  while (completed < total) {
    // Post in call order while the next chunk's slot is free.
    while (next < total && requests[next % kSlots] == nullptr) {
      const size_t slot = next % kSlots, count = kStepChunkBytes[next % kStepChunkBytes.size()] / elt;
      std::vector<std::vector<uint8_t>> inputs;
      std::vector<const void*> ptrs;
      for (int r = 0; r < run.nranks; ++r) inputs.push_back(input(r, next, count, run.dtype));
      for (auto& in : inputs) ptrs.push_back(in.data());
      memcpy(st.send(slot), inputs[size_t(rank)].data(), count * elt);
      void* req = nullptr;
      CHILD_CHECK(api.iallreduce(coll, st.send(slot), st.recv(slot), count, ncclDataType_t(run.dtype),
                                 ncclSum, st.sendMh, st.recvMh, &req) == ncclSuccess);
      if (req == nullptr) break;  // busy: NCCL posts again later
      algo::AllreduceArgs args;
      args.count = count;
      args.dtype = run.dtype;
      args.bufferKey = collnet::ChunkKeys::sharedKey(run.efPeriod, next, count, run.dtype);
      expect[slot].count = count;
      CHILD_CHECK(reference->expect(ptrs, args, &expect[slot].expected, &expect[slot].tolerance).ok());
      requests[slot] = req;
      maxInFlight = std::max(maxInFlight, ++inFlight);
      ++next;
    }
    // Poll every request in flight (NCCL tests its oldest per channel).
    for (size_t slot = 0; slot < kSlots; ++slot) {
      if (requests[slot] == nullptr) continue;
      int done = 0, size = -1;
      CHILD_CHECK(api.test(requests[slot], &done, &size) == ncclSuccess);
      if (!done) continue;
      CHILD_CHECK(size == int(expect[slot].count * elt));
      wrong += countWrong(expect[slot], run.dtype, st.recv(slot));
      requests[slot] = nullptr;
      --inFlight;
      ++completed;
    }
    CHILD_CHECK(since(start) < 200);
  }
  fprintf(stderr, "rank %d: %s v%d: %llu chunks, up to %llu in flight, #wrong %llu, %.2f s\n", rank,
          run.algo.c_str(), run.version, (unsigned long long)completed,
          (unsigned long long)maxInFlight, (unsigned long long)wrong, since(start));
  CHILD_CHECK(api.deregMr(coll, st.sendMh) == ncclSuccess && api.deregMr(coll, st.recvMh) == ncclSuccess);
  CHILD_CHECK(api.closeColl(coll) == ncclSuccess);
  CHILD_CHECK(api.finalize() == ncclSuccess);
  CHILD_CHECK(maxInFlight == kSlots);
  return wrong == 0 ? 0 : 3;
}

// Sums of the numeric fields of every PREFIX.collnet.*.json in dir.
std::map<std::string, double> statsTotals(const std::string& dir) {
  std::map<std::string, double> sums;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return sums;
  const std::regex field("\"([a-z_]+)\": ([0-9.e+-]+)");
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.rfind("stats.collnet.", 0) != 0 || name.size() < 5 || name.substr(name.size() - 5) != ".json")
      continue;
    std::stringstream text;
    text << std::ifstream(dir + "/" + name).rdbuf();
    std::string s = text.str();
    sums["files"] += 1;
    for (std::sregex_iterator it(s.begin(), s.end(), field), end; it != end; ++it)
      sums[(*it)[1]] += std::stod((*it)[2]);
  }
  closedir(d);
  return sums;
}

}  // namespace

TEST_CASE("collnet: chunk keys follow the call order and restart when the slot moves", "[collnet]") {
  collnet::ChunkKeys off(0);
  collnet::SlotState state;
  CHECK(off.key(5, 100, DataType::Float32, 0x1000, 0, &state) == 1);
  CHECK(state == collnet::SlotState::New);
  CHECK(off.key(6, 200, DataType::Float16, 0x1000, 64, &state) == 1);
  CHECK(state == collnet::SlotState::New);

  collnet::ChunkKeys keys(4);
  uint64_t k0 = keys.key(0, 100, DataType::Float32, 0x1000, 0, &state);
  CHECK(state == collnet::SlotState::New);
  uint64_t k1 = keys.key(1, 100, DataType::Float32, 0x1000, 400, &state);
  CHECK(k1 != k0);  // another position in the step
  CHECK(keys.key(4, 100, DataType::Float32, 0x1000, 0, &state) == k0);
  CHECK(state == collnet::SlotState::Same);  // next step, same slot: the residual applies
  CHECK(keys.key(5, 100, DataType::Float32, 0x1000, 800, &state) == k1);
  CHECK(state == collnet::SlotState::Moved);  // same position, other slot: restart
  CHECK(keys.key(8, 50, DataType::Float32, 0x1000, 0, &state) != k0);  // other length: other key
  CHECK(collnet::ChunkKeys::sharedKey(4, 12, 100, DataType::Float32) == k0);
  CHECK(collnet::ChunkKeys::sharedKey(4, 12, 100, DataType::BFloat16) != k0);
}

TEST_CASE("collnet: every table v6..v12 offers host memory and answers reduceSupport", "[collnet]") {
  TmpDir dir;
  auto exits = test::runRanks(1, [&](int) {
    void* lib = test::openGradcomp();
    for (int v = 6; v <= 12; ++v) {
      CollNetApi api = test::loadCollNet(lib, v);
      CHILD_CHECK(strcmp(api.name, "gradcomp") == 0);
      CHILD_CHECK(api.init(testLogger) == ncclSuccess);
      int n = 0, ptr = 0, supported = -1;
      size_t maxColl = 0;
      CHILD_CHECK(api.devices(&n) == ncclSuccess && n >= 1);
      CHILD_CHECK(api.properties(0, &ptr, &maxColl) == ncclSuccess && ptr == NCCL_PTR_HOST);
      CHILD_CHECK(v < 9 || maxColl > 0);
      CHILD_CHECK(api.properties(n, &ptr, &maxColl) != ncclSuccess);  // out of range
      for (ncclDataType_t dt : {ncclFloat32, ncclFloat16, ncclBfloat16})
        for (ncclRedOp_t op : {ncclSum, ncclAvg}) {
          CHILD_CHECK(api.reduceSupport(dt, op, &supported) == ncclSuccess && supported == 1);
        }
      for (ncclDataType_t dt : {ncclInt32, ncclFloat64, ncclInt8, ncclFloat8e4m3}) {
        CHILD_CHECK(api.reduceSupport(dt, ncclSum, &supported) == ncclSuccess && supported == 0);
      }
      for (ncclRedOp_t op : {ncclProd, ncclMax, ncclMin}) {
        CHILD_CHECK(api.reduceSupport(ncclFloat32, op, &supported) == ncclSuccess && supported == 0);
      }
      CHILD_CHECK(!api.hasGatherScatter || api.gatherScatterNull);  // v8+: not offered
      char buf[64];
      void *mh = nullptr, *req = reinterpret_cast<void*>(1);
      CHILD_CHECK(api.regMr(nullptr, buf, sizeof buf, NCCL_PTR_CUDA, &mh) != ncclSuccess);
      CHILD_CHECK(api.regMr(nullptr, buf, sizeof buf, NCCL_PTR_HOST, &mh) == ncclSuccess && mh);
      CHILD_CHECK(api.deregMr(nullptr, mh) == ncclSuccess);
      CHILD_CHECK(api.iflush(nullptr, buf, 64, nullptr, &req) == ncclSuccess && req == nullptr);
      CHILD_CHECK(api.finalize() == ncclSuccess);
    }
    return 0;
  }, headEnv("qsgd", dir.path));
  REQUIRE(test::allSucceeded(exits));
}

TEST_CASE("collnet: GRADCOMP_ALGO=off, or an algorithm CollNet does not run, offers no device",
          "[collnet]") {
  TmpDir dir;
  for (const char* algo : {"off", "oktopk"}) {
    INFO("GRADCOMP_ALGO=" << algo);
    auto exits = test::runRanks(1, [&](int) {
      CollNetApi api = test::loadCollNet(test::openGradcomp(), 11);
      CHILD_CHECK(api.init(testLogger) == ncclSuccess);
      int n = -1, supported = -1;
      CHILD_CHECK(api.devices(&n) == ncclSuccess && n == 0);  // NCCL disables CollNet
      CHILD_CHECK(api.reduceSupport(ncclFloat32, ncclSum, &supported) == ncclSuccess && supported == 0);
      return 0;
    }, headEnv(algo, dir.path));
    REQUIRE(test::allSucceeded(exits));
  }
}

TEST_CASE("collnet: 4 head ranks, 32-512 KiB chunks, 8 in flight: results match the reference, "
          "wire bytes below dense", "[mp][collnet]") {
  // One ABI version per algorithm: int counts (v6), size_t counts (v9),
  // per-communicator init (v11, NCCL 2.28), v12 properties (NCCL 2.30).
  struct Case {
    HeadRun run;
    std::map<std::string, std::string> env;
    double minRatioVsDense;  // dense wire bytes / this algorithm's (same dtype), at least
  };
  const uint64_t period = kStepChunkBytes.size();
  std::vector<Case> cases = {
      {{"dense", 6, DataType::Float32}, {}, 0},
      {{"qsgd", 11, DataType::Float32, 4, 3, period}, {{"GRADCOMP_BITS", "4"}}, 5.0},
      {{"rbf", 9, DataType::BFloat16, 4, 3, period}, {}, 1.4},
      {{"sign", 12, DataType::Float16, 4, 3, period}, {}, 8.0},
  };
  double denseFactor = 0;
  for (Case& c : cases) {
    INFO(c.run.algo << " over ncclCollNetPlugin_v" << c.run.version);
    TmpDir dir;
    auto env = headEnv(c.run.algo, dir.path);
    env["GRADCOMP_COLLNET_EF_PERIOD"] = std::to_string(c.run.efPeriod);
    for (auto& [k, v] : c.env) env[k] = v;
    auto start = Clock::now();
    auto exits = test::runRanks(c.run.nranks, [&](int rank) { return runHead(rank, c.run, dir.path); },
                                env, 240);
    REQUIRE(test::allSucceeded(exits));
    auto stats = statsTotals(dir.path);
    const double chunks = double(c.run.steps) * double(kStepChunkBytes.size()) * c.run.nranks;
    CHECK(stats["files"] == c.run.nranks);
    CHECK(stats["calls"] == chunks);
    // Dense sends the raw dtype: its wire/logical factor (ring 2(P-1)/P, more
    // for recursive doubling on small chunks) gives the dense wire bytes of
    // any run's logical bytes.
    const double wire = stats["wire_bytes"], logical = stats["logical_bytes"];
    if (c.run.algo == "dense") denseFactor = wire / logical;
    // Error feedback: from the second step on, every chunk found its key at the same slot.
    if (c.run.efPeriod) CHECK(stats["ef_reused"] == chunks * (c.run.steps - 1) / c.run.steps);
    CHECK(stats["ef_restarts"] == 0);
    const double ratio = wire > 0 ? logical * denseFactor / wire : 0;
    printf("collnet %-5s v%-2d %-8s: %4.0f chunks, %7.2f MiB logical -> %7.2f MiB wire (%.2fx dense), "
           "%.1f s\n", c.run.algo.c_str(), c.run.version, dtypeName(c.run.dtype), chunks,
           stats["logical_bytes"] / 1048576.0, stats["wire_bytes"] / 1048576.0, ratio, since(start));
    if (c.minRatioVsDense > 0) CHECK(ratio >= c.minRatioVsDense);
  }
}

TEST_CASE("collnet: a killed head rank fails the others' pending requests instead of hanging",
          "[mp][collnet]") {
  TmpDir dir;
  auto env = headEnv("qsgd", dir.path);
  env["GRADCOMP_TIMEOUT_S"] = "2";
  const int kRanks = 3;
  auto exits = test::runRanks(kRanks, [&](int rank) {
    CollNetApi api = test::loadCollNet(test::openGradcomp(), 11);
    void* coll = nullptr;
    CHILD_CHECK(connectHead(api, dir.path, rank, kRanks, &coll) == ncclSuccess);
    Staging st;
    CHILD_CHECK(api.regMr(coll, st.region.data(), st.region.size() * 8, NCCL_PTR_HOST, &st.sendMh) == ncclSuccess);
    const size_t count = (128 << 10) / 4;
    auto post = [&](size_t slot, void** req) {
      for (size_t i = 0; i < count; ++i) reinterpret_cast<float*>(st.send(slot))[i] = inputValue(rank, slot, i);
      return api.iallreduce(coll, st.send(slot), st.recv(slot), count, ncclFloat32, ncclSum,
                            st.sendMh, st.sendMh, req);
    };
    // One clean chunk proves the group works.
    void* req = nullptr;
    CHILD_CHECK(post(0, &req) == ncclSuccess && req);
    int done = 0, size = 0;
    auto start = Clock::now();
    while (!done) {
      CHILD_CHECK(api.test(req, &done, &size) == ncclSuccess);
      CHILD_CHECK(since(start) < 30);
    }
    // Then 8 in flight; the last rank dies right after posting 3 of them.
    // A survivor that posts after it already saw the death is refused at
    // once with ncclRemoteError (the group stays failed); that chunk counts
    // as ended and failed.
    void* reqs[kSlots] = {};
    start = Clock::now();
    int ended = 0, failed = 0;
    ncclResult_t first = ncclSuccess;
    for (size_t s = 0; s < kSlots; ++s) {
      ncclResult_t rc = post(s, &reqs[s]);
      CHILD_CHECK(rc == ncclSuccess ? reqs[s] != nullptr : (rc == ncclRemoteError && !reqs[s]));
      if (rc != ncclSuccess) {
        if (first == ncclSuccess) first = rc;
        ++failed;
        ++ended;
      }
      if (rank == kRanks - 1 && s == 2) kill(getpid(), SIGKILL);
    }
    // Chunks 0..2 may complete (the dying rank posted them); 3..7 cannot.
    while (ended < int(kSlots)) {  // every request ends, done or failed
      for (size_t s = 0; s < kSlots; ++s) {
        if (reqs[s] == nullptr) continue;
        done = 0;
        ncclResult_t rc = api.test(reqs[s], &done, &size);
        if (rc == ncclSuccess && !done) continue;
        CHILD_CHECK(rc != ncclSuccess || s < 3);
        if (rc != ncclSuccess && first == ncclSuccess) {
          first = rc;
          fprintf(stderr, "rank %d: first request failed after %.2f s (result %d)\n", rank,
                  since(start), int(rc));
        }
        failed += rc != ncclSuccess;
        reqs[s] = nullptr;
        ++ended;
      }
      CHILD_CHECK(since(start) < 2 + 15);
    }
    CHILD_CHECK(failed >= int(kSlots) - 3);
    CHILD_CHECK(first == ncclRemoteError);
    // The group stays failed: a new chunk is refused at once.
    CHILD_CHECK(post(0, &req) == ncclRemoteError);
    auto closeStart = Clock::now();
    CHILD_CHECK(api.closeColl(coll) == ncclSuccess && since(closeStart) < 5);
    std::lock_guard<std::mutex> lock(gLogMu);
    CHILD_CHECK(gWarnings.find("rank 2") != std::string::npos);  // the error names the dead peer
    return 0;
  }, env, 90);
  REQUIRE(exits.size() == size_t(kRanks));
  CHECK(exits[kRanks - 1].signal == SIGKILL);
  for (int r = 0; r < kRanks - 1; ++r) CHECK(exits[size_t(r)].exitCode == 0);
}

TEST_CASE("collnet: a configuration that differs across head ranks fails connect on every rank",
          "[mp][collnet]") {
  TmpDir dir;
  auto exits = test::runRanks(2, [&](int rank) {
    setenv("GRADCOMP_BITS", rank == 0 ? "4" : "2", 1);  // before the registry is read
    CollNetApi api = test::loadCollNet(test::openGradcomp(), 11);
    void* coll = nullptr;
    auto start = Clock::now();
    ncclResult_t rc = connectHead(api, dir.path, rank, 2, &coll);
    CHILD_CHECK(rc == ncclInvalidUsage && coll == nullptr && since(start) < 20);
    std::lock_guard<std::mutex> lock(gLogMu);
    CHILD_CHECK(gWarnings.find("key 'GRADCOMP_BITS' is '4' on rank 0 but '2' on rank 1") !=
                std::string::npos);
    return 0;
  }, headEnv("qsgd", dir.path), 60);
  REQUIRE(test::allSucceeded(exits));
}

