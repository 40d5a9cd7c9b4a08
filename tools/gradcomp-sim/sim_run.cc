#include "tools/gradcomp-sim/sim_run.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/error_feedback.h"
#include "device/backend.h"

namespace gradcomp::sim {
namespace {

// What one rank measured per timed call.
struct RankLog {
  std::vector<double> time, sent, recv, msgs;
  Status status;
};

struct RankTask {
  const SimJob* job;
  const algo::AlgorithmInfo* info;
  SimTransport* net;
  RankLog* log;
};

Status runRank(const RankTask& t) {
  const SimJob& job = *t.job;
  const int rank = t.net->rank();
  std::unique_ptr<algo::Algorithm> alg = t.info->create();
  std::unique_ptr<algo::ErrorFeedbackStore> ef;
  GC_CHECK(algo::ErrorFeedbackStore::create(job.config, &ef));
  std::vector<float> in(job.count), out(job.count);
  const bench::InputSpec spec{job.input, job.seed, job.ranks};
  for (int c = 0; c < job.warmup + job.iters; ++c) {
    GC_CHECK(bench::fillInput(spec, rank, uint64_t(c), DataType::Float32, in.data(), job.count));
    algo::Context ctx{*t.net, device::cpuBackend(), job.config, uint64_t(c)};
    ctx.errorFeedback = ef.get();
    algo::AllreduceArgs args;
    args.sendBuf = in.data();
    args.recvBuf = out.data();
    args.count = job.count;
    args.bufferKey = 7;
    t.net->resetCounters();
    t.net->beginCall();
    GC_CHECK(alg->allreduce(ctx, args));
    const double clock = t.net->endCall();
    if (c < job.warmup) continue;
    const transport::PeerCounters total = t.net->totalCounters();
    t.log->time.push_back(clock);
    t.log->sent.push_back(double(total.bytesSent));
    t.log->recv.push_back(double(total.bytesRecv));
    t.log->msgs.push_back(double(total.msgsSent));
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
  const algo::AlgorithmInfo* info = algo::findAlgorithm(job.algo);
  GC_REQUIRE(info, Err::InvalidArgument, "unknown algorithm '%s': expected one of %s",
             job.algo.c_str(), algo::algorithmNames().c_str());
  GC_REQUIRE(job.ranks >= 1 && job.ranks <= (1 << 20), Err::InvalidArgument,
             "ranks %d outside 1..1048576", job.ranks);
  GC_REQUIRE(job.iters >= 1 && job.warmup >= 0, Err::InvalidArgument,
             "iters %d / warmup %d: need iters >= 1, warmup >= 0", job.iters, job.warmup);
  const auto t0 = std::chrono::steady_clock::now();
  auto nets = createSimTransports(job.ranks, job.model, job.timeoutS);
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
  for (int r = 0; r < job.ranks; ++r) {
    const double sent = mean(logs[r].sent), msgs = mean(logs[r].msgs);
    res.sentMax = std::max(res.sentMax, sent);
    res.sentMean += sent / job.ranks;
    res.recvMax = std::max(res.recvMax, mean(logs[r].recv));
    res.msgsMax = std::max(res.msgsMax, msgs);
    res.msgsMean += msgs / job.ranks;
  }
  res.wallS = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  *out = res;
  return Status::Ok();
}

}  // namespace gradcomp::sim
