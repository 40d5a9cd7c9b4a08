// "qsgd": bucketed max-min quantization with stochastic rounding (QSGD / CGX
// style, notes section 6) over the code-exchange allreduce (code_exchange.h):
// reduce-scatter of b-bit codes, fp32 sums at the chunk owners, allgather of
// the re-quantized owned chunks. Error feedback keeps what this rank's own
// quantization lost (acc - decoded codes it sent); the owners' second
// quantization, common to all ranks, is fed back by the owner (its residual
// on its own chunk holds k * (sum - decoded sum), k = 1 for sum, P for avg;
// code_exchange.h) unless GRADCOMP_QUANT_OWNER_EF=0.
//
// Reduce-scatter form (NCCL's layout): phase 1 alone (code_exchange.h
// reduceScatterCodes). Rank r encodes the P-1 shards it does not own, each
// shard's buckets starting at the shard (recvcount need not be a multiple of
// the bucket); owner j decodes and sums in fp32 in rank order, its own shard
// exact (avg: / P). Error feedback: acc - decoded codes on the shards sent, 0
// on the own shard (no second quantization, so no owner feedback). Wire per
// rank: 16 (P-1) stats bytes + (P-1) (8 ceil(recvcount / B) +
// ceil(recvcount b / 8)) bytes, about (P-1)/P of the tensor at b bits.
//
// Parameters: GRADCOMP_BITS (1|2|4|8, default 8), GRADCOMP_BUCKET (default
// 512), GRADCOMP_QUANT_SEED, GRADCOMP_QUANT_OWNER_EF (default on). Rounding
// of element i in a call draws counterUniform(streamSeed(seed, call, rank,
// phase), i), call = the number of earlier calls with the same scheduleKey
// on this algorithm object.
#include <memory>

#include "algorithms/quant/chunk_codecs.h"
#include "algorithms/quant/quant_algorithms.h"
#include "algorithms/quant/quant_frame.h"

namespace gradcomp::algo::quant {
namespace {

constexpr const char* kName = "qsgd";

struct QsgdConfig {
  int bits = 8;
  size_t bucket = 512;
  uint64_t seed = 0;
  bool ownerEf = true;
};

Status readConfig(const param::Overrides& config, QsgdConfig* out) {
  GC_CHECK(readBits(config, 8, &out->bits));
  GC_REQUIRE(out->bits == 1 || out->bits == 2 || out->bits == 4 || out->bits == 8,
             Err::InvalidConfig, "qsgd: GRADCOMP_BITS=%d is not supported (accepted: 1, 2, 4, 8)",
             out->bits);
  int64_t v = 0;
  GC_CHECK(readInt(config, param::Id::BUCKET, &v));
  out->bucket = size_t(v);
  GC_CHECK(readInt(config, param::Id::QUANT_SEED, &v));
  out->seed = uint64_t(v);
  return readOwnerEf(config, true, &out->ownerEf);
}

// A sum of P values each at most maxAbs stays below P * maxAbs.
double growthFor(int P) { return double(P); }

class Qsgd final : public QuantAlgorithm {
 public:
  Qsgd() : QuantAlgorithm(kName) {}

 private:
  Status configure(const param::Overrides& config, int nranks, FramePlan* plan) override {
    GC_CHECK(readConfig(config, &cfg_));
    plan->growth = growthFor(nranks);
    return Status::Ok();
  }
  Status step(Context& ctx, const AllreduceArgs& args, const CallState& st, float* out,
              float* residual) override {
    MaxMinCodec codec(cfg_.bits, cfg_.bucket);
    return exchangeCodes(ctx, codec, codec, ExchangeSeeds{cfg_.seed, st.call}, args.op, st.acc,
                         args.count, out, residual, 1, &ws_, cfg_.ownerEf);
  }
  Status stepReduceScatter(Context& ctx, const AllreduceArgs& args, const CallState& st,
                           float* out, float* residual) override {
    MaxMinCodec codec(cfg_.bits, cfg_.bucket);
    return reduceScatterCodes(ctx, codec, ExchangeSeeds{cfg_.seed, st.call}, args.op, st.acc,
                              recvCountOf(args, ctx.net.size()), out, residual, 1, &ws_);
  }

  QsgdConfig cfg_;
};

// Same encodings, same seeds, same fp32 operations: results are bit-exact.
class QsgdReference final : public QuantReference {
 public:
  QsgdReference() : QuantReference(kName) {}

 private:
  Status loadConfig(const param::Overrides& config) override {
    return readConfig(config, &cfg_);
  }
  FramePlan plan(int nranks) const override { return {true, growthFor(nranks)}; }
  Status step(const AllreduceArgs& args, const std::vector<std::vector<float>>& acc,
              const std::vector<device::AbsStats>&, uint64_t call, std::vector<float>* out,
              std::vector<std::vector<float>>* contribution, double*) override {
    MaxMinCodec codec(cfg_.bits, cfg_.bucket);
    return simulateExchange(device::cpuBackend(), codec, codec, ExchangeSeeds{cfg_.seed, call},
                            args.op, acc, out, contribution,
                            cfg_.ownerEf ? &ownerResidual_ : nullptr);
  }
  Status stepReduceScatter(const AllreduceArgs& args, const std::vector<std::vector<float>>& acc,
                           const std::vector<device::AbsStats>&, uint64_t call,
                           std::vector<float>* out, std::vector<std::vector<float>>* contribution,
                           double*) override {
    MaxMinCodec codec(cfg_.bits, cfg_.bucket);
    return simulateReduceScatter(device::cpuBackend(), codec, ExchangeSeeds{cfg_.seed, call},
                                 args.op, acc, out, contribution);
  }

  QsgdConfig cfg_;
};

}  // namespace

Status makeQsgdReference(int nranks, const param::Overrides& config,
                         std::unique_ptr<Reference>* out) {
  return makeQuantReference<QsgdReference>(nranks, config, out);
}

GC_REGISTER_ALGORITHM(
    qsgd, {kName,
           "bucketed max-min quantization, stochastic rounding; reduce-scatter of codes, "
           "allgather of re-quantized sums; reduce-scatter: the first half",
           {param::Id::BITS, param::Id::BUCKET, param::Id::QUANT_SEED, param::Id::QUANT_OWNER_EF,
            param::Id::EF},
           [] { return std::unique_ptr<Algorithm>(new Qsgd()); },
           [](int nranks) { return registryReference<QsgdReference>(nranks, kName); }, false,
           // One reference class: expect() follows args.coll.
           [](int nranks) { return registryReference<QsgdReference>(nranks, kName); }});

}  // namespace gradcomp::algo::quant
