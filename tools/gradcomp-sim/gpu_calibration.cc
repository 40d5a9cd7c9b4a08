#include "tools/gradcomp-sim/gpu_calibration.h"

namespace gradcomp::sim {

double modelBytesPerElement(const std::string& kernel, double kbenchBytesPerElement,
                            double selectPasses) {
  // kbench counts two passes over x for the compactions (count, then
  // compact) and 16 bytes per gathered value; the model counts the contract:
  // x once, 12 bytes per listed entry (capacity n / 100), a 32-byte sector
  // per zeroed or gathered element, and the select's passes.
  const double d = 0.01;
  if (kernel == "compact_above_1pct") return 4 + 12 * d;
  if (kernel == "compact_above_zero_1pct") return 4 + 12 * d + 32 * d;
  if (kernel == "gather_values_1pct") return (8 + 32 + 4) * d;
  if (kernel == "kth_largest_abs_4pass") return 4 * selectPasses;
  return kbenchBytesPerElement;
}

GpuCalibration::GpuCalibration(const kbench::Table& table, const std::string& source,
                               double selectPasses)
    : source_(table.device + " (" + source + ")") {
  for (const kbench::KernelFit& f : kbench::fitTable(table)) {
    KernelRate r;
    r.floorS = f.interceptS;
    r.kbenchBytesPerElement = f.bytesPerElement;
    r.modelBytesPerElement = modelBytesPerElement(f.kernel, f.bytesPerElement, selectPasses);
    r.bytesPerS = r.modelBytesPerElement / f.secondsPerElement;
    rates_[f.kernel] = r;
  }
}

Status GpuCalibration::fromFile(const std::string& path, double selectPasses,
                                std::shared_ptr<const GpuCalibration>* out) {
  kbench::Table t;
  GC_CHECK(kbench::readTable(path, &t));
  *out = std::make_shared<const GpuCalibration>(t, path, selectPasses);
  return Status::Ok();
}

const KernelRate* GpuCalibration::find(const char* kernel) const {
  if (!kernel) return nullptr;
  const auto it = rates_.find(kernel);
  return it == rates_.end() ? nullptr : &it->second;
}

}  // namespace gradcomp::sim
