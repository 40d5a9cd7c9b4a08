// gradcomp-sim --gpu-kbench FILE: the GPU model's kernels at the rates and
// launch floors gradcomp-kbench measured (kbench_table.h), instead of one HBM
// constant and one launch floor for every kernel.
//
// Each kbench kernel is fitted affine in its element count through its
// smallest and largest sizes (kbench::KernelFit): t(n) = floor + n * s. A
// primitive priced as that kernel (gpu_model_backend.cc names it) takes
// floor + device bytes / rate, where rate = the model's own bytes per element
// at kbench's configuration / s (modelBytesPerElement): the model's byte count
// for the primitive's arguments converts to kbench's elements, so a kernel
// measured at 1% density or 4 bits is priced at other densities or widths in
// proportion to its bytes. A primitive without a kbench kernel, or whose
// kernel the file lacks, keeps the constants (GpuConstants::hbmGBs, launchUs);
// the table says which.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "tools/gradcomp-kbench/kbench_table.h"
#include "tools/gradcomp-sim/gpu_model.h"

namespace gradcomp::sim {

struct KernelRate {
  double floorS = 0;     // the fit's intercept: launch to completion of an empty kernel
  double bytesPerS = 0;  // in the model's bytes (modelBytesPerElement)
  double modelBytesPerElement = 0;
  double kbenchBytesPerElement = 0;
};

class GpuCalibration {
 public:
  GpuCalibration(const kbench::Table& table, const std::string& source, double selectPasses);
  static Status fromFile(const std::string& path, double selectPasses,
                         std::shared_ptr<const GpuCalibration>* out);
  // nullptr when the file has no such kernel (or kernel is nullptr).
  const KernelRate* find(const char* kernel) const;
  const std::string& source() const { return source_; }  // "DEVICE (path)"
  const std::map<std::string, KernelRate>& rates() const { return rates_; }

 private:
  std::string source_;
  std::map<std::string, KernelRate> rates_;
};

// The bytes the model counts per element (gpu_model_backend.cc) for the
// primitive kbench times as `kernel`, at kbench's configuration (1% density:
// capacity n / 100; 4 bits; 10-bit RBF; --gpu-select-passes for the radix
// select); kbench's own count where both count the same.
double modelBytesPerElement(const std::string& kernel, double kbenchBytesPerElement,
                            double selectPasses);

}  // namespace gradcomp::sim
