// gradcomp-kbench's results as data (kbench_table.h) and gradcomp-sim
// --gpu-kbench (gpu_calibration.h), from the H200 run committed under
// docs/results/gpu/2026-11-28-h200: the file parses, each kernel's fit
// reproduces its measured rows, --check flags the kernels issue 33 names,
// and the calibrated model prices a primitive at floor + bytes / rate, at
// the measured time at kbench's sizes, with kernels the file lacks at the
// constants.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "device/arrays.h"
#include "tools/gradcomp-kbench/kbench_table.h"
#include "tools/gradcomp-sim/gpu_calibration.h"
#include "tools/gradcomp-sim/gpu_model.h"
#include "tools/gradcomp-sim/sim_run.h"

using namespace gradcomp;
using sim::GpuDesign;

namespace {

const char* kH200 = GC_H200_KBENCH;  // tests/sim.cmake

kbench::Table h200() {
  kbench::Table t;
  const Status s = kbench::readTable(kH200, &t);
  INFO(s.toString());
  REQUIRE(s.ok());
  return t;
}

const kbench::KernelFit& fitOf(const std::vector<kbench::KernelFit>& fits, const char* k) {
  const auto it = std::find_if(fits.begin(), fits.end(),
                               [&](const kbench::KernelFit& f) { return f.kernel == k; });
  REQUIRE(it != fits.end());
  return *it;
}

const kbench::Row& rowOf(const kbench::Table& t, const char* k, double n) {
  const auto it = std::find_if(t.rows.begin(), t.rows.end(), [&](const kbench::Row& r) {
    return r.kernel == k && r.elements == n;
  });
  REQUIRE(it != t.rows.end());
  return *it;
}

// One rank, resident and persistent scenarios, no network; `scale` prices
// scale x the elements the primitives are given.
struct OneRank {
  explicit OneRank(std::shared_ptr<const sim::GpuCalibration> cal, double scale = 1)
      : nets(sim::createSimTransports(1, std::vector<sim::CostModel>(2), 10)) {
    sim::GpuModelOptions o;
    o.scenarioDesign = {GpuDesign::Resident, GpuDesign::Persistent};
    o.scale = scale;
    o.calibration = std::move(cal);
    model = sim::makeGpuModel(*nets[0], o);
    nets[0]->beginCall();
    model->beginCall(1, DataType::Float32);
  }
  // Resident and persistent stream time of what ran since the constructor.
  std::vector<double> finish() {
    model->endCall();
    return nets[0]->endCallAll();
  }
  std::vector<std::unique_ptr<sim::SimTransport>> nets;
  std::unique_ptr<sim::GpuModel> model;
};

std::shared_ptr<const sim::GpuCalibration> h200Calibration() {
  std::shared_ptr<const sim::GpuCalibration> cal;
  REQUIRE(sim::GpuCalibration::fromFile(kH200, 4, &cal).ok());
  return cal;
}

}  // namespace

TEST_CASE("kbench table: the H200 file parses and each fit reproduces its rows", "[sim]") {
  const kbench::Table t = h200();
  CHECK(t.device == "NVIDIA H200");
  const std::vector<kbench::KernelFit> fits = kbench::fitTable(t);
  CHECK(fits.size() == 25);
  CHECK(t.rows.size() == 25 * 5);  // 1M, 4M, 16M, 64M, 256M
  for (const kbench::KernelFit& f : fits) {
    INFO(f.kernel);
    CHECK(f.floorElements == 1 << 20);
    CHECK(f.largestElements == double(256 << 20));
    CHECK(f.floorS == rowOf(t, f.kernel.c_str(), f.floorElements).seconds);
    // The affine fit passes through the largest row, and through the
    // smallest one unless its intercept was clamped at 0.
    CHECK(f.interceptS + f.largestElements * f.secondsPerElement == Approx(f.largestS));
    if (f.interceptS > 0)
      CHECK(f.interceptS + f.floorElements * f.secondsPerElement == Approx(f.floorS));
  }
  // The kernel's own byte count, and the copy as the yardstick.
  CHECK(fitOf(fits, "quantize_maxmin_4b_residual").bytesPerElement == Approx(8.5 + 8.0 / 512));
  CHECK(fitOf(fits, "copy_d2d").ofCopyLargest == Approx(1.0).epsilon(0.01));
  CHECK(fitOf(fits, "moments_f64").ofCopyLargest == Approx(0.043).epsilon(0.05));
}

TEST_CASE("kbench check: flags the kernels far from the copy on the H200 file", "[sim]") {
  const std::vector<kbench::KernelFit> fits = kbench::fitTable(h200());
  const kbench::CheckResult r = kbench::check(fits, 0.7, 0.4);
  auto flagged = [&](const std::string& k) {
    return std::any_of(r.failures.begin(), r.failures.end(),
                       [&](const std::string& line) { return line.rfind(k + " ", 0) == 0; });
  };
  for (const char* k : {"quantize_maxmin_4b_residual", "moments_f64", "dense_stream_encode_1pct",
                        "fft_select_bins_15pct", "count_above_64_thresholds",
                        "kth_largest_abs_4pass", "compact_above_1pct", "rbf_encode_10b_residual"})
    CHECK(flagged(k));
  // At or near the copy from 16 M elements on; the copy and the sparse
  // gather are not held to a fraction.
  for (const char* k : {"accumulate_f32_stats", "accumulate_bf16_stats", "block_dot_1024",
                        "copy_d2d", "gather_values_1pct"})
    CHECK_FALSE(flagged(k));
  CHECK(r.checked == 23);
  // The lowest fraction is taken over 16 M elements and above: sign_pack is
  // 0.42 at 4 M but 0.75 from 16 M.
  CHECK(fitOf(fits, "sign_pack").minOfCopy == Approx(0.753).epsilon(0.01));
  CHECK(kbench::check(fits, 0, 0).failures.empty());
  CHECK(kbench::check(fits, 0.7, 0).failures.size() < r.failures.size());
}

TEST_CASE("kbench table: malformed files are refused", "[sim]") {
  kbench::Table t;
  CHECK_FALSE(kbench::parseTable("{\"device\": \"x\"}", &t).ok());
  CHECK_FALSE(kbench::parseTable("{\"rows\": [{\"kernel\": \"a\", \"elements\": 0}]}", &t).ok());
  CHECK_FALSE(kbench::readTable("/nonexistent/kbench.json", &t).ok());
  REQUIRE(kbench::parseTable("{\"rows\": [{\"kernel\": \"a\", \"elements\": 4, "
                             "\"moved_bytes\": 16, \"seconds\": 2e-6}]}", &t).ok());
  CHECK(t.rows.size() == 1);
}

TEST_CASE("sim gpu model calibrated: prices at the measured rows and floor + bytes / rate",
          "[sim]") {
  const kbench::Table t = h200();
  const auto cal = h200Calibration();
  const sim::KernelRate* q = cal->find("quantize_maxmin_4b_residual");
  REQUIRE(q != nullptr);
  device::MaxMinSpec spec;
  spec.bits = 4;
  const size_t n = 1 << 20;
  // At kbench's smallest and largest sizes (1M and, scaled x 256, 256M) the
  // quantizer costs what was measured; in between, floor + bytes / rate.
  for (double scale : {1.0, 16.0, 256.0}) {
    OneRank one(cal, scale);
    device::DeviceArray<float> x(*one.model, n), meta(*one.model, 2 * n / 512), res(*one.model, n);
    device::DeviceArray<uint8_t> codes(*one.model, n / 2);
    REQUIRE(one.model->quantizeMaxMin(x.data(), n, spec, 0, meta.data(), codes.data(),
                                      res.data()).ok());
    const std::vector<double> s = one.finish();
    INFO("scale " << scale);
    const double bytes = scale * n * (8.5 + 8.0 / 512);
    CHECK(s[0] == Approx(q->floorS + bytes / q->bytesPerS));
    CHECK(s[1] == Approx(bytes / q->bytesPerS + 1e-6));  // persistent: no floor, a 1 us step
    if (scale != 16)
      CHECK(s[0] == Approx(rowOf(t, "quantize_maxmin_4b_residual", scale * n).seconds));
    const sim::GpuCallStats st = one.model->takeCallStats()[int(GpuDesign::Resident)];
    REQUIRE(st.prims.count("quantizeMaxMin") == 1);
    CHECK(st.prims.at("quantizeMaxMin").kernel == "quantize_maxmin_4b_residual");
    CHECK(st.prims.at("quantizeMaxMin").seconds == Approx(s[0]));
  }
  // Twice the bytes (no residual: fewer) cost in proportion beyond the floor.
  CHECK(q->modelBytesPerElement == Approx(8.5 + 8.0 / 512));
}

TEST_CASE("sim gpu model calibrated: kernels the file lacks keep the constants", "[sim]") {
  // A file with the copy only: zero, add and checkFinite are priced at the
  // constants (launch 4 us, 3000 GB/s), the copy at its fit, and the
  // per-primitive tally says which.
  kbench::Table t;
  REQUIRE(kbench::parseTable(
              "{\"device\": \"toy\", \"rows\": ["
              "{\"kernel\": \"copy_d2d\", \"elements\": 1000, \"moved_bytes\": 8000, "
              "\"seconds\": 5e-6},"
              "{\"kernel\": \"copy_d2d\", \"elements\": 1000000, \"moved_bytes\": 8000000, "
              "\"seconds\": 4.001e-3}]}", &t).ok());
  auto cal = std::make_shared<const sim::GpuCalibration>(t, "toy.json", 4);
  const sim::KernelRate* c = cal->find("copy_d2d");
  REQUIRE(c != nullptr);
  CHECK(c->floorS == Approx(1e-6));         // 5 us - 1000 elements * 4 ns
  CHECK(c->bytesPerS == Approx(8 / 4e-9));  // 8 bytes per 4 ns
  CHECK(cal->find("add_f32") == nullptr);
  CHECK(cal->find(nullptr) == nullptr);
  const size_t n = 1 << 20;
  OneRank one(cal);
  device::DeviceArray<float> a(*one.model, n), b(*one.model, n);
  REQUIRE(one.model->zero(a.data(), 4 * n).ok());
  REQUIRE(one.model->zero(b.data(), 4 * n).ok());
  REQUIRE(one.model->add(a.data(), a.data(), b.data(), n, DataType::Float32).ok());
  REQUIRE(one.model->copy(b.data(), a.data(), 4 * n).ok());
  REQUIRE(one.model->checkFinite(b.data(), n, -1).ok());
  const std::vector<double> s = one.finish();
  const double add = std::max(4e-6, 12.0 * n / 3000e9), copy = 1e-6 + 8.0 * n / (8 / 4e-9);
  CHECK(s[0] == Approx(2 * 4e-6 + add + copy + 4e-6));  // zero, checkFinite at the floor
  const sim::GpuCallStats st = one.model->takeCallStats()[int(GpuDesign::Resident)];
  CHECK(st.prims.at("add").kernel.empty());
  CHECK(st.prims.at("zero").kernel.empty());
  CHECK(st.prims.at("checkFinite").kernel.empty());
  CHECK(st.prims.at("copy").kernel == "copy_d2d");
  CHECK(st.prims.at("copy").seconds == Approx(copy));
}

TEST_CASE("sim gpu model calibrated: a replay's per-primitive table adds up", "[sim]") {
  // oktopk at P = 4, 1M per rank, priced from the H200 file: every measured
  // primitive costs at least its calls' floors + bytes / rate (plus PCIe),
  // and the user-buffer ones (accumulate: device memory only) exactly that;
  // the tally sums to the design's stream time.
  sim::SimJob job;
  job.algo = "oktopk";
  job.ranks = 4;
  job.count = 1 << 20;
  job.warmup = 1;
  job.iters = 1;
  job.timeoutS = 60;
  job.model.alphaS = 5e-6;
  job.gpu.enabled = true;
  job.gpu.designs = {GpuDesign::Resident};
  job.gpu.gbps = {100};
  job.gpu.calibration = h200Calibration();
  sim::SimResult r;
  REQUIRE(sim::runSim(job, &r).ok());
  const sim::GpuCallStats& g = r.gpuStats[int(GpuDesign::Resident)];
  double total = 0;
  for (const auto& [name, t] : g.prims) {
    total += t.seconds;
    if (t.kernel.empty()) continue;
    const sim::KernelRate* k = job.gpu.calibration->find(t.kernel.c_str());
    REQUIRE(k != nullptr);
    INFO(name);
    const double model = t.calls * k->floorS + t.deviceBytes / k->bytesPerS;
    CHECK(t.seconds >= model * (1 - 1e-9));
    if (name == "accumulate" || name == "kthLargestAbs") CHECK(t.seconds == Approx(model));
  }
  CHECK(g.prims.count("kthLargestAbs") == 1);
  CHECK(total == Approx(g.kernelS + g.launchS + g.pcieS));
}
