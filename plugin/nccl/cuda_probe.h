// The two CUDA facts the interposer needs, read through the CUDA driver API
// found at run time (dlopen("libcuda.so.1", RTLD_NOLOAD)), so that no CUDA
// header or library is needed to build or load libgradcomp.so:
// - where a buffer lives (host memory vs device/managed memory);
// - whether a stream is being captured into a CUDA graph.
// When libcuda is not loaded in the process no device memory can exist, so
// every buffer is host memory and no stream is capturing (the test double).
#pragma once

#include <string>

#include "plugin/nccl/nccl_abi.h"

namespace gradcomp::nccl {

enum class MemoryKind { Host, Device, Unknown };

MemoryKind memoryKind(const void* ptr);
// The CUDA device a device pointer belongs to; -1 when unknown.
int deviceOrdinal(const void* ptr);
// True when `stream` is capturing (or its capture is invalidated); errors of
// the query count as capturing, so the call passes through to NCCL.
bool streamCapturing(cudaStream_t stream);
// True when the CUDA driver is loaded in this process.
bool cudaDriverLoaded();
// PCI bus id ("0000:3B:00.0") of CUDA device `ordinal`, or of the calling
// thread's current device for -1; "" when unknown (no driver, no context).
std::string pciBusId(int ordinal = -1);

// Synchronous host<->device copies for the address exchange on GPU
// communicators (driver cuMemcpyHtoD/DtoH, ordered after the legacy stream).
bool copyToDevice(void* dst, const void* src, size_t bytes);
bool copyToHost(void* dst, const void* src, size_t bytes);

}  // namespace gradcomp::nccl
