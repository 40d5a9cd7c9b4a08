// The GPU model's formulas (gpu_model.h has the designs in words).
#include "tools/gradcomp-sim/gpu_clock.h"

#include <algorithm>
#include <set>

#include "common/log.h"
#include "tools/gradcomp-sim/gpu_calibration.h"

namespace gradcomp::sim {

const char* gpuDesignName(GpuDesign d) {
  switch (d) {
    case GpuDesign::Staged: return "staged";
    case GpuDesign::Resident: return "resident";
    case GpuDesign::Persistent: return "persistent";
  }
  return "?";
}

Status parseGpuDesigns(const std::string& text, std::vector<GpuDesign>* out) {
  out->clear();
  if (text == "all") {
    *out = {GpuDesign::Staged, GpuDesign::Resident, GpuDesign::Persistent};
    return Status::Ok();
  }
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string name = text.substr(start, end - start);
    bool found = false;
    for (int d = 0; d < kGpuDesigns; ++d)
      if (name == gpuDesignName(GpuDesign(d))) {
        out->push_back(GpuDesign(d));
        found = true;
      }
    GC_REQUIRE(found, Err::InvalidArgument,
               "--gpu-model: unknown design '%s': expected staged, resident, persistent or all",
               name.c_str());
    start = end + 1;
  }
  return Status::Ok();
}

GpuCallStats& GpuCallStats::operator+=(const GpuCallStats& o) {
  primitives += o.primitives, syncs += o.syncs;
  deviceBytes += o.deviceBytes, pcieBytes += o.pcieBytes, hostBytes += o.hostBytes;
  kernelS += o.kernelS, launchS += o.launchS, pcieS += o.pcieS, syncS += o.syncS;
  hostS += o.hostS;
  for (const auto& [name, t] : o.prims) {
    PrimTally& m = prims[name];
    m.calls += t.calls, m.deviceBytes += t.deviceBytes, m.seconds += t.seconds;
    m.pcieS += t.pcieS;
    if (m.kernel.empty()) m.kernel = t.kernel;
  }
  return *this;
}

GpuCallStats GpuCallStats::scaled(double f) const {
  GpuCallStats s = *this;
  for (double* v : {&s.primitives, &s.syncs, &s.deviceBytes, &s.pcieBytes, &s.hostBytes,
                    &s.kernelS, &s.launchS, &s.pcieS, &s.syncS, &s.hostS})
    *v *= f;
  for (auto& [name, t] : s.prims) t.calls *= f, t.deviceBytes *= f, t.seconds *= f, t.pcieS *= f;
  return s;
}

double stagedHostPassBytes(const std::string& algo) {
  static const std::set<std::string> sparse{"oktopk", "topka", "gtopk", "dsa"};
  static const std::set<std::string> quant{"qsgd", "rbf", "sign", "fft"};
  if (sparse.count(algo)) return 8;
  if (quant.count(algo)) return 20;
  return 0;
}

double ncclRingSeconds(int P, double bytes, double gbps, double alphaS) {
  if (P <= 1) return 0;
  return 2.0 * (P - 1) / P * bytes * 8.0 / (gbps * 1e9) + 2.0 * (P - 1) * alphaS;
}

namespace {
constexpr double kGB = 1e9, kUs = 1e-6;
}  // namespace

GpuClock::Cost GpuClock::price(GpuDesign d, PrimKind kind, const PrimBytes& b,
                               const GpuConstants& c, const GpuCalibration* cal) {
  Cost k;
  GpuCallStats& s = k.stats;
  s.primitives = 1;
  const double launch = c.launchUs * kUs;
  // A measured kernel (resident, persistent): its floor and rate; a copy with
  // a host side is a DMA and stays at the constants.
  const bool hostCopy = kind == PrimKind::Copy && b.host > 0;
  const KernelRate* rate = cal && !hostCopy ? cal->find(b.name.kernel) : nullptr;
  switch (d) {
    case GpuDesign::Resident:
    case GpuDesign::Persistent: {
      const bool resident = d == GpuDesign::Resident;
      s.deviceBytes = b.device;
      s.pcieBytes = b.host + b.scalar;
      // A copy with a host side is a DMA (resident) or mapped stores of the
      // persistent kernel; its device side overlaps the transfer.
      const bool dma = kind == PrimKind::Copy && b.host > 0;
      const double pcie = b.host / ((dma && resident ? c.pcieGBs : c.mappedGBs) * kGB);
      const double kernel = dma ? 0 : b.device / (rate ? rate->bytesPerS : c.hbmGBs * kGB);
      s.kernelS = kernel;
      s.pcieS = pcie;
      if (resident && rate) {
        s.launchS = rate->floorS;  // measured back to back: no constant floor on top
        k.stream = rate->floorS + kernel + pcie;
      } else if (resident) {
        const double floor = std::max(launch, kernel + pcie);
        s.launchS = floor - kernel - pcie;
        k.stream = floor;
      } else {
        s.syncS = c.stepUs * kUs;
        k.stream = kernel + pcie + s.syncS;
      }
      return k;
    }
    case GpuDesign::Staged: {
      const double sync = c.syncUs * kUs;
      if (kind == PrimKind::Kernel) {
        // Every buffer is mapped pinned memory; one stream synchronization
        // after the kernel, another inside a primitive with a scalar result.
        s.pcieBytes = b.device + b.host + b.scalar;
        s.pcieS = (b.device + b.host) / (c.mappedGBs * kGB);
        s.launchS = std::max(0.0, launch - s.pcieS);
        s.syncs = b.scalar > 0 ? 2 : 1;
        s.syncS = s.syncs * sync;
        k.stream = s.pcieS + s.launchS + s.syncS;
        return k;
      }
      // Host loops (fills), pinned-to-pinned runtime copies, and the
      // accumulate's input copy + residual add + allFinite.
      s.hostBytes = kind == PrimKind::Accumulate ? b.stagedHost : b.device + b.host;
      s.hostS = s.hostBytes / (c.hostGBs * kGB);
      s.syncs = kind == PrimKind::Fill ? 0 : 1;  // the runtime copy is synchronous
      s.syncS = s.syncs * sync;
      k.host = s.hostS + s.syncS;
      return k;
    }
  }
  return k;
}

GpuClock::GpuClock(SimTransport& net, const GpuModelOptions& options)
    : net_(net), o_(options), gpuFree_(options.scenarioDesign.size(), 0.0),
      stats_(kGpuDesigns) {}

void GpuClock::primitive(PrimKind kind, const PrimBytes& bytes) {
  pending_ = true;
  Cost cost[kGpuDesigns];
  const GpuCalibration* cal = o_.calibration.get();
  // Copies with a host side are DMAs: their own row, never a kernel's.
  const bool dma = (kind == PrimKind::Copy || kind == PrimKind::Fill) && bytes.host > 0;
  const bool measured = cal && !dma && cal->find(bytes.name.kernel);
  const std::string prim = std::string(bytes.name.prim) + (dma ? " (host)" : "");
  for (int d = 0; d < kGpuDesigns; ++d) {
    cost[d] = price(GpuDesign(d), kind, bytes, o_.c, cal);
    stats_[d] += cost[d].stats;
    PrimTally& t = stats_[d].prims[prim];
    t.calls += 1;
    t.deviceBytes += bytes.device;
    t.seconds += cost[d].stream + cost[d].host;
    t.pcieS += cost[d].stats.pcieS;
    if (measured && d != int(GpuDesign::Staged)) t.kernel = bytes.name.kernel;
  }
  for (size_t s = 0; s < gpuFree_.size(); ++s) {
    const GpuDesign d = o_.scenarioDesign[s];
    const Cost& k = cost[int(d)];
    // The stream starts the primitive when it is idle and the host has
    // issued it; the staged design then waits for it (and runs its loops).
    const double start = std::max(net_.clockOf(int(s)), gpuFree_[s]);
    gpuFree_[s] = start + k.stream;
    if (d == GpuDesign::Staged) {
      gpuFree_[s] += k.host;
      net_.advanceTo(int(s), gpuFree_[s]);
    }
  }
}

void GpuClock::sync() {
  if (!pending_) return;
  pending_ = false;
  const double wait[kGpuDesigns] = {0, o_.c.syncUs * kUs, o_.c.flagUs * kUs};
  for (int d = 1; d < kGpuDesigns; ++d) {  // staged synchronized every primitive already
    stats_[d].syncs += 1;
    stats_[d].syncS += wait[d];
  }
  for (size_t s = 0; s < gpuFree_.size(); ++s) {
    const GpuDesign d = o_.scenarioDesign[s];
    if (d == GpuDesign::Staged) continue;
    net_.advanceTo(int(s), std::max(net_.clockOf(int(s)), gpuFree_[s]) + wait[int(d)]);
  }
}

void GpuClock::beginCall(double userBytes, double elements) {
  std::fill(gpuFree_.begin(), gpuFree_.end(), 0.0);
  pending_ = false;
  userBytes_ = userBytes;
  elements_ = elements;
  // Staged: the user buffer D2H into pinned staging (a synchronous copy).
  const double d2h = userBytes / (o_.c.pcieGBs * kGB) + o_.c.syncUs * kUs;
  GpuCallStats& st = stats_[int(GpuDesign::Staged)];
  st.pcieBytes += userBytes, st.pcieS += d2h - o_.c.syncUs * kUs;
  st.syncs += 1, st.syncS += o_.c.syncUs * kUs;
  for (size_t s = 0; s < gpuFree_.size(); ++s)
    if (o_.scenarioDesign[s] == GpuDesign::Staged) net_.advanceTo(int(s), net_.clockOf(int(s)) + d2h);
}

void GpuClock::endCall() {
  // Staged: the per-call host passes, then the result H2D.
  const double passBytes = o_.stagedHostBytesPerElement * elements_;
  const double pass = passBytes / (o_.c.hostGBs * kGB);
  const double h2d = userBytes_ / (o_.c.pcieGBs * kGB);
  GpuCallStats& st = stats_[int(GpuDesign::Staged)];
  st.hostBytes += passBytes, st.hostS += pass;
  st.pcieBytes += userBytes_, st.pcieS += h2d;
  st.syncs += 1, st.syncS += o_.c.syncUs * kUs;
  for (size_t s = 0; s < gpuFree_.size(); ++s) {
    double t = std::max(net_.clockOf(int(s)), gpuFree_[s]);
    if (o_.scenarioDesign[s] == GpuDesign::Staged) t += pass + h2d + o_.c.syncUs * kUs;
    net_.advanceTo(int(s), t);
  }
  pending_ = false;
}

std::vector<GpuCallStats> GpuClock::take() {
  std::vector<GpuCallStats> out(kGpuDesigns);
  out.swap(stats_);
  return out;
}

}  // namespace gradcomp::sim
