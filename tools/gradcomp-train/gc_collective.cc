#include "tools/gradcomp-train/gc_collective.h"

namespace gradcomp::train {
namespace {

// Metrics use their own key space, far above any bucket index.
constexpr uint64_t kMetricsKey = uint64_t(1) << 40;
constexpr uint64_t kGatherKey = kMetricsKey + 1;

Err errFor(gcResult_t r) {
  switch (r) {
    case gcSuccess: return Err::Ok;
    case gcInvalidArgument: return Err::InvalidArgument;
    case gcInvalidConfig: return Err::InvalidConfig;
    case gcSystemError: return Err::SystemError;
    case gcRemoteError: return Err::RemoteError;
    case gcTimeout: return Err::Timeout;
    case gcUnsupported: return Err::Unsupported;
    case gcInternalError: return Err::Internal;
  }
  return Err::Internal;
}

}  // namespace

Status fromGcResult(gcResult_t result, const char* what) {
  if (result == gcSuccess) return Status::Ok();
  const char* detail = gcLastError();
  return makeStatus(errFor(result), "%s: %s", what,
                    detail && *detail ? detail : gcResultString(result));
}

Status GcCollective::create(const std::string& algo, const Params& params, bool sumThenScale,
                            const std::string& agAlgo, const Params& agParams,
                            std::unique_ptr<GcCollective>* out) {
  std::unique_ptr<GcCollective> c(new GcCollective());
  c->sumThenScale_ = sumThenScale;
  // Configs first: a bad --algo or parameter fails before any network setup.
  GC_CHECK(fromGcResult(gcAlgoConfigCreate(algo.c_str(), &c->algo_), "--algo"));
  for (const auto& [name, value] : params)
    GC_CHECK(fromGcResult(gcAlgoConfigSet(c->algo_, name.c_str(), value.c_str()), name.c_str()));
  if (!agAlgo.empty()) {
    GC_CHECK(fromGcResult(gcAlgoConfigCreate(agAlgo.c_str(), &c->ag_), "--ag-algo"));
    for (const auto& [name, value] : agParams)
      GC_CHECK(fromGcResult(gcAlgoConfigSet(c->ag_, name.c_str(), value.c_str()), name.c_str()));
  }
  GC_CHECK(fromGcResult(gcAlgoConfigCreate("dense", &c->metrics_), "metrics config"));
  GC_CHECK(fromGcResult(gcCommInitFromEnv(&c->comm_),
                        "joining the job (start ranks with gradcomp-run -n N -- gradcomp-train, "
                        "or pass --ranks N)"));
  c->rank_ = gcCommRank(c->comm_);
  c->size_ = gcCommSize(c->comm_);
  *out = std::move(c);
  return Status::Ok();
}

GcCollective::~GcCollective() {
  if (comm_) (void)gcCommDestroy(comm_);
  if (algo_) gcAlgoConfigDestroy(algo_);
  if (metrics_) gcAlgoConfigDestroy(metrics_);
  if (ag_) gcAlgoConfigDestroy(ag_);
}

// The communicator's whole traffic (all peers), read at any time: counting
// around each call would miss what an asynchronous algorithm sends between calls.
Status GcCollective::totalSent(uint64_t* bytes) {
  gcTraffic_t t{};
  GC_CHECK(fromGcResult(gcCommGetTraffic(comm_, &t), "gcCommGetTraffic"));
  *bytes = t.bytesSent;
  return Status::Ok();
}

Status GcCollective::bytesSent(uint64_t* out) {
  uint64_t total = 0;
  GC_CHECK(totalSent(&total));
  *out = total - metricsBytes_ - paramBytes_;
  return Status::Ok();
}

Status GcCollective::average(float* data, size_t count, uint64_t key) {
  GC_CHECK(fromGcResult(gcAllreduce(data, data, count, gcFloat32, sumThenScale_ ? gcSum : gcAvg,
                                    algo_, key, comm_),
                        "gcAllreduce"));
  if (sumThenScale_) {
    const float scale = 1.0f / size_;
    for (size_t i = 0; i < count; ++i) data[i] *= scale;
  }
  return Status::Ok();
}

Status GcCollective::sumMetrics(double* values, size_t n) {
  // Dense is synchronous: everything it sends is counted by the time it returns.
  uint64_t before = 0, after = 0;
  GC_CHECK(totalSent(&before));
  GC_CHECK(fromGcResult(
      gcAllreduce(values, values, n, gcFloat64, gcSum, metrics_, kMetricsKey, comm_),
      "metrics allreduce"));
  GC_CHECK(totalSent(&after));
  metricsBytes_ += after - before;
  return Status::Ok();
}

Status GcCollective::reduceScatterAverage(const float* data, size_t count, float* shard,
                                          uint64_t key) {
  const size_t recv = count / size_t(size_);
  GC_CHECK(fromGcResult(gcReduceScatter(data, shard, recv, gcFloat32,
                                        sumThenScale_ ? gcSum : gcAvg, algo_, key, comm_),
                        "gcReduceScatter"));
  if (sumThenScale_) {
    const float scale = 1.0f / size_;
    for (size_t i = 0; i < recv; ++i) shard[i] *= scale;
  }
  return Status::Ok();
}

// The C API has no allgather: a dense sum of zero-padded shards is one
// (x + 0 is exact), at twice an allgather's bytes; they are not counted.
Status GcCollective::allGather(const float* shard, size_t shardCount, float* out) {
  gather_.assign(shardCount * size_t(size_), 0.0f);
  std::copy(shard, shard + shardCount, gather_.begin() + size_t(rank_) * shardCount);
  uint64_t before = 0, after = 0;
  GC_CHECK(totalSent(&before));
  GC_CHECK(fromGcResult(gcAllreduce(gather_.data(), gather_.data(), gather_.size(), gcFloat32,
                                    gcSum, metrics_, kGatherKey, comm_),
                        "parameter allgather"));
  GC_CHECK(totalSent(&after));
  metricsBytes_ += after - before;
  std::copy(gather_.begin(), gather_.end(), out);
  return Status::Ok();
}

// The allgather is synchronous (a ring), so what is sent during the call is
// its traffic; an asynchronous gradient algorithm's background sends in that
// window would be counted here too (none of the reduce-scatter forms has any).
Status GcCollective::paramAllgather(const float* shard, size_t shardCount, float* out) {
  GC_REQUIRE(ag_, Err::Internal, "paramAllgather without an --ag-algo");
  uint64_t before = 0, after = 0;
  GC_CHECK(totalSent(&before));
  GC_CHECK(fromGcResult(gcAllgather(shard, out, shardCount, gcFloat32, ag_, comm_),
                        "parameter allgather (--ag-algo)"));
  GC_CHECK(totalSent(&after));
  paramBytes_ += after - before;
  return Status::Ok();
}

Status GcCollective::paramBytesSent(uint64_t* out) {
  *out = paramBytes_;
  return Status::Ok();
}

}  // namespace gradcomp::train
