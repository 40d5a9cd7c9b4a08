#include "tools/gradcomp-train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "common/log.h"
#include "tools/gradcomp-train/model.h"
#include "tools/gradcomp-train/rng.h"

namespace gradcomp::train {
namespace {

using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Stream tags so the weight, shuffle and straggler draws never share numbers.
constexpr uint64_t kShuffleStream = 1, kStraggleStream = 2;

// The ranks that straggle at `step`: drawn from a stream every rank seeds the
// same way, so all ranks agree without talking. Partial Fisher-Yates.
bool straggles(const TrainOptions& o, int rank, int nranks, uint64_t step) {
  if (o.straggleRanks <= 0 || o.straggleMs <= 0) return false;
  Rng rng(o.seed, kStraggleStream, step);
  std::vector<int> ranks(nranks);
  std::iota(ranks.begin(), ranks.end(), 0);
  for (int i = 0; i < o.straggleRanks; ++i) {
    std::swap(ranks[i], ranks[i + rng.below(nranks - i)]);
    if (ranks[i] == rank) return true;
  }
  return false;
}

// PyTorch's SGD: v = momentum * v + g; w -= lr * v (plain SGD when momentum == 0).
void sgdStep(float* w, const float* g, float* v, size_t n, float lr, float momentum) {
  if (momentum == 0.0f) {
    for (size_t i = 0; i < n; ++i) w[i] -= lr * g[i];
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    v[i] = momentum * v[i] + g[i];
    w[i] -= lr * v[i];
  }
}

// Collective: fails on every rank unless every rank holds bit-identical
// params (what sharded training promises). The ranks' 64-bit FNV-1a hashes
// are compared through exact double sums, 16 bits at a time: P x sum(h^2) ==
// (sum h)^2 holds only when every rank's h is the same (Cauchy-Schwarz), and
// h^2 < 2^32 summed over at most 2^20 ranks stays an exact double.
Status checkSameParams(Collective& comm, const float* params, size_t n, int epoch) {
  uint64_t h = 1469598103934665603ull;
  const auto* bytes = reinterpret_cast<const unsigned char*>(params);
  for (size_t i = 0; i < n * sizeof(float); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  double sums[8];
  for (int k = 0; k < 4; ++k) {
    const double part = double((h >> (16 * k)) & 0xffff);
    sums[2 * k] = part;
    sums[2 * k + 1] = part * part;
  }
  GC_CHECK(comm.sumMetrics(sums, 8));
  for (int k = 0; k < 4; ++k)
    GC_REQUIRE(sums[2 * k + 1] * comm.size() == sums[2 * k] * sums[2 * k], Err::Internal,
               "after epoch %d the ranks' parameters differ (sharded training must leave every "
               "rank with the same bytes)", epoch);
  return Status::Ok();
}

}  // namespace

double testAccuracy(Network& net, const Dataset& data) {
  constexpr int kChunk = 500;
  std::vector<int> predicted(kChunk);
  size_t correct = 0;
  for (size_t begin = 0; begin < data.size(); begin += kChunk) {
    const int n = static_cast<int>(std::min<size_t>(kChunk, data.size() - begin));
    (void)net.evaluate(data.image(begin), nullptr, n, predicted.data());
    for (int i = 0; i < n; ++i) correct += predicted[i] == data.labels[begin + i];
  }
  return data.size() ? double(correct) / data.size() : 0.0;
}

Status runTraining(const TrainOptions& o, const Dataset& trainSet, const Dataset& testSet,
             Collective& comm, const std::function<void(const EpochStats&)>& onEpoch) {
  const int rank = comm.rank(), nranks = comm.size();
  GC_REQUIRE(o.straggleRanks <= nranks, Err::InvalidArgument,
             "--straggle asks for %d straggling ranks but the job has %d ranks", o.straggleRanks,
             nranks);
  // Equal step counts on every rank (collectives pair up): the smallest shard
  // decides, the remainder of each shard is dropped.
  const size_t shardBegin = trainSet.size() * rank / nranks;
  const size_t shardEnd = trainSet.size() * (rank + 1) / nranks;
  const size_t steps = (trainSet.size() / nranks) / o.batch;
  GC_REQUIRE(steps > 0, Err::InvalidArgument,
             "%zu training images over %d ranks leave fewer than --batch %d per rank; "
             "use a smaller --batch or more images",
             trainSet.size(), nranks, o.batch);

  std::unique_ptr<Network> net;
  GC_CHECK(Network::create(o.model, {1, trainSet.rows, trainSet.cols}, 10, &net));
  net->init(o.seed);  // same seed on every rank: identical starting weights
  const size_t n = net->paramCount();
  std::vector<float> velocity(o.momentum > 0 ? n : 0, 0.0f);
  BucketReducer reducer(comm, planBuckets(net->tensors(), size_t(o.bucketMb * 1024 * 1024)));
  ShardedStepper sharded(comm, reducer.buckets(), o.zero3);
  GC_REQUIRE(!o.sharded || o.average == AverageMode::Gradients, Err::InvalidArgument,
             "sharded training reduce-scatters gradients: it needs --average grads");
  GC_REQUIRE(o.sharded || !o.zero3, Err::InvalidArgument, "ZeRO-3 needs sharded training");
  GC_REQUIRE(!o.zero3 || !o.momentumCorrection, Err::InvalidArgument,
             "ZeRO-3 has no momentum correction");
  if (o.zero3) GC_CHECK(sharded.start(net->params()));  // the first forward's parameters
  GC_INFO(TOOL, "gradcomp-train: %s, %zu parameters in %zu buckets, %zu steps/epoch, shard %zu..%zu",
          o.model.c_str(), n, reducer.buckets().size(), steps, shardBegin, shardEnd);

  std::vector<size_t> order(shardEnd - shardBegin);
  std::vector<float> x(size_t(o.batch) * trainSet.pixels());
  std::vector<uint8_t> y(o.batch);
  uint64_t globalStep = 0;
  for (int epoch = 1; epoch <= o.epochs; ++epoch) {
    std::iota(order.begin(), order.end(), shardBegin);
    Rng shuffle(o.seed, kShuffleStream, (uint64_t(epoch) << 20) | uint64_t(rank));
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[shuffle.below(i)]);

    const double comm0 = reducer.commSeconds() + sharded.commSeconds();
    const double agComm0 = sharded.paramSeconds();
    uint64_t bytes0 = 0, bytes1 = 0, agBytes0 = 0, agBytes1 = 0;
    GC_CHECK(comm.bytesSent(&bytes0));
    GC_CHECK(comm.paramBytesSent(&agBytes0));
    const auto start = Clock::now();
    double lossSum = 0;
    for (size_t step = 0; step < steps; ++step, ++globalStep) {
      for (int s = 0; s < o.batch; ++s) {
        const size_t idx = order[step * o.batch + s];
        std::memcpy(x.data() + s * trainSet.pixels(), trainSet.image(idx),
                    sizeof(float) * trainSet.pixels());
        y[s] = trainSet.labels[idx];
      }
      lossSum += net->trainStep(x.data(), y.data(), o.batch);
      // Straggling ranks model slow compute: they arrive late at the collective.
      if (straggles(o, rank, nranks, globalStep))
        std::this_thread::sleep_for(std::chrono::milliseconds(o.straggleMs));
      if (o.sharded && o.momentumCorrection) {
        // As below, sharded: the velocity is reduce-scattered, and the
        // entries to clear are those whose parameter the step changed.
        float* g = net->grads();
        const float m = float(o.momentum);
        for (size_t i = 0; i < n; ++i) g[i] = velocity[i] = m * velocity[i] + g[i];
        GC_CHECK(sharded.step(g, net->params(), velocity.data(), float(o.lr), m, true));
      } else if (o.sharded) {
        GC_CHECK(sharded.step(net->grads(), net->params(), velocity.data(), float(o.lr),
                              float(o.momentum), false));
      } else if (o.average == AverageMode::Gradients && o.momentumCorrection) {
        float* g = net->grads();
        const float m = float(o.momentum);
        for (size_t i = 0; i < n; ++i) g[i] = velocity[i] = m * velocity[i] + g[i];
        GC_CHECK(reducer.reduce(g));
        float* w = net->params();
        for (size_t i = 0; i < n; ++i) {
          if (g[i] != 0.0f) velocity[i] = 0.0f;
          w[i] -= float(o.lr) * g[i];
        }
      } else if (o.average == AverageMode::Gradients) {
        GC_CHECK(reducer.reduce(net->grads()));
        sgdStep(net->params(), net->grads(), velocity.data(), n, float(o.lr), float(o.momentum));
      } else {
        sgdStep(net->params(), net->grads(), velocity.data(), n, float(o.lr), float(o.momentum));
        if ((globalStep + 1) % o.period == 0) GC_CHECK(reducer.reduce(net->params()));
      }
    }
    EpochStats st;
    st.epoch = epoch;
    st.steps = static_cast<int>(steps);
    st.wallS = secondsSince(start);
    st.commS = reducer.commSeconds() + sharded.commSeconds() - comm0;
    GC_CHECK(comm.bytesSent(&bytes1));
    GC_CHECK(comm.paramBytesSent(&agBytes1));
    st.wireBytes = double(bytes1 - bytes0);
    st.agWireBytes = double(agBytes1 - agBytes0);
    st.agCommS = sharded.paramSeconds() - agComm0;
    st.trainLoss = lossSum / steps;
    if (o.sharded) GC_CHECK(checkSameParams(comm, net->params(), n, epoch));
    if (rank == 0) st.testAcc = testAccuracy(*net, testSet);
    if (o.zero3) {  // the exact masters in the network for one evaluation
      std::vector<float> computed(net->params(), net->params() + n);
      GC_CHECK(sharded.gatherMasters(net->params()));
      if (rank == 0) st.testAccMaster = testAccuracy(*net, testSet);
      std::copy(computed.begin(), computed.end(), net->params());
    }
    // Means over ranks; accuracy comes from rank 0 alone. This collective also
    // keeps the other ranks out of the next epoch's timing while rank 0 evaluates.
    double metrics[8] = {st.trainLoss, st.wallS,       st.commS,  st.wireBytes,
                         st.testAcc,   st.agWireBytes, st.agCommS, st.testAccMaster};
    GC_CHECK(comm.sumMetrics(metrics, 8));
    st.trainLoss = metrics[0] / nranks;
    st.wallS = metrics[1] / nranks;
    st.commS = metrics[2] / nranks;
    st.wireBytes = metrics[3] / nranks;
    st.testAcc = metrics[4];
    st.agWireBytes = metrics[5] / nranks;
    st.agCommS = metrics[6] / nranks;
    st.testAccMaster = metrics[7];
    onEpoch(st);
  }
  return Status::Ok();
}

}  // namespace gradcomp::train
