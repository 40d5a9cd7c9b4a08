#include "algorithms/auto/chooser.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace gradcomp::algo::autosel {

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
  o_.retrialCalls = std::max(1, o_.retrialCalls);
  o_.refineCalls = std::max(1, o_.refineCalls);
}

Chooser::ClassState& Chooser::state(const ClassKey& key) {
  ClassState& s = classes_[key];
  if (s.factor.empty()) {
    s.factor.assign(n_, 1.0);
    s.window.assign(n_, {});
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
// the lower index (the order of GRADCOMP_AUTO_CANDIDATES). -1: none usable.
int Chooser::best(const ClassState& s, const std::vector<double>& base) const {
  int pick = -1;
  double t = 0;
  for (size_t c = 0; c < n_ && c < base.size(); ++c) {
    if (!std::isfinite(base[c])) continue;
    const double e = base[c] * s.factor[c];
    if (pick < 0 || e < t) pick = int(c), t = e;
  }
  return pick;
}

uint64_t Chooser::trialLength(const ClassState& s) const {
  return uint64_t(o_.trialRounds) * uint64_t(o_.trialBlock) * s.trial.size();
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
  std::vector<double> w(2 * n_, 0.0);
  auto it = classes_.find(key);
  if (it == classes_.end()) return w;
  const ClassState& s = it->second;
  for (size_t c = 0; c < n_; ++c) {
    std::vector<double> v = s.window[c];
    if (!v.empty()) {
      // The median: one call preempted by the OS or another job does not
      // move it (a mean of three would).
      std::sort(v.begin(), v.end());
      const size_t m = v.size() / 2;
      w[2 * c] = -(v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2);
    } else {
      w[2 * c] = -1.0;
    }
    w[2 * c + 1] = double(v.size());
  }
  return w;
}

void Chooser::absorb(const ClassKey& key, const std::vector<double>& agreed,
                     const std::vector<double>& base) {
  ClassState& s = state(key);
  ++s.agreements;
  for (size_t c = 0; c < n_ && 2 * c + 1 < agreed.size(); ++c) {
    const double ratio = -agreed[2 * c];
    if (agreed[2 * c + 1] > 0 && std::isfinite(ratio) && ratio > 0) {
      s.factor[c] = ratio;
      s.measuredAt[c] = s.agreements;
    }
  }
  for (auto& v : s.window) v.clear();
  s.sinceAgree = 0;
  s.retrial = -1;
  const int pick = best(s, base);
  if (!s.steady) {
    s.steady = true;
    s.current = pick;
    return;
  }
  if (s.current < 0) s.current = pick;
  if (pick >= 0 && pick != s.current) {
    const double now = base[size_t(s.current)] * s.factor[size_t(s.current)];
    const double alt = base[size_t(pick)] * s.factor[size_t(pick)];
    if (!std::isfinite(now) || alt < now * (1.0 - o_.hysteresis)) s.current = pick;
  }
  // Retrial: a candidate whose factor is stale (measured kRetrialAgreements
  // or more agreements ago, or never) and that the model alone predicts
  // faster than what the current one measures gets retrialCalls calls, then
  // an agreement: conditions change (a transient slowed it), and a factor is
  // only refreshed by running. At most retrialCalls calls per that many windows.
  if (s.current < 0) return;
  const double now = base[size_t(s.current)] * s.factor[size_t(s.current)];
  for (size_t c = 0; c < n_ && c < base.size(); ++c) {
    if (int(c) == s.current || !std::isfinite(base[c]) || !(base[c] < now)) continue;
    if (s.agreements - s.measuredAt[c] < kRetrialAgreements) continue;
    if (s.retrial < 0 || base[c] < base[size_t(s.retrial)]) s.retrial = int(c);
  }
  s.retrialLeft = s.retrial >= 0 ? uint64_t(o_.retrialCalls) : 0;
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
    ch.record = s.measurable && s.retrialLeft < uint64_t(o_.retrialCalls);
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
    s.callsBy[c]++;
    s.predictedSum[c] += ch.predictedS;
    s.modelSum[c] += base[c];
  }
  s.lastRun = ch.candidate;
  return ch;
}

void Chooser::record(const ClassKey& key, int candidate, double seconds, double baseS) {
  if (candidate < 0 || size_t(candidate) >= n_ || !(baseS > 0) || !std::isfinite(seconds)) return;
  ClassState& s = state(key);
  s.window[size_t(candidate)].push_back(seconds / baseS);
  s.measuredSum[size_t(candidate)] += seconds;
  s.measuredN[size_t(candidate)]++;
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
    }
    r.factor = s.factor;
    r.steady = s.steady;
    out.push_back(r);
  }
  return out;
}

}  // namespace gradcomp::algo::autosel
