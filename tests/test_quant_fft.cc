// FFT sparsification: transform properties of the CPU primitives (round trip,
// linearity, Parseval for the dropped bins, energy-ordered selection), the
// payload codec's validation, and the "fft" algorithm against its reference
// and the dense sum.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "algorithms/quant/fft_payload.h"
#include "algorithms/quant/quant_algorithms.h"
#include "device/cpu/quant_primitives.h"
#include "quant_harness.h"

using namespace gradcomp;
using namespace gradcomp::device;
using test::Buffers;

namespace {

std::vector<float> signal(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0, 1);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = g(rng) + 2.0f * std::sin(0.05f * float(i));
  return x;
}

double norm2(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += double(v) * v;
  return s;
}

param::Overrides overrides(std::initializer_list<std::pair<const char*, const char*>> kv) {
  param::Overrides o;
  for (const auto& [k, v] : kv) REQUIRE(o.set(k, v, "test").ok());
  return o;
}

bool bit(const std::vector<uint8_t>& m, size_t b) { return (m[b / 8] >> (b % 8)) & 1u; }

}  // namespace

TEST_CASE("fft: chunked forward/inverse round-trips; sum of spectra = spectrum of sum",
          "[quant][fft]") {
  for (size_t chunk : {size_t(2), size_t(7), size_t(64), size_t(1000)})
    for (size_t n : {size_t(1), size_t(5), size_t(64), size_t(1001)}) {
      const auto a = signal(n, 1), b = signal(n, 2);
      const size_t bins = fftBinCount(n, chunk);
      std::vector<float> fa(2 * bins), fb(2 * bins), y(n), ab(n);
      REQUIRE(cpu::fftForward(a.data(), n, chunk, fa.data()).ok());
      REQUIRE(cpu::fftForward(b.data(), n, chunk, fb.data()).ok());
      REQUIRE(cpu::fftInverse(fa.data(), n, chunk, y.data()).ok());
      for (size_t i = 0; i < n; ++i) REQUIRE(std::fabs(y[i] - a[i]) <= 1e-5 * (1 + std::fabs(a[i])));
      for (size_t i = 0; i < 2 * bins; ++i) fa[i] += fb[i];
      REQUIRE(cpu::fftInverse(fa.data(), n, chunk, y.data()).ok());
      for (size_t i = 0; i < n; ++i) REQUIRE(std::fabs(y[i] - (a[i] + b[i])) <= 2e-5 * (1 + std::fabs(a[i] + b[i])));
    }
}

TEST_CASE("fft: selection keeps the highest-energy bins; Parseval holds for what is dropped",
          "[quant][fft]") {
  const size_t n = 3000, chunk = 512;  // 5 full chunks (257 bins) + 440 (221 bins)
  const auto x = signal(n, 3);
  const size_t bins = fftBinCount(n, chunk);
  std::vector<float> f(2 * bins);
  REQUIRE(cpu::fftForward(x.data(), n, chunk, f.data()).ok());
  for (double keep : {0.0, 0.15, 0.5, 1.0}) {
    std::vector<uint8_t> map(packedBytes(bins, 1));
    REQUIRE(cpu::fftSelectBins(f.data(), n, chunk, keep, map.data()).ok());
    std::vector<float> kept(2 * bins, 0.0f), y(n);
    double droppedEnergy = 0;  // time-domain energy of the dropped bins, by Parseval
    for (size_t c = 0, bin = 0; c < fftChunkCount(n, chunk); ++c) {
      const size_t len = fftChunkLength(n, chunk, c), nb = fftBinsOfLength(len);
      size_t count = 0;
      double minKept = INFINITY, maxDropped = 0;
      for (size_t j = 0; j < nb; ++j) {
        const size_t b = bin + j;
        const double w = (j == 0 || (len % 2 == 0 && j == len / 2)) ? 1 : 2;
        const double e = w * (double(f[2 * b]) * f[2 * b] + double(f[2 * b + 1]) * f[2 * b + 1]);
        if (bit(map, b)) {
          ++count;
          minKept = std::min(minKept, e);
          kept[2 * b] = f[2 * b];
          kept[2 * b + 1] = f[2 * b + 1];
        } else {
          maxDropped = std::max(maxDropped, e);
          droppedEnergy += e / double(len);
        }
      }
      REQUIRE(count == fftKeepCount(nb, keep));
      if (count && count < nb) REQUIRE(minKept >= maxDropped);
      bin += nb;
    }
    REQUIRE(cpu::fftInverse(kept.data(), n, chunk, y.data()).ok());
    std::vector<float> diff(n);
    for (size_t i = 0; i < n; ++i) diff[i] = x[i] - y[i];
    REQUIRE(std::fabs(norm2(diff) - droppedEnergy) <= 1e-4 * norm2(x) + 1e-6);
  }
}

TEST_CASE("fft payload: size is fixed, decoders reject malformed payloads", "[quant][fft]") {
  algo::quant::FftLayout l;
  l.n = 2000;
  l.chunk = 256;
  l.keep = 0.2;
  const auto x = signal(l.n, 4);
  std::vector<uint8_t> p(algo::quant::fftPayloadBytes(l));
  Backend& dev = cpuBackend();
  REQUIRE(algo::quant::fftEncode(dev, l, x.data(), p.data()).ok());
  std::vector<float> spec(2 * fftBinCount(l.n, l.chunk), 0.0f);
  REQUIRE(algo::quant::fftDecodeAdd(dev, l, p.data(), 1, spec.data()).ok());
  auto bad = p;
  bad[0] ^= 0x01;  // one bin more or fewer in chunk 0
  Status s = algo::quant::fftDecodeAdd(dev, l, bad.data(), 3, spec.data());
  REQUIRE(s.code() == Err::RemoteError);
  REQUIRE(s.message().find("rank 3") != std::string::npos);
  bad = p;
  const size_t bitmapBytes = packedBytes(fftBinCount(l.n, l.chunk), 1);
  const float inf = INFINITY;
  std::memcpy(&bad[bitmapBytes], &inf, 4);  // chunk 0's vmax
  REQUIRE(algo::quant::fftDecodeAdd(dev, l, bad.data(), 3, spec.data()).code() == Err::RemoteError);
}

TEST_CASE("fft: theta 0 without a quantizer is the dense sum; matches its reference",
          "[quant][fft]") {
  for (int P : {1, 2, 3, 4}) {
    const size_t n = 5000;
    std::vector<Buffers> in(1, Buffers(P));
    for (int r = 0; r < P; ++r) in[0][r] = signal(n, 10 + r);
    const auto run = test::runLocal("fft", overrides({{"THETA", "0"}, {"BITS", "0"}, {"FFT_CHUNK", "1024"}}),
                                    in, RedOp::Sum);
    REQUIRE(run.ok());
    for (size_t i = 0; i < n; ++i) {
      double exact = 0, mag = 0;
      for (int r = 0; r < P; ++r) {
        exact += in[0][r][i];
        mag += std::fabs(in[0][r][i]);
      }
      for (int r = 0; r < P; ++r) REQUIRE(std::fabs(run.out[0][r][i] - exact) <= 1e-4 * (1 + mag));
    }
  }
  // The paper's setting with error feedback, several calls: identical on all
  // ranks and equal to the reference; wire bytes (P-1) * payload + stats.
  for (int P : {1, 2, 3, 5}) {
    const size_t n = 7000;
    std::vector<Buffers> in(3, Buffers(P));
    for (int c = 0; c < 3; ++c)
      for (int r = 0; r < P; ++r) in[c][r] = signal(n, 100 * c + r);
    const auto cfg = overrides({{"FFT_CHUNK", "2048"}});
    const auto run = test::runLocal("fft", cfg, in, RedOp::Avg);
    REQUIRE(run.ok());
    std::unique_ptr<algo::Reference> ref;
    REQUIRE(algo::quant::makeFftReference(P, cfg, &ref).ok());
    std::vector<std::vector<double>> expected;
    REQUIRE(test::referenceRun(*ref, in, RedOp::Avg, &expected).ok());
    algo::quant::FftLayout l;
    l.n = n;
    l.chunk = 2048;
    l.keep = 1 - 0.85;
    for (int c = 0; c < 3; ++c)
      for (int r = 0; r < P; ++r) {
        for (size_t i = 0; i < n; ++i) REQUIRE(test::sameBits(run.out[c][r][i], float(expected[c][i])));
        REQUIRE(run.sent[c][r] == uint64_t(P - 1) * (16 + algo::quant::fftPayloadBytes(l)));
      }
  }
}

TEST_CASE("fft: theta decays to 0 on schedule; NaN input falls back to dense", "[quant][fft]") {
  const int P = 2;
  const size_t n = 3000;
  std::vector<Buffers> in(4, Buffers(P));
  for (int c = 0; c < 4; ++c)
    for (int r = 0; r < P; ++r) in[c][r] = signal(n, 7 * c + r);
  const auto cfg = overrides({{"THETA", "0.9"}, {"THETA_DECAY_CALLS", "2"}, {"BITS", "0"},
                              {"EF", "0"}, {"FFT_CHUNK", "1000"}});
  const auto run = test::runLocal("fft", cfg, in, RedOp::Sum);
  REQUIRE(run.ok());
  // theta: 0.9, 0.45, 0, 0 -> payload sizes shrink with theta, calls 2 and 3 are exact.
  REQUIRE(run.sent[0][0] < run.sent[1][0]);
  REQUIRE(run.sent[1][0] < run.sent[2][0]);
  REQUIRE(run.sent[2][0] == run.sent[3][0]);
  for (int c : {2, 3})
    for (size_t i = 0; i < n; ++i)
      REQUIRE(std::fabs(run.out[c][0][i] - (in[c][0][i] + in[c][1][i])) <= 1e-4 * (1 + std::fabs(in[c][0][i]) + std::fabs(in[c][1][i])));

  auto nan = in;
  nan[0][1][17] = std::nanf("");
  const auto fb = test::runLocal("fft", overrides({}), nan, RedOp::Sum);
  REQUIRE(fb.ok());
  REQUIRE(std::isnan(fb.out[0][0][17]));
  REQUIRE(fb.out[0][0][16] == nan[0][0][16] + nan[0][1][16]);
}
