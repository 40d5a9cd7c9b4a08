// Every CUDA kernel linked into this binary, and loading them all before any
// caller's stream is parked (the proxy contract, docs/design.md).
//
// Lazy module loading (CUDA_MODULE_LOADING=LAZY, the default on Linux since
// CUDA 12.2) loads a kernel at its first launch, and loading may synchronize
// the context: a proxy launching a kernel for the first time while the
// caller's stream waits for that proxy deadlocks (the H200 run of 2026-11-28).
// NCCL loads all of its kernels at communicator init for the same reason.
//
// The registry needs no list kept by hand: nvcc's host code announces each
// kernel of each translation unit to the runtime at static initialization
// through __cudaRegisterFunction, which every binary linking this library
// wraps (-Wl,--wrap=__cudaRegisterFunction, device/cuda/CMakeLists.txt) to
// record it here first. A new .cu file or template instantiation is thereby
// registered; tests/test_kernel_registry.cc checks the registry against the
// kernel stubs the built library contains.
// Host header (g++, no CUDA include path needed).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace gradcomp::device::cuda {

struct KernelEntry {
  const void* hostFunction;  // what <<<>>> and cudaFuncGetAttributes take
  std::string deviceName;    // mangled, as in the cubin
};

// In registration order; complete once static initialization is over.
std::vector<KernelEntry> registeredKernels();

// Loads every registered kernel on `device` (cudaFuncGetAttributes on each,
// as NCCL's ncclInitKernelsForDevice), and raises the device's stack limit
// to the largest a kernel needs, so that no later launch loads a module or
// resizes the stack. Once per device and process; the caller makes `device`
// current. Calling thread only: never while a stream waits on this process.
Status preloadKernels(int device);

}  // namespace gradcomp::device::cuda
