#include "tools/gradcomp-sim/gpu_table.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <string>

#include "common/log.h"
#include "tools/gradcomp-sim/gpu_calibration.h"

namespace gradcomp::sim {
namespace {

bool quantized(const std::string& algo) {
  static const std::set<std::string> q{"qsgd", "rbf", "sign", "fft"};
  return q.count(algo) > 0;
}

// Bytes one simulated rank holds per element (measured peak RSS / (P n) at
// P = 64, rounded up): the sparse frame's accumulator, result, region and
// lists; the quantized frame's payloads; dense's host staging.
double bytesPerElement(const std::string& algo) {
  if (quantized(algo)) return 16;
  if (algo == "dense") return 20;
  return 32;
}

// The dense schedule a count gets: recursive doubling up to
// GRADCOMP_DENSE_RD_MAX_BYTES, else the ring with clamp(chunk / 64 KiB, 1, 4)
// segments per chunk (segmentsFor in algorithms/dense/ring.cc).
int denseShape(uint64_t count, int P, const param::Overrides& config) {
  int64_t rdMax = 64 << 10;
  (void)config.getInt(param::Id::DENSE_RD_MAX_BYTES, &rdMax);
  if (4 * count <= uint64_t(rdMax)) return 0;
  const uint64_t chunkBytes = 4 * ((count + uint64_t(P) - 1) / uint64_t(P));
  return int(std::clamp<uint64_t>(chunkBytes / (64 << 10), 1, 4));
}

struct Replay {
  std::string algo;
  int P = 0;
  size_t runCount = 0;
  double scale = 1;
  bool aligned = true;
  SimResult r;
};

void printHeader(const GpuTableSpec& s) {
  const GpuConstants& c = s.base.gpu.constants;
  std::printf("# gradcomp-sim --gpu-model: %llu fp32 elements (%.1f MiB) per rank, alpha %g us; "
              "HBM %g GB/s, PCIe %g GB/s DMA / %g GB/s mapped, host %g GB/s, launch %g us, "
              "sync %g us, flag %g us, step %g us, select passes %g; %d warm-up + %d timed "
              "calls, seed %llu\n",
              (unsigned long long)s.count, double(s.count) * 4 / (1 << 20),
              s.base.model.alphaS * 1e6, c.hbmGBs, c.pcieGBs, c.mappedGBs, c.hostGBs, c.launchUs,
              c.syncUs, c.flagUs, c.stepUs, c.selectPasses, s.base.warmup, s.base.iters,
              (unsigned long long)s.base.seed);
  if (const GpuCalibration* cal = s.base.gpu.calibration.get()) {
    std::printf("# kernels at the floors and rates measured on %s (resident, persistent):\n",
                cal->source().c_str());
    for (const auto& [name, r] : cal->rates())
      std::printf("#   %-28s floor %7.2f us, %8.1f GB/s (%.4g model bytes per element)\n",
                  name.c_str(), r.floorS * 1e6, r.bytesPerS / 1e9, r.modelBytesPerElement);
  }
}

// The design whose per-primitive breakdown is printed: resident when run.
GpuDesign breakdownDesign(const GpuTableSpec& s) {
  for (GpuDesign d : s.base.gpu.designs)
    if (d == GpuDesign::Resident) return d;
  return s.base.gpu.designs.front();
}

// Per replay: where the GPU's time goes, by primitive, largest first.
void printPrimitives(const GpuTableSpec& s, const std::vector<Replay>& replays) {
  const GpuDesign d = breakdownDesign(s);
  std::vector<std::string> unmeasured;
  for (const Replay& r : replays) {
    const GpuCallStats& g = r.r.gpuStats[int(d)];
    std::vector<std::pair<std::string, PrimTally>> rows(g.prims.begin(), g.prims.end());
    std::sort(rows.begin(), rows.end(),
              [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
    double total = 0;
    for (const auto& row : rows) total += row.second.seconds;
    std::printf("\n%s, P = %d, %s: %.3f ms of GPU stream time per call and rank\n\n"
                "| primitive | priced as | calls | device MB | ms | of which PCIe ms | share |\n"
                "|---|---|--:|--:|--:|--:|--:|\n",
                r.algo.c_str(), r.P, gpuDesignName(d), total * 1e3);
    for (const auto& [name, t] : rows) {
      const bool measured = !t.kernel.empty();
      const bool dma = name.find(" (host)") != std::string::npos;  // gpu_clock.cc
      std::printf("| %s | %s | %.1f | %.1f | %.3f | %.3f | %.1f%% |\n", name.c_str(),
                  measured ? t.kernel.c_str() : dma ? "PCIe DMA" : "constants", t.calls,
                  t.deviceBytes / 1e6, t.seconds * 1e3, t.pcieS * 1e3,
                  total > 0 ? 100 * t.seconds / total : 0.0);
      if (!measured && !dma && s.base.gpu.calibration &&
          std::find(unmeasured.begin(), unmeasured.end(), name) == unmeasured.end())
        unmeasured.push_back(name);
    }
  }
  if (!unmeasured.empty()) {
    std::printf("\nNote: no kernel of the kbench file measures these; priced at the constants "
                "(HBM %g GB/s, launch %g us):",
                s.base.gpu.constants.hbmGBs, s.base.gpu.constants.launchUs);
    for (const std::string& n : unmeasured) std::printf(" %s", n.c_str());
    std::printf("\n");
  }
}

// ms per call: rows algorithm x design (+ NCCL ring), columns P x rate.
void printTimes(const GpuTableSpec& s, const std::vector<Replay>& replays) {
  const std::vector<double>& rates = s.base.gpu.gbps;
  std::printf("\n| algorithm | design |");
  for (int P : s.ranks)
    for (double g : rates) std::printf(" P=%d %gG |", P, g);
  std::printf("\n|---|---|");
  for (size_t i = 0; i < s.ranks.size() * rates.size(); ++i) std::printf("--:|");
  std::printf("\n");
  for (const std::string& a : s.algos)
    for (size_t d = 0; d < s.base.gpu.designs.size(); ++d) {
      std::printf("| %s | %s |", a.c_str(), gpuDesignName(s.base.gpu.designs[d]));
      for (int P : s.ranks) {
        const Replay* rp = nullptr;
        for (const Replay& r : replays)
          if (r.algo == a && r.P == P) rp = &r;
        for (size_t j = 0; j < rates.size(); ++j) {
          if (!rp) std::printf(" - |");
          else std::printf(" %.3g%s |", rp->r.scenarioTimeS[d * rates.size() + j] * 1e3,
                           rp->aligned ? "" : "*");
        }
      }
      std::printf("\n");
    }
  std::printf("| nccl ring | - |");
  for (int P : s.ranks)
    for (double g : rates)
      std::printf(" %.3g |", ncclRingSeconds(P, 4.0 * s.count, g, s.base.model.alphaS) * 1e3);
  std::printf("\n");
}

// Per replay and design: what the primitives cost per call and rank.
void printBreakdown(const GpuTableSpec& s, const std::vector<Replay>& replays) {
  std::printf("\n| algorithm | P | run count | design | primitives | syncs | device MB | "
              "PCIe MB | host MB | kernel ms | launch ms | PCIe ms | sync ms | host ms | "
              "wire MB |\n|---|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
  for (const Replay& r : replays)
    for (GpuDesign d : s.base.gpu.designs) {
      const GpuCallStats& g = r.r.gpuStats[int(d)];
      std::printf("| %s | %d | %zu%s | %s | %.0f | %.0f | %.1f | %.1f | %.1f | %.3f | %.3f | "
                  "%.3f | %.3f | %.3f | %.2f |\n",
                  r.algo.c_str(), r.P, r.runCount, r.aligned ? "" : "*", gpuDesignName(d),
                  g.primitives, g.syncs, g.deviceBytes / 1e6, g.pcieBytes / 1e6,
                  g.hostBytes / 1e6, g.kernelS * 1e3, g.launchS * 1e3, g.pcieS * 1e3,
                  g.syncS * 1e3, g.hostS * 1e3, r.r.chargedSentMax / 1e6);
    }
}

// {"primitive": {"kernel": ..., "calls": ..., "device_bytes": ..., "ms": ...}, ...}
std::string primsJson(const GpuCallStats& g) {
  std::string out = "{";
  char buf[256];
  for (const auto& [name, t] : g.prims) {
    std::snprintf(buf, sizeof buf,
                  "%s\"%s\": {\"kernel\": \"%s\", \"calls\": %.1f, \"device_bytes\": %.0f, "
                  "\"ms\": %.6g, \"pcie_ms\": %.6g}",
                  out.size() > 1 ? ", " : "", name.c_str(), t.kernel.c_str(), t.calls,
                  t.deviceBytes, t.seconds * 1e3, t.pcieS * 1e3);
    out += buf;
  }
  return out + "}";
}

void writeJson(const GpuTableSpec& s, const std::vector<Replay>& replays) {
  FILE* out = std::fopen(s.jsonPath.c_str(), "w");
  if (!out) {
    GC_WARN("cannot write --json %s", s.jsonPath.c_str());
    return;
  }
  const GpuConstants& c = s.base.gpu.constants;
  std::fprintf(out, "{\"tool\": \"gradcomp-sim --gpu-model\", \"count\": %llu, \"alpha_us\": %g, "
               "\"hbm_gbs\": %g, \"pcie_gbs\": %g, \"mapped_gbs\": %g, \"host_gbs\": %g, "
               "\"launch_us\": %g, \"sync_us\": %g, \"flag_us\": %g, \"step_us\": %g, "
               "\"select_passes\": %g, \"kbench\": \"%s\", \"warmup\": %d, \"iters\": %d, "
               "\"seed\": %llu,\n \"rows\": [\n",
               (unsigned long long)s.count, s.base.model.alphaS * 1e6, c.hbmGBs, c.pcieGBs,
               c.mappedGBs, c.hostGBs, c.launchUs, c.syncUs, c.flagUs, c.stepUs, c.selectPasses,
               s.base.gpu.calibration ? s.base.gpu.calibration->source().c_str() : "",
               s.base.warmup, s.base.iters, (unsigned long long)s.base.seed);
  const std::vector<double>& rates = s.base.gpu.gbps;
  bool first = true;
  for (const Replay& r : replays)
    for (size_t d = 0; d < s.base.gpu.designs.size(); ++d) {
      const GpuDesign design = s.base.gpu.designs[d];
      const GpuCallStats& g = r.r.gpuStats[int(design)];
      for (size_t j = 0; j < rates.size(); ++j) {
        std::fprintf(out, "%s  {\"algo\": \"%s\", \"design\": \"%s\", \"P\": %d, \"gbps\": %g, "
                     "\"time_ms\": %.6g, \"run_count\": %zu, \"scale\": %.6g, \"aligned\": %s, "
                     "\"primitives\": %.1f, \"syncs\": %.1f, \"device_bytes\": %.0f, "
                     "\"pcie_bytes\": %.0f, \"host_bytes\": %.0f, \"kernel_ms\": %.6g, "
                     "\"launch_ms\": %.6g, \"pcie_ms\": %.6g, \"sync_ms\": %.6g, "
                     "\"host_ms\": %.6g, \"wire_bytes_max\": %.0f, \"msgs_max\": %.1f, "
                     "\"wall_s\": %.1f, \"prims\": %s}",
                     first ? "" : ",\n", r.algo.c_str(), gpuDesignName(design), r.P, rates[j],
                     r.r.scenarioTimeS[d * rates.size() + j] * 1e3, r.runCount, r.scale,
                     r.aligned ? "true" : "false", g.primitives, g.syncs, g.deviceBytes,
                     g.pcieBytes, g.hostBytes, g.kernelS * 1e3, g.launchS * 1e3, g.pcieS * 1e3,
                     g.syncS * 1e3, g.hostS * 1e3, r.r.chargedSentMax, r.r.msgsMax, r.r.wallS,
                     primsJson(g).c_str());
        first = false;
      }
    }
  for (int P : s.ranks)
    for (double g : rates)
      std::fprintf(out, ",\n  {\"algo\": \"nccl ring\", \"design\": \"-\", \"P\": %d, \"gbps\": "
                   "%g, \"time_ms\": %.6g}",
                   P, g, ncclRingSeconds(P, 4.0 * s.count, g, s.base.model.alphaS) * 1e3);
  std::fprintf(out, "\n ]}\n");
  std::fclose(out);
}

}  // namespace

size_t gpuRunCount(const std::string& algo, int P, uint64_t count, uint64_t memBudget,
                   const param::Overrides& config, bool* aligned) {
  uint64_t align = 1024;
  if (quantized(algo)) {
    int64_t bucket = 512;
    (void)config.getInt(param::Id::BUCKET, &bucket);
    align = uint64_t(P) * uint64_t(bucket);
  }
  const double perElement = double(P) * bytesPerElement(algo);
  for (uint64_t m = 1; m <= count / align; ++m) {
    if (count % m || (count / m) % align) continue;
    if (double(count / m) * perElement <= double(memBudget)) {
      // Dense: the same schedule (ring segments) as the full count, or unaligned.
      *aligned = algo != "dense" ||
                 denseShape(count / m, P, config) == denseShape(count, P, config);
      return size_t(count / m);
    }
  }
  *aligned = false;
  uint64_t c = count;
  while (c > 1024 && double(c) * perElement > double(memBudget)) c /= 2;
  return c >= 1024 ? size_t(c / 1024 * 1024) : size_t(c);
}

int runGpuTable(const GpuTableSpec& spec) {
  printHeader(spec);
  std::vector<Replay> replays;
  int failures = 0;
  for (const std::string& a : spec.algos)
    for (int P : spec.ranks) {
      Replay rp;
      rp.algo = a;
      rp.P = P;
      rp.runCount = gpuRunCount(a, P, spec.count, spec.memBudget, spec.base.config, &rp.aligned);
      rp.scale = double(spec.count) / double(rp.runCount);
      SimJob job = spec.base;
      job.algo = a;
      job.ranks = P;
      job.count = rp.runCount;
      job.gpu.enabled = true;
      job.gpu.scale = rp.scale;
      const Status s = runSim(job, &rp.r);
      if (!s.ok()) {
        std::fprintf(stderr, "gradcomp-sim: %s at P=%d: %s\n", a.c_str(), P,
                     s.toString().c_str());
        ++failures;
        continue;
      }
      std::printf("# %s P=%d: ran %zu elements per rank (x %.4g%s), %.1f s\n", a.c_str(), P,
                  rp.runCount, rp.scale, rp.aligned ? "" : ", unaligned", rp.r.wallS);
      std::fflush(stdout);
      replays.push_back(rp);
      if (!spec.jsonPath.empty()) writeJson(spec, replays);  // partial results survive
    }
  printTimes(spec, replays);
  printBreakdown(spec, replays);
  printPrimitives(spec, replays);
  return failures ? 1 : 0;
}

}  // namespace gradcomp::sim
