// "rbf": the N-bit range-based float codec (notes section 6) over the
// code-exchange allreduce (code_exchange.h). Phase 1 encodes every rank's
// chunks with one vmax agreed by all ranks: GRADCOMP_RBF_VMAX when set (larger
// values saturate), else the largest |acc| over all ranks of this call (from
// the per-call stats exchange, so nothing saturates). Phase 2 encodes each
// owner's sum with that chunk's own largest |sum| (sent in its payload).
// Rounding is to nearest; error feedback keeps this rank's own encoding error
// and, with GRADCOMP_QUANT_OWNER_EF, the owner's phase-2 error (as qsgd).
//
// Reduce-scatter form (NCCL's layout): phase 1 alone (code_exchange.h
// reduceScatterCodes) with the same agreed vmax; owner j decodes and sums in
// fp32 in rank order, its own shard exact (avg: / P); error feedback keeps
// the phase-1 encoding error on the shards sent, 0 on the own shard (no
// phase 2, so GRADCOMP_QUANT_OWNER_EF has nothing to feed back). Wire per
// rank: 16 (P-1) stats bytes + (P-1) (4 + ceil(recvcount N / 8)) bytes,
// about (P-1)/P of the tensor at N bits.
//
// Parameters: GRADCOMP_BITS (3..16, default 10), GRADCOMP_RBF_MANTISSA
// (default BITS-4), GRADCOMP_RBF_VMAX (default: tracked), GRADCOMP_QUANT_OWNER_EF
// (default off).
#include <algorithm>
#include <memory>

#include "algorithms/quant/chunk_codecs.h"
#include "algorithms/quant/quant_algorithms.h"
#include "algorithms/quant/quant_frame.h"

namespace gradcomp::algo::quant {
namespace {

constexpr const char* kName = "rbf";

struct RbfConfig {
  int bits = 10;
  int mantissa = 6;
  double vmax = 0;  // 0: tracked
  bool ownerEf = false;
};

Status readConfig(const param::Overrides& config, RbfConfig* out) {
  GC_CHECK(readBits(config, 10, &out->bits));
  GC_REQUIRE(out->bits >= 3 && out->bits <= 16, Err::InvalidConfig,
             "rbf: GRADCOMP_BITS=%d is not supported (accepted: 3..16)", out->bits);
  GC_CHECK(readRbfMantissa(config, out->bits, kName, &out->mantissa));
  GC_CHECK(readRbfVmax(config, &out->vmax));
  return readOwnerEf(config, false, &out->ownerEf);
}

double agreedVmax(const RbfConfig& cfg, const std::vector<device::AbsStats>& stats) {
  if (cfg.vmax > 0) return cfg.vmax;
  double v = 0;
  for (const device::AbsStats& s : stats) v = std::max(v, s.maxAbs);
  return v;
}

class Rbf final : public QuantAlgorithm {
 public:
  Rbf() : QuantAlgorithm(kName) {}

 private:
  Status configure(const param::Overrides& config, int nranks, FramePlan* plan) override {
    GC_CHECK(readConfig(config, &cfg_));
    plan->growth = double(nranks);
    return Status::Ok();
  }
  Status step(Context& ctx, const AllreduceArgs& args, const CallState& st, float* out,
              float* residual) override {
    RbfCodec phase1(cfg_.bits, cfg_.mantissa, agreedVmax(cfg_, st.stats));
    RbfCodec phase2(cfg_.bits, cfg_.mantissa, 0.0);
    return exchangeCodes(ctx, phase1, phase2, ExchangeSeeds{0, st.call}, args.op, st.acc,
                         args.count, out, residual, 1, &ws_, cfg_.ownerEf);
  }
  Status stepReduceScatter(Context& ctx, const AllreduceArgs& args, const CallState& st,
                           float* out, float* residual) override {
    RbfCodec codec(cfg_.bits, cfg_.mantissa, agreedVmax(cfg_, st.stats));
    return reduceScatterCodes(ctx, codec, ExchangeSeeds{0, st.call}, args.op, st.acc,
                              recvCountOf(args, ctx.net.size()), out, residual, 1, &ws_);
  }

  RbfConfig cfg_;
};

class RbfReference final : public QuantReference {
 public:
  RbfReference() : QuantReference(kName) {}

 private:
  Status loadConfig(const param::Overrides& config) override {
    return readConfig(config, &cfg_);
  }
  FramePlan plan(int nranks) const override { return {true, double(nranks)}; }
  Status step(const AllreduceArgs& args, const std::vector<std::vector<float>>& acc,
              const std::vector<device::AbsStats>& stats, uint64_t call, std::vector<float>* out,
              std::vector<std::vector<float>>* contribution, double*) override {
    RbfCodec phase1(cfg_.bits, cfg_.mantissa, agreedVmax(cfg_, stats));
    RbfCodec phase2(cfg_.bits, cfg_.mantissa, 0.0);
    return simulateExchange(device::cpuBackend(), phase1, phase2, ExchangeSeeds{0, call}, args.op,
                            acc, out, contribution, cfg_.ownerEf ? &ownerResidual_ : nullptr);
  }
  Status stepReduceScatter(const AllreduceArgs& args, const std::vector<std::vector<float>>& acc,
                           const std::vector<device::AbsStats>& stats, uint64_t call,
                           std::vector<float>* out, std::vector<std::vector<float>>* contribution,
                           double*) override {
    RbfCodec codec(cfg_.bits, cfg_.mantissa, agreedVmax(cfg_, stats));
    return simulateReduceScatter(device::cpuBackend(), codec, ExchangeSeeds{0, call}, args.op,
                                 acc, out, contribution);
  }

  RbfConfig cfg_;
};

}  // namespace

Status makeRbfReference(int nranks, const param::Overrides& config,
                        std::unique_ptr<Reference>* out) {
  return makeQuantReference<RbfReference>(nranks, config, out);
}

GC_REGISTER_ALGORITHM(
    rbf, {kName,
          "N-bit range-based float codes (vmax agreed per call); reduce-scatter of codes, "
          "allgather of re-encoded sums; reduce-scatter: the first half",
          {param::Id::BITS, param::Id::RBF_MANTISSA, param::Id::RBF_VMAX,
           param::Id::QUANT_OWNER_EF, param::Id::EF},
          [] { return std::unique_ptr<Algorithm>(new Rbf()); },
          [](int nranks) { return registryReference<RbfReference>(nranks, kName); }, false,
          // One reference class: expect() follows args.coll.
          [](int nranks) { return registryReference<RbfReference>(nranks, kName); }});

}  // namespace gradcomp::algo::quant
