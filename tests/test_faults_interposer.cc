// Kills and stops under the NCCL interposer: ranks call ncclAllReduce through
// libgradcomp.so (the test-double NCCL, host buffers, the host executor) with
// GRADCOMP_ALGO=<algorithm>; one rank raises SIGKILL or SIGSTOP from a thread
// a random few milliseconds into its compressed calls. Every survivor must
// see its ncclAllReduce fail with ncclRemoteError within the bound (a killed
// rank: kKillBoundS whatever GRADCOMP_TIMEOUT_S is; a stopped one: the
// timeout + 2 s + slack), ncclGetLastError and the stats file
// (GRADCOMP_STATS: "failed", "failed_rank") must name the failed rank, and
// ncclCommGetAsyncError must report ncclRemoteError. A survivor that is not
// inside a call learns a death through ncclCommGetAsyncError as well (what
// PyTorch's NCCL watchdog polls).
//
// Default tier: kill for dense and wagma (GRADCOMP_TIMEOUT_S=20), stop for
// dense (2 s). Full tier ("[full]", tools/ci/faults_full.sh): every algorithm,
// kill and stop, GRADCOMP_TIMEOUT_S=20, 4 ranks, 8 cells at a time.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/algorithm.h"
#include "support/multiproc.h"
#include "support/nccl_api.h"

namespace {

using gradcomp::test::NcclApi;
using gradcomp::test::NcclJob;
using Clock = std::chrono::steady_clock;

constexpr int kMaxRanks = 8;
constexpr double kKillBoundS = 5.0;
constexpr double kStopSlackS = 1.5;
constexpr size_t kCount = 4099;  // floats per call (GRADCOMP_MIN_BYTES=0 makes it eligible)

double clockSeconds() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

enum class Fault { Kill, Stop };

struct Cell {
  std::string algorithm;
  Fault fault = Fault::Kill;
  double timeoutS = 20;
  int nranks = 3;
  int faultyRank = 1;
  int delayUs = 0;  // from the end of call 1 to the signal
};

// Written by the ranks into a MAP_SHARED page, read by the test after reaping.
struct SharedRank {
  int calls, rc, asyncRc, statsNamesRank, statsFailedRank, lastErrorNamesRank;
  double failedAt, doneAt;
  char lastError[1024];
};
struct Shared {
  SharedRank ranks[kMaxRanks];
  std::atomic<int> survivorsDone;
  double faultAt;
  int faultyPid;
};

bool contains(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

int rankBody(const Cell& c, const NcclJob& job, const std::string& stats, Shared* sh, int rank) {
  SharedRank& me = sh->ranks[rank];
  NcclApi a = gradcomp::test::loadNcclApi();
  ncclComm_t comm = nullptr;
  if (a.initRank(&comm, c.nranks, job.id, rank) != ncclSuccess) return 2;
  std::vector<float> send(kCount), recv(kCount);
  for (size_t i = 0; i < kCount; ++i) send[i] = float(int(i % 64) - 32) / 8.0f;
  const bool faulty = rank == c.faultyRank;
  const std::string culprit = "rank " + std::to_string(c.faultyRank) + " (";
  std::thread trigger;
  for (int call = 0; call < 5000; ++call) {
    if (faulty && call == 2) {
      sh->faultyPid = getpid();
      trigger = std::thread([&] {
        std::this_thread::sleep_for(std::chrono::microseconds(c.delayUs));
        sh->faultAt = clockSeconds();
        raise(c.fault == Fault::Kill ? SIGKILL : SIGSTOP);
      });
    }
    const ncclResult_t rc = a.allReduce(send.data(), recv.data(), kCount, ncclFloat32, ncclSum, comm, nullptr);
    if (rc == ncclSuccess) {
      ++me.calls;
      continue;
    }
    me.failedAt = clockSeconds();
    me.rc = rc;
    const std::string text = a.lastError(comm);
    snprintf(me.lastError, sizeof me.lastError, "%s", text.c_str());
    me.lastErrorNamesRank = contains(text, "compressed allreduce failed") && contains(text, culprit);
    ncclResult_t async = ncclSuccess;
    (void)a.asyncError(comm, &async);
    me.asyncRc = async;
    break;
  }
  if (faulty) {  // not reached before the signal in a healthy run
    if (trigger.joinable()) trigger.join();
    return 3;
  }
  (void)a.abort(comm);  // as the application would; writes the stats file
  me.doneAt = clockSeconds();
  const std::string json = gradcomp::test::readWholeFile(stats + ".rank" + std::to_string(rank) + ".json");
  me.statsNamesRank = contains(json, "\"failed\": \"gradcomp: compressed allreduce failed") &&
                      contains(json, culprit);
  me.statsFailedRank = contains(json, "\"failed_rank\": " + std::to_string(c.faultyRank));
  // Wait for the other survivors outside gradcomp; the first kills a stopped rank.
  sh->survivorsDone.fetch_add(1);
  const auto until = Clock::now() + std::chrono::seconds(60);
  while (sh->survivorsDone.load() < c.nranks - 1 && Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (rank == (c.faultyRank == 0 ? 1 : 0) && sh->faultyPid > 0) kill(sh->faultyPid, SIGKILL);
  return 0;
}

struct Outcome {
  std::vector<gradcomp::test::RankExit> exits;
  std::vector<SharedRank> ranks;  // copied from the shared page
  double faultAt = 0;
  double seconds = 0;
};

Outcome runCell(const Cell& c) {
  Outcome out;
  void* page = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) return out;
  Shared* sh = new (page) Shared{};
  NcclJob job;
  const std::string stats = job.dir + "/stats";
  const auto t0 = Clock::now();
  out.exits = gradcomp::test::runRanks(
      c.nranks, [&](int rank) { return rankBody(c, job, stats, sh, rank); },
      job.env({{"GRADCOMP_ALGO", c.algorithm},
               {"GRADCOMP_MIN_BYTES", "0"},
               {"GRADCOMP_STATS", stats},
               {"GRADCOMP_TIMEOUT_S", std::to_string(c.timeoutS)},
               {"UCX_TLS", "sm,self"}}),
      30 + 4 * c.timeoutS);
  out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  out.ranks.assign(sh->ranks, sh->ranks + c.nranks);
  out.faultAt = sh->faultAt;
  sh->~Shared();
  munmap(page, sizeof(Shared));
  return out;
}

void checkCell(const Cell& c, const Outcome& o) {
  REQUIRE(int(o.exits.size()) == c.nranks);
  const double bound = c.fault == Fault::Kill ? kKillBoundS : c.timeoutS + 2.0 + kStopSlackS;
  std::ostringstream report;
  std::vector<std::string> problems;
  for (int r = 0; r < c.nranks; ++r) {
    const SharedRank& s = o.ranks[size_t(r)];
    const auto& e = o.exits[size_t(r)];
    const double detect = s.failedAt > 0 ? s.failedAt - o.faultAt : -1;
    const double done = s.doneAt > 0 ? s.doneAt - o.faultAt : -1;
    report << "  rank " << r << (r == c.faultyRank ? " (faulty)" : "") << ": exit " << e.exitCode
           << " signal " << e.signal << (e.killedAtDeadline ? " HUNG" : "") << ", " << s.calls
           << " calls, rc " << s.rc << ", async " << s.asyncRc << ", failed " << detect
           << " s after the fault, aborted after " << done << " s: " << s.lastError << "\n";
    auto problem = [&](const std::string& what) { problems.push_back("rank " + std::to_string(r) + ": " + what); };
    if (e.killedAtDeadline) problem("hung");
    if (r == c.faultyRank) {
      if (e.signal != SIGKILL) problem("the faulty rank was not SIGKILLed");
      continue;
    }
    if (e.signal || e.exitCode) problem("exit " + std::to_string(e.exitCode) + " signal " + std::to_string(e.signal));
    if (s.rc != ncclRemoteError) problem("ncclAllReduce returned " + std::to_string(s.rc));
    if (s.asyncRc != ncclRemoteError) problem("ncclCommGetAsyncError gave " + std::to_string(s.asyncRc));
    if (!s.lastErrorNamesRank) problem("ncclGetLastError does not name the failed rank");
    if (!s.statsNamesRank || !s.statsFailedRank) problem("the stats file does not record the failed rank");
    if (detect < 0 || detect > bound) problem("failed " + std::to_string(detect) + " s after the fault");
    if (done < 0 || done > bound + 1.0) problem("aborted " + std::to_string(done) + " s after the fault");
  }
  std::printf("interposer faults: %s x %s (GRADCOMP_TIMEOUT_S=%g, %d ranks, faulty rank %d, %d us "
              "after call 1): %s in %.2f s\n%s",
              c.algorithm.c_str(), c.fault == Fault::Kill ? "sigkill" : "sigstop", c.timeoutS,
              c.nranks, c.faultyRank, c.delayUs, problems.empty() ? "PASS" : "FAIL", o.seconds,
              report.str().c_str());
  for (const std::string& p : problems) std::printf("  problem: %s\n", p.c_str());
  std::fflush(stdout);
  INFO(report.str());
  for (const std::string& p : problems) CHECK(p == "");
}

std::vector<Cell> cells(const std::vector<std::string>& algorithms, Fault fault, double timeoutS, int nranks) {
  std::vector<Cell> out;
  for (const std::string& algorithm : algorithms) {
    unsigned h = 12345 + unsigned(fault) * 7919 + unsigned(nranks);
    for (char ch : algorithm) h = h * 131 + unsigned(ch);
    h ^= h >> 13;
    Cell c;
    c.algorithm = algorithm;
    c.fault = fault;
    c.timeoutS = timeoutS;
    c.nranks = nranks;
    c.faultyRank = int(h % unsigned(nranks));
    c.delayUs = int((h >> 8) % 20000);
    out.push_back(c);
  }
  return out;
}

// An Outcome in shared memory, written by a cell's own process.
struct CellRecord {
  int nranks;
  gradcomp::test::RankExit exits[kMaxRanks];
  SharedRank ranks[kMaxRanks];
  double faultAt, seconds;
};

// Sequentially, or (full tier) up to 8 cells at a time, each in a process of
// its own (forks from threads of this process would not be safe).
void run(const std::vector<Cell>& all, bool concurrently) {
  std::vector<Outcome> outcomes(all.size());
  if (concurrently) {
    std::vector<std::vector<char>> records;
    const auto exits = gradcomp::test::runConcurrently(
        int(all.size()), 8, sizeof(CellRecord),
        [&](int i, void* memory) {
          const Outcome o = runCell(all[size_t(i)]);
          auto* rec = static_cast<CellRecord*>(memory);
          rec->nranks = int(std::min<size_t>(o.exits.size(), kMaxRanks));
          for (int r = 0; r < rec->nranks; ++r) {
            rec->exits[r] = o.exits[size_t(r)];
            rec->ranks[r] = o.ranks[size_t(r)];
          }
          rec->faultAt = o.faultAt;
          rec->seconds = o.seconds;
          return 0;
        },
        &records);
    for (size_t i = 0; i < all.size(); ++i) {
      if (exits[i].exitCode != 0 || exits[i].signal) continue;  // the cell's process failed
      const auto* rec = reinterpret_cast<const CellRecord*>(records[i].data());
      outcomes[i].exits.assign(rec->exits, rec->exits + rec->nranks);
      outcomes[i].ranks.assign(rec->ranks, rec->ranks + rec->nranks);
      outcomes[i].faultAt = rec->faultAt;
      outcomes[i].seconds = rec->seconds;
    }
  } else {
    for (size_t i = 0; i < all.size(); ++i) outcomes[i] = runCell(all[i]);
  }
  for (size_t i = 0; i < all.size(); ++i) checkCell(all[i], outcomes[i]);
}

// Every registered algorithm, or those in GC_FAULTS_ALGOS (comma list).
std::vector<std::string> everyAlgorithm() {
  const char* only = std::getenv("GC_FAULTS_ALGOS");
  std::vector<std::string> names;
  for (const auto* info : gradcomp::algo::listAlgorithms())
    if (!only || contains("," + std::string(only) + ",", "," + info->name + ","))
      names.push_back(info->name);
  return names;
}

}  // namespace

TEST_CASE("interposer faults: a rank SIGKILLed during compressed calls", "[faults][mp][nccl]") {
  run(cells({"dense", "wagma"}, Fault::Kill, 20.0, 3), false);
}

TEST_CASE("interposer faults: a rank SIGSTOPped during compressed calls", "[faults][mp][nccl]") {
  run(cells({"dense"}, Fault::Stop, 2.0, 3), false);
}

TEST_CASE("interposer faults: ncclCommGetAsyncError reports a dead peer between calls",
          "[faults][mp][nccl]") {
  NcclJob job;
  // Ranks that finished the first call, counted in a page the forked ranks
  // share: rank 2 dies only once the others are done with it ("between
  // calls"). Without this it could die while they still exchanged the
  // call's last steps with each other, and the monitor rightly fails those.
  void* page = mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(page != MAP_FAILED);
  auto* finishedFirst = new (page) std::atomic<int>(0);
  auto exits = gradcomp::test::runRanks(3, [&](int rank) {
    NcclApi a = gradcomp::test::loadNcclApi();
    ncclComm_t comm = nullptr;
    CHILD_CHECK(a.initRank(&comm, 3, job.id, rank) == ncclSuccess);
    std::vector<float> buf(kCount, 1.0f);
    CHILD_CHECK(a.allReduce(buf.data(), buf.data(), kCount, ncclFloat32, ncclSum, comm, nullptr) == ncclSuccess);
    CHILD_CHECK(buf[0] == 3.0f);
    finishedFirst->fetch_add(1);
    if (rank == 2) {
      const auto waitFrom = Clock::now();  // bounded: the others fail the test if they are stuck
      while (finishedFirst->load() < 3 && Clock::now() - waitFrom < std::chrono::seconds(20))
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      raise(SIGKILL);
    }
    // Ranks 0 and 1 make no call: they poll like a watchdog.
    const auto t0 = Clock::now();
    ncclResult_t async = ncclSuccess;
    while (async == ncclSuccess && Clock::now() - t0 < std::chrono::seconds(10)) {
      CHILD_CHECK(a.asyncError(comm, &async) == ncclSuccess);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    const double took = std::chrono::duration<double>(Clock::now() - t0).count();
    const std::string text = a.lastError(comm);
    fprintf(stderr, "rank %d: ncclCommGetAsyncError %d after %.2f s: %s\n", rank, int(async), took, text.c_str());
    CHILD_CHECK(async == ncclRemoteError);
    CHILD_CHECK(took < 2.0);
    CHILD_CHECK(contains(text, "rank 2 (") && contains(text, "failed: connection closed"));
    // The next call fails at once with the same error instead of passing through.
    CHILD_CHECK(a.allReduce(buf.data(), buf.data(), kCount, ncclFloat32, ncclSum, comm, nullptr) == ncclRemoteError);
    CHILD_CHECK(a.abort(comm) == ncclSuccess);
    return 0;
  }, job.env({{"GRADCOMP_ALGO", "dense"}, {"GRADCOMP_MIN_BYTES", "0"}, {"UCX_TLS", "sm,self"}}), 60);
  munmap(page, sizeof(std::atomic<int>));
  REQUIRE(exits.size() == 3);
  CHECK(exits[0].exitCode == 0);
  CHECK(exits[1].exitCode == 0);
  CHECK(exits[2].signal == SIGKILL);
}

TEST_CASE("interposer faults: calls that disagree fail on every rank with one message",
          "[faults][mp][nccl][call_check]") {
  NcclJob job;
  // Each rank's ncclGetLastError text after the failing call, for the parent.
  constexpr size_t kText = 1024;
  void* page = mmap(nullptr, 3 * kText, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(page != MAP_FAILED);
  char* texts = static_cast<char*>(page);
  memset(texts, 0, 3 * kText);
  auto exits = gradcomp::test::runRanks(3, [&](int rank) {
    NcclApi a = gradcomp::test::loadNcclApi();
    ncclComm_t comm = nullptr;
    CHILD_CHECK(a.initRank(&comm, 3, job.id, rank) == ncclSuccess);
    const size_t count = rank == 2 ? 2 * kCount : kCount;  // rank 2 disagrees
    std::vector<float> buf(count, 1.0f);
    const auto t0 = Clock::now();
    const ncclResult_t rc = a.allReduce(buf.data(), buf.data(), count, ncclFloat32, ncclSum, comm, nullptr);
    const double took = std::chrono::duration<double>(Clock::now() - t0).count();
    ncclResult_t async = ncclSuccess;
    CHILD_CHECK(a.asyncError(comm, &async) == ncclSuccess);
    const std::string text = a.lastError(comm);
    snprintf(texts + size_t(rank) * kText, kText, "%s", text.c_str());
    fprintf(stderr, "rank %d: ncclAllReduce %d after %.2f s: %s\n", rank, int(rc), took, text.c_str());
    CHILD_CHECK(rc == ncclRemoteError);
    CHILD_CHECK(async == ncclRemoteError);
    CHILD_CHECK(took < 5.0);
    CHILD_CHECK(contains(text, "called allreduce #0 with count "));
    CHILD_CHECK(a.abort(comm) == ncclSuccess);
    return 0;
  }, job.env({{"GRADCOMP_ALGO", "dense"}, {"GRADCOMP_MIN_BYTES", "0"}, {"UCX_TLS", "sm,self"}}), 60);
  std::vector<std::string> verdicts;
  for (int r = 0; r < 3; ++r) {
    // "gradcomp: compressed allreduce failed on communicator #n (rank r/3): <verdict>[; rank r was ...]"
    std::string t = texts + size_t(r) * kText;
    const size_t at = t.find("): ");
    t = at == std::string::npos ? t : t.substr(at + 3);
    verdicts.push_back(t.substr(0, t.find("; rank ", t.find(" failed: "))));
  }
  munmap(page, 3 * kText);
  REQUIRE(gradcomp::test::allSucceeded(exits));
  CHECK_THAT(verdicts[0], Catch::Contains(" failed: ") &&
                              (Catch::Contains("with count 4099 float sum, rank 2 with count 8198") ||
                               Catch::Contains("with count 8198 float sum, rank ")));
  CHECK(verdicts[1] == verdicts[0]);
  CHECK(verdicts[2] == verdicts[0]);
}

TEST_CASE("interposer faults full: a rank SIGKILLed under every algorithm", "[.][full]") {
  run(cells(everyAlgorithm(), Fault::Kill, 20.0, 4), true);
}

TEST_CASE("interposer faults full: a rank SIGSTOPped under every algorithm", "[.][full]") {
  run(cells(everyAlgorithm(), Fault::Stop, 20.0, 4), true);
}
