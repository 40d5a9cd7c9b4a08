// [gpu] The quantized-family primitives of the CUDA backend against the CPU
// reference: max-min quantization (fused and general paths, residual into a
// separate buffer and in place), RBF (whole streams and FFT segments), sign
// votes and counts, blockDot's fixed summation order, the block expansion,
// and the FFT with bin selection, bitmap checks, gather and scatter. Every
// deterministic primitive matches bit for bit; cuFFT against FFTW within a
// bound; corrupt payloads give the CPU's code and message at sync().
//
// main: tests/support/gpu_main.cc (exits 4, skipped, without a CUDA device).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "device/backend.h"
#include "support/backend_buffers.h"
#include "support/backend_under_test.h"

using namespace gradcomp;
using namespace gradcomp::device;
using testing::DevBuf;

namespace {

// `owned` is made in its initializer: `gpu` binds to it after (members
// initialize in order; a constructor body would run too late, and `gpu` would
// refer to no object -- the H200 run's std::bad_alloc at every first section).
struct Fixture {
  std::unique_ptr<Backend> owned = testing::makeBackendUnderTest();
  Backend& gpu = *owned;
  Backend& cpu = cpuBackend();
  Status done() { return gpu.sync(); }
};

uint32_t bitsOf(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}
bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (bitsOf(a[i]) != bitsOf(b[i]) && !(std::isnan(a[i]) && std::isnan(b[i]))) {
      UNSCOPED_INFO("first difference at " << i << ": " << a[i] << " vs " << b[i]);
      return false;
    }
  return true;
}
void sameOutcome(const Status& gpu, const Status& cpu) {
  INFO("gpu: " << gpu.toString() << "\ncpu: " << cpu.toString());
  CHECK(gpu.code() == cpu.code());
  CHECK(gpu.message() == cpu.message());
}

std::vector<float> makeInput(size_t n, int kind, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  const float specials[] = {0.0f, -0.0f, NAN, INFINITY, -INFINITY, 1e-45f, -3.4e38f, 1.0f};
  for (size_t i = 0; i < n; ++i) {
    switch (kind) {
      case 0: x[i] = normal(rng); break;
      case 1: x[i] = float(int(rng() % 7) - 3) * 0.5f; break;
      case 2: x[i] = rng() % 13 == 0 ? specials[rng() % 8] : normal(rng); break;
      case 3: x[i] = normal(rng) * std::ldexp(1.0f, int(rng() % 60) - 30); break;  // wide range
      default: x[i] = 0.25f;
    }
  }
  return x;
}

const size_t kSizes[] = {1, 7, 8, 2047, 2049, 100003};

}  // namespace

TEST_CASE("cuda absStats and max-min quantization match the cpu", "[gpu]") {
  Fixture f;
  for (size_t n : kSizes)
    for (int kind = 0; kind < 5; ++kind) {
      INFO("n " << n << " kind " << kind);
      const std::vector<float> x = makeInput(n, kind, 77 + n + kind);
      DevBuf<float> dx(f.gpu, x);
      AbsStats sc, sg;
      REQUIRE(f.cpu.absStats(x.data(), n, &sc).ok());
      REQUIRE(f.gpu.absStats(dx.ptr(), n, &sg).ok());
      REQUIRE(f.done().ok());
      CHECK(sg.maxAbs == sc.maxAbs);
      CHECK(sg.nonFinite == sc.nonFinite);
      // Buckets: 512 and 5 (fused unless bits * bucket is not whole bytes),
      // 10000 (the general path: chunked min/max).
      for (int bits : {1, 2, 4, 8})
        for (size_t bucket : {size_t(1), size_t(5), size_t(512), size_t(10000)}) {
          INFO("bits " << bits << " bucket " << bucket);
          MaxMinSpec spec;
          spec.bits = bits;
          spec.bucket = bucket;
          spec.seed = streamSeed(11, 2, 1, 0);
          const size_t buckets = maxMinBuckets(n, bucket), bytes = packedBytes(n, bits);
          std::vector<float> mc(2 * buckets), rc(n);
          std::vector<uint8_t> cc(bytes);
          REQUIRE(f.cpu.quantizeMaxMin(x.data(), n, spec, 1234, mc.data(), cc.data(), rc.data()).ok());
          // Meta and codes into a host payload (as the algorithms do), residual separate.
          HostArray<uint8_t> payload(f.gpu, 8 * buckets + bytes);
          float* mg = reinterpret_cast<float*>(payload.data());
          uint8_t* cg = payload.data() + 8 * buckets;
          DevBuf<float> rg(f.gpu, n);
          REQUIRE(f.gpu.quantizeMaxMin(dx.ptr(), n, spec, 1234, mg, cg, rg.ptr()).ok());
          REQUIRE(f.done().ok());
          CHECK(sameBits(std::vector<float>(mg, mg + 2 * buckets), mc));
          CHECK(std::vector<uint8_t>(cg, cg + bytes) == cc);
          CHECK(sameBits(rg.get(), rc));
          // In place: the residual overwrites the source.
          DevBuf<float> inPlace(f.gpu, x);
          REQUIRE(f.gpu.quantizeMaxMin(inPlace.ptr(), n, spec, 1234, mg, cg, inPlace.ptr()).ok());
          REQUIRE(f.done().ok());
          CHECK(sameBits(inPlace.get(), rc));
          CHECK(std::vector<uint8_t>(cg, cg + bytes) == cc);
          for (bool accumulate : {false, true}) {
            std::vector<float> oc = makeInput(n, 0, 5);
            DevBuf<float> og(f.gpu, oc);
            REQUIRE(f.cpu.dequantizeMaxMin(mc.data(), cc.data(), n, spec, oc.data(), accumulate, -1).ok());
            REQUIRE(f.gpu.dequantizeMaxMin(mg, cg, n, spec, og.ptr(), accumulate, -1).ok());
            REQUIRE(f.done().ok());
            CHECK(sameBits(og.get(), oc));
          }
        }
    }
  // Unaligned starts: absStats' unaligned head and tail; the decoder with dst
  // not 16-byte aligned and codes in device memory at an odd byte offset.
  for (size_t n : {size_t(1), size_t(3), size_t(17), size_t(2049)})
    for (size_t off = 1; off < 4; ++off) {
      INFO("n " << n << " offset " << off);
      const std::vector<float> x = makeInput(n + off, 2, 5 + n + off);
      DevBuf<float> dx(f.gpu, x);
      AbsStats sc, sg;
      REQUIRE(f.cpu.absStats(x.data() + off, n, &sc).ok());
      REQUIRE(f.gpu.absStats(dx.ptr() + off, n, &sg).ok());
      REQUIRE(f.done().ok());
      CHECK(sg.maxAbs == sc.maxAbs);
      CHECK(sg.nonFinite == sc.nonFinite);
      MaxMinSpec spec;
      spec.bits = 4;
      spec.bucket = 5;
      const std::vector<float> v = makeInput(n, 0, n);
      const size_t buckets = maxMinBuckets(n, spec.bucket), bytes = packedBytes(n, spec.bits);
      std::vector<float> mc(2 * buckets);
      std::vector<uint8_t> cc(bytes + off);
      REQUIRE(f.cpu.quantizeMaxMin(v.data(), n, spec, 0, mc.data(), cc.data() + off, nullptr).ok());
      DevBuf<float> dm(f.gpu, mc);
      DevBuf<uint8_t> dc(f.gpu, cc);
      for (bool accumulate : {false, true}) {
        std::vector<float> oc = makeInput(n + off, 0, 6);
        DevBuf<float> og(f.gpu, oc);
        REQUIRE(f.cpu.dequantizeMaxMin(mc.data(), cc.data() + off, n, spec, oc.data() + off,
                                       accumulate, -1).ok());
        REQUIRE(f.gpu.dequantizeMaxMin(dm.ptr(), dc.ptr() + off, n, spec, og.ptr() + off,
                                       accumulate, -1).ok());
        REQUIRE(f.done().ok());
        CHECK(sameBits(og.get(), oc));
      }
    }
  // Corrupt payloads: a bucket's meta, then the padding bits (checked first).
  MaxMinSpec spec;
  spec.bucket = 4;
  spec.bits = 2;
  std::vector<float> meta = {0, 1, 2, 1, 0, 1};  // bucket 1: min > max
  std::vector<uint8_t> codes(packedBytes(11, 2), 0x1B);
  codes.back() &= 0x3F;  // 11 codes: the last 2 bits are padding
  HostArray<float> hm = testing::hostCopy(f.gpu, meta);
  HostArray<uint8_t> hc = testing::hostCopy(f.gpu, codes);
  DevBuf<float> og(f.gpu, 11);
  std::vector<float> oc(11);
  REQUIRE(f.gpu.dequantizeMaxMin(hm.data(), hc.data(), 11, spec, og.ptr(), false, 6).ok());
  sameOutcome(f.done(), f.cpu.dequantizeMaxMin(meta.data(), codes.data(), 11, spec, oc.data(), false, 6));
  codes.back() |= 0xC0;
  hc[codes.size() - 1] = codes.back();
  REQUIRE(f.gpu.dequantizeMaxMin(hm.data(), hc.data(), 11, spec, og.ptr(), false, 6).ok());
  sameOutcome(f.done(), f.cpu.dequantizeMaxMin(meta.data(), codes.data(), 11, spec, oc.data(), false, 6));
  spec.bits = 3;
  const Status badBits = f.gpu.quantizeMaxMin(og.ptr(), 11, spec, 0, og.ptr(), hc.data(), nullptr);
  CHECK(testing::argumentError(f.gpu, badBits) == Err::InvalidArgument);
}

TEST_CASE("cuda RBF streams and segments match the cpu", "[gpu]") {
  Fixture f;
  for (size_t n : kSizes)
    for (int kind = 0; kind < 5; ++kind)
      for (int bits : {3, 10, 16}) {
        INFO("n " << n << " kind " << kind << " bits " << bits);
        const std::vector<float> x = makeInput(n, kind, 99 + n + kind);
        RbfSpec spec;
        spec.bits = bits;
        spec.mantissa = rbfDefaultMantissa(bits);
        spec.eps = rbfEpsForVmax(2.0, bits, spec.mantissa);
        std::vector<uint8_t> cc(packedBytes(n, bits));
        std::vector<float> rc(n);
        REQUIRE(f.cpu.rbfEncode(x.data(), n, spec, cc.data(), rc.data()).ok());
        DevBuf<float> dx(f.gpu, x);  // residual in place
        HostArray<uint8_t> cg(f.gpu, cc.size());
        REQUIRE(f.gpu.rbfEncode(dx.ptr(), n, spec, cg.data(), dx.ptr()).ok());
        REQUIRE(f.done().ok());
        CHECK(std::vector<uint8_t>(cg.begin(), cg.end()) == cc);
        CHECK(sameBits(dx.get(), rc));
        for (bool accumulate : {false, true}) {
          std::vector<float> oc = makeInput(n, 0, 3);
          DevBuf<float> og(f.gpu, oc);
          REQUIRE(f.cpu.rbfDecode(cc.data(), n, spec, oc.data(), accumulate, -1).ok());
          REQUIRE(f.gpu.rbfDecode(cg.data(), n, spec, og.ptr(), accumulate, -1).ok());
          REQUIRE(f.done().ok());
          CHECK(sameBits(og.get(), oc));
        }
        if ((n * bits) % 8) {  // a set padding bit
          std::vector<uint8_t> bad = cc;
          REQUIRE(!bad.empty());
          bad[bad.size() - 1] = uint8_t(bad[bad.size() - 1] | 0x80);
          HostArray<uint8_t> hb = testing::hostCopy(f.gpu, bad);
          DevBuf<float> og(f.gpu, n);
          std::vector<float> oc(n);
          REQUIRE(f.gpu.rbfDecode(hb.data(), n, spec, og.ptr(), false, 1).ok());
          sameOutcome(f.done(), f.cpu.rbfDecode(bad.data(), n, spec, oc.data(), false, 1));
        }
      }
  // Segments: per-run vmax and a fixed one, payloads at odd offsets, empty runs.
  for (size_t per : {size_t(0), size_t(1), size_t(37), size_t(2458)})
    for (size_t last : {size_t(0), size_t(5), size_t(2458)})
      for (double fixedVmax : {0.0, 1.5}) {
        const size_t segments = 9;
        INFO("per " << per << " last " << last << " fixed " << fixedVmax);
        const size_t total = (segments - 1) * per + last;
        const std::vector<float> v = makeInput(total, 3, per + last);
        const size_t bytes = rbfSegmentsBytes(segments, per, last, 10);
        std::vector<uint8_t> oc(bytes);
        REQUIRE(f.cpu.rbfEncodeSegments(v.data(), segments, per, last, 10, 6, fixedVmax, oc.data()).ok());
        DevBuf<float> dv(f.gpu, v);
        HostArray<uint8_t> og(f.gpu, bytes + 3);
        REQUIRE(f.gpu.rbfEncodeSegments(dv.ptr(), segments, per, last, 10, 6, fixedVmax, og.data() + 3).ok());
        REQUIRE(f.done().ok());
        CHECK(std::vector<uint8_t>(og.begin() + 3, og.end()) == oc);
        std::vector<float> vc(total);
        DevBuf<float> vg(f.gpu, total);
        REQUIRE(f.cpu.rbfDecodeSegments(oc.data(), segments, per, last, 10, 6, vc.data(), 2).ok());
        REQUIRE(f.gpu.rbfDecodeSegments(og.data() + 3, segments, per, last, 10, 6, vg.ptr(), 2).ok());
        REQUIRE(f.done().ok());
        CHECK(sameBits(vg.get(), vc));
        if (per < 2) continue;
        // A NaN vmax in run 4, then a padding bit in run 2 (reported first).
        std::vector<uint8_t> bad = oc;
        const size_t run = 4 + packedBytes(per, 10);
        const float nan = NAN;
        std::memcpy(bad.data() + 4 * run, &nan, 4);
        HostArray<uint8_t> hb = testing::hostCopy(f.gpu, bad);
        REQUIRE(f.gpu.rbfDecodeSegments(hb.data(), segments, per, last, 10, 6, vg.ptr(), 2).ok());
        sameOutcome(f.done(), f.cpu.rbfDecodeSegments(bad.data(), segments, per, last, 10, 6, vc.data(), 2));
        if ((per * 10) % 8) {
          bad[2 * run + run - 1] |= 0x80;
          hb[2 * run + run - 1] = bad[2 * run + run - 1];
          REQUIRE(f.gpu.rbfDecodeSegments(hb.data(), segments, per, last, 10, 6, vg.ptr(), 2).ok());
          sameOutcome(f.done(), f.cpu.rbfDecodeSegments(bad.data(), segments, per, last, 10, 6, vc.data(), 2));
        }
      }
  // A NaN fixed vmax is an argument error on both (CUDA once took it for
  // "from the data", session 12's review).
  const std::vector<float> v = makeInput(40, 3, 1);
  DevBuf<float> dv(f.gpu, v);
  std::vector<uint8_t> oc(rbfSegmentsBytes(4, 10, 10, 10));
  HostArray<uint8_t> og(f.gpu, oc.size());
  // (At the call on CUDA; the cpu-device harness defers every error to sync.)
  const Status sc = f.cpu.rbfEncodeSegments(v.data(), 4, 10, 10, 10, 6, double(NAN), oc.data());
  Status sg = f.gpu.rbfEncodeSegments(dv.ptr(), 4, 10, 10, 10, 6, double(NAN), og.data());
  if (sg.ok()) sg = f.done();
  CHECK(sc.code() == Err::InvalidArgument);
  CHECK(sg.code() == Err::InvalidArgument);
}

TEST_CASE("cuda sign votes, counts, majority and expansion match the cpu", "[gpu]") {
  Fixture f;
  for (size_t n : kSizes)
    for (int kind = 0; kind < 5; ++kind) {
      INFO("n " << n << " kind " << kind);
      const std::vector<float> x = makeInput(n, kind, 7 + n + kind);
      DevBuf<float> dx(f.gpu, x);
      std::vector<uint8_t> sc(packedBytes(n, 1));
      REQUIRE(f.cpu.signPack(x.data(), n, sc.data()).ok());
      HostArray<uint8_t> sg(f.gpu, sc.size());
      REQUIRE(f.gpu.signPack(dx.ptr(), n, sg.data()).ok());
      REQUIRE(f.done().ok());
      CHECK(std::vector<uint8_t>(sg.begin(), sg.end()) == sc);
      // Counts of 3 ranks in 2-bit fields (payloads in host memory), then
      // majority and expansion; 5-bit fields straddle bytes.
      for (int w : {2, 5}) {
        std::vector<uint8_t> c1(packedBytes(n, w)), c2(packedBytes(n, w));
        REQUIRE(f.cpu.signCountAdd(nullptr, 0, 0, sc.data(), n, c1.data(), w, -1).ok());
        REQUIRE(f.cpu.signCountAdd(c1.data(), w, 1, sc.data(), n, c2.data(), w, -1).ok());
        HostArray<uint8_t> g1(f.gpu, c1.size()), g2(f.gpu, c2.size()), dec(f.gpu, sc.size());
        REQUIRE(f.gpu.signCountAdd(nullptr, 0, 0, sg.data(), n, g1.data(), w, -1).ok());
        REQUIRE(f.gpu.signCountAdd(g1.data(), w, 1, sg.data(), n, g2.data(), w, -1).ok());
        REQUIRE(f.done().ok());
        CHECK(std::vector<uint8_t>(g2.begin(), g2.end()) == c2);
        std::vector<uint8_t> decision(sc.size());
        const SignTies negative{false, 0}, hashed{true, 0x5EEDull + n};
        REQUIRE(f.cpu.signMajority(c2.data(), w, n, 3, negative, 0, decision.data()).ok());
        REQUIRE(f.gpu.signMajority(g2.data(), w, n, 3, negative, 0, dec.data()).ok());
        REQUIRE(f.done().ok());
        CHECK(std::vector<uint8_t>(dec.begin(), dec.end()) == decision);
        // Ties: one rank's votes (counts 0 or 1) of 2 ranks, split by the hash
        // of the global index (indexBase shifts it) or all negative.
        for (const SignTies& ties : {negative, hashed}) {
          std::vector<uint8_t> tc(sc.size());
          REQUIRE(f.cpu.signMajority(c1.data(), w, n, 2, ties, 1000, tc.data()).ok());
          REQUIRE(f.gpu.signMajority(g1.data(), w, n, 2, ties, 1000, dec.data()).ok());
          REQUIRE(f.done().ok());
          CHECK(std::vector<uint8_t>(dec.begin(), dec.end()) == tc);
        }
        REQUIRE(f.gpu.signMajority(g2.data(), w, n, 3, negative, 0, dec.data()).ok());
        REQUIRE(f.done().ok());
        std::vector<float> ec(n);
        DevBuf<float> eg(f.gpu, n);
        REQUIRE(f.cpu.signExpand(decision.data(), n, 0.5f, -0.25f, ec.data(), -1).ok());
        REQUIRE(f.gpu.signExpand(dec.data(), n, 0.5f, -0.25f, eg.ptr(), -1).ok());
        REQUIRE(f.done().ok());
        CHECK(sameBits(eg.get(), ec));
        // Counts above what they cover; set padding bits.
        REQUIRE(f.gpu.signMajority(g2.data(), w, n, 1, negative, 0, dec.data()).ok());
        sameOutcome(f.done(), f.cpu.signMajority(c2.data(), w, n, 1, negative, 0, decision.data()));
        REQUIRE(f.gpu.signCountAdd(g2.data(), w, 0, sg.data(), n, g1.data(), w, 4).ok());
        sameOutcome(f.done(), f.cpu.signCountAdd(c2.data(), w, 0, sc.data(), n, c1.data(), w, 4));
      }
      if (n % 8) {
        std::vector<uint8_t> padded = sc;
        padded.back() |= 0x80;
        HostArray<uint8_t> hp = testing::hostCopy(f.gpu, padded);
        DevBuf<float> eg(f.gpu, n);
        std::vector<float> ec(n);
        REQUIRE(f.gpu.signExpand(hp.data(), n, 1, -1, eg.ptr(), 3).ok());
        sameOutcome(f.done(), f.cpu.signExpand(padded.data(), n, 1, -1, ec.data(), 3));
        std::vector<uint8_t> c1(packedBytes(n, 2));
        HostArray<uint8_t> g1(f.gpu, c1.size());
        REQUIRE(f.gpu.signCountAdd(nullptr, 0, 0, hp.data(), n, g1.data(), 2, 3).ok());
        sameOutcome(f.done(), f.cpu.signCountAdd(nullptr, 0, 0, padded.data(), n, c1.data(), 2, 3));
      }
    }
}

TEST_CASE("cuda blockDot reproduces the fixed summation order, and expandBlocks", "[gpu]") {
  Fixture f;
  for (size_t n : {size_t(1), size_t(255), size_t(257), size_t(100003)})
    for (size_t block : {size_t(1), size_t(7), size_t(256), size_t(1000), size_t(100003)}) {
      INFO("n " << n << " block " << block);
      // Magnitudes over 60 binades: any other summation order shows.
      const std::vector<float> x = makeInput(n, 3, n + block), d = makeInput(n, 3, n * block + 1);
      const size_t blocks = (n + block - 1) / block;
      std::vector<float> oc(blocks);
      REQUIRE(f.cpu.blockDot(x.data(), d.data(), n, block, oc.data()).ok());
      DevBuf<float> dx(f.gpu, x), dd(f.gpu, d);
      HostArray<float> og(f.gpu, blocks);  // shares live in host memory
      REQUIRE(f.gpu.blockDot(dx.ptr(), dd.ptr(), n, block, og.data()).ok());
      REQUIRE(f.done().ok());
      CHECK(sameBits(std::vector<float>(og.begin(), og.end()), oc));
      for (bool subtract : {false, true}) {
        std::vector<float> dst = makeInput(n, 0, 4);
        HostArray<float> scales = testing::hostCopy(f.gpu, oc);
        DevBuf<float> dg(f.gpu, dst);
        REQUIRE(f.cpu.expandBlocks(d.data(), n, block, oc.data(), dst.data(), subtract).ok());
        REQUIRE(f.gpu.expandBlocks(dd.ptr(), n, block, scales.data(), dg.ptr(), subtract).ok());
        REQUIRE(f.done().ok());
        CHECK(sameBits(dg.get(), dst));
      }
      // dst aliasing d.
      std::vector<float> alias = d;
      REQUIRE(f.cpu.expandBlocks(alias.data(), n, block, oc.data(), alias.data(), false).ok());
      HostArray<float> scales = testing::hostCopy(f.gpu, oc);
      REQUIRE(f.gpu.expandBlocks(dd.ptr(), n, block, scales.data(), dd.ptr(), false).ok());
      REQUIRE(f.done().ok());
      CHECK(sameBits(dd.get(), alias));
    }
  DevBuf<float> one(f.gpu, 1);
  CHECK(testing::argumentError(
            f.gpu, f.gpu.blockDot(one.ptr(), one.ptr(), 1, 0, one.ptr())) == Err::InvalidArgument);
}

TEST_CASE("cuda FFT, bin selection, bitmap checks, gather and scatter against the cpu", "[gpu]") {
  Fixture f;
  for (size_t n : {size_t(2), size_t(1025), size_t(100003)})
    for (size_t chunk : {size_t(2), size_t(16), size_t(4096)}) {
      INFO("n " << n << " chunk " << chunk);
      const std::vector<float> x = makeInput(n, 0, n + chunk);
      const size_t bins = fftBinCount(n, chunk);
      std::vector<float> sc(2 * bins);
      REQUIRE(f.cpu.fftForward(x.data(), n, chunk, sc.data()).ok());
      DevBuf<float> dx(f.gpu, x), sg(f.gpu, 2 * bins);
      REQUIRE(f.gpu.fftForward(dx.ptr(), n, chunk, sg.ptr()).ok());
      REQUIRE(f.done().ok());
      const std::vector<float> spec = sg.get();
      // cuFFT and FFTW differ in rounding: bound by the input's scale.
      double worst = 0;
      for (size_t i = 0; i < spec.size(); ++i)
        worst = std::max(worst, double(std::fabs(spec[i] - sc[i])));
      CHECK(worst <= 1e-4 * std::sqrt(double(std::min(n, chunk))) * 8);
      DevBuf<float> bg(f.gpu, n);
      REQUIRE(f.gpu.fftInverse(sg.ptr(), n, chunk, bg.ptr()).ok());
      REQUIRE(f.done().ok());
      const std::vector<float> back = bg.get();
      for (size_t i = 0; i < n; ++i) CHECK(std::fabs(back[i] - x[i]) <= 1e-4f * (1 + std::fabs(x[i])));
      CHECK(sameBits(sg.get(), spec));  // the inverse left the spectrum alone
      // Selection, checks, gather and scatter are exact given the same spectrum.
      for (double keep : {0.0, 0.15, 1.0}) {
        INFO("keep " << keep);
        std::vector<uint8_t> mc(packedBytes(bins, 1));
        REQUIRE(f.cpu.fftSelectBins(spec.data(), n, chunk, keep, mc.data()).ok());
        HostArray<uint8_t> mg(f.gpu, mc.size());  // the bitmap is a payload
        REQUIRE(f.gpu.fftSelectBins(sg.ptr(), n, chunk, keep, mg.data()).ok());
        REQUIRE(f.gpu.fftCheckBitmap(mg.data(), n, chunk, keep, 1).ok());
        REQUIRE(f.done().ok());
        CHECK(std::vector<uint8_t>(mg.begin(), mg.end()) == mc);
        size_t kept = 0;
        for (size_t b = 0; b < bins; ++b) kept += (mc[b / 8] >> (b % 8)) & 1;
        std::vector<float> pc(2 * kept + 2);
        REQUIRE(f.cpu.gatherBins(spec.data(), mc.data(), bins, pc.data()).ok());
        DevBuf<float> pg(f.gpu, pc.size());
        REQUIRE(f.gpu.gatherBins(sg.ptr(), mg.data(), bins, pg.ptr()).ok());
        REQUIRE(f.done().ok());
        CHECK(sameBits(pg.get(2 * kept), std::vector<float>(pc.begin(), pc.begin() + 2 * kept)));
        std::vector<float> acc = spec;
        REQUIRE(f.cpu.scatterAddBins(pc.data(), mc.data(), bins, acc.data()).ok());
        DevBuf<float> ag(f.gpu, spec);
        REQUIRE(f.gpu.scatterAddBins(pg.ptr(), mg.data(), bins, ag.ptr()).ok());
        REQUIRE(f.done().ok());
        CHECK(sameBits(ag.get(), acc));
        // A bitmap with one bit too many (a chunk keeps one more bin), then
        // a padding bit: the CPU's verdicts.
        std::vector<uint8_t> bad = mc;
        size_t unset = 0;
        while (unset < bins && ((bad[unset / 8] >> (unset % 8)) & 1)) ++unset;
        if (unset < bins) {
          bad[unset / 8] |= uint8_t(1u << (unset % 8));
          HostArray<uint8_t> hb = testing::hostCopy(f.gpu, bad);
          REQUIRE(f.gpu.fftCheckBitmap(hb.data(), n, chunk, keep, 1).ok());
          sameOutcome(f.done(), f.cpu.fftCheckBitmap(bad.data(), n, chunk, keep, 1));
        }
        if (bins % 8) {
          bad = mc;
          bad.back() |= 0x80;
          HostArray<uint8_t> hb = testing::hostCopy(f.gpu, bad);
          REQUIRE(f.gpu.fftCheckBitmap(hb.data(), n, chunk, keep, 1).ok());
          sameOutcome(f.done(), f.cpu.fftCheckBitmap(bad.data(), n, chunk, keep, 1));
          REQUIRE(f.gpu.scatterAddBins(pg.ptr(), hb.data(), bins, ag.ptr()).ok());
          sameOutcome(f.done(), f.cpu.scatterAddBins(pc.data(), bad.data(), bins, acc.data()));
        }
      }
    }
}
