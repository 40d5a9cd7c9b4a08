// The backend the kernel tests (test_gpu_kernels.cc, test_gpu_quant_kernels.cc)
// compare with the CPU reference: the CUDA backend on device 0 in the [gpu]
// binaries, and cpu-device in their CPU builds (GC_HARNESS_CPU_DEVICE,
// tests/CMakeLists.txt), so the harness itself runs in CI and cannot rot
// where no GPU runs it.
#pragma once

#include <catch2/catch.hpp>

#include <memory>

#include "device/backend.h"
#if GC_HARNESS_CPU_DEVICE
#include "device/cpu/cpu_device_backend.h"
#else
#include "device/cuda/cuda_backend.h"
#endif

namespace gradcomp::testing {

inline std::unique_ptr<device::Backend> makeBackendUnderTest() {
#if GC_HARNESS_CPU_DEVICE
  return device::makeCpuDeviceBackend();
#else
  std::unique_ptr<device::CudaBackend> gpu;
  const Status s = device::CudaBackend::create(0, &gpu);
  INFO(s.toString());
  REQUIRE(s.ok());
  return gpu;
#endif
}

// The code of an argument error. The CUDA backend refuses bad arguments at
// the call; cpu-device records every primitive and checks its arguments when
// sync() runs it, so there the error comes from the sync after the call.
inline Err argumentError(device::Backend& be, const Status& atCall) {
#if GC_HARNESS_CPU_DEVICE
  if (atCall.ok()) return be.sync().code();
#endif
  (void)be;
  return atCall.code();
}

}  // namespace gradcomp::testing
