// The CUDA backend: device::Backend (the v2 contract of device/backend.h) on
// one CUDA device, every primitive enqueued on the backend's own non-blocking
// stream, nothing waited for until sync(). Host header: compiles with g++
// and needs no CUDA include path.
//
// - Device memory (allocate): blocks of a SlabHeap (device/slab_heap.h) whose
//   slabs are stream-ordered allocations (cudaMallocFromPoolAsync on the
//   backend's stream) from a pool of the device that keeps what it reserved.
//   deallocate returns the block to its free list at once: every later user
//   is enqueued later on the same stream, so reuse is ordered after it.
// - Host memory (allocateHost): mapped pinned blocks of a SlabHeap over
//   cudaHostAlloc; kernels address them by the host pointer (unified
//   addressing). A block given back returns to the free list at the next
//   sync(), after the kernels that may still use it.
// - The proxy contract: slabs grow only in reserve() (the calling thread,
//   before the caller's stream is parked); mid-call growth and FFT plans made
//   mid-call are violations unpark() reports (refused when strict).
// - Scalar results: kernels write them into mapped pinned slots; sync() waits
//   and copies every slot to the host pointer the primitive was given.
// - Errors in the data (malformed payloads, out-of-range indexes): kernels
//   record the first one (by position) in device memory and set a sticky
//   word; every later kernel of the stream finds it and returns at once, so
//   nothing reads or writes past a buffer because an earlier check failed.
//   sync() reports the failing primitive and its `source` rank and clears the
//   word. Copies and fills (cudaMemcpyAsync, cudaMemsetAsync) have host-known
//   extents and run regardless.
// - sync() polls an event with backoff, bounded by GRADCOMP_TIMEOUT_S; it never
//   calls cudaStreamSynchronize, cudaDeviceSynchronize, cudaFree or
//   cudaFreeHost (nor does any primitive).
// Results are bit-identical to the CPU reference (device/cpu) except the FFT
// transforms (cuFFT against FFTW: rounding differs, as the contract allows).
//
// Thread-safe: primitives and sync() from several threads are serialized
// (WAGMA's progress thread shares a backend with its caller); one thread's
// sync() waits for everything enqueued so far. No lock of ours is held
// across a wait for the device or a driver call that may wait for a parked
// stream: sync() waits without the backend's lock, the heaps grow without
// theirs, so reserve() and allocation never wait for a sync in flight, nor a
// primitive for a reserve() stuck in the driver (backend_impl.h).
#pragma once

#include <cstddef>
#include <memory>

#include "device/backend.h"

struct CUstream_st;  // cudaStream_t

namespace gradcomp::device {

namespace cuda {
struct BackendState;  // backend_impl.h
}

class CudaBackend final : public Backend {
 public:
  // A backend with its own non-blocking stream on CUDA device `device`.
  static Status create(int device, std::unique_ptr<CudaBackend>* out);
  // For a thread that runs primitives beside the application's (a proxy):
  // relaxed stream-capture mode, so a graph capture another thread starts in
  // global mode neither fails this thread's calls nor is invalidated by them
  // (as NCCL's proxy thread does).
  static void relaxStreamCaptureOnThisThread();
  // Waits (bounded) for the stream, then releases everything it owns.
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  const char* name() const override { return "cuda"; }
  int deviceOrdinal() const;
  // The owner (a communicator) goes away while objects holding this
  // backend's memory (algorithm state) are released after it: waits for the
  // stream (bounded), frees what the backend holds itself, and from then on
  // returns pinned blocks to the driver as they come back. No primitive may
  // run after; the object must outlive those objects.
  void retire();
  // The backend's stream (cudaStream_t).
  CUstream_st* stream() const;

  void* allocate(size_t bytes) override;
  void deallocate(void* p, size_t bytes) override;
  void* allocateHost(size_t bytes) override;
  void deallocateHost(void* p, size_t bytes) override;

  // The proxy contract (device/backend.h): memory from SlabHeaps that grow
  // only in reserve(); FFT plans from prepareFft (fft_cufft.cu).
  Status reserve(const Reservation& r) override;
  bool reserveWouldGrow(const Reservation& r) const override;
  Status prepareFft(size_t n, size_t chunk) override;
  void park(const std::string& what, bool strict) override;
  void setRefusal(std::function<Status()> refused) override;
  Status unpark(const Reservation& promised, Reservation* drawn) override;
  const char* lastPrimitive() const override;

  Status sync() override;
  Traffic traffic() const override;
  void resetTraffic() override;

  Status add(void* dst, const void* a, const void* b, size_t n, DataType t) override;
  Status divide(void* buf, size_t n, DataType t, int divisor) override;
  Status scale(void* buf, size_t n, DataType t, double factor) override;
  Status copy(void* dst, const void* src, size_t bytes) override;
  Status zero(void* dst, size_t bytes) override;
  Status convert(void* dst, DataType dstType, const void* src, DataType srcType,
                 size_t n) override;
  Status subtract(float* dst, const float* a, const float* b, size_t n) override;
  Status accumulate(float* acc, const void* in, DataType inType, size_t n, bool add,
                    float countThreshold, AccumulateStats* stats) override;

  Status kthLargestAbs(const float* x, size_t n, size_t k, float* threshold,
                       size_t* above) override;
  Status countAbove(const float* x, size_t n, float threshold, size_t* count) override;
  Status compactAbove(float* x, size_t n, float threshold, size_t tieBudget, uint64_t indexBase,
                      uint64_t* idx, float* val, size_t capacity, size_t* count,
                      bool zeroSelected) override;
  Status scatterAdd(float* dst, size_t n, uint64_t base, const uint64_t* idx, const float* val,
                    size_t count) override;
  Status scatterZero(float* dst, size_t n, uint64_t base, const uint64_t* idx,
                     size_t count) override;
  Status countAboveMany(const float* x, size_t n, const float* thresholds, size_t m,
                        size_t* counts) override;
  Status moments(const float* x, size_t n, double* sum, double* sumSquares) override;
  Status gatherValues(float* dst, const float* x, size_t n, const uint64_t* idx,
                      size_t count) override;
  Status gather(uint64_t* dst, const uint64_t* src, size_t srcCount, const uint64_t* pos,
                size_t count) override;
  Status lowerBound(const uint64_t* sorted, size_t n, const uint64_t* keys, size_t nkeys,
                    uint64_t* pos) override;
  Status zeroIntersection(float* x, size_t n, uint64_t base, const uint64_t* a, size_t na,
                          const uint64_t* b, size_t nb) override;
  Status mergeAdd(const uint64_t* aIdx, const float* aVal, size_t na, const uint64_t* bIdx,
                  const float* bVal, size_t nb, uint64_t* outIdx, float* outVal, size_t capacity,
                  size_t* count) override;
  Status intersect(const uint64_t* a, size_t na, const uint64_t* b, size_t nb, uint64_t* out,
                   size_t capacity, size_t* count) override;
  Status checkSubset(const uint64_t* sub, size_t nsub, const uint64_t* set, size_t nset,
                     int source) override;
  Status checkAscending(const uint64_t* idx, size_t n, int source) override;
  Status cooEncode(const uint64_t* idx, const float* val, size_t nnz, uint64_t base,
                   uint64_t count, int indexBytes, void* out) override;
  Status cooDecode(const void* in, size_t nnz, uint64_t base, uint64_t count, int indexBytes,
                   uint64_t* idx, float* val, int source) override;
  Status denseEncode(const uint64_t* idx, const float* val, size_t nnz, uint64_t base,
                     uint64_t count, void* out) override;
  Status denseDecode(const void* in, uint64_t count, uint64_t base, size_t nnz, uint64_t* idx,
                     float* val, int source) override;
  Status denseStreamSize(const uint64_t* idx, size_t count, int indexBytes, size_t* bytes,
                         size_t* blocks) override;
  Status denseStreamEncode(const uint64_t* idx, const float* val, size_t count, uint64_t base,
                           int indexBytes, void* out, size_t bytes) override;
  Status denseStreamDecode(const void* in, size_t bytes, size_t blocks, uint64_t n,
                           uint64_t base, int indexBytes, size_t nnz, uint64_t* idx, float* val,
                           int source) override;
  Status indexEncode(const uint64_t* idx, size_t count, uint64_t base, uint64_t n, int indexBytes,
                     void* out) override;
  Status indexDecode(const void* in, size_t count, uint64_t base, uint64_t n, int indexBytes,
                     uint64_t* idx, int source) override;

  Status absStats(const float* src, size_t n, AbsStats* out) override;
  Status quantizeMaxMin(const float* src, size_t n, const MaxMinSpec& spec, uint64_t indexBase,
                        float* meta, uint8_t* codes, float* residual) override;
  Status dequantizeMaxMin(const float* meta, const uint8_t* codes, size_t n,
                          const MaxMinSpec& spec, float* dst, bool accumulate,
                          int source) override;
  Status rbfEncode(const float* src, size_t n, const RbfSpec& spec, uint8_t* codes,
                   float* residual) override;
  Status rbfDecode(const uint8_t* codes, size_t n, const RbfSpec& spec, float* dst,
                   bool accumulate, int source) override;
  Status rbfEncodeSegments(const float* values, size_t segments, size_t perSegment,
                           size_t lastSegment, int bits, int mantissa, double fixedVmax,
                           uint8_t* out) override;
  Status rbfDecodeSegments(const uint8_t* in, size_t segments, size_t perSegment,
                           size_t lastSegment, int bits, int mantissa, float* values,
                           int source) override;
  Status signPack(const float* src, size_t n, uint8_t* bits) override;
  Status signCountAdd(const uint8_t* countsIn, int inBits, int maxIn, const uint8_t* signBits,
                      size_t n, uint8_t* countsOut, int outBits, int source) override;
  Status signMajority(const uint8_t* counts, int bits, size_t n, int nranks,
                      const SignTies& ties, uint64_t indexBase, uint8_t* decision) override;
  Status signExpand(const uint8_t* bits, size_t n, float pos, float neg, float* dst,
                    int source) override;
  Status blockDot(const float* x, const float* d, size_t n, size_t block, float* out) override;
  Status expandBlocks(const float* d, size_t n, size_t block, const float* scales, float* dst,
                      bool subtractFrom) override;
  Status fftForward(const float* src, size_t n, size_t chunk, float* spectrum) override;
  Status fftInverse(const float* spectrum, size_t n, size_t chunk, float* dst) override;
  Status fftSelectBins(const float* spectrum, size_t n, size_t chunk, double keep,
                       uint8_t* bitmap) override;
  Status fftCheckBitmap(const uint8_t* bitmap, size_t n, size_t chunk, double keep,
                        int source) override;
  Status gatherBins(const float* spectrum, const uint8_t* bitmap, size_t bins,
                    float* packed) override;
  Status scatterAddBins(const float* packed, const uint8_t* bitmap, size_t bins,
                        float* spectrum) override;
  Status checkFinite(const float* x, size_t n, int source) override;
  Status blockqEncode(const float* src, size_t n, const BlockQuantSpec& spec,
                      uint8_t* out) override;
  Status blockqDecode(const uint8_t* in, size_t n, const BlockQuantSpec& spec, float* dst,
                      int source) override;

  // Internal: the kernel files' view of the backend (backend_impl.h).
  cuda::BackendState& state() { return *state_; }

 private:
  explicit CudaBackend(std::unique_ptr<cuda::BackendState> state);
  std::unique_ptr<cuda::BackendState> state_;
};

// Number of visible CUDA devices; 0 when there is none or no usable driver.
int cudaDeviceCount();

// Makes `device` the calling thread's current CUDA device for the scope and
// restores the previous one after (the CUDA executor enqueues on a caller's
// stream and runs algorithms on a proxy thread).
class CurrentDevice {
 public:
  explicit CurrentDevice(int device);
  ~CurrentDevice();
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;
  Status status() const;  // Ok, or why the device could not be made current

 private:
  int previous_ = -1;
  int error_ = 0;  // cudaError_t
  int device_;
};

}  // namespace gradcomp::device
