// "rbf": the N-bit range-based float codec (notes section 6) over the
// code-exchange allreduce (code_exchange.h). Phase 1 encodes every rank's
// chunks with one vmax agreed by all ranks: GRADCOMP_RBF_VMAX when set (larger
// values saturate), else the largest |acc| over all ranks of this call (from
// the per-call stats exchange, so nothing saturates). Phase 2 encodes each
// owner's sum with that chunk's own largest |sum| (sent in its payload).
// Rounding is to nearest; error feedback keeps this rank's own encoding error.
//
// Parameters: GRADCOMP_BITS (3..16, default 10), GRADCOMP_RBF_MANTISSA
// (default BITS-4), GRADCOMP_RBF_VMAX (default: tracked).
#include <algorithm>
#include <memory>

#include "algorithms/quant/chunk_codecs.h"
#include "algorithms/quant/quant_algorithms.h"
#include "algorithms/quant/quant_common.h"
#include "common/log.h"

namespace gradcomp::algo::quant {
namespace {

constexpr const char* kName = "rbf";

struct RbfConfig {
  int bits = 10;
  int mantissa = 6;
  double vmax = 0;  // 0: tracked
};

Status readConfig(const param::Overrides& config, RbfConfig* out) {
  GC_CHECK(readBits(config, 10, &out->bits));
  GC_REQUIRE(out->bits >= 3 && out->bits <= 16, Err::InvalidConfig,
             "rbf: GRADCOMP_BITS=%d is not supported (accepted: 3..16)", out->bits);
  GC_CHECK(readRbfMantissa(config, out->bits, kName, &out->mantissa));
  GC_CHECK(readRbfVmax(config, &out->vmax));
  return Status::Ok();
}

double agreedVmax(const RbfConfig& cfg, const std::vector<device::AbsStats>& stats) {
  if (cfg.vmax > 0) return cfg.vmax;
  double v = 0;
  for (const device::AbsStats& s : stats) v = std::max(v, s.maxAbs);
  return v;
}

class Rbf final : public Algorithm {
 public:
  Status allreduce(Context& ctx, const AllreduceArgs& args) override {
    GC_CHECK(checkArgs(kName, args));
    if (args.count == 0) return Status::Ok();  // nothing to send; every rank agrees
    RbfConfig cfg;
    GC_CHECK(readConfig(ctx.config, &cfg));
    CallState& st = st_;
    GC_CHECK(beginCall(ctx, args, true, double(ctx.net.size()), &calls_, &st));
    if (st.fallback) return fallbackCall(ctx, args, &st, &ws_);
    RbfCodec phase1(cfg.bits, cfg.mantissa, agreedVmax(cfg, st.stats));
    RbfCodec phase2(cfg.bits, cfg.mantissa, 0.0);
    std::vector<float>& out = ws_.out;
    std::vector<float>& contribution = ws_.contribution;
    out.resize(args.count);
    contribution.resize(st.errorFeedback ? args.count : 0);
    GC_CHECK(exchangeCodes(ctx, phase1, phase2, ExchangeSeeds{0, st.call}, args.op,
                           st.acc.data(), args.count, out.data(),
                           st.errorFeedback ? contribution.data() : nullptr, 1, &ws_));
    return endCall(ctx, args, &st, out.data(), st.errorFeedback ? contribution.data() : nullptr);
  }

 private:
  CallCounter calls_;
  CallState st_;
  Workspace ws_;
};

class RbfReference final : public Reference {
 public:
  // Bench flags reach the reference here (registry values until called).
  Status configure(const param::Overrides& config) override { return init(ranks_->size(), config); }
  Status init(int nranks, const param::Overrides& config) {
    GC_CHECK(readConfig(config, &cfg_));
    return CentralRanks::create(nranks, config, &ranks_);
  }
  Status expect(const std::vector<const void*>& inputs, const AllreduceArgs& args,
                std::vector<double>* expected, std::vector<double>* tolerance) override {
    GC_CHECK(checkArgs("rbf reference", args, false));
    if (args.count == 0) {
      expected->clear();
      tolerance->clear();
      return Status::Ok();
    }
    std::vector<std::vector<float>> acc, contribution;
    std::vector<device::AbsStats> stats;
    bool fallback = false;
    uint64_t call = 0;
    GC_CHECK(ranks_->begin(inputs, args, true, double(ranks_->size()), &acc, &stats, &fallback,
                           &call));
    std::vector<float> out;
    if (fallback) {
      GC_CHECK(ranks_->fallback(acc, args, true, &out));
    } else {
      RbfCodec phase1(cfg_.bits, cfg_.mantissa, agreedVmax(cfg_, stats));
      RbfCodec phase2(cfg_.bits, cfg_.mantissa, 0.0);
      GC_CHECK(simulateExchange(device::cpuBackend(), phase1, phase2, ExchangeSeeds{0, call},
                                args.op, acc, &out, &contribution));
      GC_CHECK(ranks_->end(args, true, acc, contribution));
    }
    fillExpected(out, 0.0, expected, tolerance);
    return Status::Ok();
  }

 private:
  RbfConfig cfg_;
  std::unique_ptr<CentralRanks> ranks_;
};

}  // namespace

Status makeRbfReference(int nranks, const param::Overrides& config,
                        std::unique_ptr<Reference>* out) {
  auto ref = std::make_unique<RbfReference>();
  GC_CHECK(ref->init(nranks, config));
  *out = std::move(ref);
  return Status::Ok();
}

GC_REGISTER_ALGORITHM(
    rbf, {kName,
          "N-bit range-based float codes (vmax agreed per call); reduce-scatter of codes, "
          "allgather of re-encoded sums",
          {param::Id::BITS, param::Id::RBF_MANTISSA, param::Id::RBF_VMAX},
          [] { return std::unique_ptr<Algorithm>(new Rbf()); },
          [](int nranks) {
            std::unique_ptr<Reference> ref;
            Status s = makeRbfReference(nranks, param::Overrides{}, &ref);
            if (!s.ok()) GC_WARN("rbf reference: %s", s.toString().c_str());
            return ref;
          }});

}  // namespace gradcomp::algo::quant
