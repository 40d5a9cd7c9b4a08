// The CUDA backend: device::Backend on device pointers, every primitive a
// kernel (or cudaMemcpyAsync) enqueued on the stream given at construction.
// Host header: compiles with g++ and needs no CUDA include path (the stream
// is the runtime's opaque CUstream_st*, i.e. cudaStream_t).
//
// Semantics are those of the CPU reference (device/cpu/element_traits.h):
// 16-bit floats computed in fp32 and rounded once to nearest even, divide in
// fp64 rounded once, integer add wraps, integer divide truncates, conversions
// round once (to integers: nearest even, saturating, NaN -> 0).
//
// Calls are asynchronous with respect to the host: a returned Ok means the
// work was enqueued (launch errors are reported); call synchronize() before
// the host reads results or hands the buffers to a transport. Primitives with
// a host result (counts, thresholds, sizes, verdicts) synchronize themselves.
// A backend serves one thread at a time (it owns its workspace).
#pragma once

#include <cstddef>

#include "device/backend.h"

struct CUstream_st;

namespace gradcomp::device {

// Kernel families, for workspace sizing (each reports what it needs for n
// elements; a backend is created once per communicator and its workspace
// grows to the largest call, never per call).
enum class KernelFamily {
  Select,       // kthLargestAbs, countAbove, compactAbove
  Scatter,      // scatterAdd, scatterZero
  DenseStream,  // denseStreamSize/Encode/Decode (n = COO entries or body bytes / 4)
  Quant,        // absStats, max-min, RBF, sign
  Fft,          // fftForward/Inverse/SelectBins, gatherBins, scatterAddBins
};

class CudaBackend final : public Backend {
 public:
  // stream: nullptr is the legacy default stream. Not owned.
  explicit CudaBackend(CUstream_st* stream) : stream_(stream) {}
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;
  const char* name() const override { return "cuda"; }
  CUstream_st* stream() const { return stream_; }

  // Algorithm scratch (device::Buffer): mapped pinned host memory from a
  // per-backend pool of power-of-two classes, so a call's buffers are reused
  // by the next call instead of cudaHostAlloc'd again (and cudaFreeHost,
  // which may synchronize the device, runs only at destruction). Kernels
  // address it by the same pointer (UVA); UCX sends from it.
  void* allocate(size_t bytes) override;
  void deallocate(void* p, size_t bytes) override;

  // Device workspace bytes `family` needs for n elements.
  static size_t workspaceBytes(KernelFamily family, size_t n);
  // Allocates the workspace for calls of up to n elements of every family now
  // (otherwise it grows on first use).
  Status reserve(size_t n);

  Status add(void* dst, const void* a, const void* b, size_t n, DataType t) override;
  Status divide(void* buf, size_t n, DataType t, int divisor) override;
  Status copy(void* dst, const void* src, size_t bytes) override;
  Status convert(void* dst, DataType dstType, const void* src, DataType srcType,
                 size_t n) override;

  // Primitives that return a value to the host (a threshold, a count, a
  // size, a validation verdict) synchronize the stream before returning;
  // the others only enqueue. Contracts: device/backend.h.
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

  // ---- Fused error-feedback primitives (CUDA only) ----
  // acc[i] = acc[i] + grad[i] in fp32 (grad: Float32, Float16 or BFloat16).
  Status accumulateGradient(float* acc, const void* grad, DataType gradType, size_t n);
  // compactAbove, and every selected x[i] becomes +0.0 in the same pass: the
  // residual update of top-k error feedback without a separate scatterZero.
  Status compactAboveAndZero(float* x, size_t n, float threshold, size_t tieBudget,
                             uint64_t indexBase, uint64_t* idx, float* val, size_t capacity,
                             size_t* count);

  // Waits for everything enqueued on the stream; reports asynchronous errors.
  Status synchronize();

  // Internal (the kernel files): device scratch of at least `bytes`, and the
  // results words (kResultWords, device) with their host copy.
  static constexpr int kResultWords = 16;
  Status scratch(size_t bytes, void** out);
  Status resetResults();  // enqueues: words = 0, first-bad words = ~0 (see kernel files)
  Status fetchResults(uint64_t* host);  // enqueues the copy and synchronizes
  uint64_t* deviceResults() const { return dres_; }
  void* fftPlans() { return fftPlans_; }
  void setFftPlans(void* p) { fftPlans_ = p; }

 private:
  Status compact(float* x, size_t n, float threshold, size_t tieBudget, uint64_t indexBase,
                 uint64_t* idx, float* val, size_t capacity, size_t* count, bool zero);

  CUstream_st* stream_;
  void* ws_ = nullptr;
  size_t wsBytes_ = 0;
  uint64_t* dres_ = nullptr;  // kResultWords, device
  uint64_t* hres_ = nullptr;  // kResultWords, pinned host
  void* fftPlans_ = nullptr;  // plan cache (fft_cufft.cu)
  void* pinnedPool_ = nullptr;  // PinnedPool (pinned_pool.cu)
};

// Releases a PinnedPool (called by ~CudaBackend).
void destroyPinnedPool(void* pool);

// Releases the plan cache of fft_cufft.cu (called by ~CudaBackend).
void destroyFftPlans(void* plans);

// Number of visible CUDA devices; 0 when there is none or no usable driver.
int cudaDeviceCount();

}  // namespace gradcomp::device
