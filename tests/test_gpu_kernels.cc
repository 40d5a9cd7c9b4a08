// [gpu] Every kernel family of the CUDA backend against the CPU reference, on
// random and adversarial inputs (NaN, +-Inf, -0.0, ties, all-equal data,
// lengths not a multiple of 8 or of a tile, corrupt payloads). Deterministic
// primitives must match bit for bit; the FFT (cuFFT vs FFTW) within a bound
// relative to the chunk's energy; absStats' sum within fp64 rounding.
//
// main: tests/support/gpu_main.cc (exits 4, skipped, without a CUDA device).
#include <catch2/catch.hpp>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "device/backend.h"
#include "device/cuda/cuda_backend.h"

using namespace gradcomp;
using namespace gradcomp::device;

namespace {

template <class T>
struct Dev {
  explicit Dev(size_t count) : n(count) {
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&ptr), (count ? count : 1) * sizeof(T)) == cudaSuccess);
  }
  explicit Dev(const std::vector<T>& host) : Dev(host.size()) {
    if (!host.empty())
      REQUIRE(cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice) ==
              cudaSuccess);
  }
  ~Dev() { cudaFree(ptr); }
  Dev(const Dev&) = delete;
  std::vector<T> get(size_t count) const {
    std::vector<T> out(count);
    if (count)
      REQUIRE(cudaMemcpy(out.data(), ptr, count * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return out;
  }
  std::vector<T> get() const { return get(n); }
  T* ptr = nullptr;
  size_t n;
};

struct Fixture {
  Fixture() : gpu(nullptr) {}
  CudaBackend gpu;
  Backend& cpu = cpuBackend();
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

// Kinds of input: random normal, heavy ties, specials sprinkled in, all equal.
std::vector<float> makeInput(size_t n, int kind, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  const float specials[] = {0.0f, -0.0f, NAN, INFINITY, -INFINITY, 1e-45f, -3.4e38f, 1.0f};
  for (size_t i = 0; i < n; ++i) {
    switch (kind) {
      case 0: x[i] = normal(rng); break;
      case 1: x[i] = float(int(rng() % 7) - 3) * 0.5f; break;  // many ties, zeros, -0
      case 2: x[i] = rng() % 13 == 0 ? specials[rng() % 8] : normal(rng); break;
      default: x[i] = 0.25f;
    }
  }
  return x;
}

const size_t kSizes[] = {1, 7, 8, 2047, 2049, 100003};

}  // namespace

TEST_CASE("cuda kthLargestAbs, countAbove, compactAbove match the cpu", "[gpu]") {
  Fixture f;
  for (size_t n : kSizes)
    for (int kind = 0; kind < 4; ++kind) {
      INFO("n " << n << " kind " << kind);
      const std::vector<float> x = makeInput(n, kind, n * 10 + kind);
      Dev<float> dx(x);
      for (size_t k : {size_t(1), n / 3 + 1, n}) {
        float tg = -1, tc = -2;
        REQUIRE(f.gpu.kthLargestAbs(dx.ptr, n, k, &tg, nullptr).ok());
        REQUIRE(f.cpu.kthLargestAbs(x.data(), n, k, &tc, nullptr).ok());
        CHECK(bitsOf(tg) == bitsOf(tc));
        size_t cg = 0, cc = 0;
        REQUIRE(f.gpu.countAbove(dx.ptr, n, tc, &cg).ok());
        REQUIRE(f.cpu.countAbove(x.data(), n, tc, &cc).ok());
        CHECK(cg == cc);
        for (size_t budget : {size_t(0), size_t(3), n}) {
          std::vector<uint64_t> ic(n);
          std::vector<float> vc(n);
          size_t countC = 0, countG = 0;
          Dev<uint64_t> ig(n);
          Dev<float> vg(n);
          const Status sc = f.cpu.compactAbove(x.data(), n, tc, budget, 1000, ic.data(), vc.data(), n, &countC, false);
          const Status sg = f.gpu.compactAbove(dx.ptr, n, tc, budget, 1000, ig.ptr, vg.ptr, n, &countG, false);
          REQUIRE(sc.code() == sg.code());
          CHECK(countG == countC);
          ic.resize(countC);
          vc.resize(countC);
          CHECK(ig.get(countG) == ic);
          CHECK(sameBits(vg.get(countG), vc));
        }
      }
    }
  // Capacity overflow and a negative threshold fail as on the CPU.
  std::vector<float> x = makeInput(100, 0, 1);
  Dev<float> dx(x);
  Dev<uint64_t> ig(100);
  Dev<float> vg(100);
  size_t c = 0;
  CHECK(f.gpu.compactAbove(dx.ptr, 100, 0.0f, 0, 0, ig.ptr, vg.ptr, 5, &c, false).code() == Err::Internal);
  CHECK(f.gpu.compactAbove(dx.ptr, 100, -1.0f, 0, 0, ig.ptr, vg.ptr, 100, &c, false).code() ==
        Err::InvalidArgument);
  CHECK(f.gpu.kthLargestAbs(dx.ptr, 100, 0, nullptr, nullptr).code() == Err::InvalidArgument);
}

TEST_CASE("cuda fused error-feedback primitives", "[gpu]") {
  Fixture f;
  const size_t n = 100003;
  std::vector<float> acc = makeInput(n, 2, 5), grad = makeInput(n, 0, 6);
  Dev<float> da(acc), dg(grad);
  REQUIRE(f.gpu.accumulateGradient(da.ptr, dg.ptr, DataType::Float32, n).ok());
  REQUIRE(f.cpu.add(acc.data(), acc.data(), grad.data(), n, DataType::Float32).ok());
  CHECK(sameBits(da.get(), acc));
  // fp16 gradient: converted exactly to fp32, then one fp32 add.
  std::vector<uint16_t> half(n);
  REQUIRE(f.cpu.convert(half.data(), DataType::Float16, grad.data(), DataType::Float32, n).ok());
  std::vector<float> widened(n);
  REQUIRE(f.cpu.convert(widened.data(), DataType::Float32, half.data(), DataType::Float16, n).ok());
  Dev<uint16_t> dh(half);
  REQUIRE(f.gpu.accumulateGradient(da.ptr, dh.ptr, DataType::Float16, n).ok());
  REQUIRE(f.cpu.add(acc.data(), acc.data(), widened.data(), n, DataType::Float32).ok());
  CHECK(sameBits(da.get(), acc));
  CHECK(f.gpu.accumulateGradient(da.ptr, dh.ptr, DataType::Int32, n).code() == Err::InvalidArgument);
  // compactAboveAndZero == compactAbove + scatterZero.
  float t = 0;
  REQUIRE(f.cpu.kthLargestAbs(acc.data(), n, 1000, &t, nullptr).ok());
  std::vector<uint64_t> ic(n);
  std::vector<float> vc(n);
  size_t cc = 0, cg = 0;
  REQUIRE(f.cpu.compactAbove(acc.data(), n, t, 2, 0, ic.data(), vc.data(), n, &cc, false).ok());
  REQUIRE(f.cpu.scatterZero(acc.data(), n, 0, ic.data(), cc).ok());
  Dev<uint64_t> ig(n);
  Dev<float> vg(n);
  REQUIRE(f.gpu.compactAboveAndZero(da.ptr, n, t, 2, 0, ig.ptr, vg.ptr, n, &cg).ok());
  CHECK(cg == cc);
  CHECK(sameBits(da.get(), acc));
}

TEST_CASE("cuda scatterAdd and scatterZero match the cpu", "[gpu]") {
  Fixture f;
  const size_t n = 5000;
  std::mt19937_64 rng(3);
  for (int mode = 0; mode < 3; ++mode) {
    INFO("mode " << mode);
    std::vector<uint64_t> idx;
    for (uint64_t i = 0; i < n; ++i)
      if (rng() % 3 == 0) idx.push_back(100 + i);
    if (mode == 1) idx.insert(idx.end(), idx.begin(), idx.begin() + 50);  // repeats: serial order
    if (mode == 2) idx[idx.size() / 2] = 99;                               // out of range
    std::vector<float> val = makeInput(idx.size(), 0, 9), dst = makeInput(n, 0, 10);
    Dev<uint64_t> di(idx);
    Dev<float> dv(val), dd(dst);
    const Status sc = f.cpu.scatterAdd(dst.data(), n, 100, idx.data(), val.data(), idx.size());
    const Status sg = f.gpu.scatterAdd(dd.ptr, n, 100, di.ptr, dv.ptr, idx.size());
    CHECK(sc.code() == sg.code());
    CHECK(sameBits(dd.get(), dst));
    const Status zc = f.cpu.scatterZero(dst.data(), n, 100, idx.data(), idx.size());
    const Status zg = f.gpu.scatterZero(dd.ptr, n, 100, di.ptr, idx.size());
    CHECK(zc.code() == zg.code());
    CHECK(sameBits(dd.get(), dst));
  }
}

TEST_CASE("cuda DenseStream encode and decode match the cpu", "[gpu]") {
  Fixture f;
  std::mt19937_64 rng(4);
  for (int indexBytes : {4, 8})
    for (size_t n : {size_t(1), size_t(64), size_t(100003)}) {
      INFO("indexBytes " << indexBytes << " n " << n);
      std::vector<uint64_t> idx;
      std::vector<float> val;
      for (uint64_t i = 0; i < n; ++i)
        if (rng() % 4 == 0 || i == n - 1) idx.push_back(7 + i), val.push_back(float(rng() % 9) - 4.5f);
      size_t bc = 0, blc = 0, bg = 0, blg = 0;
      REQUIRE(f.cpu.denseStreamSize(idx.data(), idx.size(), indexBytes, &bc, &blc).ok());
      Dev<uint64_t> di(idx);
      Dev<float> dv(val);
      REQUIRE(f.gpu.denseStreamSize(di.ptr, idx.size(), indexBytes, &bg, &blg).ok());
      CHECK(bg == bc);
      CHECK(blg == blc);
      std::vector<uint8_t> body(bc);
      size_t wrote = 0;
      REQUIRE(f.cpu.denseStreamEncode(idx.data(), val.data(), idx.size(), 7, indexBytes, body.data(), bc, &wrote).ok());
      Dev<uint8_t> dbody(bc);
      REQUIRE(f.gpu.denseStreamEncode(di.ptr, dv.ptr, idx.size(), 7, indexBytes, dbody.ptr, bc, &wrote).ok());
      CHECK(dbody.get(bc) == body);
      // Decode the CPU's body on the GPU, then corrupt it byte by byte.
      Dev<uint64_t> oi(idx.size());
      Dev<float> ov(idx.size());
      size_t count = 0;
      REQUIRE(f.gpu.denseStreamDecode(dbody.ptr, bc, blc, n, 7, indexBytes, oi.ptr, ov.ptr, idx.size(), &count).ok());
      CHECK(count == idx.size());
      CHECK(oi.get(count) == idx);
      CHECK(sameBits(ov.get(count), val));
      for (int trial = 0; trial < 40; ++trial) {
        std::vector<uint8_t> bad = body;
        bad[rng() % bad.size()] ^= uint8_t(1u << (rng() % 8));
        std::vector<uint64_t> ci(idx.size() + 8);
        std::vector<float> cv(idx.size() + 8);
        size_t cc = 0, cg = 0;
        const Status sc = f.cpu.denseStreamDecode(bad.data(), bc, blc, n, 7, indexBytes, ci.data(), cv.data(), ci.size(), &cc);
        Dev<uint8_t> dbad(bad);
        Dev<uint64_t> gi(ci.size());
        Dev<float> gv(cv.size());
        const Status sg = f.gpu.denseStreamDecode(dbad.ptr, bc, blc, n, 7, indexBytes, gi.ptr, gv.ptr, ci.size(), &cg);
        CHECK(sc.code() == sg.code());
        if (sc.ok() && sg.ok()) {
          CHECK(cg == cc);
          ci.resize(cc);
          CHECK(gi.get(cg) == ci);
        }
      }
    }
  // Unsorted input and +0 values are InvalidArgument, as on the CPU.
  std::vector<uint64_t> unsorted = {5, 3};
  std::vector<float> zero = {1.0f, 0.0f};
  Dev<uint64_t> du(unsorted);
  Dev<float> dz(zero);
  size_t b = 0, bl = 0;
  CHECK(f.gpu.denseStreamSize(du.ptr, 2, 4, &b, &bl).code() == Err::InvalidArgument);
  std::vector<uint64_t> sorted = {3, 5};
  Dev<uint64_t> ds(sorted);
  Dev<uint8_t> out(64);
  CHECK(f.gpu.denseStreamEncode(ds.ptr, dz.ptr, 2, 0, 4, out.ptr, 64, &b).code() == Err::InvalidArgument);
}

TEST_CASE("cuda absStats and max-min quantization match the cpu", "[gpu]") {
  Fixture f;
  for (size_t n : kSizes)
    for (int kind = 0; kind < 4; ++kind) {
      INFO("n " << n << " kind " << kind);
      const std::vector<float> x = makeInput(n, kind, 77 + n + kind);
      Dev<float> dx(x);
      AbsStats sc, sg;
      REQUIRE(f.cpu.absStats(x.data(), n, &sc).ok());
      REQUIRE(f.gpu.absStats(dx.ptr, n, &sg).ok());
      CHECK(sg.maxAbs == sc.maxAbs);
      CHECK(sg.nonFinite == sc.nonFinite);
      // Different summation order: fp64 rounding, n * 2^-52 relative at most.
      CHECK(std::fabs(sg.sumAbs - sc.sumAbs) <= sc.sumAbs * double(n) * 0x1p-52);
      for (int bits : {1, 2, 4, 8})
        for (size_t bucket : {size_t(1), size_t(5), size_t(512)}) {
          INFO("bits " << bits << " bucket " << bucket);
          MaxMinSpec spec;
          spec.bits = bits;
          spec.bucket = bucket;
          spec.seed = streamSeed(11, 2, 1, 0);
          const size_t buckets = maxMinBuckets(n, bucket), bytes = packedBytes(n, bits);
          std::vector<float> mc(2 * buckets);
          std::vector<uint8_t> cc(bytes);
          REQUIRE(f.cpu.quantizeMaxMin(x.data(), n, spec, 1234, mc.data(), cc.data(), nullptr).ok());
          Dev<float> mg(2 * buckets);
          Dev<uint8_t> cg(bytes);
          REQUIRE(f.gpu.quantizeMaxMin(dx.ptr, n, spec, 1234, mg.ptr, cg.ptr, nullptr).ok());
          CHECK(sameBits(mg.get(), mc));
          CHECK(cg.get() == cc);
          std::vector<float> oc = makeInput(n, 0, 5);
          Dev<float> og(oc);
          REQUIRE(f.cpu.dequantizeMaxMin(mc.data(), cc.data(), n, spec, oc.data(), true, -1).ok());
          REQUIRE(f.gpu.dequantizeMaxMin(mg.ptr, cg.ptr, n, spec, og.ptr, true, -1).ok());
          CHECK(sameBits(og.get(), oc));
        }
    }
  // Corrupt meta: RemoteError, buckets before it decoded as on the CPU.
  std::vector<float> meta = {0, 1, 2, 1, 0, 1};
  std::vector<uint8_t> codes(packedBytes(12, 8), 7);
  MaxMinSpec spec;
  spec.bucket = 4;
  std::vector<float> oc(12, 0.0f);
  Dev<float> dm(meta), og(oc);
  Dev<uint8_t> dc(codes);
  CHECK(f.cpu.dequantizeMaxMin(meta.data(), codes.data(), 12, spec, oc.data(), false, -1).code() == Err::RemoteError);
  CHECK(f.gpu.dequantizeMaxMin(dm.ptr, dc.ptr, 12, spec, og.ptr, false, -1).code() == Err::RemoteError);
  CHECK(sameBits(og.get(), oc));
}

TEST_CASE("cuda RBF and sign kernels match the cpu", "[gpu]") {
  Fixture f;
  for (size_t n : kSizes)
    for (int kind = 0; kind < 4; ++kind) {
      INFO("n " << n << " kind " << kind);
      const std::vector<float> x = makeInput(n, kind, 99 + n + kind);
      Dev<float> dx(x);
      for (int bits : {3, 10, 16}) {
        RbfSpec spec;
        spec.bits = bits;
        spec.mantissa = rbfDefaultMantissa(bits);
        spec.eps = rbfEpsForVmax(2.0, bits, spec.mantissa);
        std::vector<uint8_t> cc(packedBytes(n, bits));
        REQUIRE(f.cpu.rbfEncode(x.data(), n, spec, cc.data(), nullptr).ok());
        Dev<uint8_t> cg(cc.size());
        REQUIRE(f.gpu.rbfEncode(dx.ptr, n, spec, cg.ptr, nullptr).ok());
        CHECK(cg.get() == cc);
        std::vector<float> oc(n);
        Dev<float> og(n);
        REQUIRE(f.cpu.rbfDecode(cc.data(), n, spec, oc.data(), false, -1).ok());
        REQUIRE(f.gpu.rbfDecode(cg.ptr, n, spec, og.ptr, false, -1).ok());
        CHECK(sameBits(og.get(), oc));
      }
      std::vector<uint8_t> sc(packedBytes(n, 1));
      REQUIRE(f.cpu.signPack(x.data(), n, sc.data()).ok());
      Dev<uint8_t> sg(sc.size());
      REQUIRE(f.gpu.signPack(dx.ptr, n, sg.ptr).ok());
      CHECK(sg.get() == sc);
      // Counts of 3 ranks in 2-bit fields, then majority and expansion.
      std::vector<uint8_t> c1(packedBytes(n, 2)), c2(packedBytes(n, 2));
      REQUIRE(f.cpu.signCountAdd(nullptr, 0, 0, sc.data(), n, c1.data(), 2, -1).ok());
      REQUIRE(f.cpu.signCountAdd(c1.data(), 2, 1, sc.data(), n, c2.data(), 2, -1).ok());
      Dev<uint8_t> g1(c1.size()), g2(c2.size()), dec(sc.size());
      REQUIRE(f.gpu.signCountAdd(nullptr, 0, 0, sg.ptr, n, g1.ptr, 2, -1).ok());
      REQUIRE(f.gpu.signCountAdd(g1.ptr, 2, 1, sg.ptr, n, g2.ptr, 2, -1).ok());
      CHECK(g2.get() == c2);
      std::vector<uint8_t> decision(sc.size());
      REQUIRE(f.cpu.signMajority(c2.data(), 2, n, 3, decision.data()).ok());
      REQUIRE(f.gpu.signMajority(g2.ptr, 2, n, 3, dec.ptr).ok());
      CHECK(dec.get() == decision);
      std::vector<float> ec(n);
      Dev<float> eg(n);
      REQUIRE(f.cpu.signExpand(decision.data(), n, 0.5f, -0.25f, ec.data(), -1).ok());
      REQUIRE(f.gpu.signExpand(dec.ptr, n, 0.5f, -0.25f, eg.ptr, -1).ok());
      CHECK(sameBits(eg.get(), ec));
      // Counts above the ranks they cover and set padding bits: RemoteError.
      CHECK(f.gpu.signMajority(g2.ptr, 2, n, 1, dec.ptr).code() ==
            f.cpu.signMajority(c2.data(), 2, n, 1, decision.data()).code());
      if (n % 8) {
        std::vector<uint8_t> padded = sc;
        padded.back() |= 0x80;
        Dev<uint8_t> dp(padded);
        CHECK(f.gpu.signExpand(dp.ptr, n, 1, -1, eg.ptr, -1).code() == Err::RemoteError);
      }
    }
}

TEST_CASE("cuda FFT, bin selection, gather and scatter against the cpu", "[gpu]") {
  Fixture f;
  for (size_t n : {size_t(2), size_t(1025), size_t(100003)})
    for (size_t chunk : {size_t(2), size_t(16), size_t(4096)}) {
      INFO("n " << n << " chunk " << chunk);
      const std::vector<float> x = makeInput(n, 0, n + chunk);
      const size_t bins = fftBinCount(n, chunk);
      std::vector<float> sc(2 * bins);
      REQUIRE(f.cpu.fftForward(x.data(), n, chunk, sc.data()).ok());
      Dev<float> dx(x), sg(2 * bins);
      REQUIRE(f.gpu.fftForward(dx.ptr, n, chunk, sg.ptr).ok());
      const std::vector<float> spec = sg.get();
      // cuFFT and FFTW differ in rounding: bound by the input's scale.
      double worst = 0;
      for (size_t i = 0; i < spec.size(); ++i) worst = std::max(worst, double(std::fabs(spec[i] - sc[i])));
      CHECK(worst <= 1e-4 * std::sqrt(double(std::min(n, chunk))) * 8);
      std::vector<float> back(n);
      Dev<float> bg(n);
      REQUIRE(f.gpu.fftInverse(sg.ptr, n, chunk, bg.ptr).ok());
      const std::vector<float> gback = bg.get();
      for (size_t i = 0; i < n; ++i) CHECK(std::fabs(gback[i] - x[i]) <= 1e-4f * (1 + std::fabs(x[i])));
      CHECK(sameBits(sg.get(), spec));  // the inverse left the spectrum alone
      // Selection, gather and scatter are exact given the same spectrum.
      Dev<float> same(spec);
      for (double keep : {0.0, 0.15, 1.0}) {
        std::vector<uint8_t> mc(packedBytes(bins, 1));
        REQUIRE(f.cpu.fftSelectBins(spec.data(), n, chunk, keep, mc.data()).ok());
        Dev<uint8_t> mg(mc.size());
        REQUIRE(f.gpu.fftSelectBins(same.ptr, n, chunk, keep, mg.ptr).ok());
        CHECK(mg.get() == mc);
        size_t kept = 0;
        for (size_t b = 0; b < bins; ++b) kept += (mc[b / 8] >> (b % 8)) & 1;
        std::vector<float> pc(2 * kept + 2);
        REQUIRE(f.cpu.gatherBins(spec.data(), mc.data(), bins, pc.data()).ok());
        Dev<float> pg(pc.size());
        REQUIRE(f.gpu.gatherBins(same.ptr, mg.ptr, bins, pg.ptr).ok());
        CHECK(sameBits(pg.get(2 * kept), std::vector<float>(pc.begin(), pc.begin() + 2 * kept)));
        std::vector<float> acc = spec;
        REQUIRE(f.cpu.scatterAddBins(pc.data(), mc.data(), bins, acc.data()).ok());
        Dev<float> ag(spec);
        REQUIRE(f.gpu.scatterAddBins(pg.ptr, mg.ptr, bins, ag.ptr).ok());
        CHECK(sameBits(ag.get(), acc));
      }
    }
}

TEST_CASE("cuda workspace sizes are reported and reserved once", "[gpu]") {
  for (KernelFamily fam : {KernelFamily::Select, KernelFamily::Scatter, KernelFamily::DenseStream,
                           KernelFamily::Quant, KernelFamily::Fft})
    CHECK(CudaBackend::workspaceBytes(fam, size_t(1) << 20) <=
          CudaBackend::workspaceBytes(fam, size_t(1) << 24));
  CudaBackend gpu(nullptr);
  CHECK(gpu.reserve(size_t(1) << 20).ok());
}
