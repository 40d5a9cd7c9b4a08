// The hierarchical allgather (hierarchy/hierarchical.h): on threads over
// LocalTransport (CPU reference and cpu-device backends), hosts of several
// shapes and layouts, every codec: every rank holds the same bytes, equal to
// the flat schedule's and to the hierarchical reference's bit for bit, and
// each rank's bytes to other hosts and inside its host are those of
// allgather.h to the byte, per peer. Then between UCX processes with
// emulated hosts (GRADCOMP_HOSTID) through the C API: gcAllgather runs the
// hierarchical form, its inter-host and total traffic to the byte.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/allgather/allgather.h"
#include "algorithms/hierarchy/hierarchical.h"
#include "device/arrays.h"
#include "device/cpu/cpu_device_backend.h"
#include "gradcomp/gradcomp.h"
#include "support/multiproc.h"
#include "transport/local_transport.h"

namespace gradcomp {
namespace {

using algo::AllreduceArgs;
using algo::Collective;
using Params = std::map<std::string, std::string>;

struct Layout {
  int hosts, perHost;
  bool interleaved;  // rank r on host r % hosts (else consecutive blocks)
  std::vector<std::vector<int>> hostRanks() const {
    std::vector<std::vector<int>> h(static_cast<size_t>(hosts));
    for (int r = 0; r < hosts * perHost; ++r)
      h[size_t(interleaved ? r % hosts : r / perHost)].push_back(r);
    return h;
  }
};

// Rank r's shard: values of both signs spanning a few binades, exact in
// every float dtype's conversion from double (they are rounded first).
std::vector<char> shardOf(int r, size_t m, DataType t, int call) {
  std::vector<double> v(m);
  for (size_t i = 0; i < m; ++i)
    v[i] = std::sin(double(i) * 0.37 + r * 1.1 + call) * (1.0 + r) * (i % 5 == 0 ? 9.0 : 1.0);
  std::vector<char> out(m * dtypeSize(t));
  REQUIRE(device::cpuBackend().convert(out.data(), t, v.data(), DataType::Float64, m).ok());
  return out;
}

struct Result {
  std::vector<std::vector<char>> out;               // [rank] output bytes
  std::vector<std::vector<transport::PeerCounters>> peer;  // [rank][peer]
};

// One allgather on P = hosts x perHost threads; hierarchical or flat.
Result runOnce(const std::string& algo, const param::Overrides& cfg, const Layout& lay,
               const std::vector<std::vector<char>>& shards, DataType t, bool inPlace,
               bool hierarchical, bool cpuDevice) {
  const int P = lay.hosts * lay.perHost;
  const size_t esz = dtypeSize(t), m = shards[0].size() / esz, n = m * size_t(P);
  auto nets = transport::createLocalTransports(P, 20.0);
  Result res;
  res.out.resize(size_t(P));
  res.peer.assign(size_t(P), std::vector<transport::PeerCounters>(size_t(P)));
  std::vector<Status> st(static_cast<size_t>(P));
  std::vector<std::thread> threads;
  for (int r = 0; r < P; ++r)
    threads.emplace_back([&, r] {
      std::unique_ptr<device::Backend> own;
      if (cpuDevice) own = device::makeCpuDeviceBackend();
      device::Backend& d = own ? *own : device::cpuBackend();
      std::unique_ptr<algo::Algorithm> alg = algo::findAllgatherAlgorithm(algo)->create();
      if (hierarchical) alg = algo::hierarchy::makeHierarchical(std::move(alg), lay.hostRanks());
      Status s;
      {
        device::DeviceArray<char> recv(d, n * esz + 1), send(d, m * esz + 1);
        device::HostArray<char> host(d, n * esz + 1);
        std::memset(host.data(), 0x5A, n * esz);
        if (m) std::memcpy(host.data() + size_t(r) * m * esz, shards[size_t(r)].data(), m * esz);
        s = d.copy(recv.data(), host.data(), n * esz);
        if (s.ok()) s = d.copy(send.data(), host.data() + size_t(r) * m * esz, m * esz);
        if (s.ok()) s = d.sync();
        AllreduceArgs a;
        a.count = n;
        a.dtype = t;
        a.coll = Collective::AllGather;
        a.recvBuf = recv.data();
        a.sendBuf = inPlace ? recv.data() + size_t(r) * m * esz : send.data();
        algo::Context ctx{*nets[size_t(r)], d, cfg, 7};
        if (s.ok()) s = algo::runCollective(*alg, ctx, a);
        if (s.ok()) s = d.copy(host.data(), recv.data(), n * esz);
        if (s.ok()) s = d.sync();
        res.out[size_t(r)].assign(host.data(), host.data() + n * esz);
        alg.reset();  // frees into d before d goes
      }
      for (int p = 0; p < P; ++p) res.peer[size_t(r)][size_t(p)] = nets[size_t(r)]->counters(p);
      st[size_t(r)] = s;
    });
  for (auto& th : threads) th.join();
  for (int r = 0; r < P; ++r) {
    INFO("rank " << r << ": " << st[size_t(r)].toString());
    REQUIRE(st[size_t(r)].ok());
  }
  return res;
}

struct Codec {
  std::string algo;
  Params params;
  size_t (*payload)(size_t m);  // fp32 shard payload (allgather.h), written out
};

std::vector<Codec> codecs() {
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

// Runs hierarchical and flat and checks what the file's header promises.
void checkLayout(const Codec& c, const Layout& lay, size_t m, DataType t, bool inPlace,
                 bool cpuDevice) {
  param::Overrides cfg;
  for (const auto& [k, v] : c.params) REQUIRE(cfg.set(k, v, "test").ok());
  const int P = lay.hosts * lay.perHost, H = lay.hosts, L = lay.perHost;
  std::vector<std::vector<char>> shards;
  for (int r = 0; r < P; ++r) shards.push_back(shardOf(r, m, t, int(m % 7)));
  const Result hier = runOnce(c.algo, cfg, lay, shards, t, inPlace, true, cpuDevice);
  const Result flat = runOnce(c.algo, cfg, lay, shards, t, inPlace, false, cpuDevice);
  for (int r = 0; r < P; ++r) {
    INFO("rank " << r);
    REQUIRE(hier.out[size_t(r)] == hier.out[0]);
  }
  CHECK(hier.out[0] == flat.out[0]);
  // The hierarchical reference, bit for bit.
  const size_t n = m * size_t(P);
  auto ref = algo::hierarchy::makeHierarchicalReference(*algo::findAllgatherAlgorithm(c.algo),
                                                        lay.hostRanks());
  REQUIRE(ref);
  REQUIRE(ref->configure(cfg).ok());
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
  CHECK(hier.out[0] == want);
  // Each owner's slot is decode(encode(its shard)): lossy codecs change it.
  if (c.algo != "dense" && t == DataType::Float32 && m > 1)
    CHECK(std::memcmp(want.data(), shards[0].data(), m * 4) != 0);
  // Wire bytes per peer, to the byte.
  uint64_t inter = 0, intra = 0;
  REQUIRE(algo::allgather::hierarchicalWireBytes(c.algo, cfg, n, t, H, L, &inter, &intra).ok());
  if (t == DataType::Float32) {
    CHECK(inter == uint64_t(H - 1) * c.payload(m));
    CHECK(intra == uint64_t(L - 1) * uint64_t(H) * m * 4);
  }
  std::vector<int> hostOf(static_cast<size_t>(P));
  const auto hostRanks = lay.hostRanks();
  for (size_t h = 0; h < hostRanks.size(); ++h)
    for (int r : hostRanks[h]) hostOf[size_t(r)] = int(h);
  for (int r = 0; r < P; ++r) {
    uint64_t sentOut = 0, recvOut = 0, sentIn = 0, recvIn = 0, msgsOut = 0, msgsIn = 0;
    for (int p = 0; p < P; ++p) {
      const transport::PeerCounters& pc = hier.peer[size_t(r)][size_t(p)];
      const bool sameHost = hostOf[size_t(p)] == hostOf[size_t(r)];
      (sameHost ? sentIn : sentOut) += pc.bytesSent;
      (sameHost ? recvIn : recvOut) += pc.bytesRecv;
      (sameHost ? msgsIn : msgsOut) += pc.msgsSent;
    }
    INFO("rank " << r);
    CHECK(sentOut == inter);
    CHECK(recvOut == inter);
    CHECK(sentIn == intra);
    CHECK(recvIn == intra);
    CHECK(msgsOut == (m ? uint64_t(H - 1) : 0));  // an empty shard sends nothing
    CHECK(msgsIn == (m ? uint64_t(L - 1) : 0));
  }
}

TEST_CASE("hierarchical allgather on threads: flat's bytes on every rank, wire bytes per peer",
          "[allgather][hierarchy]") {
  const std::vector<Layout> layouts = {
      {2, 2, false}, {3, 2, true}, {2, 3, false}, {1, 4, false}, {4, 1, false}};
  for (const Codec& c : codecs())
    for (const Layout& lay : layouts)
      for (size_t m : {size_t(1), size_t(77), size_t(301)}) {
        INFO(c.algo << (c.params.count("BITS") ? " 4 bit" : "")
                    << (c.params.count("AG_CAST") ? " fp8" : "") << " " << lay.hosts << "x"
                    << lay.perHost << (lay.interleaved ? " interleaved" : "") << " m=" << m);
        checkLayout(c, lay, m, DataType::Float32, m % 2 == 1, false);
      }
  // Other dtypes; zero-sized shards send nothing.
  checkLayout(codecs()[3], {2, 2, true}, 33, DataType::BFloat16, false, false);
  checkLayout(codecs()[1], {3, 2, false}, 40, DataType::Float16, true, false);
  checkLayout(codecs()[0], {2, 2, false}, 0, DataType::Float32, false, false);
}

TEST_CASE("hierarchical allgather on cpu-device backends: the device contract",
          "[allgather][hierarchy]") {
  for (const Codec& c : codecs()) {
    INFO(c.algo);
    checkLayout(c, {2, 2, false}, 129, DataType::Float32, true, true);
    checkLayout(c, {3, 2, true}, 65, DataType::Float16, false, true);
  }
}

// ---- The C API between UCX processes, hosts emulated by GRADCOMP_HOSTID ----

#define RANK_CHECK(cond)                                                                   \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "rank %d: line %d: check failed: %s (last error: %s)\n", rank, \
                   __LINE__, #cond, gcLastError());                                        \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)

// 4 ranks, hosts {0, 2} and {1, 3} (interleaved): blockq int4 over 2 hosts of 2.
int apiRank(int rank) {
  setenv("GRADCOMP_HOSTID", rank % 2 ? "hostB" : "hostA", 1);
  gcComm_t comm = nullptr;
  RANK_CHECK(gcCommInitFromEnv(&comm) == gcSuccess);
  const int P = gcCommSize(comm);
  gcTopology_t topo{};
  RANK_CHECK(gcCommGetTopology(comm, &topo) == gcSuccess);
  RANK_CHECK(P == 4 && topo.hierarchical == 1 && topo.hosts == 2);
  gcAlgoConfig_t cfg = nullptr;
  RANK_CHECK(gcAlgoConfigCreate("blockq", &cfg) == gcSuccess);
  RANK_CHECK(gcAlgoConfigSet(cfg, "AG_BLOCK", "100") == gcSuccess);
  RANK_CHECK(gcAlgoConfigSet(cfg, "BITS", "4") == gcSuccess);
  const size_t m = 250;
  std::vector<std::vector<float>> shards(static_cast<size_t>(P), std::vector<float>(m));
  for (int r = 0; r < P; ++r)
    for (size_t i = 0; i < m; ++i) shards[size_t(r)][i] = float(r + 1) * std::sin(float(i));
  std::vector<float> out(m * size_t(P), -1.0f);
  RANK_CHECK(gcCommResetTraffic(comm) == gcSuccess);
  RANK_CHECK(gcAllgather(shards[size_t(rank)].data(), out.data(), m, gcFloat32, cfg, comm) ==
             gcSuccess);
  gcTraffic_t all{}, inter{};
  RANK_CHECK(gcCommGetTraffic(comm, &all) == gcSuccess);
  RANK_CHECK(gcCommGetInterHostTraffic(comm, &inter) == gcSuccess);
  const uint64_t payload = 4 * 3 + m / 2;  // 3 blocks, int4 codes
  RANK_CHECK(inter.bytesSent == payload && inter.bytesRecv == payload);       // (H-1) payloads
  RANK_CHECK(all.bytesSent == payload + 2 * m * 4 && all.bytesRecv == all.bytesSent);  // + H m e
  // Every slot is decode(encode(shard)), computed here with the codec.
  param::Overrides o;
  RANK_CHECK(o.set("AG_BLOCK", "100", "test").ok() && o.set("BITS", "4", "test").ok());
  std::unique_ptr<algo::allgather::ShardCodec> codec;
  RANK_CHECK(algo::allgather::makeCodec("blockq", o, &codec).ok());
  std::vector<uint8_t> p(codec->payloadBytes(m, DataType::Float32));
  std::vector<float> want(m);
  for (int r = 0; r < P; ++r) {
    device::Backend& cpu = device::cpuBackend();
    RANK_CHECK(codec->encode(cpu, shards[size_t(r)].data(), m, DataType::Float32, p.data()).ok());
    RANK_CHECK(codec->decode(cpu, p.data(), m, DataType::Float32, want.data(), r).ok());
    RANK_CHECK(cpu.sync().ok());
    RANK_CHECK(std::memcmp(want.data(), out.data() + size_t(r) * m, m * 4) == 0);
  }
  gcAlgoConfigDestroy(cfg);
  RANK_CHECK(gcCommDestroy(comm) == gcSuccess);
  return 0;
}

TEST_CASE("gcAllgather between UCX processes on emulated hosts runs hierarchically",
          "[allgather][hierarchy][mp]") {
  REQUIRE(test::allSucceeded(test::runRanks(4, apiRank, {{"GRADCOMP_TIMEOUT_S", "20"}}, 90)));
}

}  // namespace
}  // namespace gradcomp
