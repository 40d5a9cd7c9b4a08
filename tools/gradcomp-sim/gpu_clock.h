// Internal to the GPU model (gpu_model.h): prices one primitive under every
// design from the bytes it moves and charges it to the rank's scenario
// clocks. The backend decorator (gpu_model_backend.cc) only measures
// arguments; every formula of the model is in gpu_clock.cc.
#pragma once

#include <vector>

#include "tools/gradcomp-sim/gpu_model.h"

namespace gradcomp::sim {

// How a primitive runs, as far as the designs price it differently.
enum class PrimKind {
  Kernel,      // a kernel over its arguments
  Copy,        // copy / convert: a DMA when a side is host memory
  Fill,        // zero: staged ran it as a host loop
  Accumulate,  // the error-feedback load: staged ran it as host loops
};

// The primitive (Backend's method name) and the gradcomp-kbench kernel that
// measures it (nullptr: none does; priced at the constants).
struct PrimName {
  const char* prim = "";
  const char* kernel = nullptr;
};

struct PrimBytes {
  PrimName name;
  double device = 0;      // bytes read + written in device memory (scaled)
  double host = 0;        // bytes read + written in host memory (scaled)
  double scalar = 0;      // scalar results read back (not scaled)
  double stagedHost = 0;  // Accumulate: what v1's host loops moved (scaled)
};

class GpuClock {
 public:
  GpuClock(SimTransport& net, const GpuModelOptions& options);
  void primitive(PrimKind kind, const PrimBytes& bytes);
  // Backend::sync(): charged only when a primitive ran since the last one.
  void sync();
  // The call's buffer: userBytes = count * dtype size, elements = count
  // (both scaled).
  void beginCall(double userBytes, double elements);
  void endCall();
  std::vector<GpuCallStats> take();

  // One primitive under one design: stream time, host time, statistics.
  struct Cost {
    double stream = 0;  // on the GPU stream (staged: synchronous, host waits)
    double host = 0;    // on the host (staged host loops)
    GpuCallStats stats;
  };
  // `cal` may be nullptr (every kernel at the constants).
  static Cost price(GpuDesign d, PrimKind kind, const PrimBytes& b, const GpuConstants& c,
                    const GpuCalibration* cal = nullptr);

 private:
  SimTransport& net_;
  const GpuModelOptions o_;
  std::vector<double> gpuFree_;  // per scenario: when the stream is idle
  std::vector<GpuCallStats> stats_;
  bool pending_ = false;
  double userBytes_ = 0, elements_ = 0;
};

}  // namespace gradcomp::sim
