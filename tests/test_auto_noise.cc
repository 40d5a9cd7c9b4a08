// GRADCOMP_ALGO=auto's chooser under seeded noisy timings: four choosers
// stand for four ranks exchanging words as the tuner does (slot-wise max),
// and every rank's call times come from a seeded model of a shared, loaded
// machine. Asserted on a fixed seed set: how often a candidate slower than
// 1.1x the best is the choice after 120 calls. On seeds 1-200 the rule
// before (each rank's median of 3 trial calls, min over ranks, the factor
// replaced per agreement, no early re-check) chose wrong in 66 runs (first
// case) and 30 (second); this file compiled against it fails both checks.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <vector>

#include "algorithms/auto/auto_model.h"
#include "algorithms/auto/chooser.h"

using namespace gradcomp;
using namespace gradcomp::algo::autosel;

namespace {

// splitmix64: the same numbers on every platform (std distributions differ).
struct Rng {
  uint64_t x;
  double uniform() {  // [0, 1)
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return double((z ^ (z >> 31)) >> 11) / double(uint64_t(1) << 53);
  }
  double pm(double a) { return (2 * uniform() - 1) * a; }  // uniform in [-a, a)
};

// A candidate's true cost: each call lasts meanS * (1 +- noise) for the job
// (its slowest rank); the other ranks arrived up to skew * meanS later (the
// OS ran something else between their calls, more so under a candidate that
// loads the CPUs), so their own timers read less. A rank's timer also
// jitters by +-5%.
struct Truth {
  double meanS, noise, skew;
};

struct Sim {
  std::vector<Truth> truth;
  std::vector<double> base;  // the model's predictions (agreed, wrong by design)
  int ranks = 4, calls = 120;
  // Bursts of load from other jobs: each call starts one with this chance;
  // it slows every call it covers (4 to 16 calls) by burstFactor.
  double burstChance = 0, burstFactor = 1;
  ChooserOptions options;
};

// One call on every rank: the agreement the tuner runs first when it is due
// (each rank's words, the slot-wise max, absorbed by all), then the choices.
std::vector<Choice> agreeAndChoose(std::vector<Chooser>& ranks, const ClassKey& k,
                                   const std::vector<double>& base) {
  if (ranks[0].agreementDue(k)) {
    std::vector<std::vector<double>> words;
    for (Chooser& c : ranks) words.push_back(c.windowWords(k));
    const std::vector<double> agreed = slotMax(words);
    for (Chooser& c : ranks) c.absorb(k, agreed, base);
  }
  std::vector<Choice> ch;
  for (Chooser& c : ranks) ch.push_back(c.choose(k, base, true));
  return ch;
}

// The choice after `calls` calls (the chooser's current candidate).
int run(const Sim& sim, uint64_t seed) {
  Rng rng{seed * 7919};
  std::vector<Chooser> ranks(size_t(sim.ranks), Chooser(sim.options, sim.truth.size()));
  const ClassKey k = classOf(1 << 20, DataType::Float32);
  int burstLeft = 0;
  for (int call = 0; call < sim.calls; ++call) {
    if (burstLeft > 0) --burstLeft;
    else if (rng.uniform() < sim.burstChance) burstLeft = 4 + int(rng.uniform() * 13);
    const std::vector<Choice> ch = agreeAndChoose(ranks, k, sim.base);
    for (const Choice& c : ch) REQUIRE(c.candidate == ch[0].candidate);
    const size_t c = size_t(ch[0].candidate);
    const Truth& t = sim.truth[c];
    const double period = t.meanS * (1 + rng.pm(t.noise)) * (burstLeft > 0 ? sim.burstFactor : 1);
    const int first = int(rng.uniform() * sim.ranks);  // waited the whole call
    for (int r = 0; r < sim.ranks; ++r) {
      const double late = r == first ? 0 : rng.uniform() * t.skew * t.meanS;
      const double seconds = (period - late) * (1 + rng.pm(0.05));
      if (ch[size_t(r)].record) ranks[size_t(r)].record(k, int(c), seconds, sim.base[c]);
    }
  }
  return ranks[0].report().at(0).current;
}

// Time of calls [from, sim.calls) over what the best candidate alone would
// take: the steady-state cost of re-checks (5a, 5b) to the job. Per call the
// slowest rank's period; noise as in run().
double steadyCost(const Sim& sim, uint64_t seed, int from) {
  Rng rng{seed * 104729};
  std::vector<Chooser> ranks(size_t(sim.ranks), Chooser(sim.options, sim.truth.size()));
  const ClassKey k = classOf(100 << 20, DataType::Float32);
  double best = sim.truth[0].meanS;
  for (const Truth& t : sim.truth) best = std::min(best, t.meanS);
  double spent = 0, ideal = 0;
  for (int call = 0; call < sim.calls; ++call) {
    const std::vector<Choice> ch = agreeAndChoose(ranks, k, sim.base);
    const size_t c = size_t(ch[0].candidate);
    const double period = sim.truth[c].meanS * (1 + rng.pm(sim.truth[c].noise));
    for (int r = 0; r < sim.ranks; ++r)
      if (ch[size_t(r)].record) ranks[size_t(r)].record(k, int(c), period * (1 + rng.pm(0.05)), sim.base[c]);
    if (call >= from) spent += period, ideal += best;
  }
  return spent / ideal;
}

// Seeds 1..200: runs whose choice is slower than 1.1x the best.
int wrongRuns(const Sim& sim) {
  double best = sim.truth[0].meanS;
  for (const Truth& t : sim.truth) best = std::min(best, t.meanS);
  int wrong = 0;
  for (uint64_t seed = 1; seed <= 200; ++seed)
    if (sim.truth[size_t(run(sim, seed))].meanS > 1.1 * best) ++wrong;
  return wrong;
}

}  // namespace

TEST_CASE("auto noise: a 1.3x candidate that loads the machine is not chosen", "[auto]") {
  // The model cannot tell them apart (both predicted 2 ms). c1 is 1.3x c0,
  // +-30% per call, and under it the ranks arrive up to half a call apart.
  Sim sim;
  sim.truth = {{0.0025, 0.10, 0.05}, {0.00325, 0.30, 0.50}};
  sim.base = {0.002, 0.002};
  const int wrong = wrongRuns(sim);
  INFO("wrong choices in 200 seeded runs: " << wrong);
  CHECK(wrong <= 2);  // measured: 0 (the rule before: 66)
}

TEST_CASE("auto noise: 1 Gbit/s, 1 MiB: calls of 2-4 ms varying +-30% pick the best", "[auto]") {
  // The lab's cell (docs/results/auto.md): dense 11.3 ms, qsgd 8 bit 4.1,
  // qsgd 4 bit 3.4, oktopk 2.5; the model rates oktopk worse than qsgd 4 bit.
  // Bursts of load from other jobs slow about a tenth of the calls by 1.6x.
  Sim sim;
  sim.truth = {{0.0113, 0.10, 0.10}, {0.0041, 0.30, 0.30}, {0.0034, 0.30, 0.30},
               {0.0025, 0.30, 0.30}};
  sim.base = {0.009, 0.0035, 0.0028, 0.0030};
  sim.burstChance = 0.01;
  sim.burstFactor = 1.6;
  const int wrong = wrongRuns(sim);
  INFO("wrong choices in 200 seeded runs: " << wrong);
  CHECK(wrong <= 4);  // measured: 1 (the rule before: 30)
}

TEST_CASE("auto chooser: trial rounds are sized by predicted time, 3 to 8", "[auto]") {
  const ClassKey k = classOf(1 << 20, DataType::Float32);
  // Calls until the first agreement with the default options (budget 250 ms,
  // blocks of two calls): a round of two candidates costs 2 * (a + b).
  auto trialCalls = [&](std::vector<double> base) {
    Chooser ch(ChooserOptions{}, base.size());
    int calls = 0;
    while (!ch.agreementDue(k) && calls < 1000) {
      const Choice c = ch.choose(k, base, true);
      if (c.record) ch.record(k, c.candidate, base[size_t(c.candidate)], base[size_t(c.candidate)]);
      ++calls;
    }
    return calls;
  };
  CHECK(trialCalls({0.001, 0.0012}) == 8 * 2 * 2);  // 4.4 ms a round: capped at 8
  CHECK(trialCalls({0.010, 0.012}) == 5 * 2 * 2);   // 44 ms: 5 rounds fit
  CHECK(trialCalls({0.5, 0.6}) == 3 * 2 * 2);       // 2.2 s: the least, 3
}

TEST_CASE("auto chooser: a runner-up within the noise is re-checked at once, once", "[auto]") {
  ChooserOptions o;
  o.trialBudgetS = 0;  // three rounds: three measured calls each
  Chooser ch(o, 2);
  const ClassKey k = classOf(1 << 20, DataType::Float32);
  const std::vector<double> base{0.001, 0.001};
  // c1 is truly 0.8 ms, but its three trial calls read 1.05 ms (a burst).
  double c1 = 0.00105;
  auto call = [&] {
    if (ch.agreementDue(k)) ch.absorb(k, ch.windowWords(k), base);
    const Choice c = ch.choose(k, base, true);
    const double seconds = c.candidate == 0 ? 0.001 : c1;
    if (c.record) ch.record(k, c.candidate, seconds, base[size_t(c.candidate)]);
    return c;
  };
  for (int i = 0; i < 12; ++i) call();
  c1 = 0.0008;
  // Agreement: c0 (1.0) chosen; c1 (1.05) is within 10% and has 3 agreed
  // calls of the 8 that confirm: 8 - 3 + 1 calls of c1, the first unmeasured.
  for (int i = 0; i < 6; ++i) {
    const Choice c = call();
    CHECK(c.candidate == 1);
    CHECK(c.record == (i > 0));
  }
  // Agreement: c1's median over its 8 calls is 0.8 ms, more than 10% faster:
  // the class moves; c0 (1.0 ms, beyond the noise of c1's calls) is not re-checked.
  for (int i = 0; i < 40; ++i) CHECK(call().candidate == 1);
  const ClassReport r = ch.report().at(0);
  CHECK(r.agreedCalls[0] == 3);
  CHECK(r.factor[1] == Approx(0.8));
}

TEST_CASE("auto chooser: at steady state, re-checks of a candidate the model over-rates stay cheap",
          "[auto]") {
  // The lab's 1 Gbit/s, 100 MiB cell: oktopk 94 ms is the best; the model
  // rates qsgd 4 bit (truly 410 ms) faster than oktopk measures, so the
  // stale rule (5b) keeps re-trying it. Each re-check costs 4 calls of
  // 4.4x the best; once per 128 calls that was +10% on every call forever.
  Sim sim;
  sim.truth = {{1.40, 0.05, 0.05}, {0.70, 0.05, 0.05}, {0.41, 0.05, 0.05}, {0.094, 0.05, 0.05}};
  sim.base = {1.30, 0.45, 0.08, 0.12};
  sim.calls = 2300;
  double worst = 0;
  for (uint64_t seed = 1; seed <= 5; ++seed) worst = std::max(worst, steadyCost(sim, seed, 300));
  INFO("calls 300..2300 over the best candidate alone: " << worst);
  CHECK(worst < 1.03);
}

TEST_CASE("auto chooser: a compressor must beat dense by the hysteresis to be chosen", "[auto]") {
  // Loopback, 1 MiB (docs/results/auto.md): dense 2.0 ms, oktopk about as
  // fast; compressing there costs accuracy for nothing. Candidate 0 is the
  // baseline; calls vary +-10%.
  Sim sim;
  sim.options.baseline = 0;
  sim.base = {0.002, 0.002};
  sim.truth = {{0.0020, 0.10, 0.05}, {0.0020, 0.10, 0.05}};  // as fast: dense
  int dense = 0;
  for (uint64_t seed = 1; seed <= 50; ++seed) dense += run(sim, seed) == 0;
  CHECK(dense >= 48);
  sim.truth[1].meanS = 0.0015;  // 25% faster: the compressor
  int compressed = 0;
  for (uint64_t seed = 1; seed <= 50; ++seed) compressed += run(sim, seed) == 1;
  CHECK(compressed >= 48);
  // Calls of 2 ms varying +-40% (loopback, 4 ranks on 2 cores): a 15% gain
  // is inside the noise and dense stays; with the hysteresis alone as the
  // margin it was taken in most runs.
  sim.truth = {{0.0020, 0.40, 0.30}, {0.0017, 0.40, 0.30}};
  dense = 0;
  for (uint64_t seed = 1; seed <= 50; ++seed) dense += run(sim, seed) == 0;
  INFO("noisy 15% gain: dense chosen in " << dense << " of 50");
  CHECK(dense >= 40);
  // 1 Gbit/s, 1 MiB with dense as the baseline: oktopk, 4.5x faster and as
  // noisy, is still chosen.
  sim.truth = {{0.0113, 0.10, 0.10}, {0.0025, 0.30, 0.30}};
  sim.base = {0.009, 0.0030};
  compressed = 0;
  for (uint64_t seed = 1; seed <= 50; ++seed) compressed += run(sim, seed) == 1;
  CHECK(compressed == 50);
}
