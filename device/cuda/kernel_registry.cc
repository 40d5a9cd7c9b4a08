#include "device/cuda/kernel_registry.h"

#include <cuda_runtime.h>

#include <mutex>
#include <set>

#include "common/log.h"

namespace gradcomp::device::cuda {
namespace {

std::mutex& registryMutex() {
  static std::mutex mu;
  return mu;
}
std::vector<KernelEntry>& registry() {
  static auto* list = new std::vector<KernelEntry>();  // never destroyed: static init order
  return *list;
}

}  // namespace

std::vector<KernelEntry> registeredKernels() {
  std::lock_guard<std::mutex> lock(registryMutex());
  return registry();
}

Status preloadKernels(int device) {
  static std::mutex mu;
  static std::set<int> loaded;
  std::lock_guard<std::mutex> lock(mu);
  if (loaded.count(device)) return Status::Ok();
  const std::vector<KernelEntry> kernels = registeredKernels();
  GC_REQUIRE(!kernels.empty(), Err::Internal,
             "cuda: no kernel was registered (the binary was linked without "
             "-Wl,--wrap=__cudaRegisterFunction): kernels would load lazily mid-call");
  size_t stack = 0;
  for (const KernelEntry& k : kernels) {
    cudaFuncAttributes attr;
    const cudaError_t e = cudaFuncGetAttributes(&attr, k.hostFunction);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return makeStatus(Err::SystemError, "cuda: loading kernel %s on device %d failed: %s",
                        k.deviceName.c_str(), device, cudaGetErrorString(e));
    }
    if (attr.localSizeBytes > stack) stack = attr.localSizeBytes;
  }
  size_t limit = 0;
  if (cudaDeviceGetLimit(&limit, cudaLimitStackSize) == cudaSuccess && stack > limit &&
      cudaDeviceSetLimit(cudaLimitStackSize, stack) != cudaSuccess) {
    (void)cudaGetLastError();
    GC_WARN("cuda: could not raise the stack limit of device %d to %zu bytes", device, stack);
  }
  loaded.insert(device);
  GC_INFO(DEVICE, "cuda: %zu kernels loaded on device %d before any call (largest stack %zu B)",
          kernels.size(), device, stack);
  return Status::Ok();
}

}  // namespace gradcomp::device::cuda

// The linker sends nvcc's registration calls here (--wrap); the runtime still
// gets every one of them.
extern "C" void __real___cudaRegisterFunction(void** fatCubinHandle, const char* hostFun,
                                              char* deviceFun, const char* deviceName,
                                              int threadLimit, uint3* tid, uint3* bid,
                                              dim3* bDim, dim3* gDim, int* wSize);

extern "C" void __wrap___cudaRegisterFunction(void** fatCubinHandle, const char* hostFun,
                                              char* deviceFun, const char* deviceName,
                                              int threadLimit, uint3* tid, uint3* bid,
                                              dim3* bDim, dim3* gDim, int* wSize) {
  {
    using namespace gradcomp::device::cuda;
    std::lock_guard<std::mutex> lock(registryMutex());
    registry().push_back(KernelEntry{hostFun, deviceName ? deviceName : ""});
  }
  __real___cudaRegisterFunction(fatCubinHandle, hostFun, deviceFun, deviceName, threadLimit, tid,
                                bid, bDim, gDim, wSize);
}
