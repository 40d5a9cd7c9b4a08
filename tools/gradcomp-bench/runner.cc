#include "tools/gradcomp-bench/runner.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/hierarchy/hierarchical.h"
#include "common/log.h"
#include "gradcomp/gradcomp.h"
#include "tools/gradcomp-bench/check.h"
#include "tools/gradcomp-bench/inputs.h"
#include "tools/gradcomp-bench/report.h"

namespace gradcomp::bench {
namespace {

// Public API results back to the internal Status, keeping the API's message.
Status api(gcResult_t r) {
  if (r == gcSuccess) return Status::Ok();
  Err code = Err::Internal;
  switch (r) {
    case gcInvalidArgument: code = Err::InvalidArgument; break;
    case gcInvalidConfig: code = Err::InvalidConfig; break;
    case gcSystemError: code = Err::SystemError; break;
    case gcRemoteError: code = Err::RemoteError; break;
    case gcTimeout: code = Err::Timeout; break;
    case gcUnsupported: code = Err::Unsupported; break;
    default: break;
  }
  return Status(code, gcLastError());
}

struct Comm {
  gcComm_t c = nullptr;
  ~Comm() {
    if (c) (void)gcCommDestroy(c);
  }
};

struct Config {
  gcAlgoConfig_t c = nullptr;
  Config() = default;
  Config(const Config&) = delete;
  Config& operator=(const Config&) = delete;
  ~Config() {
    if (c) gcAlgoConfigDestroy(c);
  }
};

Status makeConfig(const std::string& algo, const Options::Params* params, Config* out) {
  GC_CHECK(api(gcAlgoConfigCreate(algo.c_str(), &out->c)));
  if (params)
    for (const auto& [name, value] : *params)
      GC_CHECK(api(gcAlgoConfigSet(out->c, name.c_str(), value.c_str())));
  return Status::Ok();
}

// gcDataType_t / gcRedOp_t values equal DataType / RedOp (both mirror NCCL).
gcDataType_t gcType(DataType t) { return static_cast<gcDataType_t>(t); }
gcRedOp_t gcOp(RedOp op) { return static_cast<gcRedOp_t>(op); }

// bufferKeys: each size is its own logical tensor (error-feedback residuals
// and per-tensor state start empty); the barrier and statistics use fixed keys.
constexpr uint64_t kBarrierKey = 1ull << 62;
constexpr uint64_t kStatsKey = kBarrierKey + 1;
uint64_t sizeKey(size_t sizeIndex) { return sizeIndex + 1; }

struct Job {
  const Options& o;
  gcComm_t comm;
  int rank, nranks;
  gcAlgoConfig_t dense;  // barrier and statistics
  InputSpec inputs;
  const algo::AlgorithmInfo& info;
  // Ranks of each host when the algorithm runs hierarchically, else empty.
  std::vector<std::vector<int>> hostRanks;
};

// A buffer in the communicator's device memory (gcMemAlloc): on cpu-device
// host code must not touch it, so data moves with gcMemcpyToDevice/ToHost.
struct DeviceBuf {
  gcComm_t comm;
  size_t bytes;
  void* p = nullptr;
  DeviceBuf(gcComm_t c, size_t b) : comm(c), bytes(b) {}
  ~DeviceBuf() {
    if (p) (void)gcMemFree(comm, p, bytes);
  }
  Status alloc() { return api(gcMemAlloc(comm, bytes ? bytes : 1, &p)); }
};

// Dense fp64 sum of `values` over the ranks (barrier and statistics), on
// device memory like every other call.
Status sumOverRanks(const Job& job, uint64_t key, std::vector<double>* values) {
  DeviceBuf buf(job.comm, values->size() * sizeof(double));
  GC_CHECK(buf.alloc());
  GC_CHECK(api(gcMemcpyToDevice(job.comm, buf.p, values->data(), buf.bytes)));
  GC_CHECK(api(gcAllreduce(buf.p, buf.p, values->size(), gcFloat64, gcSum, job.dense, key,
                           job.comm)));
  return api(gcMemcpyToHost(job.comm, values->data(), buf.p, buf.bytes));
}

// Per-rank figures for one size.
struct Local {
  double timeUs = 0, wire = 0, relErr = 0, d2h = 0, h2d = 0, syncs = 0, interHost = 0;
  uint64_t wrong = 0;
  std::map<std::string, uint64_t> choices;  // the algorithm each timed call ran
  uint32_t choiceDigest = 2166136261u;      // of that sequence, to compare ranks
};

// One size: w warm-up then n timed calls on a fresh algorithm config. With
// -c 1 every call (warm-up included) is checked after it returns: all ranks'
// inputs of the call are regenerated and the Reference sees the calls in
// order. The check work sits between calls, outside the timed region, and
// the barrier before each timed call realigns the ranks after it. The call's
// buffers are device memory of the communicator's backend; inputs move in
// and results out through host copies outside the timed region.
Status runSize(const Job& job, size_t sizeIndex, size_t count, Local* local) {
  const Options& o = job.o;
  const bool rs = o.coll == algo::Collective::ReduceScatter;
  const bool ag = o.coll == algo::Collective::AllGather;
  const size_t bytes = count * dtypeSize(o.dtype);
  // A reduce-scatter's output is this rank's recvcount elements; an
  // allgather's input is this rank's sendcount elements (count: the output).
  const size_t outBytes = rs ? bytes / size_t(job.nranks) : bytes;
  const size_t inCount = ag ? count / size_t(job.nranks) : count;
  const size_t inBytes = inCount * dtypeSize(o.dtype);
  // Inputs of the current call: every rank's with -c 1, else only this rank's
  // (freed when the size is done).
  const int held = o.check ? job.nranks : 1;
  std::vector<std::vector<char>> inputs(held, std::vector<char>(inBytes));
  std::vector<const void*> ptrs;
  for (const auto& buf : inputs) ptrs.push_back(buf.data());
  char* send = inputs[o.check ? job.rank : 0].data();
  std::vector<char> recv(outBytes);
  DeviceBuf dSend(job.comm, inBytes), dRecv(job.comm, outBytes);
  GC_CHECK(dSend.alloc());
  GC_CHECK(dRecv.alloc());
  Config cfg;
  GC_CHECK(makeConfig(o.algo, &o.params, &cfg));
  std::unique_ptr<Checker> checker;
  if (o.check) {
    checker = std::make_unique<Checker>(job.info, job.nranks, job.hostRanks, o.coll);
    param::Overrides overrides;
    for (const auto& [name, value] : o.params) GC_CHECK(overrides.set(name, value, "--" + name));
    GC_CHECK(checker->configure(overrides));
  }
  algo::AllreduceArgs args;
  args.sendBuf = send;
  args.recvBuf = recv.data();
  args.count = count;
  args.dtype = o.dtype;
  args.op = o.op;
  args.bufferKey = sizeKey(sizeIndex);
  args.coll = o.coll;

  double totalUs = 0, totalWire = 0, totalD2h = 0, totalH2d = 0, totalSyncs = 0, totalInter = 0;
  for (int c = 0; c < o.warmupIters + o.iters; ++c) {
    if (o.check) {
      for (int r = 0; r < job.nranks; ++r)
        GC_CHECK(fillInput(job.inputs, r, uint64_t(c), o.dtype, inputs[r].data(), inCount));
    } else {
      GC_CHECK(fillInput(job.inputs, job.rank, uint64_t(c), o.dtype, send, inCount));
    }
    GC_CHECK(api(gcMemcpyToDevice(job.comm, dSend.p, send, inBytes)));
    const bool timed = c >= o.warmupIters;
    if (timed) {
      std::vector<double> token(1, 0.0);
      GC_CHECK(sumOverRanks(job, kBarrierKey, &token));
      GC_CHECK(api(gcCommResetTraffic(job.comm)));
    }
    const auto t0 = std::chrono::steady_clock::now();
    if (ag)
      GC_CHECK(api(gcAllgather(dSend.p, dRecv.p, inCount, gcType(o.dtype), cfg.c, job.comm)));
    else if (rs)
      GC_CHECK(api(gcReduceScatter(dSend.p, dRecv.p, count / size_t(job.nranks), gcType(o.dtype),
                                   gcOp(o.op), cfg.c, args.bufferKey, job.comm)));
    else
      GC_CHECK(api(gcAllreduce(dSend.p, dRecv.p, count, gcType(o.dtype), gcOp(o.op), cfg.c,
                               args.bufferKey, job.comm)));
    const auto t1 = std::chrono::steady_clock::now();
    if (timed) {
      gcTraffic_t traffic{}, inter{};
      gcDeviceTraffic_t dev{};
      GC_CHECK(api(gcCommGetTraffic(job.comm, &traffic)));
      GC_CHECK(api(gcCommGetInterHostTraffic(job.comm, &inter)));
      totalInter += double(inter.bytesSent);
      GC_CHECK(api(gcCommGetDeviceTraffic(job.comm, &dev)));
      totalUs += std::chrono::duration<double, std::micro>(t1 - t0).count();
      totalWire += double(traffic.bytesSent);
      totalD2h += double(dev.d2hBytes);
      totalH2d += double(dev.h2dBytes);
      totalSyncs += double(dev.syncs);
    }
    // auto: what this call ran, flushes marked ("dense(flush)"); every timed
    // call is counted, and every call's choice goes to the reference.
    const std::string label = o.algo == "auto" ? gcCommLastAlgorithm(job.comm) : o.algo;
    if (timed && o.algo == "auto") {
      local->choices[label]++;
      for (unsigned char ch : label + ";") local->choiceDigest = (local->choiceDigest ^ ch) * 16777619u;
    }
    if (checker) {
      GC_CHECK(api(gcMemcpyToHost(job.comm, recv.data(), dRecv.p, outBytes)));
      CallCheck result;
      GC_CHECK(checker->recordChoice(label));
      GC_CHECK(checker->checkCall(ptrs, args, recv.data(), job.rank, &result));
      // #wrong counts every call (the reference follows the whole sequence);
      // relerr describes the row's timed calls, like its time and choices.
      local->wrong += result.wrong;
      if (timed) local->relErr = std::max(local->relErr, result.relErr);
      GC_INFO(TOOL, "bench: %zu B call %d (%s) ran %s: relerr %.3g, %llu wrong on this rank",
              bytes, c, timed ? "timed" : "warm-up", label.c_str(), result.relErr,
              (unsigned long long)result.wrong);
    }
  }
  local->timeUs = totalUs / o.iters;
  local->wire = totalWire / o.iters;
  local->d2h = totalD2h / o.iters;
  local->h2d = totalH2d / o.iters;
  local->syncs = totalSyncs / o.iters;
  local->interHost = totalInter / o.iters;
  return Status::Ok();
}

// Combines the ranks' figures: each rank fills its slots, a dense sum
// gathers them, and every rank derives the same row.
Status gatherRow(const Job& job, const Local& local, Row* row) {
  constexpr int kSlots = 9;
  std::vector<double> all(size_t(job.nranks) * kSlots, 0.0);
  double* mine = &all[size_t(job.rank) * kSlots];
  mine[0] = local.timeUs;
  mine[1] = local.wire;
  mine[2] = double(local.wrong);
  mine[3] = local.relErr;
  mine[4] = local.d2h;
  mine[5] = local.h2d;
  mine[6] = local.syncs;
  mine[7] = double(local.choiceDigest);  // exact: 32 bits fit a double
  mine[8] = local.interHost;
  GC_CHECK(sumOverRanks(job, kStatsKey, &all));
  double wrong = 0;
  for (int r = 0; r < job.nranks; ++r) {
    const double* s = &all[size_t(r) * kSlots];
    row->timeUs = std::max(row->timeUs, s[0]);
    row->wireMax = std::max(row->wireMax, s[1]);
    row->wireMean += s[1] / job.nranks;
    wrong += s[2];
    row->relErr = std::max(row->relErr, s[3]);
    row->d2hMax = std::max(row->d2hMax, s[4]);
    row->h2dMax = std::max(row->h2dMax, s[5]);
    row->syncsMax = std::max(row->syncsMax, s[6]);
    row->interHostMax = std::max(row->interHostMax, s[8]);
    row->interHostMean += s[8] / job.nranks;
    GC_REQUIRE(s[7] == mine[7], Err::Internal,
               "--algo auto: rank %d ran other candidates than rank %d in the timed calls of this "
               "size (every rank must choose alike)", r, job.rank);
  }
  row->choices = local.choices;
  row->wrong = uint64_t(wrong);
  return Status::Ok();
}

}  // namespace

Status runRank(const Options& o, uint64_t* wrongTotal) {
  const bool ag = o.coll == algo::Collective::AllGather;
  const algo::AlgorithmInfo* info =
      ag ? algo::findAllgatherAlgorithm(o.algo) : algo::findAlgorithm(o.algo);
  GC_REQUIRE(info, Err::InvalidArgument, "unknown --algo '%s': expected one of %s",
             o.algo.c_str(), ag ? algo::allgatherNames().c_str() : algo::algorithmNames().c_str());
  Comm comm;
  GC_CHECK(api(gcCommInitFromEnv(&comm.c)));
  Config dense;
  GC_CHECK(makeConfig("dense", nullptr, &dense));
  const int rank = gcCommRank(comm.c), nranks = gcCommSize(comm.c);
  gcTopology_t topo{};
  GC_CHECK(api(gcCommGetTopology(comm.c, &topo)));
  // The communicator's choice (api.cc): hierarchical where the topology and
  // the algorithm allow it, for every collective (every allgather schedule
  // has the form).
  const bool hierarchical = topo.hierarchical && algo::hierarchy::supportsHierarchy(*info);
  std::vector<std::vector<int>> hostRanks;
  if (hierarchical) {
    hostRanks.resize(size_t(topo.hosts));
    for (int r = 0; r < nranks; ++r) hostRanks[size_t(gcCommRankHost(comm.c, r))].push_back(r);
  }
  const Job job{o,  comm.c, rank, nranks, dense.c, InputSpec{o.input, o.seed, nranks}, *info,
                hostRanks};
  const bool rs = o.coll == algo::Collective::ReduceScatter;
  GC_REQUIRE(!rs || info->hasReduceScatter(), Err::InvalidArgument,
             "--coll reducescatter: --algo %s has no reduce-scatter form", o.algo.c_str());
  if (o.check && !ag && !info->reference && rank == 0)
    GC_WARN("algorithm %s has no reference: #wrong is N/A, relerr is still checked",
            o.algo.c_str());

  if (rank == 0) printHeader(stdout, o, nranks);
  std::vector<Row> rows;
  const std::vector<uint64_t> sizes = benchSizes(o, nranks);
  for (size_t i = 0; i < sizes.size(); ++i) {
    const size_t count = sizes[i] / dtypeSize(o.dtype);
    Local local;
    GC_CHECK(runSize(job, i, count, &local));
    Row row;
    row.sizeBytes = sizes[i];
    row.count = rs || ag ? count / size_t(nranks) : count;
    row.ranks = nranks;
    row.reduceScatter = rs || ag;
    // The dense ring reduce-scatter (allgather) sends P-1 of its P equal chunks.
    row.ringBytes = rs || ag ? double(sizes[i]) * (nranks - 1) / nranks
                       : ringWireBytes(count, dtypeSize(o.dtype), nranks);
    row.checked = o.check;
    row.hosts = topo.hosts;
    row.hierarchical = hierarchical;
    row.haveWrong = o.check && (ag ? info->hasAllgather() : bool(info->reference));
    GC_CHECK(gatherRow(job, local, &row));
    rows.push_back(row);
    if (rank == 0) printRow(stdout, o, row);
  }
  // Every rank has the same rows (gatherRow is collective), so all exit alike.
  *wrongTotal = 0;
  for (const Row& r : rows) *wrongTotal += r.haveWrong ? r.wrong : 0;
  if (rank == 0) printFooter(stdout, rows);
  if (rank == 0 && !o.jsonPath.empty()) GC_CHECK(writeJson(o.jsonPath, o, rows));
  return Status::Ok();
}

}  // namespace gradcomp::bench
