// Collective over the public C API (include/gradcomp/gradcomp.h): gradients and
// weights through the chosen algorithm, metrics through a separate dense config
// so they never show in the algorithm's bytes.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gradcomp/gradcomp.h"
#include "tools/gradcomp-train/reducer.h"

namespace gradcomp::train {

class GcCollective final : public Collective {
 public:
  // Collective: joins the job described by the environment (gcCommInitFromEnv)
  // and configures `algo` with params (registry names without prefix -> text).
  // sumThenScale: reduce with gcSum and multiply by 1/P here, for algorithms
  // that only implement sum; otherwise gcAvg. agAlgo (may be empty: no
  // paramAllgather) with agParams: the parameter allgather of ZeRO-3.
  using Params = std::vector<std::pair<std::string, std::string>>;
  static Status create(const std::string& algo, const Params& params, bool sumThenScale,
                       const std::string& agAlgo, const Params& agParams,
                       std::unique_ptr<GcCollective>* out);
  ~GcCollective() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status average(float* data, size_t count, uint64_t key) override;
  Status bytesSent(uint64_t* out) override;
  Status sumMetrics(double* values, size_t n) override;
  Status reduceScatterAverage(const float* data, size_t count, float* shard,
                              uint64_t key) override;
  Status allGather(const float* shard, size_t shardCount, float* out) override;
  Status paramAllgather(const float* shard, size_t shardCount, float* out) override;
  Status paramBytesSent(uint64_t* out) override;

 private:
  GcCollective() = default;
  Status totalSent(uint64_t* bytes);

  gcComm_t comm_ = nullptr;
  gcAlgoConfig_t algo_ = nullptr;
  gcAlgoConfig_t metrics_ = nullptr;  // "dense", exact
  gcAlgoConfig_t ag_ = nullptr;       // paramAllgather's, or none
  bool sumThenScale_ = false;
  int rank_ = 0, size_ = 1;
  uint64_t metricsBytes_ = 0;  // sent by sumMetrics() and allGather(), not counted
  uint64_t paramBytes_ = 0;    // sent by paramAllgather()
  std::vector<float> gather_;  // allGather's zero-padded sum
};

// A gcResult_t as a Status carrying gcLastError()'s message; `what` names the call.
Status fromGcResult(gcResult_t result, const char* what);

}  // namespace gradcomp::train
