#include "algorithms/auto/chooser.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace gradcomp::algo::autosel {
namespace {

double medianOf(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// The noise of agreed calls, relative: 2 * median absolute deviation / median
// (for calls uniform in m * (1 +- a) that is a; one outlier does not move it).
double noiseOf(const std::vector<double>& v) {
  const double m = medianOf(v);
  if (v.size() < 2 || !(m > 0)) return 0;
  std::vector<double> dev;
  for (double x : v) dev.push_back(std::fabs(x - m));
  return 2 * medianOf(dev) / m;
}

std::vector<double> ratios(const std::vector<AgreedCall>& h) {
  std::vector<double> v;
  for (const auto& a : h) v.push_back(a.ratio);
  return v;
}

}  // namespace

ClassKey classOf(size_t bytes, DataType dtype) {
  ClassKey k;
  k.dtype = dtype;
  int log2 = 0;
  while (log2 < 63 && (bytes >> (log2 + 1)) != 0) ++log2;
  k.log2Bytes = log2;
  return k;
}

Chooser::Chooser(ChooserOptions options, size_t candidates) : o_(options), n_(candidates) {
  o_.trialRounds = std::max(1, o_.trialRounds);
  o_.trialBlock = std::max(1, o_.trialBlock);
  o_.maxTrialRounds = std::max(o_.trialRounds, o_.maxTrialRounds);
  o_.confirmCalls = std::max(1, o_.confirmCalls);
  o_.retrialCalls = std::max(1, o_.retrialCalls);
  o_.refineCalls = std::max(1, o_.refineCalls);
}

Chooser::ClassState& Chooser::state(const ClassKey& key) {
  ClassState& s = classes_[key];
  if (s.factor.empty()) {
    s.factor.assign(n_, 1.0);
    s.window.assign(n_, {});
    s.windowN.assign(n_, 0);
    s.history.assign(n_, {});
    s.confirmed.assign(n_, false);
    s.callsBy.assign(n_, 0);
    s.measuredN.assign(n_, 0);
    s.measuredAt.assign(n_, 0);
    s.predictedSum.assign(n_, 0.0);
    s.modelSum.assign(n_, 0.0);
    s.measuredSum.assign(n_, 0.0);
  }
  return s;
}

// Least predicted * factor among usable candidates (finite base); ties go to
// the lower index (the order of GRADCOMP_AUTO_CANDIDATES). A compressing
// candidate must beat the baseline (dense) by `hysteresis` to be chosen:
// compression costs accuracy, so where it does not pay clearly, dense runs
// (exact, and NCCL's own where the interposer passes through). -1: none usable.
int Chooser::best(const ClassState& s, const std::vector<double>& base) const {
  int pick = -1;
  double t = 0;
  for (size_t c = 0; c < n_ && c < base.size(); ++c) {
    if (!std::isfinite(base[c])) continue;
    const double e = base[c] * s.factor[c];
    if (pick < 0 || e < t) pick = int(c), t = e;
  }
  const int b = o_.baseline;
  if (pick >= 0 && b >= 0 && pick != b && size_t(b) < n_ && size_t(b) < base.size() &&
      std::isfinite(base[size_t(b)]) &&
      !(t < base[size_t(b)] * s.factor[size_t(b)] * (1.0 - baselineMargin(s, size_t(pick)))))
    pick = b;
  return pick;
}

// What a compressor must gain over the baseline to be taken: the hysteresis,
// or more where the agreed calls of either vary more (2 x median absolute
// deviation / median): calls of 2 ms on a loaded machine vary by +-30%, and
// there a gain of 10% is noise.
double Chooser::baselineMargin(const ClassState& s, size_t candidate) const {
  const size_t b = size_t(o_.baseline);
  return std::min(0.5, std::max({o_.hysteresis, noiseOf(ratios(s.history[candidate])),
                                 noiseOf(ratios(s.history[b]))}));
}

uint64_t Chooser::trialLength(const ClassState& s) const {
  return s.rounds * uint64_t(o_.trialBlock) * s.trial.size();
}

bool Chooser::agreementDue(const ClassKey& key) const {
  auto it = classes_.find(key);
  if (it == classes_.end()) return false;
  const ClassState& s = it->second;
  if (!s.started || !s.measurable) return false;
  if (!s.steady) return s.calls == trialLength(s);
  if (s.retrial >= 0) return s.retrialLeft == 0;
  return s.sinceAgree >= uint64_t(o_.refineCalls);
}

std::vector<double> Chooser::windowWords(const ClassKey& key) const {
  std::vector<double> w;
  auto it = classes_.find(key);
  if (it == classes_.end()) return w;
  for (const std::vector<double>& v : it->second.window) w.insert(w.end(), v.begin(), v.end());
  return w;
}

// Adds one agreement's calls of candidate c (slots: per call, the max over
// ranks; NaN or non-positive: some rank had no usable time) to its history;
// entries kRetrialAgreements agreements old go first (conditions change),
// and with them the confirm re-check done in their period.
void Chooser::merge(ClassState& s, size_t c, const double* slots, size_t n) {
  std::vector<AgreedCall> fresh;
  for (size_t i = 0; i < n; ++i)
    if (std::isfinite(slots[i]) && slots[i] > 0)
      fresh.push_back(AgreedCall{slots[i], s.agreements});
  if (fresh.empty()) return;
  std::vector<AgreedCall>& h = s.history[c];
  auto stale = [&](const AgreedCall& a) { return s.agreements - a.at >= kRetrialAgreements; };
  h.erase(std::remove_if(h.begin(), h.end(), stale), h.end());
  if (h.empty()) s.confirmed[c] = false;
  h.insert(h.end(), fresh.begin(), fresh.end());
  if (h.size() > kHistory) h.erase(h.begin(), h.end() - std::ptrdiff_t(kHistory));
  s.factor[c] = medianOf(ratios(h));
  s.measuredAt[c] = s.agreements;
}

void Chooser::absorb(const ClassKey& key, const std::vector<double>& agreed,
                     const std::vector<double>& base) {
  ClassState& s = state(key);
  ++s.agreements;
  size_t at = 0;
  for (size_t c = 0; c < n_; ++c) {
    const size_t k = s.window[c].size();
    if (at + k <= agreed.size()) merge(s, c, agreed.data() + at, k);
    at += k;
    s.window[c].clear();
    s.windowN[c] = 0;
  }
  s.sinceAgree = 0;
  s.retrial = -1;
  const int pick = best(s, base);
  if (!s.steady) {
    s.steady = true;
    s.current = pick;
  } else {
    if (s.current < 0) s.current = pick;
    if (pick >= 0 && pick != s.current) {
      const double now = base[size_t(s.current)] * s.factor[size_t(s.current)];
      const double alt = base[size_t(pick)] * s.factor[size_t(pick)];
      // Back to the baseline as soon as the compressor no longer beats it
      // by half the hysteresis (best() asks the whole hysteresis to leave
      // it): the band between keeps a size from flipping.
      const bool toBaseline =
          pick == o_.baseline && !(now < alt * (1.0 - baselineMargin(s, size_t(s.current)) / 2));
      if (!std::isfinite(now) || alt < now * (1.0 - o_.hysteresis) || toBaseline) s.current = pick;
    }
  }
  scheduleRecheck(s, base);
}

// Re-checks (chooser.h, 5a then 5b): at most one, run before the current
// candidate's next call and followed by an agreement.
void Chooser::scheduleRecheck(ClassState& s, const std::vector<double>& base) {
  s.retrialLeft = s.retrialLength = 0;
  if (s.current < 0) return;
  const size_t cur = size_t(s.current);
  const double now = base[cur] * s.factor[cur];
  const double noiseNow = noiseOf(ratios(s.history[cur]));
  // 5a: a runner-up within the noise of the current estimate, on few calls
  // (once the current one is measured: the model's word alone has no noise).
  double bestEst = 0;
  for (size_t c = 0; c < n_ && c < base.size() && !s.history[cur].empty(); ++c) {
    const std::vector<AgreedCall>& h = s.history[c];
    if (c == cur || !std::isfinite(base[c]) || h.empty() || s.confirmed[c]) continue;
    if (h.size() >= size_t(o_.confirmCalls)) continue;
    const double est = base[c] * s.factor[c];
    const double margin = std::max({o_.hysteresis, noiseNow, noiseOf(ratios(h))});
    if (!(est < now * (1.0 + margin))) continue;
    if (s.retrial < 0 || est < bestEst) s.retrial = int(c), bestEst = est;
  }
  if (s.retrial >= 0) {
    const size_t c = size_t(s.retrial);
    s.confirmed[c] = true;
    s.retrialLength = uint64_t(o_.confirmCalls) - s.history[c].size() + 1;
    s.retrialLeft = s.retrialLength;
    return;
  }
  // 5b: a candidate whose factor is stale (measured kRetrialAgreements or
  // more agreements ago, or never) and that the model alone predicts faster
  // than what the current one measures: conditions change (a transient
  // slowed it), and a factor is only refreshed by running. At most
  // retrialCalls calls per that many agreements.
  for (size_t c = 0; c < n_ && c < base.size(); ++c) {
    if (c == cur || !std::isfinite(base[c]) || !(base[c] < now)) continue;
    if (s.agreements - s.measuredAt[c] < kRetrialAgreements) continue;
    if (s.retrial < 0 || base[c] < base[size_t(s.retrial)]) s.retrial = int(c);
  }
  if (s.retrial >= 0) {
    // Its last estimate (the model's word where never measured) prices it.
    const size_t c = size_t(s.retrial);
    const double cost = double(o_.retrialCalls) * std::max(0.0, base[c] * s.factor[c] - now);
    if (std::isfinite(cost) && s.staleSpentS + cost <= kStaleRecheckShare * s.timeS) {
      s.staleSpentS += cost;
      s.retrialLength = s.retrialLeft = uint64_t(o_.retrialCalls);
    } else {
      s.retrial = -1;  // not yet: the class has not run long enough to afford it
    }
  }
}

Choice Chooser::choose(const ClassKey& key, const std::vector<double>& base, bool measurable) {
  ClassState& s = state(key);
  if (!s.started) {
    s.started = true;
    s.measurable = measurable;
    const int first = best(s, base);
    if (measurable && first >= 0) {
      const double limit = base[size_t(first)] * o_.explore;
      for (size_t c = 0; c < n_ && c < base.size(); ++c) {
        const double l = int(c) == o_.baseline ? limit * o_.explore : limit;
        if (std::isfinite(base[c]) && base[c] <= l) s.trial.push_back(int(c));
      }
      std::stable_sort(s.trial.begin(), s.trial.end(),
                       [&](int a, int b) { return base[size_t(a)] < base[size_t(b)]; });
      // Rounds: trialRounds, more while the predicted trials fit the budget.
      double roundS = 0;
      for (int c : s.trial) roundS += base[size_t(c)] * o_.trialBlock;
      s.rounds = uint64_t(o_.trialRounds);
      while (s.rounds < uint64_t(o_.maxTrialRounds) &&
             double(s.rounds + 1) * roundS <= o_.trialBudgetS)
        ++s.rounds;
    }
    if (s.trial.size() <= 1) {
      s.trial.clear();
      s.steady = true;
      s.current = first;
    }
  }
  Choice ch;
  if (!s.steady) {
    // Rounds of blocks: a block of trialBlock calls per candidate, every
    // candidate once per round, so a burst of load elsewhere on the machine
    // lands on some of each candidate's calls rather than on all of one's.
    // A block's first call is not measured (a switch, a first use, or
    // FlushDense pays there).
    const uint64_t block = uint64_t(o_.trialBlock);
    const uint64_t slot = (s.calls / block) % s.trial.size();
    ch.candidate = s.trial[size_t(slot)];
    ch.record = s.measurable && (block == 1 || s.calls % block != 0);
  } else if (s.retrial >= 0 && s.retrialLeft > 0) {
    ch.candidate = s.retrial;
    ch.record = s.measurable && s.retrialLeft < s.retrialLength;
    --s.retrialLeft;
  } else {
    ch.candidate = s.current;
    // The first call after a switch pays one-time costs: not measured.
    ch.record = s.measurable && s.lastRun == s.current;
    ++s.sinceAgree;
  }
  ++s.calls;
  if (ch.candidate >= 0) {
    const size_t c = size_t(ch.candidate);
    ch.predictedS = base[c] * s.factor[c];
    if (std::isfinite(ch.predictedS)) s.timeS += ch.predictedS;
    s.callsBy[c]++;
    s.predictedSum[c] += ch.predictedS;
    s.modelSum[c] += base[c];
  }
  s.lastRun = ch.candidate;
  return ch;
}

void Chooser::record(const ClassKey& key, int candidate, double seconds, double baseS) {
  if (candidate < 0 || size_t(candidate) >= n_) return;
  ClassState& s = state(key);
  // Every measured call takes its slot, usable or not (NaN), so that slot i
  // is the same call on every rank; the last kWindowSlots are kept.
  const size_t c = size_t(candidate);
  const double ratio = baseS > 0 && std::isfinite(seconds) ? seconds / baseS : NAN;
  if (s.window[c].size() < kWindowSlots) s.window[c].push_back(ratio);
  else s.window[c][s.windowN[c] % kWindowSlots] = ratio;
  s.windowN[c]++;
  if (std::isnan(ratio)) return;
  s.measuredSum[c] += seconds;
  s.measuredN[c]++;
}

std::vector<ClassReport> Chooser::report() const {
  std::vector<ClassReport> out;
  for (const auto& [key, s] : classes_) {
    ClassReport r;
    r.key = key;
    r.current = s.current >= 0 ? s.current : s.lastRun;
    r.calls = s.calls;
    r.callsBy = s.callsBy;
    r.measuredCalls = s.measuredN;
    for (size_t c = 0; c < n_; ++c) {
      r.predictedS.push_back(s.callsBy[c] ? s.predictedSum[c] / double(s.callsBy[c]) : 0);
      r.modelS.push_back(s.callsBy[c] ? s.modelSum[c] / double(s.callsBy[c]) : 0);
      r.measuredS.push_back(s.measuredN[c] ? s.measuredSum[c] / double(s.measuredN[c]) : -1);
      r.agreedCalls.push_back(s.history[c].size());
    }
    r.factor = s.factor;
    r.steady = s.steady;
    out.push_back(r);
  }
  return out;
}

}  // namespace gradcomp::algo::autosel
