// GRADCOMP_ALGO=auto's pure parts: the model (fits, predictions, words), the
// candidate list, and the per-class chooser (trials, agreements, hysteresis).
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "algorithms/auto/auto_model.h"
#include "algorithms/auto/candidates.h"
#include "algorithms/auto/chooser.h"

using namespace gradcomp;
using namespace gradcomp::algo::autosel;

namespace {

// A candidate whose true cost is latency + wire * beta + compute, sampled
// exactly at the probe's sizes.
ProbeSample exactSample(double n, double latency, double wirePerElement, double beta,
                        double computePerElement) {
  const double wire = wirePerElement * n, compute = computePerElement * n;
  return ProbeSample{n, latency + wire * beta + compute, compute, wire};
}

}  // namespace

TEST_CASE("auto model: a fit reproduces exact samples and extrapolates linearly", "[auto]") {
  const LinkFit link{20e-6, 1e-9};  // 1 GB/s
  std::vector<ProbeSample> samples;
  for (double n : {65536.0, 262144.0, 1048576.0})
    samples.push_back(exactSample(n, 300e-6, 6.0, link.betaSPerByte, 2e-9));
  const CandidateFit fit = fitCandidate(samples, link, true);
  REQUIRE(fit.usable);
  CHECK(fit.latencyS == Approx(300e-6).epsilon(1e-9));
  CHECK(fit.wirePerElement == Approx(6.0));
  CHECK(fit.computePerElement == Approx(2e-9).epsilon(1e-6));
  Model m;
  m.nranks = 4;
  m.link = link;
  m.candidates = {fit};
  const double n = 26214400;  // 100 MiB of fp32: 25x beyond the largest sample
  CHECK(predictSeconds(m, 0, size_t(n), DataType::Float32) ==
        Approx(300e-6 + 6.0 * n * 1e-9 + 2e-9 * n).epsilon(1e-9));
  // Dense follows the element size: half the bytes and work for fp16.
  CHECK(predictWireBytes(m, 0, size_t(n), DataType::Float16) == Approx(3.0 * n));
  CHECK(predictSeconds(m, 0, size_t(n), DataType::Float16) ==
        Approx(300e-6 + 3.0 * n * 1e-9 + 1e-9 * n).epsilon(1e-9));
  // A compressor works on fp32 whatever the input type.
  m.candidates[0].elementSizeScales = false;
  CHECK(predictWireBytes(m, 0, size_t(n), DataType::Float16) == Approx(6.0 * n));
}

TEST_CASE("auto model: noise never makes a prediction negative or a fit unusable", "[auto]") {
  const LinkFit link{10e-6, 1e-9};
  // The larger run measured cheaper: a flat cost, not a negative slope.
  CandidateFit flat = fitCandidate({{65536, 5e-3, 1e-3, 1e5}, {262144, 4e-3, 0.5e-3, 4e5}}, link,
                                   false);
  REQUIRE(flat.usable);
  CHECK(flat.computePerElement >= 0);
  CHECK(flat.wirePerElement >= 0);
  Model m;
  m.link = link;
  m.candidates = {flat};
  for (size_t n : {size_t(1), size_t(65536), size_t(1) << 30})
    CHECK(predictSeconds(m, 0, n, DataType::Float32) >= 0);
  // One sample: proportional through the origin.
  CandidateFit one = fitCandidate({{65536, 2e-3, 1e-3, 65536 * 4.0}}, link, false);
  REQUIRE(one.usable);
  CHECK(one.wirePerElement == Approx(4.0));
  // No samples, or a non-finite one: unusable, predicted +inf.
  CHECK_FALSE(fitCandidate({}, link, false).usable);
  CHECK_FALSE(fitCandidate({{65536, NAN, 1e-3, 1e5}}, link, false).usable);
  m.candidates.push_back(CandidateFit{});
  CHECK(std::isinf(predictSeconds(m, 1, 1000, DataType::Float32)));
  CHECK(std::isinf(predictSeconds(m, 7, 1000, DataType::Float32)));
}

TEST_CASE("auto model: words round-trip bit for bit, bad words are rejected", "[auto]") {
  Model m;
  m.nranks = 8;
  m.link = {12.5e-6, 0.8e-9};
  m.candidates.push_back(fitCandidate({{65536, 1e-3, 2e-4, 3e5}, {1 << 20, 9e-3, 4e-3, 5e6}},
                                      m.link, true));
  m.candidates.push_back(CandidateFit{});
  Model back;
  REQUIRE(modelFromWords(modelWords(m), &back).ok());
  CHECK(modelWords(back) == modelWords(m));
  std::vector<double> w = modelWords(m);
  w.pop_back();
  CHECK(modelFromWords(w, &back).code() == Err::InvalidArgument);
  w = modelWords(m);
  w[0] = 99;
  CHECK(modelFromWords(w, &back).code() == Err::InvalidArgument);
}

TEST_CASE("auto model: slotMax takes each slot's max and never hides a NaN", "[auto]") {
  const std::vector<double> agreed = slotMax({{1, -5, 3}, {2, -7, NAN}, {0, -6, 1}});
  CHECK(agreed[0] == 2);
  CHECK(agreed[1] == -5);
  CHECK(std::isnan(agreed[2]));
}

TEST_CASE("auto candidates: the default list and parameters parse", "[auto]") {
  std::vector<CandidateSpec> specs;
  REQUIRE(parseCandidates("dense, qsgd:BITS=8 ,qsgd:BITS=4:BUCKET=256,oktopk:DENSITY=0.001",
                          "GRADCOMP_AUTO_CANDIDATES", &specs)
              .ok());
  REQUIRE(specs.size() == 4);
  CHECK(specs[0].isDense());
  CHECK(specs[1].label == "qsgd:BITS=8");
  CHECK(specs[2].params.at("BITS") == "4");
  CHECK(specs[2].params.at("BUCKET") == "256");
  CHECK(specs[3].algo == "oktopk");
  CHECK(specs[3].params.at("DENSITY") == "0.001");
}

TEST_CASE("auto candidates: bad lists are errors naming the variable", "[auto]") {
  const char* var = "GRADCOMP_AUTO_CANDIDATES";
  struct Case {
    const char* text;
    const char* mentions;
  };
  for (const Case& c : {Case{"", "is empty"}, Case{"  ", "is empty"},
                        Case{"dense,nosuch", "unknown candidate 'nosuch'"},
                        Case{"dense,,oktopk", "empty entry"},
                        Case{"auto,dense", "cannot be one of them"},
                        Case{"wagma", "not an allreduce"},
                        Case{"qsgd:FOO=1", "'FOO' is not a parameter of qsgd"},
                        Case{"qsgd:BITS", "not PARAM=VALUE"},
                        Case{"qsgd:BITS=x", "BITS"},
                        Case{"dense,dense", "listed twice"}}) {
    INFO(c.text);
    std::vector<CandidateSpec> specs;
    const Status s = parseCandidates(c.text, var, &specs);
    REQUIRE(s.code() == Err::InvalidConfig);
    CHECK(s.message().find(var) != std::string::npos);
    CHECK(s.message().find(c.mentions) != std::string::npos);
  }
}

TEST_CASE("auto chooser: size classes are (dtype, floor(log2 bytes))", "[auto]") {
  CHECK(classOf(1 << 20, DataType::Float32).log2Bytes == 20);
  CHECK(classOf((2 << 20) - 1, DataType::Float32).log2Bytes == 20);
  CHECK(classOf(100 << 20, DataType::Float32).log2Bytes == 26);
  CHECK(classOf(1 << 20, DataType::Float16) < classOf(1 << 20, DataType::Float32));
  CHECK_FALSE(classOf(1 << 20, DataType::Float32) < classOf((1 << 20) + 7, DataType::Float32));
}

TEST_CASE("auto chooser: trials, agreement, then the fastest measured candidate", "[auto]") {
  ChooserOptions o;
  o.explore = 3;
  o.trialRounds = 3;
  o.trialBlock = 2;
  o.trialBudgetS = 0;  // no rounds beyond the three
  o.refineCalls = 4;
  Chooser ch(o, 4);
  const ClassKey k = classOf(16 << 20, DataType::Float32);
  // Model: c0 10 ms, c1 12 ms, c2 40 ms (beyond 3x), c3 unusable.
  const std::vector<double> base{0.010, 0.012, 0.040, std::numeric_limits<double>::infinity()};
  // Trials: three rounds of a block of two calls each for c0 then c1; a
  // block's first call is not measured.
  const std::vector<int> order{0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1};
  for (size_t i = 0; i < order.size(); ++i) {
    CHECK_FALSE(ch.agreementDue(k));
    const Choice c = ch.choose(k, base, true);
    CHECK(c.candidate == order[i]);
    CHECK(c.record == (i % 2 == 1));
    // Measured: c0 is 3x slower than modelled, c1 as modelled (one outlier
    // of c1, a preempted call, that the median ignores).
    if (c.record) ch.record(k, c.candidate, c.candidate == 0 ? 0.030 : i == 7 ? 0.5 : 0.012,
                            base[size_t(c.candidate)]);
  }
  REQUIRE(ch.agreementDue(k));
  // One word per measured call, candidate by candidate (c2, c3 never ran).
  std::vector<double> words = ch.windowWords(k);
  REQUIRE(words.size() == 6);
  CHECK(words[0] == Approx(3.0));
  CHECK(words[4] == Approx(0.5 / 0.012));  // c1's outlier
  ch.absorb(k, words, base);
  CHECK_FALSE(ch.agreementDue(k));
  Choice c = ch.choose(k, base, true);
  CHECK(c.candidate == 1);
  CHECK(c.predictedS == Approx(0.012));
  CHECK(c.record);  // c1 ran the call before: no one-time cost
  const std::vector<ClassReport> rep = ch.report();
  REQUIRE(rep.size() == 1);
  CHECK(rep[0].current == 1);
  CHECK(rep[0].callsBy == std::vector<uint64_t>{6, 7, 0, 0});
  CHECK(rep[0].measuredS[0] == Approx(0.030));
  CHECK(rep[0].factor[0] == Approx(3.0));
  CHECK(rep[0].factor[1] == Approx(1.0));  // the median: the outlier does not count
  CHECK(rep[0].agreedCalls == std::vector<uint64_t>{3, 3, 0, 0});
}

TEST_CASE("auto chooser: the baseline (dense) is tried within explore^2 of the best", "[auto]") {
  ChooserOptions o;
  o.explore = 3;
  o.trialRounds = 1;
  o.trialBlock = 3;
  o.baseline = 0;
  const ClassKey k = classOf(100 << 20, DataType::Float32);
  {
    Chooser ch(o, 3);
    // dense 8x the best (within 9x): tried; c1 4x: not.
    const std::vector<double> base{0.8, 0.4, 0.1};
    std::vector<int> ran;
    for (int i = 0; i < 6; ++i) ran.push_back(ch.choose(k, base, true).candidate);
    CHECK(ran == std::vector<int>{2, 2, 2, 0, 0, 0});
  }
  {
    Chooser ch(o, 3);
    const std::vector<double> base{1.0, 0.4, 0.1};  // dense 10x: not tried
    for (int i = 0; i < 6; ++i) CHECK(ch.choose(k, base, true).candidate == 2);
  }
}

TEST_CASE("auto chooser: hysteresis keeps a size on its candidate until another is clearly faster",
          "[auto]") {
  ChooserOptions o;
  o.explore = 1;  // no trials: the model's best first
  o.hysteresis = 0.1;
  o.refineCalls = 2;
  Chooser ch(o, 2);
  const ClassKey k = classOf(1 << 22, DataType::Float32);
  const std::vector<double> base{0.010, 0.011};
  auto runWindow = [&](double measured0) {
    for (int i = 0; i < 2; ++i) {
      const Choice c = ch.choose(k, base, true);
      if (c.record) ch.record(k, c.candidate, c.candidate == 0 ? measured0 : 0.011, base[size_t(c.candidate)]);
    }
    REQUIRE(ch.agreementDue(k));
    ch.absorb(k, ch.windowWords(k), base);
    return ch.choose(k, base, true).candidate;
  };
  CHECK(ch.choose(k, base, true).candidate == 0);
  // c0 measured 11.5 ms: c1 (11 ms) is faster, but by less than 10%: stay.
  CHECK(runWindow(0.0115) == 0);
  // c0 measured 14 ms: its factor, the median over both windows' calls, is
  // 1.275; c1 is more than 10% faster: move.
  CHECK(runWindow(0.014) == 1);
}

TEST_CASE("auto chooser: without measurements the model alone decides, no agreements",
          "[auto]") {
  Chooser ch(ChooserOptions{}, 3);
  const ClassKey k = classOf(1 << 24, DataType::BFloat16);
  const std::vector<double> base{0.020, 0.015, 0.016};
  for (int i = 0; i < 50; ++i) {
    CHECK_FALSE(ch.agreementDue(k));
    const Choice c = ch.choose(k, base, false);
    CHECK(c.candidate == 1);
    CHECK_FALSE(c.record);
  }
}

TEST_CASE("auto chooser: ranks with different local times choose alike from agreed words",
          "[auto]") {
  // Four choosers stand for four ranks: each records its own (different)
  // times, but absorbs the same agreed words, as the tuner does.
  ChooserOptions o;
  o.refineCalls = 3;
  std::vector<Chooser> ranks(4, Chooser(o, 3));
  const ClassKey k = classOf(1 << 20, DataType::Float32);
  const std::vector<double> base{0.004, 0.005, 0.006};
  uint64_t state = 12345;
  auto noise = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return 0.5 + double(state >> 11) / double(uint64_t(1) << 53) * 2.0;
  };
  for (int call = 0; call < 60; ++call) {
    if (ranks[0].agreementDue(k)) {
      std::vector<std::vector<double>> all;
      for (Chooser& c : ranks) {
        REQUIRE(c.agreementDue(k));
        all.push_back(c.windowWords(k));
      }
      const std::vector<double> agreed = slotMax(all);
      for (Chooser& c : ranks) c.absorb(k, agreed, base);
    }
    std::vector<Choice> choices;
    for (Chooser& c : ranks) choices.push_back(c.choose(k, base, true));
    for (size_t r = 0; r < ranks.size(); ++r) {
      CHECK(choices[r].candidate == choices[0].candidate);
      CHECK(choices[r].record == choices[0].record);
      if (choices[r].record)
        ranks[r].record(k, choices[r].candidate, base[size_t(choices[r].candidate)] * noise() * (1 + double(r)),
                        base[size_t(choices[r].candidate)]);
    }
  }
}
