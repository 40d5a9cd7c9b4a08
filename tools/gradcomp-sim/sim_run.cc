#include "tools/gradcomp-sim/sim_run.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/hierarchy/hierarchical.h"
#include "algorithms/error_feedback.h"
#include "device/backend.h"
#include "tools/gradcomp-sim/payload_framing.h"

namespace gradcomp::sim {
namespace {

// What one rank measured per timed call.
struct RankLog {
  std::vector<double> time, sent, recv, msgs, charged, interHost;
  std::vector<std::vector<double>> scenarioTime;  // per timed call
  std::vector<GpuCallStats> gpu;                  // per design, summed over timed calls
  Status status;
};

struct RankTask {
  const SimJob* job;
  const algo::AlgorithmInfo* info;
  SimTransport* net;
  RankLog* log;
};

std::unique_ptr<GpuModel> gpuModelFor(const SimJob& job, SimTransport& net) {
  if (!job.gpu.enabled) return nullptr;
  GpuModelOptions o;
  o.c = job.gpu.constants;
  for (GpuDesign d : job.gpu.designs)
    for (size_t j = 0; j < job.gpu.gbps.size(); ++j) o.scenarioDesign.push_back(d);
  o.scale = job.gpu.scale;
  o.calibration = job.gpu.calibration;
  o.stagedHostBytesPerElement = stagedHostPassBytes(job.algo);
  o.excludeCpu = job.model.computeScale > 0;
  return makeGpuModel(net, o);
}

Status runRank(const RankTask& t) {
  const SimJob& job = *t.job;
  const int rank = t.net->rank();
  std::unique_ptr<GpuModel> model = gpuModelFor(job, *t.net);
  device::Backend& dev = model ? static_cast<device::Backend&>(*model) : device::cpuBackend();
  std::unique_ptr<algo::Algorithm> alg = t.info->create();
  const int L = job.ranksPerHost;
  if (job.hierarchical) {
    std::vector<std::vector<int>> hosts(static_cast<size_t>(job.ranks / L));
    for (int r = 0; r < job.ranks; ++r) hosts[size_t(r / L)].push_back(r);
    alg = algo::hierarchy::makeHierarchical(std::move(alg), std::move(hosts));
  }
  std::unique_ptr<algo::ErrorFeedbackStore> ef;
  GC_CHECK(algo::ErrorFeedbackStore::create(job.config, &ef));
  std::vector<float> in(job.count), out(job.count);
  const bench::InputSpec spec{job.input, job.seed, job.ranks};
  // An allgather's shard: the first count / P elements of the rank's input.
  for (int c = 0; c < job.warmup + job.iters; ++c) {
    GC_CHECK(bench::fillInput(spec, rank, uint64_t(c), DataType::Float32, in.data(), job.count));
    algo::Context ctx{*t.net, dev, job.config, uint64_t(c)};
    ctx.errorFeedback = ef.get();
    algo::AllreduceArgs args;
    args.sendBuf = in.data();
    args.recvBuf = out.data();
    args.count = job.count;
    args.bufferKey = 7;
    args.coll = job.coll;
    t.net->resetCounters();
    t.net->beginCall();
    if (model) model->beginCall(job.count, DataType::Float32);
    GC_CHECK(algo::runCollective(*alg, ctx, args));
    if (model) model->endCall();
    const std::vector<double> clocks = t.net->endCallAll();
    const double clock = clocks[0];
    const std::vector<GpuCallStats> gpu =
        model ? model->takeCallStats() : std::vector<GpuCallStats>();
    if (c < job.warmup) continue;
    t.log->scenarioTime.push_back(clocks);
    t.log->charged.push_back(t.net->chargedBytesSent());
    if (t.log->gpu.empty()) t.log->gpu.resize(gpu.size());
    for (size_t d = 0; d < gpu.size(); ++d) t.log->gpu[d] += gpu[d];
    const transport::PeerCounters total = t.net->totalCounters();
    t.log->time.push_back(clock);
    t.log->sent.push_back(double(total.bytesSent));
    t.log->recv.push_back(double(total.bytesRecv));
    t.log->msgs.push_back(double(total.msgsSent));
    double inter = 0;
    for (int p = 0; L > 0 && p < job.ranks; ++p)
      if (p / L != rank / L) inter += double(t.net->counters(p).bytesSent);
    t.log->interHost.push_back(inter);
  }
  return Status::Ok();
}

void* rankMain(void* arg) {
  const RankTask& t = *static_cast<RankTask*>(arg);
  t.log->status = runRank(t);
  if (!t.log->status.ok()) t.net->abortAll(t.log->status);
  return nullptr;
}

}  // namespace

Status simulatedJob(SimJob* job) {
  if (job->algo == "wagma") GC_CHECK(job->config.set("WAGMA_WAIT", "1", "gradcomp-sim"));
  return Status::Ok();
}

Status runSim(const SimJob& requested, SimResult* out) {
  SimJob job = requested;
  GC_CHECK(simulatedJob(&job));
  const bool ag = job.coll == algo::Collective::AllGather;
  const algo::AlgorithmInfo* info =
      ag ? algo::findAllgatherAlgorithm(job.algo) : algo::findAlgorithm(job.algo);
  GC_REQUIRE(info, Err::InvalidArgument, "unknown %salgorithm '%s': expected one of %s",
             ag ? "allgather " : "", job.algo.c_str(),
             (ag ? algo::allgatherNames() : algo::algorithmNames()).c_str());
  GC_REQUIRE(!ag || !job.gpu.enabled, Err::InvalidArgument,
             "allgather: the GPU model prices allreduce primitives only");
  GC_REQUIRE(job.ranks >= 1 && job.ranks <= (1 << 20), Err::InvalidArgument,
             "ranks %d outside 1..1048576", job.ranks);
  GC_REQUIRE(job.iters >= 1 && job.warmup >= 0, Err::InvalidArgument,
             "iters %d / warmup %d: need iters >= 1, warmup >= 0", job.iters, job.warmup);
  GC_REQUIRE(job.ranksPerHost >= 0 && (job.ranksPerHost == 0 || job.ranks % job.ranksPerHost == 0),
             Err::InvalidArgument, "ranks per host %d must divide the %d ranks", job.ranksPerHost,
             job.ranks);
  GC_REQUIRE(!job.hierarchical || (job.ranksPerHost > 0 && algo::hierarchy::supportsHierarchy(*info)),
             Err::InvalidArgument, "the hierarchical schedule needs ranks per host%s",
             job.ranksPerHost > 0 ? " and an algorithm other than auto and wagma" : "");
  job.model.ranksPerHost = job.ranksPerHost;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<CostModel> models{job.model};
  if (job.gpu.enabled) {
    GC_REQUIRE(!job.gpu.designs.empty() && !job.gpu.gbps.empty() && job.gpu.scale > 0,
               Err::InvalidArgument, "gpu model: needs designs, link rates and a scale > 0");
    GC_REQUIRE(job.gpu.designs.size() * job.gpu.gbps.size() <= kMaxScenarios,
               Err::InvalidArgument, "gpu model: %zu designs x %zu link rates exceed %zu scenarios",
               job.gpu.designs.size(), job.gpu.gbps.size(), kMaxScenarios);
    models.clear();
    for (size_t i = 0; i < job.gpu.designs.size(); ++i)
      for (double gbps : job.gpu.gbps) {
        CostModel m = job.model;
        m.betaSPerByte = 8.0 / (gbps * 1e9);
        m.payloadScale = job.gpu.scale;
        m.framing = payloadFraming;
        models.push_back(m);
      }
  }
  auto nets = createSimTransports(job.ranks, models, job.timeoutS);
  std::vector<RankLog> logs(job.ranks);
  std::vector<RankTask> tasks(job.ranks);
  std::vector<pthread_t> threads(job.ranks);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, std::max<size_t>(job.stackBytes, PTHREAD_STACK_MIN));
  int started = 0;
  Status st;
  for (int r = 0; r < job.ranks; ++r) {
    tasks[r] = RankTask{&job, info, nets[r].get(), &logs[r]};
    const int rc = pthread_create(&threads[r], &attr, rankMain, &tasks[r]);
    if (rc != 0) {
      st = makeStatus(Err::SystemError, "pthread_create for simulated rank %d of %d: %s", r,
                      job.ranks, strerror(rc));
      break;
    }
    ++started;
  }
  pthread_attr_destroy(&attr);
  // A failed start leaves ranks that never run; the started ones time out
  // waiting for them (they cannot be told apart from a deadlock here).
  for (int r = 0; r < started; ++r) pthread_join(threads[r], nullptr);
  GC_CHECK(st);
  // The first failure in rank order that is not just "another rank failed".
  for (int r = 0; r < job.ranks; ++r)
    if (!logs[r].status.ok() && logs[r].status.code() != Err::RemoteError) return logs[r].status;
  for (int r = 0; r < job.ranks; ++r) GC_CHECK(logs[r].status);

  SimResult res;
  for (int c = 0; c < job.iters; ++c) {
    double tmax = 0;
    for (int r = 0; r < job.ranks; ++r) tmax = std::max(tmax, logs[r].time[c]);
    res.timeS += tmax / job.iters;
  }
  auto mean = [&](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return s / double(v.size());
  };
  res.scenarioTimeS.assign(models.size(), 0.0);
  for (size_t s = 0; s < models.size(); ++s)
    for (int c = 0; c < job.iters; ++c) {
      double tmax = 0;
      for (int r = 0; r < job.ranks; ++r) tmax = std::max(tmax, logs[r].scenarioTime[c][s]);
      res.scenarioTimeS[s] += tmax / job.iters;
    }
  if (job.gpu.enabled) {
    res.gpuStats.assign(kGpuDesigns, GpuCallStats{});
    for (int r = 0; r < job.ranks; ++r)
      for (int d = 0; d < kGpuDesigns; ++d)
        res.gpuStats[d] += logs[r].gpu[d].scaled(1.0 / (double(job.ranks) * job.iters));
  }
  for (int r = 0; r < job.ranks; ++r) {
    const double sent = mean(logs[r].sent), msgs = mean(logs[r].msgs);
    res.sentMax = std::max(res.sentMax, sent);
    res.chargedSentMax = std::max(res.chargedSentMax, mean(logs[r].charged));
    res.sentMean += sent / job.ranks;
    res.recvMax = std::max(res.recvMax, mean(logs[r].recv));
    res.msgsMax = std::max(res.msgsMax, msgs);
    res.msgsMean += msgs / job.ranks;
    const double inter = mean(logs[r].interHost);
    res.interHostMax = std::max(res.interHostMax, inter);
    res.interHostMean += inter / job.ranks;
  }
  res.wallS = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  *out = res;
  return Status::Ok();
}

}  // namespace gradcomp::sim
