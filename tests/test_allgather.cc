// Allgather (algorithms/allgather): the blockq codec's layout and its
// non-finite rule, the ring on threads (LocalTransport; CPU reference and
// cpu-device backends) against each algorithm's reference bit for bit, with
// the wire bytes of allgather.h to the byte, and the C API between UCX
// processes (a mismatched sendcount is an error on every rank).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/allgather/allgather.h"
#include "algorithms/call_check.h"
#include "device/arrays.h"
#include "device/cpu/cpu_device_backend.h"
#include "gradcomp/gradcomp.h"
#include "support/multiproc.h"
#include "transport/local_transport.h"

namespace gradcomp {
namespace {

using algo::AllreduceArgs;
using algo::Collective;

float bitsOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::vector<uint8_t> encode(const std::vector<float>& x, device::BlockQuantSpec spec) {
  std::vector<uint8_t> out(device::blockqBytes(x.size(), spec));
  REQUIRE(device::cpuBackend().blockqEncode(x.data(), x.size(), spec, out.data()).ok());
  return out;
}

std::vector<float> decode(const std::vector<uint8_t>& p, size_t n, device::BlockQuantSpec spec,
                          Status* st = nullptr) {
  std::vector<float> out(n, -1.0f);
  Status s = device::cpuBackend().blockqDecode(p.data(), n, spec, out.data(), 3);
  if (st)
    *st = s;
  else
    REQUIRE(s.ok());
  return out;
}

TEST_CASE("blockq codec: layout, rounding to nearest, int4 packing", "[allgather]") {
  device::BlockQuantSpec spec{8, 4};
  // Block 0: max 2.54 -> s = 0.02, block 1: one element (the short tail).
  const std::vector<float> x = {2.54f, -1.0f, 0.01f, 0.0f, -0.5f};
  const auto p = encode(x, spec);
  REQUIRE(p.size() == 2 * 4 + 5);
  float s0, s1;
  std::memcpy(&s0, p.data(), 4);
  std::memcpy(&s1, p.data() + 4, 4);
  CHECK(s0 == 2.54f / 127.0f);
  CHECK(s1 == 0.5f / 127.0f);
  CHECK(int8_t(p[8]) == 127);
  CHECK(int8_t(p[9]) == int(std::rint(-1.0f / s0)));
  CHECK(int8_t(p[12]) == -127);
  const auto y = decode(p, x.size(), spec);
  for (size_t i = 0; i < x.size(); ++i) {
    const float s = i < 4 ? s0 : s1;
    CHECK(std::fabs(y[i] - x[i]) <= s / 2);  // round to nearest
    CHECK(y[i] == float(int(std::rint(x[i] / s))) * s);
  }
  // int4: two codes per byte, element 2i in the low nibble; Q = 7.
  device::BlockQuantSpec s4{4, 8};
  const std::vector<float> z = {7.0f, -7.0f, 1.0f, -3.0f, 0.0f};
  const auto q = encode(z, s4);
  REQUIRE(q.size() == 4 + 3);
  CHECK(q[4] == uint8_t(0x97));  // 7, -7 (0x9)
  CHECK(q[5] == uint8_t(0xD1));  // 1, -3 (0xD)
  CHECK(q[6] == 0x00);           // 0 and a zero padding nibble
  CHECK(decode(q, z.size(), s4) == z);
  // A set padding nibble, a scale that is NaN: errors naming the source rank.
  auto bad = q;
  bad[6] |= 0x10;
  Status st;
  decode(bad, z.size(), s4, &st);
  CHECK(st.code() == Err::RemoteError);
  CHECK_THAT(st.message(), Catch::Contains("padding") && Catch::Contains("rank 3"));
  bad = q;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(bad.data(), &nan, 4);
  decode(bad, z.size(), s4, &st);
  CHECK_THAT(st.message(), Catch::Contains("block 0") && Catch::Contains("non-finite scale"));
  // Code -8 in a block without the non-finite flag.
  bad = q;
  bad[6] = 0x08;
  decode(bad, z.size(), s4, &st);
  CHECK_THAT(st.message(), Catch::Contains("reserved for non-finite"));
}

TEST_CASE("blockq codec: NaN and Inf are carried and do not poison their block",
          "[allgather]") {
  for (int bits : {8, 4}) {
    INFO("bits " << bits);
    const device::BlockQuantSpec spec{bits, 6};
    const float inf = std::numeric_limits<float>::infinity();
    const float nan = std::numeric_limits<float>::quiet_NaN();
    // Block 0 has NaN, +Inf, -Inf among finite values; block 1 none.
    const std::vector<float> x = {0.3f, nan, -1.2f, inf, -inf, 0.6f, 0.3f, -1.2f, 0.6f};
    const auto y = decode(encode(x, spec), x.size(), spec);
    CHECK(std::isnan(y[1]));
    CHECK(y[3] == inf);
    CHECK(y[4] == -inf);
    const int Q = (1 << (bits - 1)) - 1;
    const float sFlagged = 1.2f / float(Q - 1), sClean = 1.2f / float(Q);
    for (size_t i : {0, 2, 5}) {
      CHECK(std::isfinite(y[i]));
      CHECK(std::fabs(y[i] - x[i]) <= sFlagged / 2);  // the scale of the finite values
    }
    for (size_t i : {6, 7, 8}) CHECK(std::fabs(y[i] - x[i]) <= sClean / 2);
    float scale0;
    const auto p = encode(x, spec);
    std::memcpy(&scale0, p.data(), 4);
    CHECK(std::signbit(scale0));  // the block's flag
    // A block of nothing but non-finite values and zeros.
    const std::vector<float> only = {nan, 0.0f, -inf};
    const auto o = decode(encode(only, spec), 3, spec);
    CHECK(std::isnan(o[0]));
    CHECK(o[1] == 0.0f);
    CHECK(o[2] == -inf);
  }
  // Values near FLT_MAX do not decode to Inf.
  const std::vector<float> big = {std::numeric_limits<float>::max(), -3e38f};
  const device::BlockQuantSpec spec{8, 2};
  const auto y = decode(encode(big, spec), 2, spec);
  CHECK(std::isfinite(y[0]));
  CHECK(std::isfinite(y[1]));
  (void)bitsOf;
}

// The codec's fast paths (clean blocks: integer codes, fp8 bytes) against the
// per-element functions of quant_types.h, which the CUDA kernels follow:
// every payload byte and every decoded bit must match. Covers odd block
// sizes (4-bit blocks that start mid-byte take the generic path), short
// tails, clean blocks beside flagged ones, ties, values at the clamp, and
// subnormal scales.
TEST_CASE("blockq codec: the fast paths match the per-element functions bit for bit",
          "[allgather]") {
  std::mt19937 gen(7);
  std::normal_distribution<float> normal;
  const float inf = std::numeric_limits<float>::infinity();
  for (const auto& [bits, fp8] : {std::pair{8, false}, std::pair{4, false}, std::pair{8, true}}) {
    for (size_t block : {1, 2, 3, 7, 64, 2048}) {
      INFO("bits " << bits << (fp8 ? " (fp8)" : "") << ", block " << block);
      const device::BlockQuantSpec spec{bits, block, fp8};
      std::vector<float> x(5000 + block / 2);
      for (size_t i = 0; i < x.size(); ++i) {
        const size_t kind = (i / 997) % 5;
        x[i] = kind == 0   ? normal(gen)
               : kind == 1 ? float(int(normal(gen) * 40)) * 0.5f  // halves: rounding ties
               : kind == 2 ? normal(gen) * 1e-39f                 // subnormal values and scales
               : kind == 3 ? normal(gen) * 3e37f                  // near the top of the range
                           : 0.0f;
      }
      x[1234] = inf;  // flags its block: the generic path beside fast ones
      x[3001] = std::numeric_limits<float>::quiet_NaN();
      const auto payload = encode(x, spec);
      std::vector<uint8_t> expect(payload.size(), 0);
      const size_t blocks = device::blockqBlocks(x.size(), block);
      uint8_t* codes = expect.data() + 4 * blocks;
      for (size_t b = 0; b < blocks; ++b) {
        const size_t lo = b * block, hi = std::min(x.size(), lo + block);
        float maxAbs = 0;
        bool nonFinite = false;
        for (size_t i = lo; i < hi; ++i) {
          if (!std::isfinite(x[i])) nonFinite = true;
          else maxAbs = std::max(maxAbs, std::fabs(x[i]));
        }
        const float scale = device::blockqScale(maxAbs, nonFinite, spec);
        std::memcpy(expect.data() + 4 * b, &scale, 4);
        for (size_t i = lo; i < hi; ++i) {
          const int c = device::blockqEncodeOne(x[i], scale, spec);
          if (bits == 8) codes[i] = uint8_t(c);
          else codes[i / 2] |= uint8_t((c & 0xF) << (i % 2 ? 4 : 0));
        }
      }
      REQUIRE(payload == expect);
      const auto y = decode(payload, x.size(), spec);
      size_t mismatched = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        float scale;
        std::memcpy(&scale, payload.data() + 4 * (i / block), 4);
        const int c = fp8         ? int(payload[4 * blocks + i])
                      : bits == 8 ? int(int8_t(payload[4 * blocks + i]))
                                : (int((payload[4 * blocks + i / 2] >> (i % 2 ? 4 : 0)) & 0xF)
                                   ^ 8) - 8;
        bool ok = true;
        const float want = device::blockqDecodeOne(c, scale, spec, &ok);
        uint32_t a, b;
        std::memcpy(&a, &y[i], 4);
        std::memcpy(&b, &want, 4);
        mismatched += a != b && !(std::isnan(y[i]) && std::isnan(want));
      }
      CHECK(mismatched == 0);
    }
  }
}

TEST_CASE("fp8 e4m3 codes: OCP E4M3FN, round to nearest even, saturating", "[allgather]") {
  using device::e4m3FromFloat;
  using device::e4m3ToFloat;
  CHECK(e4m3FromFloat(1.0f) == 0x38);
  CHECK(e4m3FromFloat(-2.0f) == 0xC0);
  CHECK(e4m3FromFloat(448.0f) == 0x7E);
  CHECK(e4m3FromFloat(1e6f) == 0x7E);       // saturates, never NaN
  CHECK(e4m3FromFloat(0x1p-9f) == 0x01);    // smallest subnormal
  CHECK(e4m3FromFloat(0x1p-10f) == 0x00);   // a tie: to even
  CHECK(e4m3FromFloat(0x3p-10f) == 0x02);   // a tie: to even
  CHECK(e4m3FromFloat(1.0625f) == 0x38);    // between 1 and 1.125: to even
  CHECK(e4m3FromFloat(1.1875f) == 0x3A);    // between 1.125 and 1.25: to even
  CHECK(e4m3FromFloat(0x1.ep-7f) == 0x08);  // rounds up into the smallest normal
  CHECK(e4m3FromFloat(-0.0f) == 0x80);
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;  // NaN
    INFO("code " << c);
    CHECK(e4m3FromFloat(e4m3ToFloat(uint8_t(c))) == c);
  }
  CHECK(e4m3ToFloat(0x7E) == 448.0f);
  CHECK(e4m3ToFloat(0x01) == 0x1p-9f);
  // In blocks: NaN and Inf carried, the rest on the finite values' scale.
  const device::BlockQuantSpec spec{8, 4, true};
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {1.0f, std::numeric_limits<float>::quiet_NaN(), -inf, 0.25f,
                                4.0f, -0.5f, 2.0f};
  const auto p = encode(x, spec);
  REQUIRE(p.size() == 2 * 4 + 7);
  const auto y = decode(p, x.size(), spec);
  CHECK(y[0] == 1.0f);  // 1.0 / (1/416) = 416 = 0x7D exactly
  CHECK(std::isnan(y[1]));
  CHECK(y[2] == -inf);
  CHECK(std::fabs(y[3] - 0.25f) <= 0.25f / 16);  // 3 mantissa bits: half a step
  for (size_t i = 4; i < 7; ++i) CHECK(std::fabs(y[i] - x[i]) <= std::fabs(x[i]) / 16);
  CHECK(y[4] == 4.0f);  // 4 / (4/448) = 448: the largest code
  auto bad = p;
  bad[8 + 4] = 0x7F;  // a NaN code in the unflagged block 1
  Status st;
  decode(bad, x.size(), spec, &st);
  CHECK(st.code() == Err::RemoteError);
  CHECK_THAT(st.message(), Catch::Contains("block 1"));
}

// P ranks on threads, each with its own algorithm object and backend.
struct Group {
  int P;
  std::string algo;
  param::Overrides config;
  std::vector<std::unique_ptr<transport::Transport>> nets;
  // Declared before the algorithms, which free their buffers into them.
  std::vector<std::unique_ptr<device::Backend>> devs;  // cpu-device, or empty: the reference
  std::vector<std::unique_ptr<algo::Algorithm>> algs;
  uint64_t seq = 0;

  Group(const std::string& name, int nranks, const std::map<std::string, std::string>& params,
        bool cpuDevice)
      : P(nranks), algo(name) {
    for (const auto& [k, v] : params) REQUIRE(config.set(k, v, "test").ok());
    const algo::AlgorithmInfo* info = algo::findAllgatherAlgorithm(name);
    REQUIRE(info);
    REQUIRE(info->hasAllgather());
    nets = transport::createLocalTransports(P, 20.0);
    for (int r = 0; r < P; ++r) {
      algs.push_back(info->create());
      if (cpuDevice) devs.push_back(device::makeCpuDeviceBackend());
    }
  }
  device::Backend& dev(int r) { return devs.empty() ? device::cpuBackend() : *devs[size_t(r)]; }

  // One allgather of each rank's shard (raw bytes of dtype t); returns every
  // rank's output.
  std::vector<std::vector<char>> call(const std::vector<std::vector<char>>& shards, DataType t,
                                      bool inPlace, std::vector<Status>* st) {
    const size_t esz = dtypeSize(t), m = shards[0].size() / esz, n = m * size_t(P);
    std::vector<std::vector<char>> out{size_t(P)};
    st->assign(size_t(P), Status::Ok());
    std::vector<std::thread> threads;
    const uint64_t callSeq = seq++;
    for (int r = 0; r < P; ++r)
      threads.emplace_back([&, r] {
        device::Backend& d = dev(r);
        // Buffers in the backend's device memory, filled through primitives.
        device::DeviceArray<char> recv(d, n * esz + 1), send(d, m * esz + 1);
        device::HostArray<char> host(d, n * esz + 1);
        std::memset(host.data(), 0x5A, n * esz);
        std::memcpy(host.data() + size_t(r) * m * esz, shards[size_t(r)].data(), m * esz);
        Status s = d.copy(recv.data(), host.data(), n * esz);
        if (s.ok()) s = d.copy(send.data(), host.data() + size_t(r) * m * esz, m * esz);
        if (s.ok()) s = d.sync();
        AllreduceArgs a;
        a.count = n;
        a.dtype = t;
        a.coll = Collective::AllGather;
        a.recvBuf = recv.data();
        a.sendBuf = inPlace ? recv.data() + size_t(r) * m * esz : send.data();
        algo::Context ctx{*nets[size_t(r)], d, config, callSeq};
        if (s.ok()) s = algo::runCollective(*algs[size_t(r)], ctx, a);
        if (s.ok()) s = d.copy(host.data(), recv.data(), n * esz);
        if (s.ok()) s = d.sync();
        out[size_t(r)].assign(host.data(), host.data() + n * esz);
        (*st)[size_t(r)] = s;
      });
    for (auto& th : threads) th.join();
    return out;
  }
};

std::vector<char> shardOf(int rank, size_t m, DataType t, uint32_t seed) {
  std::mt19937 gen(seed * 7919u + uint32_t(rank));
  std::normal_distribution<double> g(0.0, 1.0 + rank);
  std::vector<double> v(m);
  for (auto& x : v) x = g(gen);
  std::vector<char> out(m * dtypeSize(t));
  REQUIRE(device::cpuBackend().convert(out.data(), t, v.data(), DataType::Float64, m).ok());
  return out;
}

// Runs one call and checks: every rank Ok, identical bytes on every rank,
// equal to the reference bit for bit, and each rank sent and received
// exactly wireBytes in P-1 messages.
void checkCall(Group& g, size_t m, DataType t, bool inPlace, uint32_t seed) {
  std::vector<std::vector<char>> shards;
  for (int r = 0; r < g.P; ++r) shards.push_back(shardOf(r, m, t, seed));
  for (auto& n : g.nets) n->resetCounters();
  std::vector<Status> st;
  const auto out = g.call(shards, t, inPlace, &st);
  std::string why;
  for (int r = 0; r < g.P; ++r) why += "rank " + std::to_string(r) + ": " + st[size_t(r)].toString() + "\n";
  INFO(why);
  for (int r = 0; r < g.P; ++r) {
    REQUIRE(st[size_t(r)].ok());
    CHECK(out[size_t(r)] == out[0]);
  }
  const size_t n = m * size_t(g.P);
  std::unique_ptr<algo::Reference> ref = algo::findAllgatherAlgorithm(g.algo)->allgatherReference(g.P);
  REQUIRE(ref->configure(g.config).ok());
  std::vector<const void*> ptrs;
  for (const auto& s : shards) ptrs.push_back(s.data());
  AllreduceArgs a;
  a.count = n;
  a.dtype = t;
  a.coll = Collective::AllGather;
  std::vector<double> e, tol;
  REQUIRE(ref->expect(ptrs, a, &e, &tol).ok());
  std::vector<char> want(n * dtypeSize(t));
  REQUIRE(device::cpuBackend().convert(want.data(), t, e.data(), DataType::Float64, n).ok());
  CHECK(out[0] == want);
  uint64_t wire = 0;
  REQUIRE(algo::allgather::wireBytes(g.algo, g.config, n, t, g.P, &wire).ok());
  for (int r = 0; r < g.P; ++r) {
    const transport::PeerCounters c = g.nets[size_t(r)]->totalCounters();
    CHECK(c.bytesSent == wire);
    CHECK(c.bytesRecv == wire);
    CHECK(c.msgsSent == uint64_t(g.P - 1));
  }
}

struct Case {
  std::string algo;
  std::map<std::string, std::string> params;
  // Payload bytes of a shard of m fp32 elements (allgather.h), written out.
  size_t (*payload)(size_t m);
};

std::vector<Case> cases() {
  return {
      {"dense", {}, [](size_t m) { return 4 * m; }},
      {"cast", {}, [](size_t m) { return 2 * m; }},
      {"cast", {{"AG_CAST", "fp8"}, {"AG_BLOCK", "64"}},
       [](size_t m) { return 4 * ((m + 63) / 64) + m; }},
      {"blockq", {{"AG_BLOCK", "64"}}, [](size_t m) { return 4 * ((m + 63) / 64) + m; }},
      {"blockq", {{"BITS", "4"}, {"AG_BLOCK", "32"}},
       [](size_t m) { return 4 * ((m + 31) / 32) + (m + 1) / 2; }},
  };
}

TEST_CASE("allgather on threads: every rank equal to the reference, wire bytes to the byte",
          "[allgather]") {
  for (const Case& c : cases())
    for (int P : {1, 2, 3, 4}) {
      Group g(c.algo, P, c.params, false);
      for (size_t m : {size_t(1), size_t(77), size_t(301)}) {
        INFO(c.algo << " " << (c.params.count("BITS") ? "4 bit " : "") << "P=" << P
                    << " m=" << m);
        checkCall(g, m, DataType::Float32, false, 1);
        checkCall(g, m, DataType::Float32, true, 2);
        uint64_t wire = 0;
        REQUIRE(algo::allgather::wireBytes(c.algo, g.config, m * size_t(P), DataType::Float32, P,
                                           &wire)
                    .ok());
        CHECK(wire == uint64_t(P - 1) * c.payload(m));
      }
      checkCall(g, 33, DataType::BFloat16, false, 3);
      checkCall(g, 33, DataType::Float16, true, 4);
    }
}

TEST_CASE("allgather on cpu-device backends: the schedule keeps the device contract",
          "[allgather]") {
  for (const Case& c : cases()) {
    INFO(c.algo);
    Group g(c.algo, 3, c.params, true);
    checkCall(g, 129, DataType::Float32, false, 5);
    checkCall(g, 129, DataType::Float32, true, 6);
    checkCall(g, 40, DataType::Float16, false, 7);
  }
}

TEST_CASE("allgather: bad arguments and parameters are named", "[allgather]") {
  AllreduceArgs a;
  a.coll = Collective::AllGather;
  std::vector<float> buf(12);
  a.recvBuf = buf.data();
  a.count = 12;
  a.sendBuf = buf.data() + 4;  // rank 1 of 3 in place: ok
  CHECK(algo::checkCallArgs(a, 3, 1).ok());
  a.sendBuf = buf.data() + 2;
  Status s = algo::checkCallArgs(a, 3, 1);
  CHECK(s.code() == Err::InvalidArgument);
  CHECK_THAT(s.message(), Catch::StartsWith("allgather: sendBuf overlaps recvBuf"));
  a.sendBuf = buf.data() + 4;
  a.count = 13;
  CHECK_THAT(algo::checkCallArgs(a, 3, 1).message(),
             Catch::Contains("count 13 is not sendcount x 3 ranks"));
  param::Overrides cfg;
  REQUIRE(cfg.set("BITS", "2", "test").ok());
  std::unique_ptr<algo::allgather::ShardCodec> codec;
  s = algo::allgather::makeCodec("blockq", cfg, &codec);
  CHECK(s.code() == Err::InvalidConfig);
  CHECK_THAT(s.message(), Catch::Contains("GRADCOMP_BITS=2"));
  // Integers: dense gathers them, the lossy ones refuse (the interposer passes them through).
  Group g("blockq", 2, {}, false);
  std::vector<std::vector<char>> shards(2, std::vector<char>(16, 1));
  std::vector<Status> st;
  g.call(shards, DataType::Int32, false, &st);
  for (const Status& e : st) {
    CHECK(e.code() == Err::Unsupported);
    CHECK_THAT(e.message(), Catch::Contains("int32"));
  }
  // An allgather-only algorithm is not an allreduce.
  CHECK(algo::findAlgorithm("blockq") == nullptr);
  CHECK(algo::allgatherNames() == "blockq, cast, dense");
}

// ---- The C API between UCX processes ----------------------------------------

#define RANK_CHECK(cond)                                                                     \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "rank %d: line %d: check failed: %s (last error: %s)\n", rank,     \
                   __LINE__, #cond, gcLastError());                                          \
      return 1;                                                                              \
    }                                                                                        \
  } while (0)

int apiRank(int rank) {
  gcComm_t comm = nullptr;
  RANK_CHECK(gcCommInitFromEnv(&comm) == gcSuccess);
  const int P = gcCommSize(comm);
  gcAlgoConfig_t cfg = nullptr;
  RANK_CHECK(gcAlgoConfigCreate("blockq", &cfg) == gcSuccess);
  RANK_CHECK(gcAlgoConfigSet(cfg, "AG_BLOCK", "100") == gcSuccess);
  RANK_CHECK(gcAlgoConfigSet(cfg, "DENSITY", "0.1") == gcInvalidConfig);  // not blockq's
  const size_t m = 250;
  std::vector<float> out(m * size_t(P), -1.0f), in(m);
  for (size_t i = 0; i < m; ++i) in[i] = float(rank + 1) * std::sin(float(i));
  RANK_CHECK(gcCommResetTraffic(comm) == gcSuccess);
  RANK_CHECK(gcAllgather(in.data(), out.data(), m, gcFloat32, cfg, comm) == gcSuccess);
  gcTraffic_t t;
  RANK_CHECK(gcCommGetTraffic(comm, &t) == gcSuccess);
  RANK_CHECK(t.bytesSent == uint64_t(P - 1) * (4 * 3 + m));  // 3 blocks, int8 codes
  RANK_CHECK(t.bytesRecv == t.bytesSent);
  for (int r = 0; r < P; ++r)
    for (size_t i = 0; i < m; ++i) {
      const float x = float(r + 1) * std::sin(float(i));
      RANK_CHECK(std::fabs(out[size_t(r) * m + i] - x) <= float(r + 1) / 127.0f / 2 * 1.0001f);
    }
  // In place, dense: exact.
  std::vector<double> d(m * size_t(P), 0.0);
  for (size_t i = 0; i < m; ++i) d[size_t(rank) * m + i] = rank * 1000.0 + double(i) / 3;
  RANK_CHECK(gcAllgather(d.data() + size_t(rank) * m, d.data(), m, gcFloat64, nullptr, comm) ==
             gcSuccess);
  for (int r = 0; r < P; ++r)
    for (size_t i = 0; i < m; ++i) RANK_CHECK(d[size_t(r) * m + i] == r * 1000.0 + double(i) / 3);
  // Local refusals: no call consumed.
  RANK_CHECK(gcAllgather(out.data() + 1, out.data(), m, gcFloat32, cfg, comm) ==
             gcInvalidArgument);
  RANK_CHECK(std::strstr(gcLastError(), "overlaps") != nullptr);
  RANK_CHECK(gcAllreduce(in.data(), in.data(), m, gcFloat32, gcSum, cfg, 0, comm) ==
             gcUnsupported);
  // A sendcount that differs on the last rank: an error on every rank, naming the counts.
  const size_t mine = rank == P - 1 ? m - 10 : m;
  const gcResult_t rc = gcAllgather(in.data(), out.data(), mine, gcFloat32, cfg, comm);
  RANK_CHECK(rc != gcSuccess);
  RANK_CHECK(std::strstr(gcLastError(), "count") != nullptr);
  gcAlgoConfigDestroy(cfg);
  (void)gcCommDestroy(comm);
  return 0;
}

TEST_CASE("gcAllgather between UCX processes: blockq and dense, mismatched counts fail",
          "[allgather][mp]") {
  const std::map<std::string, std::string> env = {{"GRADCOMP_TIMEOUT_S", "20"}};
  REQUIRE(test::allSucceeded(test::runRanks(3, apiRank, env, 90)));
}

}  // namespace
}  // namespace gradcomp
