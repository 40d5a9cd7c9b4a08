// Per-call choice of GRADCOMP_ALGO=auto, per size class. Pure state machine:
// its inputs are the model's predictions (identical on every rank), call
// counts (identical: every rank makes the same calls) and agreed measurements
// (absorb(), after the caller's exchange), never a rank-local time, so every
// rank makes the same choice for the same call.
//
// The statistic. A call's cost to the job is its time on the slowest rank, so
// an agreement takes, per measured call, the max over ranks of measured /
// predicted (windowWords: one slot per call, the tuner's slot-wise max); a
// candidate's factor is the median over its agreed calls (`history`: up to
// kHistory, none older than kRetrialAgreements agreements), so one call
// preempted by the OS does not move it. (Before: each rank's median of its
// own calls, then the min over ranks: biased low, more so for a noisy
// candidate, and 3 calls per candidate decided.)
//
// A size class is (dtype, floor(log2 bytes)). Its life:
//  1. First call: the trial set is every usable candidate predicted within
//     `explore` times the best prediction (the baseline within explore^2),
//     best first (one candidate: no trials). Without measurements (an
//     asynchronous executor) the best prediction is final.
//  2. Trials: R rounds, in each a block of `trialBlock` calls per trial
//     candidate; all but a block's first call are measured (it pays one-time
//     costs: buffers, thresholds, a switch). R is sized by predicted time:
//     rounds are added to `trialRounds` while the trials fit `trialBudgetS`,
//     up to `maxTrialRounds`. Bound: R * trialBlock * candidates calls, R
//     in [trialRounds, maxTrialRounds]; R = trialRounds where trialRounds + 1
//     rounds are predicted over trialBudgetS (large classes: 24 calls for
//     four candidates, as before).
//  3. The first call after the trials starts with an agreement (absorb); the
//     choice is the least predicted * factor -- a compressor only when it
//     beats the baseline (dense) by `hysteresis`, or by the noise of either's
//     agreed calls where that is larger (at most 50%; best()).
//  4. Steady: the chosen candidate runs; every `refineCalls` calls another
//     agreement refreshes the factors of what ran, and the choice moves only
//     when another candidate is predicted `hysteresis` (a fraction) faster,
//     so a size does not flip between algorithms on noise; back to the
//     baseline as soon as the compressor's lead over it is under half that.
//  5. Re-checks, after any agreement, at most one at a time:
//     a. confirm: a candidate with fewer than `confirmCalls` agreed calls
//        whose estimate is within the noise of the current one's (measured)
//        estimate (margin: max(hysteresis, either's agreed calls' relative
//        noise, 2 * median absolute deviation / median)) runs
//        confirmCalls - (its agreed calls) + 1 calls, then an agreement: a
//        runner-up a few unlucky trial calls wrote off is corrected at once.
//        Once per candidate until its history goes stale. Bound, with the
//        defaults: trials plus these take at most 16 calls per tried
//        candidate, 2R + (9 - R) for R < 8 (64 for four candidates).
//     b. stale: a candidate whose factor is kRetrialAgreements agreements old
//        (or never measured) and that the model alone predicts faster than
//        the current one measures runs `retrialCalls` calls, so a candidate
//        once measured slow (a transient) is not written off for good --
//        while the predicted extra time of such re-checks stays within
//        kStaleRecheckShare of the class's time. (Unbudgeted, a candidate the
//        model over-rates was re-tried every 128 calls: +10% on every call
//        at 1 Gbit/s, 100 MiB, where qsgd 4 bit is 4.4x oktopk.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/dtype.h"

namespace gradcomp::algo::autosel {

constexpr uint64_t kRetrialAgreements = 8;
// Agreed calls kept per candidate, and measured calls per candidate in one
// agreement's words (the last ones when more ran): bounds the exchange to
// P * candidates * kWindowSlots doubles at most.
constexpr size_t kHistory = 32, kWindowSlots = 32;
// Stale re-checks (5b) of candidates that lose cost time at steady state:
// their predicted extra time (retrialCalls x (the candidate's last estimate
// - the current one's)) is kept within this share of the class's time.
constexpr double kStaleRecheckShare = 0.01;

struct ChooserOptions {
  // The baseline (dense; -1: none) is tried within explore^2 of the best
  // prediction: never slower than dense is the promise, and the model is
  // least sure far from its probe sizes.
  int baseline = -1;
  double explore = 3;
  double hysteresis = 0.1;
  int trialRounds = 3, trialBlock = 2;   // trialRounds: the least rounds
  int maxTrialRounds = 8;
  double trialBudgetS = 0.25;            // predicted seconds rounds are added within
  int confirmCalls = 8;
  int retrialCalls = 4;
  int refineCalls = 16;
};

struct ClassKey {
  DataType dtype = DataType::Float32;
  int log2Bytes = 0;  // bytes in [2^log2Bytes, 2^(log2Bytes+1))
  bool operator<(const ClassKey& o) const {
    return dtype != o.dtype ? int(dtype) < int(o.dtype) : log2Bytes < o.log2Bytes;
  }
};
ClassKey classOf(size_t bytes, DataType dtype);

struct Choice {
  int candidate = -1;
  bool record = false;       // measure this call and pass it to record()
  double predictedS = 0;     // prediction * factor of the chosen candidate
};

// Per class, for reports (this rank's view; everything but measured figures
// is identical on every rank).
struct ClassReport {
  ClassKey key;
  int current = -1;                 // the chosen candidate (-1: none yet)
  uint64_t calls = 0;
  // Per candidate: calls, mean predicted seconds per call (the model's
  // prediction times the agreed factor when it ran; modelS: the model's
  // alone), mean measured seconds per measured call on this rank (-1: none
  // measured), measured calls, agreed calls behind the factor, agreed factor.
  std::vector<uint64_t> callsBy;
  std::vector<double> predictedS, modelS, measuredS;
  std::vector<uint64_t> measuredCalls, agreedCalls;
  std::vector<double> factor;
  bool steady = false;
};

struct AgreedCall {
  double ratio;  // max over ranks of measured / predicted, one call
  uint64_t at;   // the agreement that brought it
};

class Chooser {
 public:
  Chooser(ChooserOptions options, size_t candidates);

  // Whether the next call of `key` must start with an agreement (the caller
  // then exchanges windowWords(key) and calls absorb with the slot-wise max).
  bool agreementDue(const ClassKey& key) const;
  // This rank's measurements since the last agreement: measured / predicted
  // per measured call, candidate by candidate, the last kWindowSlots of each
  // (NaN: not a usable time). The layout follows the measured-call counts,
  // which every rank shares, so slot i is the same call on every rank.
  std::vector<double> windowWords(const ClassKey& key) const;
  // `agreed`: slot-wise max of every rank's windowWords (per call, the
  // slowest rank); `base`: the model's predictions for this call's size per
  // candidate.
  void absorb(const ClassKey& key, const std::vector<double>& agreed,
              const std::vector<double>& base);
  // The candidate for the next call of `key`; `measurable`: the caller can
  // time the call (fixed per class on every rank).
  Choice choose(const ClassKey& key, const std::vector<double>& base, bool measurable);
  // A measured call (Choice::record): seconds on this rank, and base[c].
  void record(const ClassKey& key, int candidate, double seconds, double baseS);

  std::vector<ClassReport> report() const;

 private:
  struct ClassState {
    uint64_t calls = 0, sinceAgree = 0, agreements = 0;
    int retrial = -1;  // candidate being re-measured (steady), -1: none
    uint64_t retrialLeft = 0, retrialLength = 0;
    std::vector<uint64_t> measuredAt;  // agreement that last refreshed each factor
    bool started = false, steady = false, measurable = false;
    std::vector<int> trial;
    uint64_t rounds = 0;
    int current = -1, lastRun = -1;
    std::vector<double> factor;
    std::vector<std::vector<AgreedCall>> history;
    std::vector<bool> confirmed;  // had its confirm re-check (5a) this staleness period
    std::vector<std::vector<double>> window;  // this rank's ratios since the last agreement
    std::vector<uint64_t> windowN;            // measured calls since then (window: the last)
    std::vector<uint64_t> callsBy, measuredN;
    std::vector<double> predictedSum, modelSum, measuredSum;
    // Stale re-checks' (5b) predicted extra time, and the class's predicted
    // time so far: re-checks spend at most kStaleRecheckShare of it.
    double staleSpentS = 0, timeS = 0;
  };
  ClassState& state(const ClassKey& key);
  int best(const ClassState& s, const std::vector<double>& base) const;
  double baselineMargin(const ClassState& s, size_t candidate) const;
  uint64_t trialLength(const ClassState& s) const;
  void merge(ClassState& s, size_t c, const double* slots, size_t n);
  void scheduleRecheck(ClassState& s, const std::vector<double>& base);

  ChooserOptions o_;
  size_t n_;
  std::map<ClassKey, ClassState> classes_;
};

}  // namespace gradcomp::algo::autosel
