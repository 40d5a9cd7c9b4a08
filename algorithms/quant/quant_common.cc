#include "algorithms/quant/quant_common.h"

#include <cfloat>
#include <cmath>
#include <cstring>

#include "algorithms/quant/code_exchange.h"

namespace gradcomp::algo::quant {

Status readInt(const param::Overrides& config, param::Id id, int64_t* out) {
  return config.getInt(id, out);
}

Status readBits(const param::Overrides& config, int fallback, int* bits) {
  param::Value v;
  GC_CHECK(config.get(param::Id::BITS, &v));
  *bits = v.set ? int(v.i) : fallback;
  return Status::Ok();
}

Status readRbfMantissa(const param::Overrides& config, int bits, const char* who, int* mantissa) {
  param::Value v;
  GC_CHECK(config.get(param::Id::RBF_MANTISSA, &v));
  *mantissa = v.set ? int(v.i) : device::rbfDefaultMantissa(bits);
  GC_REQUIRE(device::rbfValidLayout(bits, *mantissa), Err::InvalidConfig,
             "%s: GRADCOMP_RBF_MANTISSA=%d does not fit %d-bit words (accepted: at most %d, and "
             "large enough that the words span at most 64 binades; default %d)",
             who, *mantissa, bits, bits - 2, device::rbfDefaultMantissa(bits));
  return Status::Ok();
}

Status readRbfVmax(const param::Overrides& config, double* vmax) {
  param::Value v;
  GC_CHECK(config.get(param::Id::RBF_VMAX, &v));
  *vmax = v.set ? v.d : 0.0;
  return Status::Ok();
}

Status checkArgs(const char* who, const AllreduceArgs& args, bool buffers) {
  GC_REQUIRE(dtypeSize(args.dtype) != 0, Err::InvalidArgument, "%s: dtype value %d is invalid",
             who, int(args.dtype));
  GC_REQUIRE(isFloating(args.dtype), Err::Unsupported,
             "%s: dtype %s is not supported (accepted: float, half, bfloat16, double; "
             "integers need the dense algorithm)",
             who, dtypeName(args.dtype));
  GC_REQUIRE(args.op == RedOp::Sum || args.op == RedOp::Avg, Err::InvalidArgument,
             "%s: op value %d is invalid: expected sum (0) or avg (4)", who, int(args.op));
  GC_REQUIRE(!buffers || args.count == 0 || (args.sendBuf && args.recvBuf), Err::InvalidArgument,
             "%s: %s is null with count %zu", who, args.sendBuf ? "recvBuf" : "sendBuf",
             args.count);
  return Status::Ok();
}

bool mustFallBack(const std::vector<device::AbsStats>& all, double growth) {
  for (const device::AbsStats& s : all)
    if (s.nonFinite || !(s.maxAbs * growth < 0.25 * double(FLT_MAX))) return true;
  return false;
}

namespace {

// Stats travel as 3 fp64 words; the count is exact below 2^53.
constexpr size_t kStatsBytes = 3 * sizeof(double);
// 2^53: larger counts are not exact in fp64 (and converting a value past
// 2^64 to uint64_t is undefined): a peer sending one is malformed.
constexpr double kMaxExactCount = 9007199254740992.0;

void packStats(const device::AbsStats& s, double* w) {
  w[0] = s.maxAbs;
  w[1] = s.sumAbs;
  w[2] = double(s.nonFinite);
}

Status unpackStats(const double* w, int peer, device::AbsStats* s) {
  GC_REQUIRE(std::isfinite(w[0]) && w[0] >= 0 && std::isfinite(w[1]) && w[1] >= 0 &&
                 w[2] >= 0 && w[2] <= kMaxExactCount && w[2] == std::floor(w[2]),
             Err::RemoteError, "quantized call stats from rank %d are malformed (%g, %g, %g)",
             peer, w[0], w[1], w[2]);
  s->maxAbs = w[0];
  s->sumAbs = w[1];
  s->nonFinite = uint64_t(w[2]);
  return Status::Ok();
}

bool storeOn(const Context& ctx) {
  return ctx.errorFeedback && ctx.errorFeedback->enabled();
}

}  // namespace

Status beginCall(Context& ctx, const AllreduceArgs& args, bool useErrorFeedback, double growth,
                 CallCounter* counter, CallState* st) {
  const size_t n = args.count;
  const int P = ctx.net.size(), r = ctx.net.rank();
  st->key = args.bufferKey;
  st->call = counter->next(args.bufferKey);
  device::bound(st->acc, ctx.dev).resize(n);
  GC_CHECK(ctx.dev.convert(st->acc.data(), DataType::Float32, args.sendBuf, args.dtype, n));
  st->errorFeedback = useErrorFeedback && storeOn(ctx);
  if (st->errorFeedback)
    GC_CHECK(ctx.errorFeedback->addResidual(st->key, ctx.callSeq, st->acc.data(), n));

  device::AbsStats mine;
  GC_CHECK(ctx.dev.absStats(st->acc.data(), n, &mine));
  std::vector<double> words(size_t(P) * 3);
  packStats(mine, &words[size_t(r) * 3]);
  std::vector<Transfer> sends, recvs;
  for (int j = 0; j < P; ++j) {
    if (j == r) continue;
    recvs.push_back({j, &words[size_t(j) * 3], kStatsBytes});
    sends.push_back({j, &words[size_t(r) * 3], kStatsBytes});
  }
  GC_CHECK(exchangeAll(ctx.net, transport::makeTag(ctx.callSeq, 0), recvs, sends,
                       "quantized call stats"));
  st->stats.resize(P);
  for (int j = 0; j < P; ++j) GC_CHECK(unpackStats(&words[size_t(j) * 3], j, &st->stats[j]));
  st->fallback = mustFallBack(st->stats, growth);
  return Status::Ok();
}

Status fallbackCall(Context& ctx, const AllreduceArgs& args, CallState* st, Workspace* ws) {
  const size_t n = args.count;
  device::Buffer<float>& out = device::bound(ws->out, ctx.dev);
  out.resize(n);
  RawCodec raw;
  GC_CHECK(exchangeCodes(ctx, raw, raw, ExchangeSeeds{}, args.op, st->acc.data(), n, out.data(),
                         nullptr, 1, ws));
  GC_CHECK(ctx.dev.convert(args.recvBuf, args.dtype, out.data(), DataType::Float32, n));
  // The residual was sent in full (or held a non-finite value): start over at 0.
  if (st->errorFeedback) {
    const std::vector<float> zero(n, 0.0f);
    GC_CHECK(ctx.errorFeedback->storeResidual(st->key, zero.data(), nullptr, n));
  }
  return Status::Ok();
}

Status endCall(Context& ctx, const AllreduceArgs& args, CallState* st, const float* out,
               const float* contribution) {
  GC_CHECK(ctx.dev.convert(args.recvBuf, args.dtype, out, DataType::Float32, args.count));
  if (st->errorFeedback)
    GC_CHECK(ctx.errorFeedback->storeResidual(st->key, st->acc.data(), contribution, args.count));
  return Status::Ok();
}

// ---- Central side -------------------------------------------------------------

Status CentralRanks::create(int nranks, const param::Overrides& config,
                            std::unique_ptr<CentralRanks>* out) {
  auto c = std::make_unique<CentralRanks>();
  c->stores_.resize(nranks);
  for (auto& s : c->stores_) GC_CHECK(ErrorFeedbackStore::create(config, &s));
  *out = std::move(c);
  return Status::Ok();
}

Status CentralRanks::begin(const std::vector<const void*>& inputs, const AllreduceArgs& args,
                           bool useErrorFeedback, double growth,
                           std::vector<std::vector<float>>* acc,
                           std::vector<device::AbsStats>* stats, bool* fallback, uint64_t* call) {
  const int P = size();
  GC_REQUIRE(int(inputs.size()) == P, Err::InvalidArgument,
             "quantized reference: %zu inputs for %d ranks", inputs.size(), P);
  device::Backend& dev = device::cpuBackend();
  *call = counter_.next(args.bufferKey);
  acc->assign(P, std::vector<float>(args.count));
  stats->resize(P);
  for (int r = 0; r < P; ++r) {
    GC_CHECK(dev.convert((*acc)[r].data(), DataType::Float32, inputs[r], args.dtype, args.count));
    if (useErrorFeedback && stores_[r]->enabled())
      GC_CHECK(stores_[r]->addResidual(args.bufferKey, *call, (*acc)[r].data(), args.count));
    GC_CHECK(dev.absStats((*acc)[r].data(), args.count, &(*stats)[r]));
  }
  *fallback = mustFallBack(*stats, growth);
  return Status::Ok();
}

Status CentralRanks::fallback(const std::vector<std::vector<float>>& acc,
                              const AllreduceArgs& args, bool useErrorFeedback,
                              std::vector<float>* out) {
  RawCodec raw;
  GC_CHECK(simulateExchange(device::cpuBackend(), raw, raw, ExchangeSeeds{}, args.op, acc, out,
                            nullptr));
  if (useErrorFeedback) {
    std::vector<float> zero(args.count, 0.0f);
    for (auto& s : stores_)
      if (s->enabled()) GC_CHECK(s->storeResidual(args.bufferKey, zero.data(), nullptr, args.count));
  }
  return Status::Ok();
}

Status CentralRanks::end(const AllreduceArgs& args, bool useErrorFeedback,
                         const std::vector<std::vector<float>>& acc,
                         const std::vector<std::vector<float>>& contribution) {
  if (!useErrorFeedback) return Status::Ok();
  for (int r = 0; r < size(); ++r)
    if (stores_[r]->enabled())
      GC_CHECK(stores_[r]->storeResidual(args.bufferKey, acc[r].data(), contribution[r].data(),
                                         args.count));
  return Status::Ok();
}

void fillExpected(const std::vector<float>& out, double relTolerance,
                  std::vector<double>* expected, std::vector<double>* tolerance) {
  expected->assign(out.begin(), out.end());
  tolerance->assign(out.size(), 0.0);
  if (relTolerance > 0) {
    double scale = 0;
    for (float v : out) scale = std::max(scale, std::fabs(double(v)));
    tolerance->assign(out.size(), relTolerance * scale);
  }
}

}  // namespace gradcomp::algo::quant
