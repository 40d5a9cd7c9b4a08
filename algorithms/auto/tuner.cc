#include "algorithms/auto/tuner.h"

#include <cmath>

#include "algorithms/auto/agree.h"
#include "algorithms/auto/ef_flush.h"
#include "algorithms/error_feedback.h"
#include "common/log.h"

namespace gradcomp::algo::autosel {
namespace {

std::unique_ptr<Algorithm> makeDense() {
  const AlgorithmInfo* info = findAlgorithm("dense");
  return info ? info->create() : nullptr;
}

Status readOptions(const param::Overrides& config, ChooserOptions* o, double* budgetS,
                   double* limitS) {
  int64_t refine = 0, probeMs = 0, limitMs = 0, trialMs = 0;
  GC_CHECK(config.getInt(param::Id::AUTO_REFINE_CALLS, &refine));
  GC_CHECK(config.getInt(param::Id::AUTO_TRIAL_MS, &trialMs));
  o->trialBudgetS = double(trialMs) / 1e3;
  GC_CHECK(config.getInt(param::Id::AUTO_PROBE_MS, &probeMs));
  GC_CHECK(config.getInt(param::Id::AUTO_PROBE_LIMIT_MS, &limitMs));
  *limitS = double(limitMs) / 1e3;
  GC_CHECK(config.getDouble(param::Id::AUTO_HYSTERESIS, &o->hysteresis));
  GC_CHECK(config.getDouble(param::Id::AUTO_EXPLORE, &o->explore));
  o->refineCalls = int(refine);
  *budgetS = double(probeMs) / 1e3;
  return Status::Ok();
}

}  // namespace

AutoTuner::AutoTuner()
    : dense_(makeDense()), flush_(new FlushDense(makeDense())), agreeDense_(makeDense()) {}
AutoTuner::~AutoTuner() = default;

void AutoTuner::disable(const std::string& why) {
  if (why_.empty()) why_ = why.empty() ? "disabled" : why;
}

void AutoTuner::configure(const param::Overrides& config) {
  if (configured_) return;
  configured_ = true;
  std::string text;
  std::vector<CandidateSpec> specs;
  Status s = config.getString(param::Id::AUTO_CANDIDATES, &text);
  if (s.ok()) s = parseCandidates(text, "GRADCOMP_AUTO_CANDIDATES", &specs);
  if (s.ok()) s = readOptions(config, &options_, &budgetS_, &limitS_);
  for (size_t i = 0; s.ok() && i < specs.size(); ++i) {
    Candidate c;
    c.spec = specs[i];
    c.info = findAlgorithm(c.spec.algo);
    c.config = config;
    for (const auto& [name, value] : c.spec.params)
      if (s.ok()) s = c.config.set(name, value, "GRADCOMP_AUTO_CANDIDATES entry " + c.spec.label);
    c.algorithm = c.info->create();
    candidates_.push_back(std::move(c));
  }
  if (s.ok() && !dense_) s = makeStatus(Err::Internal, "auto: algorithm 'dense' is not registered");
  if (!s.ok()) {
    candidates_.clear();
    disable(s.message());
    GC_WARN("GRADCOMP_ALGO=auto: %s; every call runs dense", s.message().c_str());
  }
  candidatesReady_.store(true, std::memory_order_release);  // prepare() may read them now
}

Status AutoTuner::calibrate(Context& ctx) {
  configure(ctx.config);
  if (calibrated_) return Status::Ok();
  calibrated_ = true;
  if (disabled()) return Status::Ok();
  if (ctx.net.size() < 2) {
    disable("one rank: nothing to reduce across");
    return Status::Ok();
  }
  std::vector<ProbeCandidate> cands;
  for (const Candidate& c : candidates_)
    cands.push_back(ProbeCandidate{c.spec.label, c.info, &c.config, c.spec.isDense()});
  ProbeOutcome out;
  GC_CHECK(runProbe(ctx, *agreeDense_, cands, ProbeOptions{budgetS_, limitS_, hook_}, &out));
  probeSeconds_ = out.seconds;
  if (!out.ok) {
    disable(out.why);
    GC_WARN("GRADCOMP_ALGO=auto: %s; every call runs dense", out.why.c_str());
    return Status::Ok();
  }
  model_ = out.model;
  for (size_t c = 0; c < candidates_.size(); ++c)
    if (candidates_[c].spec.isDense()) options_.baseline = int(c);
  chooser_ = std::make_unique<Chooser>(options_, candidates_.size());
  GC_INFO(ALGO, "auto: calibrated in %.3f s on %d ranks: latency %.1f us, %.3f Gbit/s per link",
          out.seconds, model_.nranks, model_.link.alphaS * 1e6,
          model_.link.betaSPerByte > 0 ? 8e-9 / model_.link.betaSPerByte : INFINITY);
  for (size_t c = 0; c < candidates_.size(); ++c) {
    const CandidateFit& f = model_.candidates[c];
    GC_INFO(ALGO, "auto: %s: %s latency %.3f ms, %.3f wire B/element, compute %.3f ms + %.3f "
            "ns/element (%zu probe sizes); predicts %.3f ms at 1 MiB, %.3f ms at 100 MiB (fp32)",
            candidates_[c].spec.label.c_str(), f.usable ? "usable," : "UNUSABLE,",
            f.latencyS * 1e3, f.wirePerElement, f.compute0 * 1e3, f.computePerElement * 1e9,
            out.samples[c].size(), predictSeconds(model_, c, 262144, DataType::Float32) * 1e3,
            predictSeconds(model_, c, 26214400, DataType::Float32) * 1e3);
    for (const ProbeSample& p : out.samples[c])
      GC_TRACE(ALGO, "auto: %s probe %.0f elements: %.3f ms (compute %.3f ms), %.0f wire bytes",
               candidates_[c].spec.label.c_str(), p.count, p.totalS * 1e3, p.computeS * 1e3,
               p.wireBytes);
  }
  return Status::Ok();
}

void AutoTuner::logAgreement(const ClassKey& key, const std::vector<double>& base) const {
  for (const ClassReport& r : chooser_->report()) {
    if (r.key < key || key < r.key) continue;
    std::string text;
    for (size_t c = 0; c < candidates_.size(); ++c) {
      char item[160];
      snprintf(item, sizeof item, "%s%s %.3f ms x %.2f (%llu calls)", c ? ", " : "",
               candidates_[c].spec.label.c_str(), base[c] * 1e3, r.factor[c],
               (unsigned long long)r.agreedCalls[c]);
      text += item;
    }
    GC_INFO(ALGO, "auto: %s class 2^%d B: model x agreed factor (agreed calls): %s; choice %s",
            dtypeName(key.dtype), key.log2Bytes, text.c_str(),
            r.current >= 0 ? candidates_[size_t(r.current)].spec.label.c_str() : "none");
  }
}

Status AutoTuner::plan(Context& ctx, const AllreduceArgs& args, bool measurable, Decision* out) {
  Decision d;
  d.tensor = scheduleKey(args);
  d.key = classOf(args.count * dtypeSize(args.dtype), args.dtype);
  const bool ef = ctx.errorFeedback && ctx.errorFeedback->enabled();
  if (calibrated_ && !disabled() && chooser_) {
    std::vector<double> base(candidates_.size());
    for (size_t c = 0; c < base.size(); ++c) base[c] = predictSeconds(model_, c, args.count, args.dtype);
    if (chooser_->agreementDue(d.key)) {
      Context c{ctx.net, ctx.dev, ctx.config, ctx.callSeq + kAgreementBand, nullptr};
      std::vector<double> agreed;
      GC_CHECK(agreeMax(c, *agreeDense_, chooser_->windowWords(d.key), &agreed));
      chooser_->absorb(d.key, agreed, base);
      if (log::enabled(log::Level::Info, log::ALGO)) logAgreement(d.key, base);
    }
    const Choice ch = chooser_->choose(d.key, base, measurable);
    d.candidate = ch.candidate;
    d.record = ch.record;
    if (d.candidate >= 0) d.baseS = base[size_t(d.candidate)];
  }
  d.dense = d.candidate < 0 || candidates_[size_t(d.candidate)].spec.isDense();
  d.flush = d.dense && ef && compressed_.count(d.tensor) != 0;
  *out = d;
  return Status::Ok();
}

Algorithm& AutoTuner::algorithmFor(const Decision& d) {
  if (d.flush) return *flush_;
  if (d.candidate < 0) return *dense_;
  return *candidates_[size_t(d.candidate)].algorithm;
}

const param::Overrides& AutoTuner::configFor(const Decision& d,
                                             const param::Overrides& callConfig) const {
  return d.candidate < 0 ? callConfig : candidates_[size_t(d.candidate)].config;
}

void AutoTuner::finish(const Decision& d, double seconds, bool errorFeedback) {
  if (d.record && chooser_) {
    const double s = hook_ ? hook_("call " + labelOf(d), seconds) : seconds;
    chooser_->record(d.key, d.candidate, s, d.baseS);
  }
  if (!d.dense && errorFeedback) compressed_.insert(d.tensor);
  else compressed_.erase(d.tensor);
}

std::string AutoTuner::labelOf(const Decision& d) const {
  return d.candidate < 0 ? "dense" : candidates_[size_t(d.candidate)].spec.label;
}

TunerReport AutoTuner::report() const {
  TunerReport r;
  r.state = disabled() ? "dense: " + why_ : calibrated_ ? "calibrated" : "not calibrated";
  for (const Candidate& c : candidates_) r.labels.push_back(c.spec.label);
  r.haveModel = calibrated_ && chooser_ != nullptr;
  r.model = model_;
  r.probeSeconds = probeSeconds_;
  if (chooser_) r.classes = chooser_->report();
  return r;
}

Status AutoTuner::prepare(Context& ctx, const AllreduceArgs& args) {
  // Candidates come with the first call, which may be running on the proxy.
  if (!candidatesReady_.load(std::memory_order_acquire)) return Status::Ok();
  for (Candidate& c : candidates_) {
    if (!c.algorithm) continue;
    Context candidate{ctx.net, ctx.dev, c.config, ctx.callSeq, ctx.errorFeedback};
    GC_CHECK(c.algorithm->prepare(candidate, args));
  }
  return Status::Ok();
}

}  // namespace gradcomp::algo::autosel
