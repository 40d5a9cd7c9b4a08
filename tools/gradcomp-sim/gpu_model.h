// gradcomp-sim --gpu-model: a cost model of one GPU per node that prices the
// primitives the simulated ranks really call (docs/results/gpu_model.md).
//
// A GpuModel is a device::Backend decorator: every primitive is forwarded to
// the CPU reference (the schedule runs on real data, so data-dependent
// counts and message sizes are exact), and its modeled GPU time is charged
// to the rank's SimTransport clocks, one per scenario (design x link rate).
// What a primitive costs follows from its arguments: the bytes its contract
// reads and writes (device/backend.h), split by memory space: host memory
// (allocateHost: payloads, control words) crosses PCIe, everything else
// (allocate, the user's buffers) is device memory. Scattered accesses
// (scatters, gathers, binary searches) are priced per 32-byte DRAM sector.
//
// Designs (what a primitive and a sync() cost):
// - Resident (the device-resident data path): primitives run in order on one
//   stream, asynchronously: max(launch, device bytes / HBM) + host bytes /
//   mapped-access bandwidth (kernels address pinned payloads directly; a copy
//   with a host side is a DMA at PCIe bandwidth instead). A sync() with work
//   waits for the stream and costs `syncUs` more (event + wake-up).
// - Staged (v1, docs/results/gpu_model.md): every O(n) buffer in mapped
//   pinned memory, so every primitive's bytes cross PCIe at mapped-access
//   bandwidth, and one stream synchronization per primitive (two for a
//   primitive with a scalar result). What v1 ran as host loops is charged at
//   host memory bandwidth instead: accumulate (input copy + residual add +
//   allFinite, 24 bytes per fp32 element), zero fills, copies and
//   conversions (pinned-to-pinned runtime copies); the user buffer is staged
//   D2H at the start and H2D at the end, and per call the host passes the
//   primitives do not show (stagedHostPassBytes) are added.
// - Persistent (NCCL's shape): one kernel per call walks every step: no
//   launch, bytes at HBM / mapped bandwidth plus `stepUs` per primitive (a
//   grid barrier between dependent steps); a sync() with work is a flag wait
//   in mapped memory (`flagUs`) set by the proxy thread.
//
// Payload scaling: GpuModelOptions::scale multiplies every argument extent
// (a run at count n / s prices count n; scalar results are not scaled).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "device/backend.h"
#include "tools/gradcomp-sim/sim_transport.h"

namespace gradcomp::sim {

enum class GpuDesign { Staged = 0, Resident = 1, Persistent = 2 };
constexpr int kGpuDesigns = 3;
const char* gpuDesignName(GpuDesign d);
// "staged,resident,persistent" or "all".
Status parseGpuDesigns(const std::string& text, std::vector<GpuDesign>* out);

// Defaults: H100 SXM (HBM3) with PCIe Gen5 x16; every one is a flag.
struct GpuConstants {
  double hbmGBs = 3000;     // effective device memory bandwidth, GB/s
  double pcieGBs = 50;      // PCIe DMA (cudaMemcpyAsync, staging), GB/s
  double mappedGBs = 25;    // kernel access to mapped pinned host memory, GB/s
  double hostGBs = 10;      // one host core's memory bandwidth (staged host loops), GB/s
  double launchUs = 4;      // shortest kernel on a stream (launch to completion)
  double syncUs = 15;       // host synchronization with a stream (event + wake-up)
  double flagUs = 1.5;      // persistent: wait on a flag the proxy sets in mapped memory
  double stepUs = 1;        // persistent: grid barrier between dependent steps
  double selectPasses = 4;  // kthLargestAbs reads its input this many times (radix select)
};

// Measured kernel rates (gpu_calibration.h); nullptr in GpuModelOptions:
// every kernel at the constants.
class GpuCalibration;

// One primitive's share of a call (GpuCallStats::prims), for one design.
struct PrimTally {
  double calls = 0;
  double deviceBytes = 0;
  double seconds = 0;   // its time on the stream (staged: also its host loops)
  double pcieS = 0;     // of which host memory across PCIe (mapped access, DMA)
  std::string kernel;   // the kbench kernel it was priced as; "" at the constants
};

// Per call and rank, for one design: what the primitives cost (sums, not the
// critical path: GPU work overlaps the network).
struct GpuCallStats {
  double primitives = 0;
  double syncs = 0;        // host synchronizations (staged: per primitive) or flag waits
  double deviceBytes = 0;  // read + written in device memory
  double pcieBytes = 0;    // crossing PCIe (host arguments, mapped buffers, staging)
  double hostBytes = 0;    // staged host loops
  double kernelS = 0;      // device bytes at HBM bandwidth
  double launchS = 0;      // launch floors beyond the kernels' own time
  double pcieS = 0;        // PCIe transfers (staged: the mapped kernels)
  double syncS = 0;        // synchronizations / flag waits / grid barriers
  double hostS = 0;        // staged host loops
  std::map<std::string, PrimTally> prims;  // by primitive name (Backend's method)
  GpuCallStats& operator+=(const GpuCallStats& o);
  GpuCallStats scaled(double f) const;
};

struct GpuModelOptions {
  GpuConstants c;
  std::vector<GpuDesign> scenarioDesign;  // the design of each transport scenario
  double scale = 1;                       // payload scaling (see above)
  double stagedHostBytesPerElement = 0;   // staged: per-call host passes (stagedHostPassBytes)
  bool excludeCpu = false;  // tell the transport the reference compute's CPU time (compute-scale)
  // Resident and persistent kernels at measured rates and launch floors
  // (--gpu-kbench); kernels it lacks, and copies with a host side, at `c`.
  std::shared_ptr<const GpuCalibration> calibration;
};

// Staged: bytes per element of the per-call host loops v1 ran that have no
// primitive in the device-resident schedules (error-feedback store: sparse
// 8, read acc + write residual; quantized 12 + 8, residual = acc - sent
// and the output copy). 0 for other algorithms.
double stagedHostPassBytes(const std::string& algo);

class GpuModel : public device::Backend {
 public:
  // Start of a call of `count` elements of `dtype` (after the transport's
  // beginCall): the stream is idle; staged stages the user buffer D2H.
  virtual void beginCall(size_t count, DataType dtype) = 0;
  // End of the call (before endCallAll): every clock waits for the stream;
  // staged adds the H2D staging and its host passes.
  virtual void endCall() = 0;
  // This call's costs per design (indexed by GpuDesign), reset.
  virtual std::vector<GpuCallStats> takeCallStats() = 0;
};

// One per rank; `net` is the rank's transport (its clocks are charged).
std::unique_ptr<GpuModel> makeGpuModel(SimTransport& net, const GpuModelOptions& options);

// NCCL's ring allreduce on one GPU per node: 2 (P - 1) / P * bytes / rate +
// 2 (P - 1) * alpha (bandwidth-bound, kernels overlapped with the network).
double ncclRingSeconds(int P, double bytes, double gbps, double alphaS);

}  // namespace gradcomp::sim
