// [gpu] The CUDA backend's block quantization (blockqEncode/blockqDecode,
// device/cuda/quant_blockq.cu) against the CPU reference: payload bytes and
// decoded bits equal for int8, int4 and fp8 e4m3 over odd sizes and block
// sizes, blocks with NaN/Inf, subnormal values and scales, ties, values near
// FLT_MAX; payloads and inputs in host and in device memory; malformed
// payloads (a non-finite scale, a reserved code in an unflagged block,
// padding bits) give the CPU's code and message at sync(), the first error in
// the CPU's order.
//
// main: tests/support/gpu_main.cc (exits 4, skipped, without a CUDA device).
// Also built as test_cpu_device_blockq (tests/CMakeLists.txt): the same code
// against cpu-device, so the harness runs where no GPU does.
#include <catch2/catch.hpp>

#include <cfloat>
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

struct Fixture {
  std::unique_ptr<Backend> owned = testing::makeBackendUnderTest();
  Backend& gpu = *owned;
  Backend& cpu = cpuBackend();
  Status done() { return gpu.sync(); }
};

// Bit for bit, NaN included (the decoders write the canonical quiet NaN).
bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], 4) != 0) {
      UNSCOPED_INFO("first difference at " << i << ": " << a[i] << " vs " << b[i]);
      return false;
    }
  return true;
}
void sameOutcome(const Status& gpu, const Status& cpu) {
  INFO("gpu: " << gpu.toString() << "\ncpu: " << cpu.toString());
  CHECK(!cpu.ok());
  CHECK(gpu.code() == cpu.code());
  CHECK(gpu.message() == cpu.message());
}

// 0 normal, 1 NaN/Inf sprinkled, 2 wide exponents, 3 subnormal (scales
// subnormal or underflowing to 0), 4 ties (x.5 steps), 5 near FLT_MAX (Q * s
// overflows), 6 zeros of both signs with rare values.
std::vector<float> makeInput(size_t n, int kind, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float specials[] = {NAN, INFINITY, -INFINITY, -NAN};
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    switch (kind) {
      case 0: x[i] = normal(rng); break;
      case 1: x[i] = rng() % 11 == 0 ? specials[rng() % 4] : normal(rng); break;
      case 2: x[i] = normal(rng) * std::ldexp(1.0f, int(rng() % 80) - 40); break;
      case 3: x[i] = normal(rng) * (rng() % 2 ? 1e-40f : 1e-44f); break;
      case 4: x[i] = i % 16 == 0 ? 127.0f : float(int(rng() % 254) - 127) + 0.5f; break;
      case 5: x[i] = (rng() % 2 ? FLT_MAX : -FLT_MAX) * (rng() % 3 ? 1.0f : 0.999f); break;
      default:
        x[i] = rng() % 97 == 0 ? normal(rng) : (rng() % 2 ? 0.0f : -0.0f);
    }
  }
  return x;
}

BlockQuantSpec specOf(int bits, bool fp8, size_t block) {
  BlockQuantSpec s;
  s.bits = bits;
  s.fp8 = fp8;
  s.block = block;
  return s;
}

struct Codec {
  int bits;
  bool fp8;
  const char* name;
};
const Codec kCodecs[] = {{8, false, "int8"}, {4, false, "int4"}, {8, true, "fp8"}};

}  // namespace

TEST_CASE("cuda blockq encode and decode match the cpu bit for bit", "[gpu]") {
  Fixture f;
  for (const Codec& k : kCodecs)
    for (size_t n : {size_t(1), size_t(2), size_t(3), size_t(33), size_t(2049), size_t(40001)})
      for (size_t block : {size_t(1), size_t(3), size_t(32), size_t(33), size_t(2048)})
        for (int kind = 0; kind < 7; ++kind) {
          if (block == 1 && n > 2049 && kind > 1) continue;  // enough one-element blocks
          INFO(k.name << " n " << n << " block " << block << " kind " << kind);
          const BlockQuantSpec spec = specOf(k.bits, k.fp8, block);
          const std::vector<float> x = makeInput(n, kind, 1000 * n + 10 * block + kind);
          const size_t bytes = blockqBytes(n, spec);
          std::vector<uint8_t> pc(bytes);
          REQUIRE(f.cpu.blockqEncode(x.data(), n, spec, pc.data()).ok());
          // Input in device memory, payload in host memory (the allgather's case).
          DevBuf<float> dx(f.gpu, x);
          HostArray<uint8_t> ph(f.gpu, bytes);
          std::memset(ph.data(), 0xA5, bytes);  // every byte must be written
          REQUIRE(f.gpu.blockqEncode(dx.ptr(), n, spec, ph.data()).ok());
          REQUIRE(f.done().ok());
          CHECK(std::vector<uint8_t>(ph.begin(), ph.end()) == pc);
          // Input in host memory, payload in device memory.
          HostArray<float> xh = testing::hostCopy(f.gpu, x);
          DevBuf<uint8_t> pd(f.gpu, bytes);
          REQUIRE(f.gpu.blockqEncode(xh.data(), n, spec, pd.ptr()).ok());
          REQUIRE(f.done().ok());
          CHECK(pd.get() == pc);
          // Decode the CPU's payload from host and from device memory.
          std::vector<float> yc(n);
          REQUIRE(f.cpu.blockqDecode(pc.data(), n, spec, yc.data(), 0).ok());
          HostArray<uint8_t> pch = testing::hostCopy(f.gpu, pc);
          DevBuf<float> yh(f.gpu, n), yd(f.gpu, n);
          REQUIRE(f.gpu.blockqDecode(pch.data(), n, spec, yh.ptr(), 0).ok());
          REQUIRE(f.gpu.blockqDecode(pd.ptr(), n, spec, yd.ptr(), 0).ok());
          REQUIRE(f.done().ok());
          CHECK(sameBits(yh.get(), yc));
          CHECK(sameBits(yd.get(), yc));
        }
}

TEST_CASE("cuda blockq: every fp8 and int code decodes as on the cpu", "[gpu]") {
  // One block per scale of interest, every code byte in each: flagged and
  // unflagged, zero, subnormal and normal scales. Reserved codes in an
  // unflagged block make the cpu fail; those payloads go to the next case.
  Fixture f;
  const float scales[] = {1.0f, 0.0f, 1e-41f, 3.0e-3f, -1.0f, -0.0f, -1e-41f, -7.5f};
  for (const Codec& k : kCodecs) {
    const size_t block = k.bits == 8 ? 256 : 16;  // every code, twice for int4
    const BlockQuantSpec spec = specOf(k.bits, k.fp8, block);
    for (float scale : scales) {
      INFO(k.name << " scale " << scale);
      std::vector<uint8_t> p(blockqBytes(block, spec));
      std::memcpy(p.data(), &scale, 4);
      for (size_t j = 4; j < p.size(); ++j)
        p[j] = k.bits == 8 ? uint8_t(j - 4)
                           : uint8_t(((2 * (j - 4)) & 15) | ((2 * (j - 4) + 1) & 15) << 4);
      std::vector<float> yc(block);
      const Status cs = f.cpu.blockqDecode(p.data(), block, spec, yc.data(), 2);
      HostArray<uint8_t> ph = testing::hostCopy(f.gpu, p);
      DevBuf<float> y(f.gpu, block);
      REQUIRE(f.gpu.blockqDecode(ph.data(), block, spec, y.ptr(), 2).ok());
      const Status gs = f.done();
      if (cs.ok()) {
        REQUIRE(gs.ok());
        CHECK(sameBits(y.get(), yc));
      } else {
        sameOutcome(gs, cs);
      }
    }
  }
}

TEST_CASE("cuda blockq: malformed payloads fail as on the cpu, first error first", "[gpu]") {
  Fixture f;
  const float nan = NAN, inf = INFINITY;
  for (const Codec& k : kCodecs)
    for (size_t n : {size_t(33), size_t(2049)}) {
      const size_t block = 8;
      const BlockQuantSpec spec = specOf(k.bits, k.fp8, block);
      const std::vector<float> x = makeInput(n, 0, n);  // every block unflagged
      std::vector<uint8_t> good(blockqBytes(n, spec));
      REQUIRE(f.cpu.blockqEncode(x.data(), n, spec, good.data()).ok());
      const size_t codes = 4 * blockqBlocks(n, block);
      const uint8_t reserved = k.fp8 ? 0xFF : k.bits == 8 ? 0x80 : 0x08;  // int4: low nibble
      auto setScale = [&](std::vector<uint8_t>& p, size_t b, float v) {
        std::memcpy(p.data() + 4 * b, &v, 4);
      };
      auto setCode = [&](std::vector<uint8_t>& p, size_t i) {  // i even for int4
        const size_t at = codes + (k.bits == 8 ? i : i / 2);
        p[at] = k.bits == 8 ? reserved : uint8_t((p[at] & 0xF0) | reserved);
      };
      std::vector<std::pair<const char*, std::vector<uint8_t>>> bad;
      {
        auto p = good;
        setScale(p, 3, nan);
        bad.emplace_back("NaN scale", p);
        setScale(p, 3, -inf);
        bad.emplace_back("-Inf scale", p);
        setCode(p, 1 * block);  // block 1's reserved code comes before block 3's scale
        bad.emplace_back("reserved code before a bad scale", p);
      }
      {
        auto p = good;
        setCode(p, 2 * block + 4);
        setCode(p, 4 * block);
        bad.emplace_back("reserved codes in two blocks", p);
        setScale(p, 2, inf);  // block 2's scale comes before its code
        bad.emplace_back("bad scale and code in one block", p);
        if (n % 2 && k.bits == 4) {
          p.back() |= 0x10;  // padding comes before everything
          bad.emplace_back("padding and more", p);
          auto q = good;
          q.back() |= 0x80;
          bad.emplace_back("padding", q);
        }
      }
      for (auto& [what, p] : bad) {
        INFO(k.name << " n " << n << ": " << what);
        std::vector<float> yc(n);
        const Status cs = f.cpu.blockqDecode(p.data(), n, spec, yc.data(), 5);
        HostArray<uint8_t> ph = testing::hostCopy(f.gpu, p);
        DevBuf<float> y(f.gpu, n);
        REQUIRE(f.gpu.blockqDecode(ph.data(), n, spec, y.ptr(), 5).ok());
        sameOutcome(f.done(), cs);
        // The failure was the epoch's: the next one decodes a good payload.
        HostArray<uint8_t> gh = testing::hostCopy(f.gpu, good);
        std::vector<float> yg(n);
        REQUIRE(f.cpu.blockqDecode(good.data(), n, spec, yg.data(), 5).ok());
        REQUIRE(f.gpu.blockqDecode(gh.data(), n, spec, y.ptr(), 5).ok());
        REQUIRE(f.done().ok());
        CHECK(sameBits(y.get(), yg));
      }
    }
}

TEST_CASE("cuda blockq: bad specs are refused, empty inputs do nothing", "[gpu]") {
  Fixture f;
  DevBuf<float> x(f.gpu, std::vector<float>{1.0f, 2.0f});
  HostArray<uint8_t> p(f.gpu, 64);
  const Status fp8four = f.gpu.blockqEncode(x.ptr(), 2, specOf(4, true, 8), p.data());
  CHECK(testing::argumentError(f.gpu, fp8four) == Err::InvalidArgument);
  const Status zeroBlock = f.gpu.blockqDecode(p.data(), 2, specOf(8, false, 0), x.ptr(), 0);
  CHECK(testing::argumentError(f.gpu, zeroBlock) == Err::InvalidArgument);
  const Status twoBits = f.gpu.blockqEncode(x.ptr(), 2, specOf(2, false, 8), p.data());
  CHECK(testing::argumentError(f.gpu, twoBits) == Err::InvalidArgument);
  (void)f.done();
  CHECK(f.gpu.blockqEncode(x.ptr(), 0, specOf(8, false, 8), p.data()).ok());
  CHECK(f.gpu.blockqDecode(p.data(), 0, specOf(4, false, 8), x.ptr(), 0).ok());
  CHECK(f.done().ok());
  CHECK(x.get() == std::vector<float>{1.0f, 2.0f});
}
