#include "plugin/nccl/cuda_probe.h"

#include <dlfcn.h>

#include <mutex>

namespace gradcomp::nccl {
namespace {

// Driver API values (cuda.h): CUresult CUDA_SUCCESS = 0,
// CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2, CU_MEMORYTYPE_HOST = 1,
// CUDA_ERROR_INVALID_VALUE = 1 (a pointer the driver does not know),
// CU_STREAM_CAPTURE_STATUS_NONE = 0.
constexpr int kCuSuccess = 0;
constexpr int kCuErrorInvalidValue = 1;
constexpr int kCuPointerAttributeMemoryType = 2;
constexpr int kCuPointerAttributeDeviceOrdinal = 9;
constexpr unsigned kCuMemoryTypeHost = 1;
constexpr int kCuStreamCaptureStatusNone = 0;

struct Driver {
  bool loaded = false;
  int (*pointerGetAttribute)(void* data, int attribute, unsigned long long ptr) = nullptr;
  int (*streamIsCapturing)(cudaStream_t stream, int* status) = nullptr;
  int (*memcpyHtoD)(unsigned long long dst, const void* src, size_t bytes) = nullptr;
  int (*memcpyDtoH)(void* dst, unsigned long long src, size_t bytes) = nullptr;
  int (*ctxGetDevice)(int* device) = nullptr;
  int (*deviceGet)(int* device, int ordinal) = nullptr;
  int (*deviceGetPciBusId)(char* id, int len, int device) = nullptr;
};

const Driver& driver() {
  static Driver d;
  static std::once_flag once;
  std::call_once(once, [] {
    void* h = dlopen("libcuda.so.1", RTLD_NOLOAD | RTLD_LAZY);
    if (h == nullptr) return;
    d.loaded = true;
    d.pointerGetAttribute =
        reinterpret_cast<decltype(d.pointerGetAttribute)>(dlsym(h, "cuPointerGetAttribute"));
    d.streamIsCapturing =
        reinterpret_cast<decltype(d.streamIsCapturing)>(dlsym(h, "cuStreamIsCapturing"));
    d.memcpyHtoD = reinterpret_cast<decltype(d.memcpyHtoD)>(dlsym(h, "cuMemcpyHtoD_v2"));
    d.memcpyDtoH = reinterpret_cast<decltype(d.memcpyDtoH)>(dlsym(h, "cuMemcpyDtoH_v2"));
    d.ctxGetDevice = reinterpret_cast<decltype(d.ctxGetDevice)>(dlsym(h, "cuCtxGetDevice"));
    d.deviceGet = reinterpret_cast<decltype(d.deviceGet)>(dlsym(h, "cuDeviceGet"));
    d.deviceGetPciBusId =
        reinterpret_cast<decltype(d.deviceGetPciBusId)>(dlsym(h, "cuDeviceGetPCIBusId"));
  });
  return d;
}

}  // namespace

bool cudaDriverLoaded() { return driver().loaded; }

MemoryKind memoryKind(const void* ptr) {
  const Driver& d = driver();
  if (!d.loaded) return MemoryKind::Host;
  if (d.pointerGetAttribute == nullptr) return MemoryKind::Unknown;
  unsigned type = 0;
  int rc = d.pointerGetAttribute(&type, kCuPointerAttributeMemoryType,
                                 reinterpret_cast<unsigned long long>(ptr));
  if (rc == kCuErrorInvalidValue) return MemoryKind::Host;  // plain malloc'd memory
  if (rc != kCuSuccess) return MemoryKind::Unknown;
  return type == kCuMemoryTypeHost ? MemoryKind::Host : MemoryKind::Device;
}

int deviceOrdinal(const void* ptr) {
  const Driver& d = driver();
  if (!d.loaded || d.pointerGetAttribute == nullptr) return -1;
  int ordinal = -1;
  if (d.pointerGetAttribute(&ordinal, kCuPointerAttributeDeviceOrdinal,
                            reinterpret_cast<unsigned long long>(ptr)) != kCuSuccess)
    return -1;
  return ordinal;
}

bool streamCapturing(cudaStream_t stream) {
  const Driver& d = driver();
  if (!d.loaded) return false;
  if (d.streamIsCapturing == nullptr) return true;
  int status = 0;
  if (d.streamIsCapturing(stream, &status) != kCuSuccess) return true;
  return status != kCuStreamCaptureStatusNone;
}

bool copyToDevice(void* dst, const void* src, size_t bytes) {
  const Driver& d = driver();
  return d.memcpyHtoD != nullptr &&
         d.memcpyHtoD(reinterpret_cast<unsigned long long>(dst), src, bytes) == kCuSuccess;
}

bool copyToHost(void* dst, const void* src, size_t bytes) {
  const Driver& d = driver();
  return d.memcpyDtoH != nullptr &&
         d.memcpyDtoH(dst, reinterpret_cast<unsigned long long>(src), bytes) == kCuSuccess;
}

std::string pciBusId(int ordinal) {
  const Driver& d = driver();
  if (!d.loaded || !d.ctxGetDevice || !d.deviceGet || !d.deviceGetPciBusId) return "";
  int device = 0;  // CUdevice
  const int rc = ordinal < 0 ? d.ctxGetDevice(&device) : d.deviceGet(&device, ordinal);
  if (rc != kCuSuccess) return "";
  char id[32] = {0};
  if (d.deviceGetPciBusId(id, int(sizeof(id)), device) != kCuSuccess) return "";
  return id;
}

}  // namespace gradcomp::nccl
