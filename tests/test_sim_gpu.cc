// gradcomp-sim --gpu-model: the model backend charges what its formulas say
// (gpu_model.h) on a hand-computed sequence, payload framing is recognized,
// a scaled run prices what the full count costs, and the designs order as
// expected on small replays.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "device/arrays.h"
#include "tools/gradcomp-sim/gpu_model.h"
#include "tools/gradcomp-sim/payload_framing.h"
#include "tools/gradcomp-sim/sim_run.h"

using namespace gradcomp;
using sim::GpuDesign;

namespace {

// Round numbers: 1 GB/s = 1 byte per ns.
sim::GpuConstants handConstants() {
  sim::GpuConstants c;
  c.hbmGBs = 1000;
  c.pcieGBs = 10;
  c.mappedGBs = 5;
  c.hostGBs = 2;
  c.launchUs = 10;
  c.syncUs = 20;
  c.flagUs = 2;
  c.stepUs = 1;
  c.selectPasses = 4;
  return c;
}

sim::SimJob replayJob(const std::string& algo, int P, size_t count) {
  sim::SimJob job;
  job.algo = algo;
  job.ranks = P;
  job.count = count;
  job.warmup = 1;
  job.iters = 2;
  job.timeoutS = 60;
  job.model.alphaS = 5e-6;
  job.gpu.enabled = true;
  job.gpu.designs = {GpuDesign::Staged, GpuDesign::Resident, GpuDesign::Persistent};
  job.gpu.gbps = {100};
  return job;
}

}  // namespace

TEST_CASE("sim gpu model: charges its formulas on a hand-computed sequence", "[sim]") {
  // One rank, one scenario per design, no network. n = 1M floats (4 MB).
  const std::vector<GpuDesign> designs{GpuDesign::Staged, GpuDesign::Resident,
                                       GpuDesign::Persistent};
  auto nets = sim::createSimTransports(1, std::vector<sim::CostModel>(3), 10);
  sim::GpuModelOptions o;
  o.c = handConstants();
  o.scenarioDesign = designs;
  auto model = sim::makeGpuModel(*nets[0], o);
  const size_t n = 1 << 20;
  const double mb = 4.0 * n;  // bytes of one buffer
  device::DeviceArray<float> a(*model, n), b(*model, n), d(*model, n);
  device::HostArray<float> h(*model, n);
  size_t count = 0;
  nets[0]->beginCall();
  model->beginCall(n, DataType::Float32);
  REQUIRE(model->add(d.data(), a.data(), b.data(), n, DataType::Float32).ok());
  REQUIRE(model->copy(h.data(), d.data(), n * 4).ok());
  REQUIRE(model->countAbove(d.data(), n, 0.5f, &count).ok());
  REQUIRE(model->zero(d.data(), n * 4).ok());
  REQUIRE(model->sync().ok());
  REQUIRE(model->sync().ok());  // nothing pending: free
  model->endCall();
  const std::vector<double> t = nets[0]->endCallAll();
  const double us = 1e-6, ns = 1e-9;  // 1 GB/s moves mb bytes in mb ns
  // Resident: add max(10 us, 3 mb / 1000 GB/s); the D2H copy is a DMA:
  // mb / 10 GB/s; countAbove and zero hit the 10 us floor (mb / 1000 GB/s of
  // HBM each); one sync, 20 us.
  CHECK(t[1] == Approx(3 * mb / 1000 * ns + mb / 10 * ns + 10 * us + 10 * us + 20 * us));
  // Persistent: bytes at HBM / mapped (the copy: mb / 5 GB/s) plus a 1 us
  // barrier per primitive, and one 2 us flag wait.
  CHECK(t[2] == Approx((3 * mb / 1000 + mb / 5 + mb / 1000 + mb / 1000) * ns + 4 * us + 2 * us));
  // Staged: D2H staging mb / 10 GB/s + sync; add over mapped memory
  // 3 mb / 5 GB/s + sync; the copy as a runtime copy at host speed
  // (2 mb / 2 GB/s) + sync; countAbove over mapped memory + two syncs (scalar
  // result); the zero fill a host loop (mb / 2 GB/s); H2D staging + sync.
  // sync() itself is free.
  const double staged = (mb / 10 + 20e3) + (3 * mb / 5 + 20e3) + (2 * mb / 2 + 20e3) +
                        (mb / 5 + 40e3) + (mb / 2) + (mb / 10 + 20e3);
  CHECK(t[0] == Approx(staged * ns));
  const std::vector<sim::GpuCallStats> st = model->takeCallStats();
  REQUIRE(st.size() == 3);
  CHECK(st[int(GpuDesign::Resident)].primitives == 4);
  CHECK(st[int(GpuDesign::Resident)].syncs == 1);
  CHECK(st[int(GpuDesign::Resident)].launchS == Approx(2 * (10 * us - mb / 1000 * ns)));
  CHECK(st[int(GpuDesign::Resident)].deviceBytes == Approx(3 * mb + mb + mb + mb));
  CHECK(st[int(GpuDesign::Resident)].pcieBytes == Approx(mb + sizeof(size_t)));
  CHECK(st[int(GpuDesign::Staged)].syncs == 1 + 1 + 1 + 2 + 0 + 1);
  CHECK(st[int(GpuDesign::Staged)].hostBytes == Approx(2 * mb + mb));
  CHECK(st[int(GpuDesign::Persistent)].syncS == Approx(4 * us + 2 * us));
  // Stats were reset.
  CHECK(model->takeCallStats()[int(GpuDesign::Resident)].primitives == 0);
}

TEST_CASE("sim gpu model: payload framing", "[sim]") {
  // A sparse wire message: 40-byte header ("GCSP", version 1, payload bytes
  // at offset 32) + body.
  std::vector<uint8_t> msg(40 + 96, 0xAB);
  const uint8_t head[8] = {'G', 'C', 'S', 'P', 1, 1, 0, 4};
  std::memcpy(msg.data(), head, 8);
  const uint64_t body = 96;
  std::memcpy(msg.data() + 32, &body, 8);
  CHECK(sim::payloadFraming(msg.data(), msg.size()) == 40);
  // A doubling-allgather bundle of 2 blocks: 2 lengths, the message, 8 bytes of words.
  std::vector<uint8_t> bundle(16 + msg.size() + 8, 0x11);
  const uint64_t lens[2] = {msg.size(), 8};
  std::memcpy(bundle.data(), lens, sizeof lens);
  std::memcpy(bundle.data() + 16, msg.data(), msg.size());
  CHECK(sim::payloadFraming(bundle.data(), bundle.size()) == 16 + 40 + 8);
  // Control words; payload that is neither (random-looking values, zeros).
  const uint8_t words[12] = {1};
  CHECK(sim::payloadFraming(words, sizeof words) == sizeof words);
  std::vector<uint8_t> codes(4096);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = uint8_t(i * 37 + 11);
  CHECK(sim::payloadFraming(codes.data(), codes.size()) == 0);
  std::vector<uint8_t> zeros(4096, 0);
  CHECK(sim::payloadFraming(zeros.data(), zeros.size()) == 0);
  msg[32] ^= 1;  // the header's length no longer matches: payload
  CHECK(sim::payloadFraming(msg.data(), msg.size()) == 0);
}

TEST_CASE("sim gpu model: a scaled run prices the full count", "[sim]") {
  // qsgd and dense have schedules that do not depend on the data: a run at
  // count / 4 with every byte scaled by 4 must price what the full count
  // costs, as long as the structure is kept (qsgd: P chunks of whole
  // 512-element buckets; dense: the ring, 4 segments per chunk at both).
  for (const char* algo : {"qsgd", "dense"}) {
    const int P = 4;
    const size_t full = 1 << 20;
    sim::SimJob whole = replayJob(algo, P, full);
    REQUIRE(whole.config.set("BITS", "4", "test").ok());
    sim::SimJob scaled = whole;
    scaled.count = full / 4;
    scaled.gpu.scale = 4;
    sim::SimResult rw, rs;
    REQUIRE(sim::runSim(whole, &rw).ok());
    REQUIRE(sim::runSim(scaled, &rs).ok());
    INFO(algo);
    for (size_t s = 0; s < rw.scenarioTimeS.size(); ++s)
      CHECK(rs.scenarioTimeS[s] == Approx(rw.scenarioTimeS[s]).epsilon(0.02));
    CHECK(rs.chargedSentMax == Approx(rw.chargedSentMax).epsilon(0.001));
  }
}

TEST_CASE("sim gpu model: designs order as expected on a small replay", "[sim]") {
  // 4 MiB per rank at P = 4: staged (host loops, a sync per primitive) is
  // slowest; the persistent kernel is never slower than the resident
  // design for the compressing algorithms (no launch floor, flag waits
  // instead of syncs); nothing is free.
  for (const char* algo : {"oktopk", "qsgd"}) {
    sim::SimJob job = replayJob(algo, 4, 1 << 20);
    REQUIRE(job.config.set("BITS", "4", "test").ok());
    sim::SimResult r;
    const Status s = sim::runSim(job, &r);
    INFO(algo << ": " << s.toString());
    REQUIRE(s.ok());
    REQUIRE(r.scenarioTimeS.size() == 3);
    const double staged = r.scenarioTimeS[0], resident = r.scenarioTimeS[1],
                 persistent = r.scenarioTimeS[2];
    INFO("staged " << staged << " resident " << resident << " persistent " << persistent);
    CHECK(staged > 5 * resident);
    CHECK(persistent <= resident);
    CHECK(persistent > 0);
    const sim::GpuCallStats& res = r.gpuStats[int(GpuDesign::Resident)];
    const sim::GpuCallStats& stg = r.gpuStats[int(GpuDesign::Staged)];
    CHECK(res.primitives == stg.primitives);
    // Syncs per round, not per primitive.
    CHECK(res.syncs < res.primitives / 2);
    CHECK(stg.syncs > res.primitives);
    CHECK(res.pcieBytes < 0.2 * stg.pcieBytes);
  }
}
