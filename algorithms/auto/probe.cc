#include "algorithms/auto/probe.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "algorithms/auto/agree.h"
#include "algorithms/error_feedback.h"
#include "algorithms/shared/requests.h"
#include "common/log.h"
#include "device/arrays.h"

namespace gradcomp::algo::autosel {
namespace {

using Clock = std::chrono::steady_clock;

// Sequence numbers of the probe's collectives: the top of the 24-bit space
// the tags keep (transport.h makeTag), apart from calls and agreements.
constexpr uint64_t kProbeSeq = 0xF00000;
constexpr size_t kLevels[] = {65536, 262144, 1048576, 4194304};
constexpr size_t kFirstShiftBytes = 64 << 10, kMaxShiftBytes = 16 << 20;
constexpr double kShiftTargetS = 2e-3;
constexpr int kLatencyRounds = 5, kBandwidthRounds = 2, kMaxDistances = 8, kMeasuredRuns = 2;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

bool transportError(const Status& s) {
  return s.code() == Err::RemoteError || s.code() == Err::Timeout;
}

// Gradient-like values, different per rank and run: a sum of uniforms
// (roughly normal) with a heavy tail on every 97th element.
float sampleValue(int rank, uint64_t run, size_t i) {
  uint64_t h = (uint64_t(rank) * 0x9E3779B97F4A7C15ull) ^ (run * 0xBF58476D1CE4E5B9ull) ^ i;
  double sum = 0;
  for (int k = 0; k < 4; ++k) {
    h ^= h >> 31;
    h *= 0x94D049BB133111EBull;
    h ^= h >> 29;
    sum += double(h >> 11) / double(uint64_t(1) << 53);
  }
  const double x = (sum - 2.0) * 1e-3;
  return float(i % 97 == 0 ? x * 30 : x);
}

class Probe {
 public:
  Probe(Context& ctx, Algorithm& dense, const ProbeOptions& o)
      : ctx_(ctx), dense_(dense), o_(o), P_(ctx.net.size()), r_(ctx.net.rank()) {}

  Status run(const std::vector<ProbeCandidate>& cands, ProbeOutcome* out);

 private:
  double limitS() const { return std::max(o_.limitS, o_.budgetS); }
  double timed(const std::string& what, double s) const { return o_.hook ? o_.hook(what, s) : s; }
  // Agreement at a phase boundary: `mine` plus this rank's elapsed time and
  // failure flag; *stop when the budget is spent (then out->why says so).
  Status agree(std::vector<double> mine, std::vector<double>* agreed, ProbeOutcome* out,
               bool* stop);
  Status shift(int d, size_t bytes, double* seconds);
  Status link(LinkFit* fit, ProbeOutcome* out, bool* stop);
  Status runCandidate(const ProbeCandidate& c, Algorithm& alg, ErrorFeedbackStore* ef,
                      size_t count, ProbeSample* sample, Status* local);
  Status barrier();
  Status measure(const ProbeCandidate& c, Algorithm& alg, ErrorFeedbackStore* ef, size_t count,
                 ProbeSample* agreedSample, bool* usable, ProbeOutcome* out, bool* stop);

  Context& ctx_;
  Algorithm& dense_;
  const ProbeOptions& o_;
  const int P_, r_;
  Clock::time_point start_ = Clock::now();
  uint64_t seq_ = kProbeSeq, step_ = 0, run_ = 0;
  bool localFailed_ = false;
  std::string localWhy_;
  std::vector<int> distances_;
  device::HostArray<char> sendBytes_, recvBytes_;
  device::HostArray<float> input_;
  device::DeviceArray<float> in_, out_;
};

Status Probe::agree(std::vector<double> mine, std::vector<double>* agreed, ProbeOutcome* out,
                    bool* stop) {
  mine.push_back(since(start_));
  mine.push_back(localFailed_ ? 1.0 : 0.0);
  Context c{ctx_.net, ctx_.dev, ctx_.config, seq_++, nullptr};
  GC_CHECK(agreeMax(c, dense_, mine, agreed));
  const double failed = agreed->back();
  agreed->pop_back();
  out->seconds = agreed->back();
  agreed->pop_back();
  *stop = false;
  if (failed != 0) {
    *stop = true;
    out->why = localFailed_ ? localWhy_ : "the calibration probe failed on another rank";
  } else if (!(out->seconds <= limitS())) {
    *stop = true;
    char why[256];
    snprintf(why, sizeof why,
             "the calibration probe took %.3f s, over GRADCOMP_AUTO_PROBE_LIMIT_MS=%.0f (a slow "
             "or loaded network or machine)",
             out->seconds, limitS() * 1e3);
    out->why = why;
  }
  return Status::Ok();
}

Status Probe::shift(int d, size_t bytes, double* seconds) {
  const int to = (r_ + d) % P_, from = (r_ - d + P_) % P_;
  const uint64_t tag = transport::makeTag(seq_, step_++);
  const auto t0 = Clock::now();
  shared::RequestSet req(ctx_.net, "auto calibration probe");
  GC_CHECK(req.irecv(from, tag, recvBytes_.data(), bytes));
  GC_CHECK(req.isend(to, tag, sendBytes_.data(), bytes));
  GC_CHECK(req.waitAll());
  *seconds = since(t0);
  return Status::Ok();
}

Status Probe::link(LinkFit* fit, ProbeOutcome* out, bool* stop) {
  for (int k = 0; k < kMaxDistances && k < P_ - 1; ++k) {
    const int d = 1 + int((int64_t(k) * (P_ - 1)) / std::min(kMaxDistances, P_ - 1));
    if (distances_.empty() || distances_.back() != d) distances_.push_back(d);
  }
  auto ensure = [&](size_t bytes) {
    sendBytes_.bind(ctx_.dev).resize(bytes);
    recvBytes_.bind(ctx_.dev).resize(bytes);
    std::fill(sendBytes_.begin(), sendBytes_.end(), char(r_));
  };
  ensure(kFirstShiftBytes);
  // Each measurement: max over distances of the min over rounds.
  auto sweep = [&](size_t bytes, int rounds, double* t) -> Status {
    std::vector<double> best(distances_.size(), INFINITY);
    for (int round = 0; round < rounds; ++round)
      for (size_t i = 0; i < distances_.size(); ++i) {
        double s = 0;
        GC_CHECK(shift(distances_[i], bytes, &s));
        best[i] = std::min(best[i], s);
      }
    *t = timed("shift", *std::max_element(best.begin(), best.end()));
    return Status::Ok();
  };
  double alpha = 0;
  GC_CHECK(sweep(8, kLatencyRounds, &alpha));
  std::vector<double> agreed;
  GC_CHECK(agree({alpha}, &agreed, out, stop));
  if (*stop) return Status::Ok();
  fit->alphaS = agreed[0];
  const double plan = o_.budgetS;
  size_t m = kFirstShiftBytes;
  for (;;) {
    double t = 0;
    GC_CHECK(sweep(m, kBandwidthRounds, &t));
    GC_CHECK(agree({t}, &agreed, out, stop));
    if (*stop) return Status::Ok();
    t = agreed[0];
    fit->betaSPerByte = std::max(0.0, t - fit->alphaS) / double(m);
    // The next size costs about 4x this one per exchange; the link phase
    // keeps to a quarter of the plan.
    const double next = 4 * t * double(distances_.size() * kBandwidthRounds);
    if (t >= kShiftTargetS || m * 4 > kMaxShiftBytes || out->seconds + next > plan / 4) break;
    m *= 4;
    ensure(m);
  }
  return Status::Ok();
}

Status Probe::runCandidate(const ProbeCandidate& c, Algorithm& alg, ErrorFeedbackStore* ef,
                           size_t count, ProbeSample* sample, Status* local) {
  input_.bind(ctx_.dev).resize(count);
  const uint64_t run = run_++;
  for (size_t i = 0; i < count; ++i) input_[i] = sampleValue(r_, run, i);
  in_.bind(ctx_.dev).resize(count);
  out_.bind(ctx_.dev).resize(count);
  GC_CHECK(ctx_.dev.copy(in_.data(), input_.data(), count * sizeof(float)));
  GC_CHECK(ctx_.dev.sync());
  Context cc{ctx_.net, ctx_.dev, *c.config, seq_++, ef};
  AllreduceArgs args;
  args.sendBuf = in_.data();
  args.recvBuf = out_.data();
  args.count = count;
  args.dtype = DataType::Float32;
  args.op = RedOp::Sum;
  args.bufferKey = 0xA070000 + count;
  const uint64_t sent0 = ctx_.net.totalCounters().bytesSent;
  const double wait0 = ctx_.net.waitSeconds();
  const auto t0 = Clock::now();
  *local = alg.allreduce(cc, args);
  const double total = since(t0);
  if (transportError(*local)) return *local;
  const double waited = std::min(total, std::max(0.0, ctx_.net.waitSeconds() - wait0));
  sample->count = double(count);
  sample->totalS = timed("total " + c.label, total);
  sample->computeS = timed("compute " + c.label, total - waited);
  sample->wireBytes = double(ctx_.net.totalCounters().bytesSent - sent0);
  return Status::Ok();
}

// At `count`: one run that pays one-time costs, then two measured runs,
// each after a barrier (an empty agreement) so the ranks start together;
// then the agreement: the per-rank mean wall time's min over ranks (the
// rank that arrived last waited least), compute's and bytes' max.
Status Probe::measure(const ProbeCandidate& c, Algorithm& alg, ErrorFeedbackStore* ef,
                      size_t count, ProbeSample* agreedSample, bool* usable, ProbeOutcome* out,
                      bool* stop) {
  // Every run even after a local failure: the peers run them all, and a
  // failure from the parameters happens alike on every rank before any message.
  ProbeSample sum, s;
  Status local, run;
  GC_CHECK(runCandidate(c, alg, ef, count, &s, &local));
  for (int k = 0; k < kMeasuredRuns; ++k) {
    GC_CHECK(barrier());
    GC_CHECK(runCandidate(c, alg, ef, count, &s, &run));
    if (local.ok()) local = run;
    sum.totalS += s.totalS / kMeasuredRuns;
    sum.computeS += s.computeS / kMeasuredRuns;
    sum.wireBytes = std::max(sum.wireBytes, s.wireBytes);
  }
  if (!local.ok())
    GC_WARN("auto: candidate %s failed in the calibration probe: %s", c.label.c_str(),
            local.toString().c_str());
  std::vector<double> agreed;
  GC_CHECK(agree({-sum.totalS, sum.computeS, sum.wireBytes, local.ok() ? 0.0 : 1.0}, &agreed,
                 out, stop));
  *usable = agreed[3] == 0 && std::isfinite(agreed[0]) && std::isfinite(agreed[1]);
  *agreedSample = ProbeSample{double(count), -agreed[0], agreed[1], agreed[2]};
  return Status::Ok();
}

Status Probe::barrier() {
  Context c{ctx_.net, ctx_.dev, ctx_.config, seq_++, nullptr};
  std::vector<double> none;
  return agreeMax(c, dense_, {0.0}, &none);
}

Status Probe::run(const std::vector<ProbeCandidate>& cands, ProbeOutcome* out) {
  *out = ProbeOutcome();
  GC_REQUIRE(P_ >= 2, Err::Internal, "auto probe: %d rank(s); it needs two or more", P_);
  out->model.nranks = P_;
  out->samples.resize(cands.size());
  LinkFit link;
  bool stop = false;
  GC_CHECK(this->link(&link, out, &stop));
  if (stop) return Status::Ok();
  out->model.link = link;
  const double plan = o_.budgetS;
  std::unique_ptr<ErrorFeedbackStore> ef;
  Status made = ErrorFeedbackStore::create(ctx_.config, &ef);
  if (!made.ok()) localFailed_ = true, localWhy_ = made.toString();
  // Level by level (64K, 256K, 1M, 4M elements): every candidate at the
  // small size, then at each larger level the candidates cheapest first,
  // each only if its projection from the level below (4x the time) fits its
  // share of what is left of the plan. So every candidate gets comparable
  // sizes, and one that scales worse than linearly cannot eat the others'.
  std::vector<std::unique_ptr<Algorithm>> algs;
  std::vector<bool> usable(cands.size(), false);
  std::vector<double> lastS(cands.size(), 0);
  std::vector<size_t> lastCount(cands.size(), kLevels[0]);
  for (size_t i = 0; i < cands.size(); ++i) {
    algs.push_back(cands[i].info->create());
    ProbeSample sample;
    bool ok = false;
    GC_CHECK(measure(cands[i], *algs[i], ef.get(), kLevels[0], &sample, &ok, out, &stop));
    if (stop) return Status::Ok();
    usable[i] = ok;
    lastS[i] = sample.totalS;
    if (ok) out->samples[i].push_back(sample);
  }
  for (size_t level = 1; level < sizeof kLevels / sizeof kLevels[0]; ++level) {
    std::vector<size_t> order;
    for (size_t i = 0; i < cands.size(); ++i)
      if (usable[i] && lastCount[i] == kLevels[level - 1]) order.push_back(i);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return lastS[a] < lastS[b]; });
    for (size_t k = 0; k < order.size(); ++k) {
      const size_t i = order[k];
      const double share = (plan - out->seconds) / double(order.size() - k);
      const double ratio = double(kLevels[level]) / double(kLevels[level - 1]);
      // Twice the linear projection: larger sizes leave the caches.
      if (2 * (1 + kMeasuredRuns) * lastS[i] * ratio > share) continue;
      ProbeSample sample;
      bool ok = false;
      GC_CHECK(measure(cands[i], *algs[i], ef.get(), kLevels[level], &sample, &ok, out, &stop));
      if (stop) return Status::Ok();
      usable[i] = ok;
      if (!ok) continue;
      out->samples[i].push_back(sample);
      lastS[i] = sample.totalS;
      lastCount[i] = kLevels[level];
    }
  }
  bool anyUsable = false;
  for (size_t i = 0; i < cands.size(); ++i) {
    const ProbeCandidate& c = cands[i];
    CandidateFit fit =
        usable[i] ? fitCandidate(out->samples[i], link, c.elementSizeScales) : CandidateFit{};
    fit.elementSizeScales = c.elementSizeScales;
    anyUsable = anyUsable || fit.usable;
    out->model.candidates.push_back(fit);
  }
  if (!anyUsable) {
    out->why = "no candidate of GRADCOMP_AUTO_CANDIDATES ran in the calibration probe";
    return Status::Ok();
  }
  out->ok = true;
  return Status::Ok();
}

}  // namespace

const std::vector<size_t>& probeLevels() {
  static const std::vector<size_t> levels(std::begin(kLevels), std::end(kLevels));
  return levels;
}

device::Backend::Reservation probeMemoryBound() {
  const size_t largest = kLevels[sizeof kLevels / sizeof kLevels[0] - 1] * 4;
  return device::Backend::Reservation{6 * largest, 2 * size_t(kMaxShiftBytes) + largest};
}

Status runProbe(Context& ctx, Algorithm& dense, const std::vector<ProbeCandidate>& candidates,
                const ProbeOptions& options, ProbeOutcome* out) {
  Probe probe(ctx, dense, options);
  return probe.run(candidates, out);
}

}  // namespace gradcomp::algo::autosel
