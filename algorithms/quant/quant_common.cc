#include "algorithms/quant/quant_common.h"

#include <cfloat>
#include <cmath>
#include <algorithm>
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

Status readOwnerEf(const param::Overrides& config, bool fallback, bool* on) {
  param::Value v;
  GC_CHECK(config.get(param::Id::QUANT_OWNER_EF, &v));
  *on = v.set ? v.i != 0 : fallback;
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

// Stats travel as 2 fp64 words; the count is exact below 2^53.
constexpr size_t kStatsWords = 2;
constexpr size_t kStatsBytes = kStatsWords * sizeof(double);
// 2^53: larger counts are not exact in fp64 (and converting a value past
// 2^64 to uint64_t is undefined): a peer sending one is malformed.
constexpr double kMaxExactCount = 9007199254740992.0;

void packStats(const device::AbsStats& s, double* w) {
  w[0] = s.maxAbs;
  w[1] = double(s.nonFinite);
}

Status unpackStats(const double* w, int peer, device::AbsStats* s) {
  GC_REQUIRE(std::isfinite(w[0]) && w[0] >= 0 && w[1] >= 0 && w[1] <= kMaxExactCount &&
                 w[1] == std::floor(w[1]),
             Err::RemoteError, "quantized call stats from rank %d are malformed (%g, %g)", peer,
             w[0], w[1]);
  s->maxAbs = w[0];
  s->nonFinite = uint64_t(w[1]);
  return Status::Ok();
}

bool storeOn(const Context& ctx) {
  return ctx.errorFeedback && ctx.errorFeedback->enabled();
}

}  // namespace

Status beginCall(Context& ctx, const AllreduceArgs& args, bool useErrorFeedback, double growth,
                 CallCounter* counter, device::DeviceArray<float>* scratch, CallState* st) {
  const size_t n = args.count;
  const int P = ctx.net.size(), r = ctx.net.rank();
  st->key = residualKey(args);
  st->call = counter->next(scheduleKey(args));
  st->errorFeedback = useErrorFeedback && storeOn(ctx);
  bool fresh = true;
  if (st->errorFeedback) {
    GC_CHECK(ctx.errorFeedback->begin(ctx.dev, st->key, n, ctx.callSeq, scratch, &st->acc,
                                      &fresh));
  } else {
    scratch->bind(ctx.dev).resize(n);
    st->acc = scratch->data();
  }
  device::AccumulateStats acc;
  GC_CHECK(ctx.dev.accumulate(st->acc, args.sendBuf, args.dtype, n, !fresh, -1.0f, &acc));
  GC_CHECK(ctx.dev.sync());
  device::AbsStats mine;
  mine.maxAbs = acc.maxAbs;
  mine.nonFinite = acc.nonFinite;

  std::vector<double> words(size_t(P) * kStatsWords);
  packStats(mine, &words[size_t(r) * kStatsWords]);
  std::vector<Transfer> sends, recvs;
  for (int j = 0; j < P; ++j) {
    if (j == r) continue;
    recvs.push_back({j, &words[size_t(j) * kStatsWords], kStatsBytes});
    sends.push_back({j, &words[size_t(r) * kStatsWords], kStatsBytes});
  }
  GC_CHECK(exchangeAll(ctx.net, transport::makeTag(ctx.callSeq, 0), recvs, sends,
                       "quantized call stats"));
  st->stats.resize(P);
  for (int j = 0; j < P; ++j) GC_CHECK(unpackStats(&words[size_t(j) * kStatsWords], j, &st->stats[j]));
  st->fallback = mustFallBack(st->stats, growth);
  return Status::Ok();
}

Status fallbackCall(Context& ctx, const AllreduceArgs& args, CallState* st, Workspace* ws) {
  const size_t n = outputCount(args, ctx.net.size());
  ws->bind(ctx.dev);
  float* out = args.dtype == DataType::Float32 ? static_cast<float*>(args.recvBuf) : nullptr;
  if (!out) {
    ws->out.resize(n);
    out = ws->out.data();
  }
  RawCodec raw;
  if (args.coll == Collective::ReduceScatter)
    GC_CHECK(reduceScatterCodes(ctx, raw, ExchangeSeeds{}, args.op, st->acc, n, out, nullptr, 1,
                                ws));
  else
    GC_CHECK(exchangeCodes(ctx, raw, raw, ExchangeSeeds{}, args.op, st->acc, n, out, nullptr, 1,
                           ws));
  // The residual was sent in full (or held a non-finite value): start over at 0.
  if (st->errorFeedback) GC_CHECK(ctx.errorFeedback->clear(ctx.dev, st->key));
  if (out != args.recvBuf)
    GC_CHECK(ctx.dev.convert(args.recvBuf, args.dtype, out, DataType::Float32, n));
  return ctx.dev.sync();
}

Status endCall(Context& ctx, const AllreduceArgs& args, CallState* st, const float* out) {
  if (out != args.recvBuf)
    GC_CHECK(ctx.dev.convert(args.recvBuf, args.dtype, out, DataType::Float32,
                             outputCount(args, ctx.net.size())));
  if (st->errorFeedback) GC_CHECK(ctx.errorFeedback->end(ctx.dev, st->key, st->acc));
  return ctx.dev.sync();
}

// ---- Central side -------------------------------------------------------------

Status CentralRanks::create(int nranks, const param::Overrides& config,
                            std::unique_ptr<CentralRanks>* out) {
  auto c = std::make_unique<CentralRanks>();
  GC_CHECK(CentralResiduals::create(nranks, config, &c->res_));
  for (int r = 0; r < nranks; ++r) c->scratch_.emplace_back(device::cpuBackend());
  c->accs_.assign(nranks, nullptr);
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
  *call = counter_.next(scheduleKey(args));
  acc->assign(P, std::vector<float>(args.count));
  stats->resize(P);
  for (int r = 0; r < P; ++r) {
    bool fresh = true;
    if (useErrorFeedback && res_->stores[r]->enabled()) {
      const uint64_t seq = res_->shared ? res_->callSeq : *call;
      GC_CHECK(res_->stores[r]->begin(dev, residualKey(args), args.count, seq, &scratch_[r],
                                      &accs_[r], &fresh));
    } else {
      scratch_[r].resize(args.count);
      accs_[r] = scratch_[r].data();
    }
    device::AccumulateStats st;
    GC_CHECK(dev.accumulate(accs_[r], inputs[r], args.dtype, args.count, !fresh, -1.0f, &st));
    std::copy(accs_[r], accs_[r] + args.count, (*acc)[r].begin());
    (*stats)[r].maxAbs = st.maxAbs;
    (*stats)[r].nonFinite = st.nonFinite;
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
  if (useErrorFeedback)
    for (auto& s : res_->stores)
      if (s->enabled()) GC_CHECK(s->clear(device::cpuBackend(), residualKey(args)));
  return Status::Ok();
}

Status CentralRanks::end(const AllreduceArgs& args, bool useErrorFeedback,
                         const std::vector<std::vector<float>>& acc,
                         const std::vector<std::vector<float>>& contribution,
                         const std::vector<OwnerResidual>& owner) {
  if (!useErrorFeedback) return Status::Ok();
  GC_REQUIRE(owner.empty() || int(owner.size()) == size(), Err::Internal,
             "quantized reference: %zu owner residuals for %d ranks", owner.size(), size());
  for (int r = 0; r < size(); ++r) {
    if (!res_->stores[r]->enabled()) continue;
    // The accumulator is CPU reference memory: the residual is written in place.
    for (size_t i = 0; i < args.count; ++i) accs_[r][i] = acc[r][i] - contribution[r][i];
    if (!owner.empty()) {
      const OwnerResidual& o = owner[r];
      GC_REQUIRE(o.begin + o.values.size() <= args.count, Err::Internal,
                 "quantized reference: owner residual of rank %d past the buffer", r);
      std::copy(o.values.begin(), o.values.end(), accs_[r] + o.begin);
    }
    GC_CHECK(res_->stores[r]->end(device::cpuBackend(), residualKey(args), accs_[r]));
  }
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
