// The CUDA backend as the algorithms use it (device/backend.h): every
// primitive runs as kernels on a private non-blocking stream and has
// completed when the call returns, so the algorithm's host code may read
// results and hand buffers to the transport right after, exactly as on the
// CPU backend. Scratch comes from CudaBackend::allocate (mapped pinned host
// memory, addressed by the kernels directly). Calls from several threads
// (WAGMA's progress thread beside the proxy) are serialized.
//
// Used by the CUDA executor's proxy thread (plugin/nccl/cuda_executor.cc):
// the caller's stream is parked on the slot's done flag meanwhile, so the
// kernels here never wait on the calling thread and the calling thread
// never waits on them. Host header (g++, no CUDA include path needed).
#pragma once

#include <memory>
#include <mutex>

#include "device/cuda/cuda_backend.h"

namespace gradcomp::device {

class HostOrderedCudaBackend final : public Backend {
 public:
  // A non-blocking stream on CUDA device `device` and a CudaBackend on it.
  static Status create(int device, std::unique_ptr<HostOrderedCudaBackend>* out);
  // The process's backend for `device`, created on first use and never
  // destroyed: algorithm objects keep Buffers from it across calls and may
  // outlive any one communicator (like the CUDA context, it lives as long
  // as the process).
  static Status shared(int device, HostOrderedCudaBackend** out);
  ~HostOrderedCudaBackend() override;
  HostOrderedCudaBackend(const HostOrderedCudaBackend&) = delete;
  HostOrderedCudaBackend& operator=(const HostOrderedCudaBackend&) = delete;

  const char* name() const override { return "cuda"; }
  int deviceOrdinal() const { return device_; }
  void* allocate(size_t bytes) override;
  void deallocate(void* p, size_t bytes) override;

  Status add(void* dst, const void* a, const void* b, size_t n, DataType t) override;
  Status divide(void* buf, size_t n, DataType t, int divisor) override;
  Status copy(void* dst, const void* src, size_t bytes) override;
  Status convert(void* dst, DataType dstType, const void* src, DataType srcType,
                 size_t n) override;
  Status kthLargestAbs(const float* x, size_t n, size_t k, float* threshold) override;
  Status countAbove(const float* x, size_t n, float threshold, size_t* count) override;
  Status compactAbove(const float* x, size_t n, float threshold, size_t tieBudget,
                      uint64_t indexBase, uint64_t* idx, float* val, size_t capacity,
                      size_t* count) override;
  Status scatterAdd(float* dst, size_t n, uint64_t base, const uint64_t* idx, const float* val,
                    size_t count) override;
  Status scatterZero(float* dst, size_t n, uint64_t base, const uint64_t* idx,
                     size_t count) override;
  Status denseStreamSize(const uint64_t* idx, size_t count, int indexBytes, size_t* bytes,
                         size_t* blocks) override;
  Status denseStreamEncode(const uint64_t* idx, const float* val, size_t count, uint64_t base,
                           int indexBytes, void* out, size_t capacity, size_t* bytes) override;
  Status denseStreamDecode(const void* in, size_t bytes, size_t blocks, uint64_t n, uint64_t base,
                           int indexBytes, uint64_t* idx, float* val, size_t capacity,
                           size_t* count) override;
  Status absStats(const float* src, size_t n, AbsStats* out) override;
  Status quantizeMaxMin(const float* src, size_t n, const MaxMinSpec& spec, uint64_t indexBase,
                        float* meta, uint8_t* codes) override;
  Status dequantizeMaxMin(const float* meta, const uint8_t* codes, size_t n,
                          const MaxMinSpec& spec, float* dst, bool accumulate) override;
  Status rbfEncode(const float* src, size_t n, const RbfSpec& spec, uint8_t* codes) override;
  Status rbfDecode(const uint8_t* codes, size_t n, const RbfSpec& spec, float* dst,
                   bool accumulate) override;
  Status signPack(const float* src, size_t n, uint8_t* bits) override;
  Status signCountAdd(const uint8_t* countsIn, int inBits, int maxIn, const uint8_t* signBits,
                      size_t n, uint8_t* countsOut, int outBits) override;
  Status signMajority(const uint8_t* counts, int bits, size_t n, int nranks,
                      uint8_t* decision) override;
  Status signExpand(const uint8_t* bits, size_t n, float pos, float neg, float* dst) override;
  Status fftForward(const float* src, size_t n, size_t chunk, float* spectrum) override;
  Status fftInverse(const float* spectrum, size_t n, size_t chunk, float* dst) override;
  Status fftSelectBins(const float* spectrum, size_t n, size_t chunk, double keep,
                       uint8_t* bitmap) override;
  Status gatherBins(const float* spectrum, const uint8_t* bitmap, size_t bins,
                    float* packed) override;
  Status scatterAddBins(const float* packed, const uint8_t* bitmap, size_t bins,
                        float* spectrum) override;

 private:
  HostOrderedCudaBackend() = default;
  // Makes device_ current on the calling thread (the proxy's, or WAGMA's).
  Status enter();

  int device_ = 0;
  CUstream_st* stream_ = nullptr;
  std::unique_ptr<CudaBackend> inner_;
  std::mutex mu_;
};

}  // namespace gradcomp::device
