// "qsgd": bucketed max-min quantization with stochastic rounding (QSGD / CGX
// style, notes section 6) over the code-exchange allreduce (code_exchange.h):
// reduce-scatter of b-bit codes, fp32 sums at the chunk owners, allgather of
// the re-quantized owned chunks. Error feedback keeps what this rank's own
// quantization lost (acc - decoded codes it sent); the owners' second
// quantization is common to all ranks and not fed back.
//
// Parameters: GRADCOMP_BITS (1|2|4|8, default 8), GRADCOMP_BUCKET (default
// 512), GRADCOMP_QUANT_SEED. Rounding of element i in a call draws
// counterUniform(streamSeed(seed, call, rank, phase), i), call = the number of
// earlier calls with the same bufferKey on this algorithm object.
#include <memory>

#include "algorithms/quant/chunk_codecs.h"
#include "algorithms/quant/quant_algorithms.h"
#include "algorithms/quant/quant_common.h"
#include "common/log.h"

namespace gradcomp::algo::quant {
namespace {

constexpr const char* kName = "qsgd";

struct QsgdConfig {
  int bits = 8;
  size_t bucket = 512;
  uint64_t seed = 0;
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
  return Status::Ok();
}

// A sum of P values each at most maxAbs stays below P * maxAbs.
double growthFor(int P) { return double(P); }

class Qsgd final : public Algorithm {
 public:
  Status allreduce(Context& ctx, const AllreduceArgs& args) override {
    GC_CHECK(checkArgs(kName, args));
    if (args.count == 0) return Status::Ok();  // nothing to send; every rank agrees
    QsgdConfig cfg;
    GC_CHECK(readConfig(ctx.config, &cfg));
    CallState& st = st_;
    GC_CHECK(beginCall(ctx, args, true, growthFor(ctx.net.size()), &calls_, &st));
    if (st.fallback) return fallbackCall(ctx, args, &st, &ws_);
    MaxMinCodec codec(cfg.bits, cfg.bucket);
    std::vector<float>& out = ws_.out;
    std::vector<float>& contribution = ws_.contribution;
    out.resize(args.count);
    contribution.resize(st.errorFeedback ? args.count : 0);
    GC_CHECK(exchangeCodes(ctx, codec, codec, ExchangeSeeds{cfg.seed, st.call}, args.op,
                           st.acc.data(), args.count, out.data(),
                           st.errorFeedback ? contribution.data() : nullptr, 1, &ws_));
    return endCall(ctx, args, &st, out.data(), st.errorFeedback ? contribution.data() : nullptr);
  }

 private:
  CallCounter calls_;
  CallState st_;
  Workspace ws_;
};

// Same encodings, same seeds, same fp32 operations: results are bit-exact.
class QsgdReference final : public Reference {
 public:
  static Status create(int nranks, const param::Overrides& config, std::unique_ptr<Reference>* out) {
    auto ref = std::make_unique<QsgdReference>();
    GC_CHECK(readConfig(config, &ref->cfg_));
    GC_CHECK(CentralRanks::create(nranks, config, &ref->ranks_));
    *out = std::move(ref);
    return Status::Ok();
  }
  // Bench flags reach the reference here (registry values until called).
  Status configure(const param::Overrides& config) override {
    GC_CHECK(readConfig(config, &cfg_));
    return CentralRanks::create(ranks_->size(), config, &ranks_);
  }
  Status expect(const std::vector<const void*>& inputs, const AllreduceArgs& args,
                std::vector<double>* expected, std::vector<double>* tolerance) override {
    GC_CHECK(checkArgs("qsgd reference", args, false));
    if (args.count == 0) {
      expected->clear();
      tolerance->clear();
      return Status::Ok();
    }
    std::vector<std::vector<float>> acc, contribution;
    std::vector<device::AbsStats> stats;
    bool fallback = false;
    uint64_t call = 0;
    GC_CHECK(ranks_->begin(inputs, args, true, growthFor(ranks_->size()), &acc, &stats,
                           &fallback, &call));
    std::vector<float> out;
    if (fallback) {
      GC_CHECK(ranks_->fallback(acc, args, true, &out));
    } else {
      MaxMinCodec codec(cfg_.bits, cfg_.bucket);
      GC_CHECK(simulateExchange(device::cpuBackend(), codec, codec, ExchangeSeeds{cfg_.seed, call},
                                args.op, acc, &out, &contribution));
      GC_CHECK(ranks_->end(args, true, acc, contribution));
    }
    fillExpected(out, 0.0, expected, tolerance);
    return Status::Ok();
  }

 private:
  QsgdConfig cfg_;
  std::unique_ptr<CentralRanks> ranks_;
};

}  // namespace

Status makeQsgdReference(int nranks, const param::Overrides& config,
                         std::unique_ptr<Reference>* out) {
  return QsgdReference::create(nranks, config, out);
}

GC_REGISTER_ALGORITHM(
    qsgd, {kName,
           "bucketed max-min quantization, stochastic rounding; reduce-scatter of codes, "
           "allgather of re-quantized sums",
           {param::Id::BITS, param::Id::BUCKET, param::Id::QUANT_SEED},
           [] { return std::unique_ptr<Algorithm>(new Qsgd()); },
           [](int nranks) {
             std::unique_ptr<Reference> ref;
             Status s = QsgdReference::create(nranks, param::Overrides{}, &ref);
             if (!s.ok()) GC_WARN("qsgd reference: %s", s.toString().c_str());
             return ref;
           }});

}  // namespace gradcomp::algo::quant
