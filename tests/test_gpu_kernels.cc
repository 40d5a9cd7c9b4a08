// [gpu] The sparse (top-k family) primitives of the CUDA backend against the
// CPU reference, on random and adversarial inputs (NaN, +-Inf, -0.0, ties,
// all-equal data, lengths not a multiple of 8 or of a tile, payloads in host
// memory at odd offsets, corrupt payloads). Results must match bit for bit;
// data errors must come out of sync() with the CPU's code, and with the CPU's
// message wherever the input has a single defect (the first bad entry).
// Quantized family: test_gpu_quant_kernels.cc.
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
  // The primitive just enqueued, as sync() reports it.
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

// Same outcome: both Ok, or the same code and (exact) the same message.
void sameOutcome(const Status& gpu, const Status& cpu, bool exact = true) {
  INFO("gpu: " << gpu.toString() << "\ncpu: " << cpu.toString());
  CHECK(gpu.code() == cpu.code());
  if (exact) CHECK(gpu.message() == cpu.message());
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

// A strictly ascending list of about n * density indexes from base.
std::vector<uint64_t> sortedList(size_t n, double density, uint64_t base, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> out;
  for (uint64_t i = 0; i < n; ++i)
    if (double(rng() % 1000000) < density * 1e6) out.push_back(base + i);
  return out;
}

// Non-zero values (never +0.0) for a COO list.
std::vector<float> nonZero(size_t n, uint64_t seed) {
  std::vector<float> v = makeInput(n, 0, seed);
  for (float& x : v)
    if (bitsOf(x) == 0) x = 1.0f;
  return v;
}

const size_t kSizes[] = {1, 7, 8, 2047, 2049, 100003};

}  // namespace

TEST_CASE("cuda kthLargestAbs, countAbove, compactAbove match the cpu", "[gpu]") {
  Fixture f;
  for (size_t n : kSizes)
    for (int kind = 0; kind < 4; ++kind) {
      INFO("n " << n << " kind " << kind);
      const std::vector<float> x = makeInput(n, kind, n * 10 + kind);
      DevBuf<float> dx(f.gpu, x);
      for (size_t k : {size_t(1), n / 3 + 1, n}) {
        float tg = -1, tc = -2;
        size_t ag = 7, ac = 8;
        REQUIRE(f.gpu.kthLargestAbs(dx.ptr(), n, k, &tg, &ag).ok());
        REQUIRE(f.done().ok());
        REQUIRE(f.cpu.kthLargestAbs(x.data(), n, k, &tc, &ac).ok());
        CHECK(bitsOf(tg) == bitsOf(tc));
        CHECK(ag == ac);
        size_t cg = 0, cc = 0;
        REQUIRE(f.gpu.countAbove(dx.ptr(), n, tc, &cg).ok());
        REQUIRE(f.done().ok());
        REQUIRE(f.cpu.countAbove(x.data(), n, tc, &cc).ok());
        CHECK(cg == cc);
        for (size_t budget : {size_t(0), size_t(3), n})
          for (bool zero : {false, true}) {
            INFO("k " << k << " budget " << budget << " zeroSelected " << zero);
            std::vector<float> xc = x;
            std::vector<uint64_t> ic(n);
            std::vector<float> vc(n);
            size_t countC = 0, countG = 0;
            DevBuf<float> xg(f.gpu, x);
            DevBuf<uint64_t> ig(f.gpu, n);
            DevBuf<float> vg(f.gpu, n);
            REQUIRE(f.cpu.compactAbove(xc.data(), n, tc, budget, 1000, ic.data(), vc.data(), n,
                                       &countC, zero).ok());
            REQUIRE(f.gpu.compactAbove(xg.ptr(), n, tc, budget, 1000, ig.ptr(), vg.ptr(), n,
                                       &countG, zero).ok());
            REQUIRE(f.done().ok());
            CHECK(countG == countC);
            ic.resize(countC);
            vc.resize(countC);
            CHECK(ig.get(countG) == ic);
            CHECK(sameBits(vg.get(countG), vc));
            CHECK(sameBits(xg.get(), xc));
            // count is nullable: the same selection without it.
            REQUIRE(f.gpu.compactAbove(dx.ptr(), n, tc, budget, 1000, ig.ptr(), vg.ptr(), n,
                                       nullptr, false).ok());
            REQUIRE(f.done().ok());
            CHECK(ig.get(countC) == ic);
          }
      }
    }
  // Capacity overflow fails at sync with the CPU's message; bad arguments at the call.
  std::vector<float> x = makeInput(100, 0, 1);
  DevBuf<float> dx(f.gpu, x);
  DevBuf<uint64_t> ig(f.gpu, 100);
  DevBuf<float> vg(f.gpu, 100);
  std::vector<uint64_t> ic(100);
  std::vector<float> vc(100), xc = x;
  size_t c = 0;
  REQUIRE(f.gpu.compactAbove(dx.ptr(), 100, 0.0f, 0, 0, ig.ptr(), vg.ptr(), 5, &c, false).ok());
  sameOutcome(f.done(), f.cpu.compactAbove(xc.data(), 100, 0.0f, 0, 0, ic.data(), vc.data(), 5,
                                           &c, false));
  const Status negative =
      f.gpu.compactAbove(dx.ptr(), 100, -1.0f, 0, 0, ig.ptr(), vg.ptr(), 100, &c, false);
  CHECK(testing::argumentError(f.gpu, negative) == Err::InvalidArgument);
  float th = 0;
  CHECK(testing::argumentError(
            f.gpu, f.gpu.kthLargestAbs(dx.ptr(), 100, 0, &th, nullptr)) == Err::InvalidArgument);
}

TEST_CASE("cuda scatterAdd, scatterZero, gather, lowerBound match the cpu", "[gpu]") {
  Fixture f;
  const size_t n = 5000;
  for (int mode = 0; mode < 3; ++mode) {
    INFO("mode " << mode);
    std::vector<uint64_t> idx = sortedList(n, 0.3, 100, 3 + mode);
    if (mode == 1) idx.insert(idx.end(), idx.begin(), idx.begin() + 50);  // repeats: in order
    if (mode == 2) idx[idx.size() / 2] = 99;                               // out of range
    std::vector<float> val = makeInput(idx.size(), 0, 9), dst = makeInput(n, 0, 10);
    DevBuf<uint64_t> di(f.gpu, idx);
    DevBuf<float> dv(f.gpu, val), dd(f.gpu, dst);
    REQUIRE(f.gpu.scatterAdd(dd.ptr(), n, 100, di.ptr(), dv.ptr(), idx.size()).ok());
    const Status sg = f.done();
    const Status sc = f.cpu.scatterAdd(dst.data(), n, 100, idx.data(), val.data(), idx.size());
    sameOutcome(sg, sc);
    if (!sc.ok()) continue;  // nothing past the bad entry is applied; before it, unspecified
    CHECK(sameBits(dd.get(), dst));
    REQUIRE(f.gpu.scatterZero(dd.ptr(), n, 100, di.ptr(), idx.size()).ok());
    sameOutcome(f.done(), f.cpu.scatterZero(dst.data(), n, 100, idx.data(), idx.size()));
    CHECK(sameBits(dd.get(), dst));
  }
  // gather and lowerBound over one list.
  const std::vector<uint64_t> list = sortedList(20000, 0.2, 0, 4);
  std::mt19937_64 rng(5);
  std::vector<uint64_t> keys(3000), pos(3000);
  for (uint64_t& k : keys) k = rng() % 22000;
  keys[0] = 0, keys[1] = ~0ull;
  DevBuf<uint64_t> dl(f.gpu, list), dk(f.gpu, keys), dp(f.gpu, keys.size());
  REQUIRE(f.gpu.lowerBound(dl.ptr(), list.size(), dk.ptr(), keys.size(), dp.ptr()).ok());
  REQUIRE(f.cpu.lowerBound(list.data(), list.size(), keys.data(), keys.size(), pos.data()).ok());
  CHECK(dp.get() == pos);
  for (uint64_t& p : pos) p = std::min<uint64_t>(p, list.size() - 1);
  DevBuf<uint64_t> dpos(f.gpu, pos), dg(f.gpu, pos.size());
  std::vector<uint64_t> gc(pos.size());
  REQUIRE(f.gpu.gather(dg.ptr(), dl.ptr(), list.size(), dpos.ptr(), pos.size()).ok());
  REQUIRE(f.cpu.gather(gc.data(), list.data(), list.size(), pos.data(), pos.size()).ok());
  CHECK(dg.get() == gc);
  pos[2000] = list.size();  // one past the end
  pos[2500] = ~0ull;
  dpos.put(pos);
  REQUIRE(f.gpu.gather(dg.ptr(), dl.ptr(), list.size(), dpos.ptr(), pos.size()).ok());
  sameOutcome(f.done(), f.cpu.gather(gc.data(), list.data(), list.size(), pos.data(), pos.size()));
}

TEST_CASE("cuda merge family: mergeAdd, intersect, zeroIntersection", "[gpu]") {
  Fixture f;
  for (double da : {0.0, 0.001, 0.3, 0.9})
    for (double db : {0.0, 0.01, 0.5}) {
      INFO("densities " << da << " " << db);
      const std::vector<uint64_t> a = sortedList(30000, da, 5, uint64_t(da * 1000) + 1);
      const std::vector<uint64_t> b = sortedList(30000, db, 5, uint64_t(db * 1000) + 2);
      const std::vector<float> av = nonZero(a.size(), 3), bv = nonZero(b.size(), 4);
      DevBuf<uint64_t> dai(f.gpu, a), dbi(f.gpu, b);
      DevBuf<float> dav(f.gpu, av), dbv(f.gpu, bv);
      const size_t cap = a.size() + b.size();
      std::vector<uint64_t> oi(cap + 1);
      std::vector<float> ov(cap + 1);
      DevBuf<uint64_t> goi(f.gpu, cap + 1);
      DevBuf<float> gov(f.gpu, cap + 1);
      size_t cc = 0, cg = 0;
      REQUIRE(f.cpu.mergeAdd(a.data(), av.data(), a.size(), b.data(), bv.data(), b.size(),
                             oi.data(), ov.data(), cap, &cc).ok());
      REQUIRE(f.gpu.mergeAdd(dai.ptr(), dav.ptr(), a.size(), dbi.ptr(), dbv.ptr(), b.size(),
                             goi.ptr(), gov.ptr(), cap, &cg).ok());
      REQUIRE(f.done().ok());
      CHECK(cg == cc);
      oi.resize(cc);
      ov.resize(cc);
      CHECK(goi.get(cc) == oi);
      CHECK(sameBits(gov.get(cc), ov));
      REQUIRE(f.gpu.intersect(dai.ptr(), a.size(), dbi.ptr(), b.size(), goi.ptr(), cap, &cg).ok());
      REQUIRE(f.done().ok());
      std::vector<uint64_t> both(cap + 1);
      REQUIRE(f.cpu.intersect(a.data(), a.size(), b.data(), b.size(), both.data(), cap, &cc).ok());
      CHECK(cg == cc);
      both.resize(cc);
      CHECK(goi.get(cc) == both);
      // Capacities one short of the result: the CPU's Internal error.
      if (cc > 0) {
        REQUIRE(f.gpu.intersect(dai.ptr(), a.size(), dbi.ptr(), b.size(), goi.ptr(), cc - 1,
                                &cg).ok());
        sameOutcome(f.done(), f.cpu.intersect(a.data(), a.size(), b.data(), b.size(),
                                              both.data(), cc - 1, &cc));
      }
      std::vector<float> x = makeInput(30010, 0, 6);
      DevBuf<float> dx(f.gpu, x);
      REQUIRE(f.gpu.zeroIntersection(dx.ptr(), x.size(), 0, dai.ptr(), a.size(), dbi.ptr(),
                                     b.size()).ok());
      REQUIRE(f.done().ok());
      REQUIRE(f.cpu.zeroIntersection(x.data(), x.size(), 0, a.data(), a.size(), b.data(),
                                     b.size()).ok());
      CHECK(sameBits(dx.get(), x));
    }
  // mergeAdd over capacity; zeroIntersection with a common index outside the range.
  const std::vector<uint64_t> a = {1, 5, 9}, b = {2, 5, 7};
  const std::vector<float> v = {1, 2, 3};
  DevBuf<uint64_t> da(f.gpu, a), db(f.gpu, b), oi(f.gpu, 8);
  DevBuf<float> dv(f.gpu, v), ov(f.gpu, 8);
  std::vector<uint64_t> ci(8);
  std::vector<float> cv(8);
  size_t c = 0;
  REQUIRE(f.gpu.mergeAdd(da.ptr(), dv.ptr(), 3, db.ptr(), dv.ptr(), 3, oi.ptr(), ov.ptr(), 4, &c).ok());
  sameOutcome(f.done(), f.cpu.mergeAdd(a.data(), v.data(), 3, b.data(), v.data(), 3, ci.data(),
                                       cv.data(), 4, &c));
  std::vector<float> x(4, 1.0f);
  DevBuf<float> dx(f.gpu, x);
  REQUIRE(f.gpu.zeroIntersection(dx.ptr(), 4, 0, da.ptr(), 3, db.ptr(), 3).ok());
  sameOutcome(f.done(), f.cpu.zeroIntersection(x.data(), 4, 0, a.data(), 3, b.data(), 3));
}

TEST_CASE("cuda checkAscending and checkSubset name the first bad entry and the source", "[gpu]") {
  Fixture f;
  const std::vector<uint64_t> set = sortedList(10000, 0.5, 0, 7);
  std::vector<uint64_t> sub;
  for (size_t i = 0; i < set.size(); i += 3) sub.push_back(set[i]);
  DevBuf<uint64_t> dset(f.gpu, set), dsub(f.gpu, sub);
  REQUIRE(f.gpu.checkSubset(dsub.ptr(), sub.size(), dset.ptr(), set.size(), 2).ok());
  REQUIRE(f.gpu.checkAscending(dset.ptr(), set.size(), 2).ok());
  CHECK(f.done().ok());
  for (int defect = 0; defect < 3; ++defect) {
    INFO("defect " << defect);
    std::vector<uint64_t> bad = sub;
    // A value still ascending but outside the set, at entry i >= from.
    auto outside = [&](size_t from) {
      for (size_t i = from; i + 1 < bad.size(); ++i)
        if (bad[i] + 1 < bad[i + 1] && !std::binary_search(set.begin(), set.end(), bad[i] + 1)) {
          bad[i] += 1;
          return;
        }
      FAIL("no gap in the list");
    };
    if (defect == 0) std::swap(bad[100], bad[101]);  // order
    if (defect == 1) outside(200);                   // membership
    if (defect == 2) std::swap(bad[300], bad[301]), outside(50);  // both: order first
    DevBuf<uint64_t> dbad(f.gpu, bad);
    REQUIRE(f.gpu.checkSubset(dbad.ptr(), bad.size(), dset.ptr(), set.size(), 4).ok());
    const Status sg = f.done();
    sameOutcome(sg, f.cpu.checkSubset(bad.data(), bad.size(), set.data(), set.size(), 4));
    REQUIRE(f.gpu.checkAscending(dbad.ptr(), bad.size(), 4).ok());
    sameOutcome(f.done(), f.cpu.checkAscending(bad.data(), bad.size(), 4));
  }
}

TEST_CASE("cuda COO and dense bodies: encode, decode, corrupt payloads", "[gpu]") {
  Fixture f;
  const uint64_t base = 1000, count = 50000;
  for (int ib : {4, 8})
    for (double density : {0.001, 0.2, 0.9})
      for (size_t at : {size_t(0), size_t(3)}) {  // payload offset in a host buffer
        INFO("indexBytes " << ib << " density " << density << " offset " << at);
        const std::vector<uint64_t> idx = sortedList(count, density, base, uint64_t(density * 100) + ib);
        const std::vector<float> val = nonZero(idx.size(), 8);
        const size_t nnz = idx.size();
        DevBuf<uint64_t> di(f.gpu, idx);
        DevBuf<float> dv(f.gpu, val);
        // COO into host memory (a payload), at an odd offset.
        const size_t cooBytes = nnz * (ib + 4);
        std::vector<uint8_t> cooC(cooBytes);
        REQUIRE(f.cpu.cooEncode(idx.data(), val.data(), nnz, base, count, ib, cooC.data()).ok());
        HostArray<uint8_t> payload(f.gpu, cooBytes + at);
        REQUIRE(f.gpu.cooEncode(di.ptr(), dv.ptr(), nnz, base, count, ib, payload.data() + at).ok());
        REQUIRE(f.done().ok());
        CHECK(std::vector<uint8_t>(payload.begin() + at, payload.end()) == cooC);
        DevBuf<uint64_t> oi(f.gpu, nnz + 1);
        DevBuf<float> ov(f.gpu, nnz + 1);
        if (nnz) {
          REQUIRE(f.gpu.cooDecode(payload.data() + at, nnz, base, count, ib, oi.ptr(), ov.ptr(), 3).ok());
          REQUIRE(f.done().ok());
          CHECK(oi.get(nnz) == idx);
          CHECK(sameBits(ov.get(nnz), val));
        }
        // Dense body into host memory and back.
        std::vector<uint8_t> denseC(count * 4);
        REQUIRE(f.cpu.denseEncode(idx.data(), val.data(), nnz, base, count, denseC.data()).ok());
        HostArray<uint8_t> dense(f.gpu, count * 4 + at);
        REQUIRE(f.gpu.denseEncode(di.ptr(), dv.ptr(), nnz, base, count, dense.data() + at).ok());
        REQUIRE(f.done().ok());
        CHECK(std::vector<uint8_t>(dense.begin() + at, dense.end()) == denseC);
        REQUIRE(f.gpu.denseDecode(dense.data() + at, count, base, nnz, oi.ptr(), ov.ptr(), 3).ok());
        REQUIRE(f.done().ok());
        CHECK(oi.get(nnz) == idx);
        CHECK(sameBits(ov.get(nnz), val));
        if (nnz < 3) continue;
        // Single defects: the CPU's message, naming rank 3.
        std::vector<uint64_t> ci(nnz + 1);
        std::vector<float> cv(nnz + 1);
        for (int defect = 0; defect < 3; ++defect) {
          INFO("COO defect " << defect);
          std::vector<uint8_t> bad = cooC;
          const size_t e = nnz / 2;
          if (defect == 0) std::memset(bad.data() + e * ib, 0xFF, ib);          // offset past count
          if (defect == 1) std::memcpy(bad.data() + e * ib, bad.data() + (e - 1) * ib, ib);  // repeat
          if (defect == 2) std::memset(bad.data() + nnz * ib + 4 * e, 0, 4);   // +0.0
          HostArray<uint8_t> hb = testing::hostCopy(f.gpu, bad);
          REQUIRE(f.gpu.cooDecode(hb.data(), nnz, base, count, ib, oi.ptr(), ov.ptr(), 3).ok());
          sameOutcome(f.done(), f.cpu.cooDecode(bad.data(), nnz, base, count, ib, ci.data(),
                                                cv.data(), 3));
        }
        for (int defect = 0; defect < 2; ++defect) {
          INFO("dense defect " << defect);
          std::vector<uint8_t> bad = denseC;
          const size_t e = size_t(idx[nnz / 2] - base);
          if (defect == 0) std::memset(bad.data() + 4 * e, 0, 4);  // one non-zero short
          if (defect == 1) {                                       // one too many
            size_t z = 0;
            while (z < count && (bad[4 * z] | bad[4 * z + 1] | bad[4 * z + 2] | bad[4 * z + 3])) ++z;
            if (z == count) continue;
            const float one = 1.0f;
            std::memcpy(bad.data() + 4 * z, &one, 4);
          }
          HostArray<uint8_t> hb = testing::hostCopy(f.gpu, bad);
          REQUIRE(f.gpu.denseDecode(hb.data(), count, base, nnz, oi.ptr(), ov.ptr(), 3).ok());
          sameOutcome(f.done(), f.cpu.denseDecode(bad.data(), count, base, nnz, ci.data(),
                                                  cv.data(), 3));
        }
        // Encoder input errors (Internal): a +0.0 value.
        std::vector<float> zeroed = val;
        zeroed[nnz / 3] = 0.0f;
        dv.put(zeroed);
        REQUIRE(f.gpu.cooEncode(di.ptr(), dv.ptr(), nnz, base, count, ib, payload.data()).ok());
        sameOutcome(f.done(), f.cpu.cooEncode(idx.data(), zeroed.data(), nnz, base, count, ib,
                                              cooC.data()));
        REQUIRE(f.gpu.denseEncode(di.ptr(), dv.ptr(), nnz, base, count, dense.data()).ok());
        sameOutcome(f.done(), f.cpu.denseEncode(idx.data(), zeroed.data(), nnz, base, count,
                                                denseC.data()));
      }
}

TEST_CASE("cuda DenseStream size, encode and decode match the cpu", "[gpu]") {
  Fixture f;
  std::mt19937_64 rng(4);
  for (int indexBytes : {4, 8})
    for (int shape = 0; shape < 4; ++shape)
      for (size_t n : {size_t(1), size_t(64), size_t(100003)}) {
        INFO("indexBytes " << indexBytes << " shape " << shape << " n " << n);
        // Shapes: sparse random, clustered runs with short gaps, one long
        // block, isolated entries T + 1 apart (every entry its own block).
        std::vector<uint64_t> idx;
        for (uint64_t i = 0; i < n; ++i) {
          bool take = false;
          if (shape == 0) take = rng() % 4 == 0;
          if (shape == 1) take = (i / 50) % 2 == 0 && rng() % 3 != 0;
          if (shape == 2) take = true;
          if (shape == 3) take = i % (uint64_t(2 * indexBytes / 4) + 2) == 0;
          if (take || i == n - 1) idx.push_back(7 + i);
        }
        const std::vector<float> val = nonZero(idx.size(), n + shape);
        size_t bc = 0, blc = 0, bg = 0, blg = 0;
        REQUIRE(f.cpu.denseStreamSize(idx.data(), idx.size(), indexBytes, &bc, &blc).ok());
        DevBuf<uint64_t> di(f.gpu, idx);
        DevBuf<float> dv(f.gpu, val);
        REQUIRE(f.gpu.denseStreamSize(di.ptr(), idx.size(), indexBytes, &bg, &blg).ok());
        REQUIRE(f.done().ok());
        CHECK(bg == bc);
        CHECK(blg == blc);
        std::vector<uint8_t> body(bc);
        REQUIRE(f.cpu.denseStreamEncode(idx.data(), val.data(), idx.size(), 7, indexBytes,
                                        body.data(), bc).ok());
        HostArray<uint8_t> hbody(f.gpu, bc + 1);  // a payload at an odd offset
        REQUIRE(f.gpu.denseStreamEncode(di.ptr(), dv.ptr(), idx.size(), 7, indexBytes,
                                        hbody.data() + 1, bc).ok());
        REQUIRE(f.done().ok());
        CHECK(std::vector<uint8_t>(hbody.begin() + 1, hbody.end()) == body);
        DevBuf<uint8_t> dbody(f.gpu, body);
        REQUIRE(f.gpu.denseStreamEncode(di.ptr(), dv.ptr(), idx.size(), 7, indexBytes,
                                        dbody.ptr(), bc).ok());  // device memory: in place
        REQUIRE(f.done().ok());
        CHECK(dbody.get() == body);
        // Decode the CPU's body from host and from device memory.
        const size_t nnz = idx.size();
        DevBuf<uint64_t> oi(f.gpu, nnz + 8);
        DevBuf<float> ov(f.gpu, nnz + 8);
        for (const uint8_t* in : {static_cast<const uint8_t*>(hbody.data() + 1),
                                  static_cast<const uint8_t*>(dbody.ptr())}) {
          REQUIRE(f.gpu.denseStreamDecode(in, bc, blc, n, 7, indexBytes, nnz, oi.ptr(), ov.ptr(),
                                          2).ok());
          REQUIRE(f.done().ok());
          CHECK(oi.get(nnz) == idx);
          CHECK(sameBits(ov.get(nnz), val));
        }
        // Corrupt bodies: the same verdict as the CPU (codes; the message
        // too when only one rule is broken, checked below).
        std::vector<uint64_t> ci(nnz + 8);
        std::vector<float> cv(nnz + 8);
        for (int trial = 0; trial < 40 && bc; ++trial) {
          std::vector<uint8_t> bad = body;
          bad[rng() % bad.size()] ^= uint8_t(1u << (rng() % 8));
          HostArray<uint8_t> hb = testing::hostCopy(f.gpu, bad);
          REQUIRE(f.gpu.denseStreamDecode(hb.data(), bc, blc, n, 7, indexBytes, nnz, oi.ptr(),
                                          ov.ptr(), 2).ok());
          const Status sg = f.done();
          const Status sc = f.cpu.denseStreamDecode(bad.data(), bc, blc, n, 7, indexBytes, nnz,
                                                    ci.data(), cv.data(), 2);
          sameOutcome(sg, sc, false);
          if (sc.ok() && sg.ok()) {
            CHECK(oi.get(nnz) == std::vector<uint64_t>(ci.begin(), ci.begin() + nnz));
            CHECK(sameBits(ov.get(nnz), std::vector<float>(cv.begin(), cv.begin() + nnz)));
          }
        }
        // Announced counts that disagree with the body: single defects.
        for (int defect = 0; defect < 3; ++defect) {
          INFO("header defect " << defect);
          const size_t blocks = defect == 0 ? blc + 1 : blc;
          const size_t bytes = defect == 1 ? bc - 4 : bc;
          const size_t want = defect == 2 ? nnz + 1 : nnz;
          if (blocks > bytes / (2 * size_t(indexBytes) + 4)) continue;  // refused at the call
          REQUIRE(f.gpu.denseStreamDecode(hbody.data() + 1, bytes, blocks, n, 7, indexBytes, want,
                                          oi.ptr(), ov.ptr(), 2).ok());
          sameOutcome(f.done(), f.cpu.denseStreamDecode(body.data(), bytes, blocks, n, 7,
                                                        indexBytes, want, ci.data(), cv.data(),
                                                        2));
        }
      }
  // Encoder argument and input errors.
  const std::vector<uint64_t> unsorted = {5, 3}, sorted = {3, 5};
  const std::vector<float> vals = {1.0f, 0.0f};
  DevBuf<uint64_t> du(f.gpu, unsorted), ds(f.gpu, sorted);
  DevBuf<float> dz(f.gpu, vals);
  DevBuf<uint8_t> out(f.gpu, 64);
  size_t b = 0, bl = 0;
  REQUIRE(f.gpu.denseStreamSize(du.ptr(), 2, 4, &b, &bl).ok());
  sameOutcome(f.done(), f.cpu.denseStreamSize(unsorted.data(), 2, 4, &b, &bl));
  std::vector<uint8_t> co(64);
  REQUIRE(f.gpu.denseStreamEncode(ds.ptr(), dz.ptr(), 2, 0, 4, out.ptr(), 20).ok());
  sameOutcome(f.done(), f.cpu.denseStreamEncode(sorted.data(), vals.data(), 2, 0, 4, co.data(), 20));
  REQUIRE(f.gpu.denseStreamEncode(ds.ptr(), dz.ptr(), 2, 0, 4, out.ptr(), 21).ok());  // wrong size
  sameOutcome(f.done(), f.cpu.denseStreamEncode(sorted.data(), vals.data(), 2, 0, 4, co.data(), 21));
  CHECK(testing::argumentError(
            f.gpu, f.gpu.denseStreamSize(ds.ptr(), 2, 5, &b, &bl)) == Err::InvalidArgument);
}

TEST_CASE("cuda countAboveMany, moments and gatherValues match the cpu", "[gpu]") {
  Fixture f;
  for (size_t n : kSizes)
    for (int kind = 0; kind < 4; ++kind) {
      INFO("n " << n << " kind " << kind);
      const std::vector<float> x = makeInput(n, kind, 40 + n + kind);
      DevBuf<float> dx(f.gpu, x);
      // Unsorted thresholds with repeats, zero, a NaN and +inf (Gaussiank's
      // 64 candidates are one instance).
      std::vector<float> th = {1.0f, 0.25f, 0.0f, 3.0f, 0.25f, NAN, INFINITY, 0.5f};
      for (int j = 0; j < 56; ++j) th.push_back(2.0f * std::pow(0.95f, float(j)));
      std::vector<size_t> cc(th.size()), gc(th.size(), 7);
      HostArray<float> hth = testing::hostCopy(f.gpu, th);
      REQUIRE(f.gpu.countAboveMany(dx.ptr(), n, hth.data(), th.size(), gc.data()).ok());
      REQUIRE(f.done().ok());
      REQUIRE(f.cpu.countAboveMany(x.data(), n, th.data(), th.size(), cc.data()).ok());
      CHECK(gc == cc);
      double gs = 1, gq = 1, cs = 0, cq = 0;
      REQUIRE(f.gpu.moments(dx.ptr(), n, &gs, &gq).ok());
      REQUIRE(f.done().ok());
      REQUIRE(f.cpu.moments(x.data(), n, &cs, &cq).ok());
      CHECK(std::memcmp(&gs, &cs, 8) == 0);  // the fixed order: bit for bit
      CHECK(std::memcmp(&gq, &cq, 8) == 0);
      std::vector<uint64_t> idx = sortedList(n, 0.1, 0, n + 3);
      idx.push_back(n - 1);
      idx.push_back(0);  // any order, repeats allowed
      DevBuf<uint64_t> di(f.gpu, idx);
      DevBuf<float> dg(f.gpu, idx.size());
      std::vector<float> vc(idx.size());
      REQUIRE(f.gpu.gatherValues(dg.ptr(), dx.ptr(), n, di.ptr(), idx.size()).ok());
      REQUIRE(f.done().ok());
      REQUIRE(f.cpu.gatherValues(vc.data(), x.data(), n, idx.data(), idx.size()).ok());
      CHECK(sameBits(dg.get(), vc));
      idx[idx.size() / 2] = n;  // one past the end
      di.put(idx);
      REQUIRE(f.gpu.gatherValues(dg.ptr(), dx.ptr(), n, di.ptr(), idx.size()).ok());
      sameOutcome(f.done(), f.cpu.gatherValues(vc.data(), x.data(), n, idx.data(), idx.size()));
    }
  // More thresholds than the contract allows: refused at the call.
  std::vector<size_t> counts(Backend::kCountAboveManyMax + 1);
  std::vector<float> many(counts.size(), 1.0f);
  DevBuf<float> one(f.gpu, std::vector<float>{2.0f});
  const Status tooMany =
      f.gpu.countAboveMany(one.ptr(), 1, many.data(), many.size(), counts.data());
  CHECK(testing::argumentError(f.gpu, tooMany) == Err::InvalidArgument);
}

// The streamed reductions (16-byte loads after an unaligned head of up to 3
// elements, a tail of up to 3) at every 4-byte offset from a 16-byte boundary.
TEST_CASE("cuda countAbove and countAboveMany at unaligned starts match the cpu", "[gpu]") {
  Fixture f;
  std::vector<float> th = {1.0f, 0.25f, 0.0f, NAN, INFINITY, 0.5f, 2.0f};
  HostArray<float> hth = testing::hostCopy(f.gpu, th);
  for (size_t n : {size_t(1), size_t(2), size_t(3), size_t(5), size_t(17), size_t(100003)})
    for (size_t off = 0; off < 4; ++off)
      for (int kind = 0; kind < 3; ++kind) {
        INFO("n " << n << " offset " << off << " kind " << kind);
        const std::vector<float> x = makeInput(n + off, kind, 90 + n + kind);
        DevBuf<float> dx(f.gpu, x);
        size_t cg = 7, cc = 8;
        REQUIRE(f.gpu.countAbove(dx.ptr() + off, n, 0.5f, &cg).ok());
        REQUIRE(f.done().ok());
        REQUIRE(f.cpu.countAbove(x.data() + off, n, 0.5f, &cc).ok());
        CHECK(cg == cc);
        std::vector<size_t> gm(th.size(), 7), cm(th.size());
        REQUIRE(f.gpu.countAboveMany(dx.ptr() + off, n, hth.data(), th.size(), gm.data()).ok());
        REQUIRE(f.done().ok());
        REQUIRE(f.cpu.countAboveMany(x.data() + off, n, th.data(), th.size(), cm.data()).ok());
        CHECK(gm == cm);
      }
}

TEST_CASE("cuda index sets: offsets and bitmaps round trip, corrupt bodies as the cpu", "[gpu]") {
  Fixture f;
  for (size_t n : kSizes)
    for (double density : {0.0, 0.01, 0.4, 1.0})
      for (int coding : {4, 8, Backend::kIndexBitmap}) {
        INFO("n " << n << " density " << density << " coding " << coding);
        const std::vector<uint64_t> idx = sortedList(n, density, 500, n + 11);
        const size_t bytes = Backend::indexSetBytes(idx.size(), n, coding);
        DevBuf<uint64_t> di(f.gpu, idx);
        // The body in host memory at an odd offset, as in a payload.
        HostArray<uint8_t> body(f.gpu, bytes + 3);
        std::vector<uint8_t> want(bytes + 3, 0);
        REQUIRE(f.gpu.indexEncode(di.ptr(), idx.size(), 500, n, coding, body.data() + 3).ok());
        REQUIRE(f.done().ok());
        REQUIRE(f.cpu.indexEncode(idx.data(), idx.size(), 500, n, coding, want.data() + 3).ok());
        CHECK(std::equal(want.begin() + 3, want.end(), body.data() + 3));
        DevBuf<uint64_t> back(f.gpu, idx.size());
        REQUIRE(f.gpu.indexDecode(body.data() + 3, idx.size(), 500, n, coding, back.ptr(), 2).ok());
        REQUIRE(f.done().ok());
        CHECK(back.get() == idx);
        if (idx.size() < 2) continue;
        // One defect each: the cpu's code and message.
        std::vector<uint8_t> bad(want.begin() + 3, want.end());
        std::vector<uint64_t> out(idx.size() + 1);
        auto compare = [&](size_t count) {
          HostArray<uint8_t> hb = testing::hostCopy(f.gpu, bad);
          DevBuf<uint64_t> dout(f.gpu, count);
          REQUIRE(f.gpu.indexDecode(hb.data(), count, 500, n, coding, dout.ptr(), 2).ok());
          sameOutcome(f.done(), f.cpu.indexDecode(bad.data(), count, 500, n, coding, out.data(), 2));
        };
        if (coding == Backend::kIndexBitmap) {
          compare(idx.size() - 1);  // more members than announced
          if (idx.size() + 1 <= out.size()) compare(idx.size() + 1);  // fewer
          if (n % 8) {
            bad.back() |= 0x80;  // a padding bit
            compare(idx.size());
          }
        } else {
          const size_t at = idx.size() / 2;
          std::memcpy(&bad[at * size_t(coding)], &bad[(at - 1) * size_t(coding)], size_t(coding));
          compare(idx.size());  // a repeat: not ascending
          bad[(idx.size() - 1) * size_t(coding)] = 0xFF;
          bad[(idx.size() - 1) * size_t(coding) + 1] = 0xFF;
          bad[(idx.size() - 1) * size_t(coding) + 2] = 0xFF;
          compare(idx.size());  // the first defect still wins
        }
      }
  // Encoder input out of order: Internal, as the cpu.
  const std::vector<uint64_t> unordered = {5, 3};
  DevBuf<uint64_t> du(f.gpu, unordered);
  HostArray<uint8_t> out(f.gpu, 16);
  std::vector<uint8_t> cout(16);
  for (int coding : {4, Backend::kIndexBitmap}) {
    REQUIRE(f.gpu.indexEncode(du.ptr(), 2, 0, 10, coding, out.data()).ok());
    sameOutcome(f.done(), f.cpu.indexEncode(unordered.data(), 2, 0, 10, coding, cout.data()));
  }
  // An entry in an empty region (n = 0): the bitmap has no bytes, the entry
  // is still rejected (session 12's review: CUDA returned Ok here).
  const std::vector<uint64_t> seven = {7};
  DevBuf<uint64_t> d7(f.gpu, seven);
  for (int coding : {4, Backend::kIndexBitmap}) {
    REQUIRE(f.gpu.indexEncode(d7.ptr(), 1, 7, 0, coding, out.data()).ok());
    sameOutcome(f.done(), f.cpu.indexEncode(seven.data(), 1, 7, 0, coding, cout.data()));
  }
}
