// Sparse primitives of the CPU backend (selection, compaction, scatter,
// DenseStream) and the sparse wire format, including seeded corruption fuzzing.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "algorithms/sparse/sparse_common.h"
#include "algorithms/sparse/wire_format.h"
#include "device/backend.h"
#include "device/cpu/cpu_device_backend.h"
#include "device/cpu/sparse_ops.h"
#include "device/arrays.h"

using namespace gradcomp;
using namespace gradcomp::algo::sparse;

namespace {

device::Backend& cpu() { return device::cpuBackend(); }

uint32_t bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}

// Dense vector -> COO of its non-zeros (bit pattern != +0.0), on the CPU
// reference backend (whose device memory the host may read).
Coo cooOf(const std::vector<float>& x, uint64_t base = 0) {
  std::vector<uint64_t> idx;
  std::vector<float> val;
  for (size_t i = 0; i < x.size(); ++i)
    if (bits(x[i]) != 0) idx.push_back(base + i), val.push_back(x[i]);
  Coo c(cpu());
  REQUIRE(c.idx.assign(idx.data(), idx.size()).ok());
  REQUIRE(c.val.assign(val.data(), val.size()).ok());
  return c;
}

std::vector<uint64_t> idxOf(const Coo& c) {
  return std::vector<uint64_t>(c.idx.hostView(), c.idx.hostView() + c.size());
}
std::vector<float> valOf(const Coo& c) {
  return std::vector<float>(c.val.hostView(), c.val.hostView() + c.size());
}

std::vector<float> denseOf(const Coo& c, size_t n, uint64_t base = 0) {
  std::vector<float> x(n, 0.0f);
  const auto idx = idxOf(c);
  const auto val = valOf(c);
  for (size_t i = 0; i < c.size(); ++i) x[idx[i] - base] = val[i];
  return x;
}

bool bitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (bits(a[i]) != bits(b[i])) return false;
  return true;
}

std::vector<float> randomSparse(std::mt19937_64& rng, size_t n, double density) {
  std::uniform_real_distribution<float> v(-2.0f, 2.0f);
  std::bernoulli_distribution keep(density);
  std::vector<float> x(n, 0.0f);
  for (auto& e : x)
    if (keep(rng)) e = v(rng);
  return x;
}

}  // namespace

TEST_CASE("kthLargestAbs equals the k-th of a full sort, NaN never wins", "[sparse]") {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (size_t n : {1u, 2u, 17u, 1000u}) {
    std::vector<float> x(n);
    for (auto& v : x) v = g(rng);
    if (n > 3) x[1] = std::numeric_limits<float>::quiet_NaN(), x[2] = -INFINITY;
    std::vector<float> mags;
    for (float v : x) mags.push_back(std::isnan(v) ? -1.0f : std::fabs(v));
    std::sort(mags.rbegin(), mags.rend());
    for (size_t k : {size_t(1), n / 2 + 1, n}) {
      float th = -5;
      REQUIRE(cpu().kthLargestAbs(x.data(), n, k, &th, nullptr).ok());
      CHECK(th == std::max(mags[k - 1], 0.0f));
    }
  }
  float th;
  CHECK(cpu().kthLargestAbs(nullptr, 0, 1, &th, nullptr).code() == Err::InvalidArgument);
}

TEST_CASE("exact top-k: exactly k, ties admitted in index order, zeros never", "[sparse]") {
  std::vector<float> x = {1, -3, 2, 3, -2, 2, 0, 3, -0.0f, 2};
  Coo sel;
  float th = 0;
  REQUIRE(selectTopk(cpu(), x.data(), x.size(), 5, 100, &sel, &th).ok());
  CHECK(th == 2.0f);
  CHECK(idxOf(sel) == std::vector<uint64_t>({101, 102, 103, 104, 107}));
  CHECK(valOf(sel) == std::vector<float>({-3, 2, 3, -2, 3}));
  // k above the non-zero count: every non-zero, no zero, no -0.0.
  REQUIRE(selectTopk(cpu(), x.data(), x.size(), 10, 0, &sel, &th).ok());
  CHECK(th == 0.0f);
  CHECK(sel.size() == 8);
  // Strict threshold on reuse, capacity enforced.
  size_t cnt = 0;
  REQUIRE(cpu().countAbove(x.data(), x.size(), 2.0f, &cnt).ok());
  CHECK(cnt == 3);
  std::vector<uint64_t> idx(2);
  std::vector<float> val(2);
  CHECK(cpu().compactAbove(x.data(), x.size(), 2.0f, 0, 0, idx.data(), val.data(), 2, &cnt, false).code() ==
        Err::Internal);
}

// accumulateCompact = accumulate + compactAbove(tie budget 0) in one pass:
// the same acc bits and statistics, the same entries (NaN never, Inf and
// values just above the threshold always, -0.0 never at threshold 0) across
// block boundaries and ragged tails; kNotCompacted once they outgrow the
// capacity; a backend that cannot compact says so and still accumulates.
TEST_CASE("accumulateCompact: accumulate and compactAbove in one pass", "[sparse]") {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> g(0, 1);
  for (size_t n : {size_t(1), size_t(15), size_t(4096), size_t(4097), size_t(20000)})
    for (float th : {0.0f, -0.0f, 1.5f, 2.5f})  // -0.0 counts like +0.0
      for (DataType t : {DataType::Float32, DataType::BFloat16, DataType::Float64}) {
        INFO("n " << n << " threshold " << th << " " << dtypeName(t));
        std::vector<float> in(n), residual(n);
        for (size_t i = 0; i < n; ++i) {
          in[i] = i % 13 == 0 ? 0.0f : g(rng);
          residual[i] = i % 7 == 0 ? 0.0f : g(rng);
        }
        if (n > 4100) {  // boundaries: just above, exactly at, -0.0, NaN, Inf
          in[4095] = std::nextafter(th, 1e9f), residual[4095] = 0;
          in[4096] = th, residual[4096] = 0;
          in[100] = -0.0f, residual[100] = 0;
          in[200] = std::numeric_limits<float>::quiet_NaN();
          in[300] = -std::numeric_limits<float>::infinity();
        }
        std::vector<uint8_t> typed(n * dtypeSize(t));
        REQUIRE(cpu().convert(typed.data(), t, in.data(), DataType::Float32, n).ok());
        std::vector<float> accA = residual, accB = residual;
        device::AccumulateStats a, b;
        REQUIRE(cpu().accumulate(accA.data(), typed.data(), t, n, true, th, &a).ok());
        std::vector<uint64_t> idx(n + 1);
        std::vector<float> val(n + 1);
        size_t got = 0;
        REQUIRE(cpu().compactsInAccumulate());
        REQUIRE(cpu().accumulateCompact(accB.data(), typed.data(), t, n, true, th, idx.data(),
                                        val.data(), n, &b, &got).ok());
        CHECK(bitEqual(accA, accB));
        CHECK(a.above == b.above);
        CHECK(a.nonFinite == b.nonFinite);
        CHECK(a.maxAbs == b.maxAbs);
        REQUIRE(got == b.above);
        std::vector<uint64_t> wantIdx(n + 1);
        std::vector<float> wantVal(n + 1);
        size_t want = 0;
        REQUIRE(cpu().compactAbove(accA.data(), n, th, 0, 0, wantIdx.data(), wantVal.data(), n,
                                   &want, false).ok());
        REQUIRE(want == got);
        for (size_t i = 0; i < got; ++i) {
          REQUIRE(idx[i] == wantIdx[i]);
          REQUIRE(bits(val[i]) == bits(wantVal[i]));
        }
        if (got > 0) {  // one short: nothing usable
          accB = residual;
          REQUIRE(cpu().accumulateCompact(accB.data(), typed.data(), t, n, true, th, idx.data(),
                                          val.data(), got - 1, &b, &got).ok());
          CHECK(got == device::Backend::kNotCompacted);
          CHECK(bitEqual(accA, accB));
          CHECK(a.above == b.above);
        }
      }
  // The default (no fused compaction): accumulate's result, kNotCompacted.
  std::unique_ptr<device::Backend> dev = device::makeCpuDeviceBackend();
  CHECK_FALSE(dev->compactsInAccumulate());
  device::DeviceArray<float> acc(*dev, 64);
  REQUIRE(acc.assignZero(64).ok());
  device::HostArray<float> in(*dev, 64);
  for (size_t i = 0; i < 64; ++i) in[i] = float(i);
  device::DeviceArray<uint64_t> idx(*dev, 64);
  device::DeviceArray<float> val(*dev, 64);
  device::HostArray<device::AccumulateStats> st(*dev, 1);
  device::HostArray<size_t> got(*dev, 1);
  REQUIRE(dev->accumulateCompact(acc.data(), in.data(), DataType::Float32, 64, true, 60.5f,
                                 idx.data(), val.data(), 64, &st[0], &got[0]).ok());
  REQUIRE(dev->sync().ok());
  CHECK(got[0] == device::Backend::kNotCompacted);
  CHECK(st[0].above == 3);
  CHECK(st[0].maxAbs == 63.0);
}

TEST_CASE("scatterAdd / scatterZero apply in order and reject out-of-range indexes", "[sparse]") {
  std::vector<float> d(4, 1.0f);
  const std::vector<uint64_t> idx = {10, 12, 13};
  const std::vector<float> val = {1, 2, 3};
  REQUIRE(cpu().scatterAdd(d.data(), 4, 10, idx.data(), val.data(), 3).ok());
  CHECK(d == std::vector<float>({2, 1, 3, 4}));
  REQUIRE(cpu().scatterZero(d.data(), 4, 10, idx.data(), 2).ok());
  CHECK(d == std::vector<float>({0, 1, 0, 4}));
  const std::vector<uint64_t> bad = {9};
  CHECK(cpu().scatterAdd(d.data(), 4, 10, bad.data(), val.data(), 1).code() == Err::InvalidArgument);
  const std::vector<uint64_t> bad2 = {14};
  CHECK(cpu().scatterZero(d.data(), 4, 10, bad2.data(), 1).code() == Err::InvalidArgument);
}

namespace {

// Parses a DenseStream body independently and checks the structure rules;
// returns the decoded dense vector.
std::vector<float> checkStructure(const std::vector<uint8_t>& body, size_t blocks, size_t n,
                                  int ib) {
  const size_t T = device::cpu::denseStreamMaxZeroRun(ib);
  std::vector<float> x(n, 0.0f);
  size_t pos = 0;
  uint64_t prevEnd = 0;
  auto getU = [&](size_t at) {
    uint64_t v = 0;
    for (int b = 0; b < ib; ++b) v |= uint64_t(body[at + b]) << (8 * b);
    return v;
  };
  for (size_t b = 0; b < blocks; ++b) {
    const uint64_t start = getU(pos), len = getU(pos + ib);
    pos += 2 * ib;
    REQUIRE(len >= 1);
    REQUIRE(start + len <= n);
    if (b > 0) REQUIRE(start - prevEnd > T);
    size_t run = 0;
    for (uint64_t j = 0; j < len; ++j) {
      float v;
      std::memcpy(&v, &body[pos + 4 * j], 4);
      x[start + j] = v;
      if (bits(v) == 0) {
        REQUIRE((j != 0 && j != len - 1));
        REQUIRE(++run <= T);
      } else {
        run = 0;
      }
    }
    pos += 4 * len;
    prevEnd = start + len;
  }
  REQUIRE(pos == body.size());
  return x;
}

void denseStreamRoundTrip(const std::vector<float>& x, int ib = 4, uint64_t base = 0) {
  const Coo c = cooOf(x, base);
  size_t bytes = 0, blocks = 0;
  REQUIRE(cpu().denseStreamSize(c.idx.data(), c.size(), ib, &bytes, &blocks).ok());
  std::vector<uint8_t> body(bytes);
  REQUIRE(cpu().denseStreamEncode(c.idx.data(), c.val.data(), c.size(), base, ib, body.data(),
                                  bytes).ok());
  // The size must be exact.
  CHECK(cpu().denseStreamEncode(c.idx.data(), c.val.data(), c.size(), base, ib, body.data(),
                                bytes + 1).code() == Err::Internal);
  CHECK(bitEqual(checkStructure(body, blocks, x.size(), ib), x));
  // Size is between one block and all-isolated entries.
  if (c.size()) {
    CHECK(bytes >= 2 * size_t(ib) + 4 * c.size());
    CHECK(bytes <= (2 * size_t(ib) + 4) * c.size());
  }
  Coo back(cpu());
  back.resize(c.size());
  REQUIRE(cpu().denseStreamDecode(body.data(), body.size(), blocks, x.size(), base, ib, c.size(),
                                  back.idx.data(), back.val.data(), -1).ok());
  CHECK(idxOf(back) == idxOf(c));
  CHECK(bitEqual(denseOf(back, x.size(), base), x));
  // A body holding another number of entries than announced is refused.
  if (c.size())
    CHECK(cpu().denseStreamDecode(body.data(), body.size(), blocks, x.size(), base, ib,
                                  c.size() - 1, back.idx.data(), back.val.data(), 2)
              .code() == Err::RemoteError);
}

}  // namespace

TEST_CASE("DenseStream round trips bit-exactly and keeps its structure", "[sparse]") {
  // T = 2 for 4-byte indexes, 4 for 8-byte ones.
  denseStreamRoundTrip({});
  denseStreamRoundTrip({0, 0, 0});
  denseStreamRoundTrip({5});
  denseStreamRoundTrip({1, 2, 3, 4, 5, 6});                 // all dense: one block
  denseStreamRoundTrip({1, 0, 0, 2});                       // run of T: one block
  denseStreamRoundTrip({1, 0, 0, 0, 2});                    // run of T+1: two blocks
  denseStreamRoundTrip({7, 0, 0, 0, 0, 0, 0, 0, 0, 0, -7});  // non-zeros at both ends
  denseStreamRoundTrip({0, -0.0f, 0, 0, 0, 3, -0.0f});       // -0.0 is a value
  denseStreamRoundTrip({1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 3}, 8, 1000);
  std::mt19937_64 rng(11);
  for (double d : {0.01, 0.3, 0.7, 1.0}) denseStreamRoundTrip(randomSparse(rng, 3000, d));

  // Block count follows the T rule exactly.
  const std::vector<uint64_t> idx = {0, 3, 7};  // gaps of 2 (join) and 3 (split)
  size_t bytes = 0, blocks = 0;
  REQUIRE(cpu().denseStreamSize(idx.data(), 3, 4, &bytes, &blocks).ok());
  CHECK(blocks == 2);
  CHECK(bytes == 2 * 8 + 4 * (4 + 1));
  // +0.0 in a COO input is refused (COO carries non-zeros only).
  const float zero = 0.0f;
  std::vector<uint8_t> out(64);
  CHECK(cpu().denseStreamEncode(idx.data(), &zero, 1, 0, 4, out.data(), 12).code() ==
        Err::Internal);
}

TEST_CASE("wire format picks the smallest body by exact size and round trips", "[sparse]") {
  struct Case {
    std::vector<float> x;
    WireFormat expect;
  };
  std::vector<float> scattered(1000, 0.0f), clustered(1000, 0.0f), full(100, 1.5f);
  for (size_t i = 0; i < 1000; i += 50) scattered[i] = 1.0f;
  for (size_t i = 200; i < 300; ++i) clustered[i] = float(i);
  const std::vector<Case> cases = {{scattered, WireFormat::Coo},
                                   {clustered, WireFormat::DenseStream},
                                   {full, WireFormat::Dense},
                                   {std::vector<float>(10, 0.0f), WireFormat::Coo}};
  for (const Case& c : cases) {
    const Coo coo = cooOf(c.x, 7);
    Bytes msg(cpu());
    msg.push_back(0xAA);  // encode appends
    WireFormat f;
    REQUIRE(encodeSparse(cpu(), SparsePiece{&coo, 0, coo.size(), 7, c.x.size()}, &msg, &f).ok());
    CHECK(f == c.expect);
    const size_t coo_ = kWireHeaderBytes + 8 * coo.size(), dense = kWireHeaderBytes + 4 * c.x.size();
    CHECK(msg.size() - 1 <= std::min(coo_, dense));
    CHECK(msg.size() - 1 <= wireBound(c.x.size(), coo.size()));
    Coo back(cpu());
    back.resize(c.x.size() + 1);
    size_t nnz = 0, used = 0;
    REQUIRE(decodeSparse(cpu(), msg.data() + 1, msg.size() - 1, 7, c.x.size(), back.idx.data(),
                         back.val.data(), c.x.size(), -1, &nnz, &used).ok());
    CHECK(used == msg.size() - 1);
    back.resize(nnz);
    CHECK(bitEqual(denseOf(back, c.x.size(), 7), c.x));
  }
}

namespace {

// Decodes with a receiver's limits; on success the output must obey every
// invariant (in range, strictly ascending, within capacity, no +0.0).
Status decodeChecked(const std::vector<uint8_t>& msg, size_t n, size_t capacity) {
  std::vector<uint64_t> idx(capacity + 1, ~0ull);
  std::vector<float> val(capacity + 1);
  size_t nnz = 0, used = 0;
  const Status s =
      decodeSparse(cpu(), msg.data(), msg.size(), 0, n, idx.data(), val.data(), capacity, 3, &nnz,
                   &used);
  if (s.ok()) {
    REQUIRE(nnz <= capacity);
    REQUIRE(used <= msg.size());
    for (size_t i = 0; i < nnz; ++i) {
      REQUIRE(idx[i] < n);
      REQUIRE((i == 0 || idx[i] > idx[i - 1]));
      REQUIRE(bits(val[i]) != 0);
    }
    REQUIRE(idx[capacity] == ~0ull);  // nothing written past capacity
  }
  return s;
}

std::vector<uint8_t> encoded(const std::vector<float>& x) {
  const Coo c = cooOf(x);
  Bytes msg(cpu());
  REQUIRE(encodeSparse(cpu(), SparsePiece{&c, 0, c.size(), 0, x.size()}, &msg).ok());
  return std::vector<uint8_t>(msg.begin(), msg.end());
}

}  // namespace

TEST_CASE("decoders reject malformed messages with RemoteError", "[sparse]") {
  std::vector<float> clustered(200, 0.0f), scattered(200, 0.0f);
  for (size_t i = 50; i < 60; ++i) clustered[i] = 1.0f + float(i);
  for (size_t i = 0; i < 200; i += 40) scattered[i] = 2.0f;
  const auto ds = encoded(clustered), coo = encoded(scattered), dense = encoded(std::vector<float>(8, 3.0f));
  REQUIRE(ds[5] == uint8_t(WireFormat::DenseStream));
  REQUIRE(coo[5] == uint8_t(WireFormat::Coo));
  REQUIRE(dense[5] == uint8_t(WireFormat::Dense));
  auto expectReject = [](std::vector<uint8_t> m, size_t n, size_t cap, const char* what) {
    INFO(what);
    CHECK(decodeChecked(m, n, cap).code() == Err::RemoteError);
  };
  auto with = [](std::vector<uint8_t> m, size_t at, uint8_t v) { m[at] = v; return m; };
  CHECK(decodeChecked(ds, 200, 200).ok());
  expectReject(std::vector<uint8_t>(ds.begin(), ds.begin() + 39), 200, 200, "short header");
  expectReject(std::vector<uint8_t>(ds.begin(), ds.end() - 1), 200, 200, "truncated body");
  expectReject(with(ds, 0, 'X'), 200, 200, "magic");
  expectReject(with(ds, 4, 9), 200, 200, "version");
  expectReject(with(ds, 5, 3), 200, 200, "format");
  expectReject(with(ds, 6, uint8_t(DataType::Float16)), 200, 200, "dtype");
  expectReject(with(ds, 7, 8), 200, 200, "index width");
  expectReject(ds, 199, 200, "count differs from the schedule");
  expectReject(ds, 200, 5, "more entries than the receiver allows");
  expectReject(with(ds, 24, 2), 200, 200, "block count");
  expectReject(with(ds, kWireHeaderBytes, 195), 200, 200, "block past the region");
  expectReject(with(ds, kWireHeaderBytes + 4, 0), 200, 200, "empty block");
  // Zero out the block's first value: a block must start non-zero.
  {
    auto m = ds;
    for (size_t i = 0; i < 4; ++i) m.at(kWireHeaderBytes + 8 + i) = 0;
    expectReject(m, 200, 200, "block starts with zero");
  }
  expectReject(with(coo, kWireHeaderBytes, 250), 200, 200, "COO index out of range");
  expectReject(with(coo, kWireHeaderBytes + 4, 0), 200, 200, "COO not ascending");
  {
    auto m = coo;
    for (size_t i = 0; i < 4; ++i) m.at(kWireHeaderBytes + 5 * 4 + i) = 0;
    expectReject(m, 200, 200, "COO +0.0 value");
  }
  expectReject(with(coo, 16, 6), 200, 200, "COO nnz vs payload");
  expectReject(with(dense, 16, 7), 8, 8, "dense nnz mismatch");
  expectReject(with(dense, 32, 28), 8, 8, "dense payload length");
}

TEST_CASE("randomized corruption never escapes validation", "[sparse]") {
  std::mt19937_64 rng(2024);
  std::vector<std::vector<uint8_t>> msgs;
  for (double d : {0.02, 0.4, 0.95}) msgs.push_back(encoded(randomSparse(rng, 500, d)));
  std::vector<float> runs(500, 0.0f);
  for (size_t i = 0; i < 500; ++i)
    if (i % 7 < 3) runs[i] = float(i) + 0.5f;
  msgs.push_back(encoded(runs));
  size_t rejected = 0, total = 0;
  for (const auto& base : msgs) {
    for (int it = 0; it < 1500; ++it) {
      auto m = base;
      const int kind = int(rng() % 4);
      if (kind == 0) {
        m[rng() % m.size()] ^= uint8_t(1u << (rng() % 8));
      } else if (kind == 1) {
        m[rng() % m.size()] = uint8_t(rng());
      } else if (kind == 2) {
        m.resize(rng() % m.size());
      } else {
        const size_t at = rng() % kWireHeaderBytes;  // header fields
        m[at] = uint8_t(rng());
      }
      const Status s = decodeChecked(m, 500, 500);
      ++total;
      if (!s.ok()) {
        CHECK(s.code() == Err::RemoteError);
        ++rejected;
      }
    }
  }
  // Value bits are not redundant, so some corruptions decode to other valid
  // data; every structural one must be caught (checked above), and most are.
  CHECK(rejected > total / 3);
}

TEST_CASE("countAboveMany, moments and gatherValues", "[sparse]") {
  std::mt19937_64 rng(21);
  std::normal_distribution<float> g(0.5f, 2.0f);
  std::vector<float> x(10007);
  for (auto& v : x) v = g(rng);
  x[5] = NAN;
  x[6] = -INFINITY;
  const std::vector<float> th = {0.0f, 1.0f, 2.5f, 100.0f};
  std::vector<size_t> counts(th.size());
  REQUIRE(cpu().countAboveMany(x.data(), x.size(), th.data(), th.size(), counts.data()).ok());
  for (size_t j = 0; j < th.size(); ++j) {
    size_t c = 0;
    REQUIRE(cpu().countAbove(x.data(), x.size(), th[j], &c).ok());
    CHECK(counts[j] == c);
  }
  // Moments over the finite values only; the fixed order agrees with an
  // fp64 sum to rounding.
  double sum = 0, sq = 0, wantSum = 0, wantSq = 0;
  REQUIRE(cpu().moments(x.data(), x.size(), &sum, &sq).ok());
  for (float v : x)
    if (std::isfinite(v)) wantSum += v, wantSq += double(v) * v;
  CHECK(sum == Approx(wantSum).epsilon(1e-12));
  CHECK(sq == Approx(wantSq).epsilon(1e-12));
  double again = 0, againSq = 0;  // deterministic
  REQUIRE(cpu().moments(x.data(), x.size(), &again, &againSq).ok());
  CHECK(again == sum);
  const std::vector<uint64_t> idx = {0, 7, 10006};
  std::vector<float> got(3);
  REQUIRE(cpu().gatherValues(got.data(), x.data(), x.size(), idx.data(), 3).ok());
  CHECK(got == std::vector<float>({x[0], x[7], x[10006]}));
  const std::vector<uint64_t> bad = {10007};
  CHECK(cpu().gatherValues(got.data(), x.data(), x.size(), bad.data(), 1).code() ==
        Err::InvalidArgument);
}

TEST_CASE("index sets round trip as offsets and bitmaps; decoders reject malformed bodies",
          "[sparse]") {
  using device::Backend;
  std::mt19937_64 rng(5);
  for (uint64_t n : {1ull, 7ull, 8ull, 64ull, 65ull, 1000ull, 4099ull}) {
    for (double density : {0.0, 0.01, 0.3, 1.0}) {
      std::vector<uint64_t> idx;
      std::bernoulli_distribution keep(density);
      const uint64_t base = 1000;
      for (uint64_t i = 0; i < n; ++i)
        if (keep(rng)) idx.push_back(base + i);
      for (int coding : {4, 8, Backend::kIndexBitmap}) {
        std::vector<uint8_t> body(Backend::indexSetBytes(idx.size(), n, coding) + 1, 0xAB);
        REQUIRE(cpu().indexEncode(idx.data(), idx.size(), base, n, coding, body.data()).ok());
        CHECK(body.back() == 0xAB);  // writes exactly indexSetBytes
        std::vector<uint64_t> back(idx.size());
        REQUIRE(cpu().indexDecode(body.data(), idx.size(), base, n, coding, back.data(), 3).ok());
        CHECK(back == idx);
      }
    }
  }
  const uint64_t n = 20;
  const std::vector<uint64_t> idx = {3, 9, 19};
  std::vector<uint64_t> out(8);
  auto rejects = [&](const std::vector<uint8_t>& body, size_t count, int coding,
                     const char* needle) {
    const Status s = cpu().indexDecode(body.data(), count, 0, n, coding, out.data(), 2);
    CHECK(s.code() == Err::RemoteError);
    CHECK_THAT(s.message(), Catch::Contains(needle) && Catch::Contains("from rank 2"));
  };
  std::vector<uint8_t> offs(12), bitmap(3);
  REQUIRE(cpu().indexEncode(idx.data(), 3, 0, n, 4, offs.data()).ok());
  REQUIRE(cpu().indexEncode(idx.data(), 3, 0, n, Backend::kIndexBitmap, bitmap.data()).ok());
  CHECK(bitmap == std::vector<uint8_t>({0x08, 0x02, 0x08}));
  auto o = offs;
  o[8] = 20;  // the third offset past the region
  rejects(o, 3, 4, "outside a region of 20");
  o = offs;
  o[4] = 3;  // the second equals the first
  rejects(o, 3, 4, "not strictly ascending");
  auto b = bitmap;
  b[2] |= 0x10;  // bit 20: padding
  rejects(b, 3, Backend::kIndexBitmap, "past its region");
  rejects(bitmap, 2, Backend::kIndexBitmap, "more than the 2 members");
  rejects(bitmap, 4, Backend::kIndexBitmap, "has 3 members, its header announces 4");
  // Encoders refuse what is not a strictly ascending set inside the region.
  const std::vector<uint64_t> unordered = {9, 3};
  CHECK(cpu().indexEncode(unordered.data(), 2, 0, n, 4, offs.data()).code() == Err::Internal);
  const std::vector<uint64_t> outside = {25};
  CHECK(cpu().indexEncode(outside.data(), 1, 0, n, Backend::kIndexBitmap, bitmap.data()).code() ==
        Err::Internal);
  CHECK(cpu().indexEncode(idx.data(), 3, 0, n, 2, offs.data()).code() == Err::InvalidArgument);
}
