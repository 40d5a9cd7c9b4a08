// qsgd, rbf and sign over the local transport (threads) and, once, between
// real processes over UCX: results equal each algorithm's Reference bit for
// bit on every rank, error bounds and unbiasedness against the exact sum,
// wire bytes as the formulas say, and the non-finite fallback.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <random>

#include "algorithms/quant/chunk_codecs.h"
#include "algorithms/quant/quant_algorithms.h"
#include "gradcomp/gradcomp.h"
#include "quant_harness.h"
#include "support/multiproc.h"

using namespace gradcomp;
using test::Buffers;

namespace {

// calls x P x n inputs: Gaussian with a per-rank offset, a few exact zeros.
std::vector<Buffers> gaussianInputs(int calls, int P, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0, 1);
  std::vector<Buffers> in(calls, Buffers(P, std::vector<float>(n)));
  for (auto& call : in)
    for (int r = 0; r < P; ++r)
      for (size_t i = 0; i < n; ++i) call[r][i] = i % 17 == 3 ? 0.0f : g(rng) + 0.1f * r;
  return in;
}

param::Overrides overrides(std::initializer_list<std::pair<const char*, const char*>> kv) {
  param::Overrides o;
  for (const auto& [k, v] : kv) REQUIRE(o.set(k, v, "test").ok());
  return o;
}

using RefFactory = Status (*)(int, const param::Overrides&, std::unique_ptr<algo::Reference>*);

// Runs `algo` and its reference; every rank's output must equal the reference.
void requireMatchesReference(const char* algo, RefFactory factory, const param::Overrides& cfg,
                             const std::vector<Buffers>& in, RedOp op) {
  const int P = int(in[0].size());
  const test::LocalRun run = test::runLocal(algo, cfg, in, op);
  INFO(algo << " P=" << P << " n=" << in[0][0].size() << " op=" << redOpName(op));
  REQUIRE(run.firstError() == "");
  std::unique_ptr<algo::Reference> ref;
  REQUIRE(factory(P, cfg, &ref).ok());
  std::vector<std::vector<double>> expected;
  REQUIRE(test::referenceRun(*ref, in, op, &expected).ok());
  for (size_t c = 0; c < in.size(); ++c)
    for (int r = 0; r < P; ++r) {
      size_t wrong = 0;
      for (size_t i = 0; i < in[c][r].size(); ++i)
        wrong += test::sameBits(run.out[c][r][i], float(expected[c][i])) ? 0 : 1;
      INFO("call " << c << " rank " << r);
      REQUIRE(wrong == 0);
    }
}

}  // namespace

TEST_CASE("qsgd: every rank returns the reference's result, bit for bit", "[quant][qsgd]") {
  for (const char* bits : {"1", "2", "4", "8"})
    for (int P : {1, 2, 3, 5, 8})
      for (size_t n : {size_t(0), size_t(1), size_t(13), size_t(1000)}) {
        const auto cfg = overrides({{"BITS", bits}, {"BUCKET", "64"}});
        const RedOp op = P % 2 ? RedOp::Sum : RedOp::Avg;
        requireMatchesReference("qsgd", algo::quant::makeQsgdReference, cfg,
                                gaussianInputs(3, P, n, 100 + P), op);
      }
}

TEST_CASE("qsgd: error within the analytic bound, unbiased over seeds", "[quant][qsgd]") {
  const int P = 3;
  const size_t n = 256, bucket = 64;
  const auto in = gaussianInputs(1, P, n, 9);
  std::vector<double> exact(n, 0.0), bound(n, 0.0);
  for (int r = 0; r < P; ++r)
    for (size_t i = 0; i < n; ++i) exact[i] += in[0][r][i];
  for (int bits : {2, 8}) {
    const double L = (1 << bits) - 1;
    // Phase 1 moves a value by < one step of its bucket; decoded values stay in
    // [min, max], so the sum's bucket spans <= sum of ranges: phase 2 moves it
    // by < that / L. Hence |out - exact| < 2 * sum_r range_r / L (+ fp32 slop).
    for (size_t b = 0; b < n / bucket; ++b) {
      double ranges = 0;
      for (int r = 0; r < P; ++r) {
        auto lo = std::min_element(in[0][r].begin() + b * bucket, in[0][r].begin() + (b + 1) * bucket);
        auto hi = std::max_element(in[0][r].begin() + b * bucket, in[0][r].begin() + (b + 1) * bucket);
        ranges += double(*hi) - double(*lo);
      }
      for (size_t i = b * bucket; i < (b + 1) * bucket; ++i) bound[i] = 2 * ranges / L + 1e-5;
    }
    const int seeds = 300;
    std::vector<double> mean(n, 0.0);
    for (int s = 0; s < seeds; ++s) {
      const std::string seed = std::to_string(s);
      const auto cfg = overrides({{"BITS", bits == 2 ? "2" : "8"}, {"BUCKET", "64"},
                                  {"QUANT_SEED", seed.c_str()}, {"EF", "0"}});
      std::unique_ptr<algo::Reference> ref;  // bit-identical to the distributed run (above)
      REQUIRE(algo::quant::makeQsgdReference(P, cfg, &ref).ok());
      std::vector<std::vector<double>> out;
      REQUIRE(test::referenceRun(*ref, in, RedOp::Sum, &out).ok());
      for (size_t i = 0; i < n; ++i) {
        REQUIRE(std::fabs(out[0][i] - exact[i]) <= bound[i]);
        mean[i] += out[0][i] / seeds;
      }
    }
    // Standard deviation of one result <= sqrt(P) * step / 2 per phase; the
    // mean over `seeds` results is within 5 of its standard deviations.
    for (size_t i = 0; i < n; ++i) {
      const double sigma = bound[i] / 2 * std::sqrt(double(P)) / std::sqrt(double(seeds));
      REQUIRE(std::fabs(mean[i] - exact[i]) <= 5 * sigma);
    }
  }
}

TEST_CASE("qsgd: wire bytes equal the schedule's formula", "[quant][qsgd]") {
  for (int P : {2, 3, 4, 7}) {
    const size_t n = 10007, bucket = 128;
    const auto cfg = overrides({{"BITS", "4"}, {"BUCKET", "128"}});
    const auto run = test::runLocal("qsgd", cfg, gaussianInputs(1, P, n, 3), RedOp::Sum);
    REQUIRE(run.ok());
    algo::quant::MaxMinCodec codec(4, bucket);
    for (int r = 0; r < P; ++r) {
      uint64_t want = 16 * uint64_t(P - 1);  // stats exchange
      for (int j = 0; j < P; ++j)
        if (j != r) want += codec.encodedBytes(algo::quant::chunkRange(n, P, j, bucket).size);
      want += uint64_t(P - 1) * codec.encodedBytes(algo::quant::chunkRange(n, P, r, bucket).size);
      REQUIRE(run.sent[0][r] == want);
    }
  }
}

TEST_CASE("qsgd, rbf: owner-side error feedback matches the reference, bit for bit",
          "[quant][qsgd][rbf]") {
  // qsgd's default is on (the test above); off explicitly here too.
  for (const char* ownerEf : {"on", "off"})
    for (const char* bits : {"2", "8"})
      for (int P : {1, 2, 3, 4, 5})
        for (size_t n : {size_t(0), size_t(1), size_t(13), size_t(1000)})
          for (RedOp op : {RedOp::Sum, RedOp::Avg}) {
            const auto cfg =
                overrides({{"BITS", bits}, {"BUCKET", "64"}, {"QUANT_OWNER_EF", ownerEf}});
            requireMatchesReference("qsgd", algo::quant::makeQsgdReference, cfg,
                                    gaussianInputs(4, P, n, 200 + P), op);
          }
  requireMatchesReference(
      "qsgd", algo::quant::makeQsgdReference,
      overrides({{"BITS", "4"}, {"QUANT_OWNER_EF", "on"}, {"EF_DTYPE", "bfloat16"}}),
      gaussianInputs(3, 3, 2000, 5), RedOp::Avg);
  for (int P : {1, 2, 3, 4})
    for (RedOp op : {RedOp::Sum, RedOp::Avg})
      requireMatchesReference("rbf", algo::quant::makeRbfReference,
                              overrides({{"BITS", "6"}, {"QUANT_OWNER_EF", "on"}}),
                              gaussianInputs(4, P, 999, 60 + P), op);
}

TEST_CASE("qsgd: owner-side error feedback stops the owners' errors from adding up",
          "[quant][qsgd]") {
  // With every encoding's error fed back, sum_t out_t differs from the exact
  // sum_t by the final residuals only (avg: / P); without owner feedback the
  // owners' phase-2 errors add up as a random walk. T calls of 2-bit avg:
  // the RMS running error must be well below the one without (the residual
  // scaled by P for avg is what makes the walk vanish: without the scaling
  // (P-1)/P of it would remain).
  const int P = 4, T = 64;
  const size_t n = 1024;
  const auto in = gaussianInputs(T, P, n, 31);
  std::vector<double> exact(n, 0.0);
  for (int t = 0; t < T; ++t)
    for (int r = 0; r < P; ++r)
      for (size_t i = 0; i < n; ++i) exact[i] += double(in[t][r][i]) / P;
  auto rmsRunningError = [&](const char* ownerEf) {
    const auto cfg = overrides({{"BITS", "2"}, {"BUCKET", "64"}, {"QUANT_OWNER_EF", ownerEf}});
    std::unique_ptr<algo::Reference> ref;  // bit-identical to the distributed run (above)
    REQUIRE(algo::quant::makeQsgdReference(P, cfg, &ref).ok());
    std::vector<std::vector<double>> out;
    REQUIRE(test::referenceRun(*ref, in, RedOp::Avg, &out).ok());
    double sq = 0;
    for (size_t i = 0; i < n; ++i) {
      double total = 0;
      for (int t = 0; t < T; ++t) total += out[t][i];
      sq += (total - exact[i]) * (total - exact[i]);
    }
    return std::sqrt(sq / n);
  };
  const double on = rmsRunningError("on"), off = rmsRunningError("off");
  INFO("RMS running error: owner EF on " << on << ", off " << off);
  CHECK(on < 0.5 * off);
}

TEST_CASE("rbf: matches its reference; error within the RBF bounds", "[quant][rbf]") {
  for (int P : {1, 2, 4, 5})
    for (size_t n : {size_t(0), size_t(1), size_t(999)})
      requireMatchesReference("rbf", algo::quant::makeRbfReference, overrides({}),
                              gaussianInputs(3, P, n, 40 + P), P == 4 ? RedOp::Avg : RedOp::Sum);
  requireMatchesReference("rbf", algo::quant::makeRbfReference,
                          overrides({{"BITS", "8"}, {"RBF_VMAX", "0.5"}}),
                          gaussianInputs(2, 3, 500, 4), RedOp::Sum);  // saturating vmax

  // One call without error feedback: phase 1 errs by <= max(eps1/2, 2^-7 |x|)
  // per contribution, phase 2 by <= max(eps2/2, 2^-7 |sum|).
  const int P = 4;
  const size_t n = 4000;
  const auto in = gaussianInputs(1, P, n, 77);
  const auto run = test::runLocal("rbf", overrides({{"EF", "0"}}), in, RedOp::Sum);
  REQUIRE(run.ok());
  double vmax1 = 0, vmax2 = 0;
  std::vector<double> exact(n, 0.0), absSum(n, 0.0);
  for (int r = 0; r < P; ++r)
    for (size_t i = 0; i < n; ++i) {
      exact[i] += in[0][r][i];
      absSum[i] += std::fabs(in[0][r][i]);
      vmax1 = std::max(vmax1, double(std::fabs(in[0][r][i])));
    }
  for (size_t i = 0; i < n; ++i) vmax2 = std::max(vmax2, absSum[i]);
  const double rel = std::ldexp(1.0, -7), unit = device::rbfUnitMax(10, 6);
  for (size_t i = 0; i < n; ++i) {
    const double phase1 = P * vmax1 / unit / 2 + rel * absSum[i];
    const double phase2 = vmax2 / unit / 2 + rel * (absSum[i] + phase1);
    REQUIRE(std::fabs(run.out[0][0][i] - exact[i]) <= (phase1 + phase2) * 1.0001);
  }
}

TEST_CASE("sign: output is the central majority for P = 1..16, ties to -1 (negative rule)",
          "[quant][sign]") {
  for (int P = 1; P <= 16; ++P) {
    // Element i: exactly (i mod (P+1)) ranks vote positive, so every count
    // 0..P (and the tie P/2 for even P) occurs; magnitudes vary.
    const size_t n = 3 * size_t(P + 1) + 5;
    Buffers in(P, std::vector<float>(n));
    for (size_t i = 0; i < n; ++i)
      for (int r = 0; r < P; ++r) {
        const bool positive = size_t((r + i) % P) < i % size_t(P + 1);
        const float mag = 0.5f + float((i * 7 + r) % 5);
        in[r][i] = positive ? mag : (r % 3 == 0 ? 0.0f : -mag);
      }
    const auto run = test::runLocal("sign", overrides({{"SIGN_EF", "0"}, {"SIGN_TIES", "negative"}}),
                                    {in}, RedOp::Avg);
    REQUIRE(run.ok());
    // Scale (one block, n < GRADCOMP_SIGN_BLOCK): the projection of the exact
    // mean onto the decisions d, from per-rank shares <in_r, d> / n (fp64,
    // index order, rounded to fp32 as they travel), added in rank order.
    std::vector<double> d(n);
    for (size_t i = 0; i < n; ++i) {
      int positive = 0;
      for (int r = 0; r < P; ++r) positive += in[r][i] > 0;
      d[i] = 2 * positive > P ? 1.0 : -1.0;
    }
    double total = 0;
    for (int r = 0; r < P; ++r) {
      double dot = 0;
      for (size_t i = 0; i < n; ++i) dot += double(in[r][i]) * d[i];
      total += double(float(dot / double(n)));
    }
    const float scale = float(std::max(total, 0.0) / double(P));
    REQUIRE(scale > 0);  // so that the sign of every output shows the decision
    for (size_t i = 0; i < n; ++i) {
      int positive = 0;
      for (int r = 0; r < P; ++r) positive += in[r][i] > 0;
      REQUIRE(positive == int(i % size_t(P + 1)));
      const float want = 2 * positive > P ? scale : -scale;
      for (int r = 0; r < P; ++r) {
        INFO("P=" << P << " element " << i << " rank " << r << " positive " << positive);
        REQUIRE(test::sameBits(run.out[0][r][i], want));
      }
    }
  }
}

TEST_CASE("sign: the seed paper's 4+4 example gives +1", "[quant][sign]") {
  // Node A's four workers vote +1 +1 +1 +1, node B's -1 -1 -1 +1: a majority of
  // per-node majorities would be a tie, the all-reducible count gives 5 of 8.
  const float votes[8] = {1, 1, 1, 1, -1, -1, -1, 1};
  Buffers in(8);
  for (int r = 0; r < 8; ++r) in[r] = {votes[r]};
  const auto run = test::runLocal("sign", overrides({{"SIGN_EF", "0"}}), {in}, RedOp::Avg);
  REQUIRE(run.ok());
  // +1 decided; the scale is the projection of the exact mean (2/8) onto it.
  for (int r = 0; r < 8; ++r) REQUIRE(run.out[0][r][0] == 0.25f);
}

TEST_CASE("sign: matches its reference with EF; wire bytes per step as the formula says",
          "[quant][sign]") {
  for (int P : {1, 2, 3, 4, 8, 13})
    for (size_t n : {size_t(0), size_t(1), size_t(1001)})
      for (const char* ef : {"0", "1"})
        for (const char* block : {"1024", "7"})  // one block; many, the last one partial
          requireMatchesReference("sign", algo::quant::makeSignReference,
                                  overrides({{"SIGN_EF", ef}, {"SIGN_BLOCK", block}}),
                                  gaussianInputs(3, P, n, P), P % 2 ? RedOp::Sum : RedOp::Avg);
  for (int P = 2; P <= 16; ++P) {
    const size_t n = 20011;
    const auto run = test::runLocal("sign", overrides({}), gaussianInputs(1, P, n, 1), RedOp::Sum);
    REQUIRE(run.ok());
    for (int r = 0; r < P; ++r) {
      auto size = [&](int c) { return algo::quant::chunkRange(n, P, ((c % P) + P) % P, 1).size; };
      // stats, and one fp32 scale share per 1024-element block
      uint64_t want = (16 + 4 * ((n + 1023) / 1024)) * uint64_t(P - 1);
      for (int i = 1; i < P; ++i) {
        const int bits = int(std::ceil(std::log2(double(i + 1))));
        want += (size(r - i) * bits + 7) / 8;
      }
      for (int s = 0; s < P - 1; ++s) want += (size(r - s) + 7) / 8;
      INFO("P=" << P << " rank " << r);
      REQUIRE(run.sent[0][r] == want);
    }
  }
}

TEST_CASE("sign: the output is never longer than the exact result", "[quant][sign]") {
  for (int P : {2, 3, 4, 8}) {
    const size_t n = 4099;
    const auto in = gaussianInputs(1, P, n, 40 + P);
    const auto run = test::runLocal("sign", overrides({{"SIGN_EF", "0"}}), in, RedOp::Sum);
    REQUIRE(run.ok());
    double out2 = 0, exact2 = 0;
    for (size_t i = 0; i < n; ++i) {
      double e = 0;
      for (int r = 0; r < P; ++r) e += in[0][r][i];
      exact2 += e * e;
      out2 += double(run.out[0][0][i]) * run.out[0][0][i];
    }
    INFO("P=" << P << " |out| " << std::sqrt(out2) << " |exact| " << std::sqrt(exact2));
    REQUIRE(out2 > 0);
    REQUIRE(out2 <= exact2 * (1 + 1e-6));
  }
}

TEST_CASE("sign: ties split by the hash rule, alike on every rank and in the reference",
          "[quant][sign]") {
  // P = 4, one scale block. Elements 0..199 carry a common positive signal
  // (so the block's scale S is positive and the sign of every output shows
  // its decision); elements 200.. are 2:2 ties of zero sum. With the hash rule
  // about half of the ties go each way, the choice changes between calls,
  // every rank agrees, and the runner checks every call against the reference.
  const int P = 4;
  const size_t n = 2200, strong = 200;
  std::vector<Buffers> in(3, Buffers(P, std::vector<float>(n)));
  for (int c = 0; c < 3; ++c)
    for (int r = 0; r < P; ++r)
      for (size_t i = 0; i < n; ++i)
        in[c][r][i] = i < strong ? 10.0f : ((r < 2) == ((i + size_t(c)) % 2 == 0) ? 1.0f : -1.0f);
  const param::Overrides cfg = overrides({{"SIGN_EF", "0"}, {"SIGN_BLOCK", "4096"}});
  const auto run = test::runLocal("sign", cfg, in, RedOp::Sum);
  REQUIRE(run.ok());
  std::unique_ptr<algo::Reference> ref;
  REQUIRE(algo::quant::makeSignReference(P, cfg, &ref).ok());
  std::vector<std::vector<double>> expected;
  REQUIRE(test::referenceRun(*ref, in, RedOp::Sum, &expected).ok());
  const size_t ties = n - strong;
  for (int c = 0; c < 3; ++c) {
    size_t up = 0, changed = 0;
    REQUIRE(run.out[c][0][0] > 0);
    for (size_t i = strong; i < n; ++i) {
      up += run.out[c][0][i] > 0;
      if (c > 0) changed += (run.out[c][0][i] > 0) != (run.out[c - 1][0][i] > 0);
      for (int r = 1; r < P; ++r) REQUIRE(test::sameBits(run.out[c][r][i], run.out[c][0][i]));
      REQUIRE(test::sameBits(run.out[c][0][i], float(expected[c][i])));
    }
    INFO("call " << c << ": " << up << " of " << ties << " ties up, " << changed << " changed");
    CHECK(up > ties * 4 / 10);
    CHECK(up < ties * 6 / 10);
    if (c > 0) CHECK(changed > ties * 4 / 10);
  }
}

TEST_CASE("sign: with EF, ties and all-zero coordinates do not drift", "[quant][sign]") {
  // P = 4, 40 calls. Elements 0..15 carry a common positive signal (so the
  // scale is positive); 16..31 are exact 2:2 ties whose sides swap every call
  // (mean 0 per rank over time); 32..47 are 0 on every rank. Ties and zeros
  // are decided -1, so without EF they move by -S every call; with EF the
  // residual (measured against the decision) pushes them back.
  const int P = 4, calls = 40;
  const size_t n = 48;
  std::vector<Buffers> in(calls, Buffers(P, std::vector<float>(n, 0.0f)));
  for (int c = 0; c < calls; ++c)
    for (int r = 0; r < P; ++r)
      for (size_t i = 0; i < 32; ++i)
        in[c][r][i] = i < 16 ? 1.0f : (((r + c) % 2) ? 0.5f : -0.5f) * (r < 2 ? 1 : -1);
  for (const char* ef : {"0", "1"}) {
    const auto run = test::runLocal("sign", overrides({{"SIGN_EF", ef}, {"SIGN_TIES", "negative"}}),
                                    in, RedOp::Avg);
    REQUIRE(run.ok());
    double maxScale = 0, tieDrift = 0, zeroDrift = 0;
    for (int c = 0; c < calls; ++c) {
      maxScale = std::max(maxScale, double(std::fabs(run.out[c][0][0])));
      for (size_t i = 16; i < 32; ++i) tieDrift += run.out[c][0][i] / 16.0;
      for (size_t i = 32; i < 48; ++i) zeroDrift += run.out[c][0][i] / 16.0;
    }
    INFO("EF " << ef << " max S " << maxScale << " tie drift " << tieDrift << " zero drift "
               << zeroDrift);
    REQUIRE(maxScale > 0);
    if (ef[0] == '0') {
      REQUIRE(tieDrift < -0.2 * calls * maxScale);
      REQUIRE(zeroDrift < -0.2 * calls * maxScale);
    } else {
      REQUIRE(std::fabs(tieDrift) <= 3 * maxScale);
      REQUIRE(std::fabs(zeroDrift) <= 3 * maxScale);
    }
  }
}

TEST_CASE("quantized: a NaN/Inf on any rank makes the call exact (dense) on all", "[quant]") {
  for (const char* algo : {"qsgd", "rbf", "sign"}) {
    INFO(algo);
    const int P = 3;
    auto in = gaussianInputs(2, P, 50, 8);
    in[0][1][3] = std::nanf("");
    in[0][2][5] = INFINITY;
    const auto run = test::runLocal(algo, overrides({}), in, RedOp::Sum);
    REQUIRE(run.ok());
    for (int r = 0; r < P; ++r)
      for (size_t i = 0; i < 50; ++i) {
        const float want = (in[0][0][i] + in[0][1][i]) + in[0][2][i];  // rank order, fp32
        REQUIRE(test::sameBits(run.out[0][r][i], want));
      }
    REQUIRE(std::isnan(run.out[0][0][3]));
    REQUIRE(run.out[0][0][5] == INFINITY);
    // The next (finite) call is compressed again, with residuals cleared.
    RefFactory f = std::string(algo) == "qsgd" ? algo::quant::makeQsgdReference
                   : std::string(algo) == "rbf" ? algo::quant::makeRbfReference
                                                : algo::quant::makeSignReference;
    requireMatchesReference(algo, f, overrides({}), in, RedOp::Sum);
  }
  // Finite inputs whose sum could overflow fp32 also take the exact path.
  Buffers big(4, std::vector<float>(8, 1e38f));
  const auto run = test::runLocal("qsgd", overrides({}), {big}, RedOp::Sum);
  REQUIRE(run.ok());
  REQUIRE(run.out[0][0][0] == INFINITY);  // what dense returns
}

TEST_CASE("quantized: bad parameters are InvalidConfig errors naming the variable", "[quant]") {
  const auto in = gaussianInputs(1, 2, 10, 1);
  auto run = test::runLocal("qsgd", overrides({{"BITS", "3"}}), in, RedOp::Sum);
  REQUIRE(run.status[0].code() == Err::InvalidConfig);
  REQUIRE(run.status[0].message().find("GRADCOMP_BITS") != std::string::npos);
  run = test::runLocal("rbf", overrides({{"BITS", "10"}, {"RBF_MANTISSA", "1"}}), in, RedOp::Sum);
  REQUIRE(run.status[0].code() == Err::InvalidConfig);
  REQUIRE(run.status[0].message().find("GRADCOMP_RBF_MANTISSA") != std::string::npos);
}

// ---- real processes over UCX, through the public C API ----

namespace {

// Each rank regenerates every rank's inputs, runs the algorithm, and checks
// its output against the reference computed locally.
int ucxRank(int rank) {
  gcComm_t comm = nullptr;
  if (gcCommInitFromEnv(&comm) != gcSuccess) {
    fprintf(stderr, "rank %d: gcCommInitFromEnv: %s\n", rank, gcLastError());
    return 10;
  }
  const int P = gcCommSize(comm);
  int rc = 0;
  const std::pair<const char*, RefFactory> algos[] = {
      {"qsgd", algo::quant::makeQsgdReference},
      {"rbf", algo::quant::makeRbfReference},
      {"sign", algo::quant::makeSignReference},
      {"fft", algo::quant::makeFftReference}};
  uint64_t key = 99;  // one tensor per algorithm: residuals are per key, shared by algorithms
  for (const auto& [name, factory] : algos) {
    ++key;
    gcAlgoConfig_t cfg = nullptr;
    if (gcAlgoConfigCreate(name, &cfg) != gcSuccess) return 11;
    const auto in = gaussianInputs(2, P, 3001, 5);
    std::unique_ptr<algo::Reference> ref;
    if (!factory(P, param::Overrides{}, &ref).ok()) return 12;
    std::vector<std::vector<double>> expected;
    if (!test::referenceRun(*ref, in, RedOp::Sum, &expected, key).ok()) return 13;
    for (size_t c = 0; c < in.size() && rc == 0; ++c) {
      std::vector<float> out(in[c][rank].size());
      if (gcAllreduce(in[c][rank].data(), out.data(), out.size(), gcFloat32, gcSum, cfg, key,
                      comm) != gcSuccess) {
        fprintf(stderr, "rank %d %s: %s\n", rank, name, gcLastError());
        rc = 14;
        break;
      }
      for (size_t i = 0; i < out.size(); ++i)
        if (!test::sameBits(out[i], float(expected[c][i]))) {
          fprintf(stderr, "rank %d %s call %zu: element %zu is %g, reference %g\n", rank, name,
                  c, i, double(out[i]), expected[c][i]);
          rc = 15;
          break;
        }
    }
    gcAlgoConfigDestroy(cfg);
  }
  if (gcCommDestroy(comm) != gcSuccess && rc == 0) rc = 16;
  return rc;
}

}  // namespace

TEST_CASE("quantized (UCX processes): 3 ranks agree with the references", "[quant][mp]") {
  const std::map<std::string, std::string> env = {{"GRADCOMP_TIMEOUT_S", "30"}};
  REQUIRE(test::allSucceeded(test::runRanks(3, ucxRank, env, 120)));
}
