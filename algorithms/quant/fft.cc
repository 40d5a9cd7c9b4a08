// "fft": FFT sparsification with range-based float values (seed 003, notes
// section 7). Each rank transforms acc in chunks (real-to-complex, fp32),
// keeps the (1 - theta) fraction of each chunk's bins with the most energy,
// RBF-encodes them (fft_payload.h) and allgathers the payload; every rank
// decodes all P payloads in rank order into one spectrum (linearity: the sum
// of spectra is the spectrum of the sum) and runs one inverse FFT. All ranks
// decode the same bytes in the same order, so they return identical results.
//
// theta schedule: theta_t = THETA * max(0, 1 - t / THETA_DECAY_CALLS), t = the
// number of earlier calls with this scheduleKey (THETA_DECAY_CALLS = 0: constant),
// so training can diminish theta to 0 as the paper requires for convergence.
// Error feedback: residual = acc - inverse FFT of this rank's own decoded
// payload (the time-domain part it did not get across).
//
// Wire bytes per rank: 16 (P-1) for the stats exchange + (P-1) * payload.
// No reduce-scatter form (docs/design.md, "Reduce-scatter forms").
#include <algorithm>
#include <memory>

#include "algorithms/quant/code_exchange.h"
#include "algorithms/quant/fft_payload.h"
#include "algorithms/quant/quant_algorithms.h"
#include "algorithms/quant/quant_frame.h"

namespace gradcomp::algo::quant {
namespace {

constexpr const char* kName = "fft";

struct FftConfig {
  FftLayout layout;  // n and keep are per call
  double theta = 0.85;
  int64_t decayCalls = 0;
};

Status readConfig(const param::Overrides& config, FftConfig* out) {
  GC_CHECK(readBits(config, 10, &out->layout.bits));
  GC_REQUIRE(out->layout.bits == 0 || (out->layout.bits >= 3 && out->layout.bits <= 16),
             Err::InvalidConfig,
             "fft: GRADCOMP_BITS=%d is not supported (accepted: 0 for raw fp32 bins, 3..16)",
             out->layout.bits);
  if (out->layout.bits)
    GC_CHECK(readRbfMantissa(config, out->layout.bits, kName, &out->layout.mantissa));
  GC_CHECK(readRbfVmax(config, &out->layout.vmax));
  GC_CHECK(config.getDouble(param::Id::THETA, &out->theta));
  GC_CHECK(config.getInt(param::Id::THETA_DECAY_CALLS, &out->decayCalls));
  int64_t chunk = 0;
  GC_CHECK(config.getInt(param::Id::FFT_CHUNK, &chunk));
  out->layout.chunk = size_t(chunk);
  return Status::Ok();
}

FftLayout layoutFor(const FftConfig& cfg, size_t n, uint64_t call) {
  FftLayout l = cfg.layout;
  l.n = n;
  double theta = cfg.theta;
  if (cfg.decayCalls > 0) theta *= std::max(0.0, 1.0 - double(call) / double(cfg.decayCalls));
  l.keep = 1.0 - theta;
  return l;
}

// |spectrum| <= chunk * max|x| per rank; P of them are summed.
double growthFor(const FftConfig& cfg, int P) { return double(P) * double(cfg.layout.chunk); }

Status inverseTo(device::Backend& dev, const FftLayout& l, const float* spectrum, RedOp op,
                 int P, float* out) {
  GC_CHECK(dev.fftInverse(spectrum, l.n, l.chunk, out));
  if (op == RedOp::Avg) GC_CHECK(dev.divide(out, l.n, DataType::Float32, P));
  return Status::Ok();
}

class Fft final : public QuantAlgorithm {
 public:
  Fft() : QuantAlgorithm(kName) {}
  // Plans for this call's transforms, made before the stream is parked.
  Status prepare(Context& ctx, const AllreduceArgs& args) override {
    FftConfig cfg;
    GC_CHECK(readConfig(ctx.config, &cfg));
    return args.count ? ctx.dev.prepareFft(args.count, cfg.layout.chunk) : Status::Ok();
  }
  // Two complex spectra (the sum's and this rank's own, 8 bytes a value
  // each), the inverse's copy of one and the contribution: about 8x the
  // tensor's fp32 bytes beyond the generic bound (measured at 16 M values).
  device::Backend::Reservation extraFirstCall(const AllreduceArgs& args) const override {
    return {8 * 4 * args.count, 0};
  }

 private:
  Status configure(const param::Overrides& config, int nranks, FramePlan* plan) override {
    GC_CHECK(readConfig(config, &cfg_));
    plan->growth = growthFor(cfg_, nranks);
    return Status::Ok();
  }
  Status step(Context& ctx, const AllreduceArgs& args, const CallState& st, float* out,
              float* residual) override {
    device::Backend& dev = ctx.dev;
    const int P = ctx.net.size(), r = ctx.net.rank();
    const FftLayout l = layoutFor(cfg_, args.count, st.call);
    const size_t bytes = fftPayloadBytes(l);
    ws_.bindPeers(dev, P);
    std::vector<device::HostArray<uint8_t>>& payload = ws_.recv;
    for (auto& p : payload) p.resize(bytes);
    GC_CHECK(fftEncode(dev, l, st.acc, payload[r].data(), &scratch_));
    GC_CHECK(dev.sync());
    std::vector<Transfer> sends, recvs;
    for (int j = 0; j < P; ++j) {
      if (j == r) continue;
      recvs.push_back({j, payload[j].data(), bytes});
      sends.push_back({j, payload[r].data(), bytes});
    }
    GC_CHECK(exchangeAll(ctx.net, transport::makeTag(ctx.callSeq, 1), recvs, sends,
                         "FFT payload allgather"));
    const size_t bins = device::fftBinCount(l.n, l.chunk);
    device::DeviceArray<float>& spectrum = ws_.spectrum;
    GC_CHECK(spectrum.assignZero(2 * bins));
    for (int s = 0; s < P; ++s)
      GC_CHECK(fftDecodeAdd(dev, l, payload[s].data(), s, spectrum.data(), &scratch_));
    GC_CHECK(inverseTo(dev, l, spectrum.data(), args.op, P, out));
    if (residual) {  // acc -= the time-domain part this rank got across
      device::DeviceArray<float>& own = ws_.own;
      GC_CHECK(own.assignZero(2 * bins));
      GC_CHECK(fftDecodeAdd(dev, l, payload[r].data(), r, own.data(), &scratch_));
      device::DeviceArray<float>& contribution = ws_.scratch;
      contribution.resize(args.count);
      GC_CHECK(dev.fftInverse(own.data(), l.n, l.chunk, contribution.data()));
      GC_CHECK(dev.subtract(residual, residual, contribution.data(), args.count));
    }
    return dev.sync();  // the decodes read the payloads
  }

  FftConfig cfg_;
  FftScratch scratch_;
};

class FftReference final : public QuantReference {
 public:
  FftReference() : QuantReference(kName) {}

 private:
  Status loadConfig(const param::Overrides& config) override {
    return readConfig(config, &cfg_);
  }
  FramePlan plan(int nranks) const override { return {true, growthFor(cfg_, nranks)}; }
  Status step(const AllreduceArgs& args, const std::vector<std::vector<float>>& acc,
              const std::vector<device::AbsStats>&, uint64_t call, std::vector<float>* out,
              std::vector<std::vector<float>>* contribution, double* relTolerance) override {
    device::Backend& dev = device::cpuBackend();
    const int P = int(acc.size());
    const FftLayout l = layoutFor(cfg_, args.count, call);
    const size_t bins = device::fftBinCount(l.n, l.chunk);
    std::vector<uint8_t> payload(fftPayloadBytes(l));
    std::vector<float> spectrum(2 * bins, 0.0f), own;
    contribution->assign(P, std::vector<float>(args.count));
    for (int s = 0; s < P; ++s) {
      GC_CHECK(fftEncode(dev, l, acc[s].data(), payload.data()));
      GC_CHECK(fftDecodeAdd(dev, l, payload.data(), s, spectrum.data()));
      own.assign(2 * bins, 0.0f);
      GC_CHECK(fftDecodeAdd(dev, l, payload.data(), s, own.data()));
      GC_CHECK(dev.fftInverse(own.data(), l.n, l.chunk, (*contribution)[s].data()));
    }
    out->resize(args.count);
    GC_CHECK(inverseTo(dev, l, spectrum.data(), args.op, P, out->data()));
    // Same plans, same operations, same order: bit-exact in practice. The
    // tolerance (1e-6 of the largest |result|) only allows for an FFT library
    // that picks different kernels in the two processes.
    *relTolerance = 1e-6;
    return Status::Ok();
  }

  FftConfig cfg_;
};

}  // namespace

Status makeFftReference(int nranks, const param::Overrides& config,
                        std::unique_ptr<Reference>* out) {
  return makeQuantReference<FftReference>(nranks, config, out);
}

GC_REGISTER_ALGORITHM(
    fft, {kName,
          "FFT sparsification: keep the (1-theta) highest-energy bins per chunk, RBF-encode, "
          "allgather, sum spectra, one inverse FFT",
          {param::Id::THETA, param::Id::THETA_DECAY_CALLS, param::Id::FFT_CHUNK, param::Id::BITS,
           param::Id::RBF_MANTISSA, param::Id::RBF_VMAX, param::Id::EF},
          [] { return std::unique_ptr<Algorithm>(new Fft()); },
          [](int nranks) { return registryReference<FftReference>(nranks, kName); }, false,
          // No reduce-scatter form: its payload is the whole chunked spectrum,
          // which one shard's owner cannot use without the others'.
          nullptr});

}  // namespace gradcomp::algo::quant
