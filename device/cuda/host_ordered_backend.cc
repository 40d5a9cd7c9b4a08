#include "device/cuda/host_ordered_backend.h"

#include <cuda_runtime.h>

#include <map>

#include "common/log.h"

namespace gradcomp::device {

Status HostOrderedCudaBackend::create(int device, std::unique_ptr<HostOrderedCudaBackend>* out) {
  std::unique_ptr<HostOrderedCudaBackend> b(new HostOrderedCudaBackend);
  b->device_ = device;
  GC_CHECK(b->enter());
  cudaStream_t s = nullptr;
  const cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  GC_REQUIRE(e == cudaSuccess, Err::SystemError, "cuda executor: stream on device %d: %s", device,
             cudaGetErrorString(e));
  b->stream_ = s;
  b->inner_ = std::make_unique<CudaBackend>(s);
  *out = std::move(b);
  return Status::Ok();
}

Status HostOrderedCudaBackend::shared(int device, HostOrderedCudaBackend** out) {
  static std::mutex mu;
  static std::map<int, HostOrderedCudaBackend*> backends;  // never freed, see the header
  std::lock_guard<std::mutex> lock(mu);
  auto it = backends.find(device);
  if (it == backends.end()) {
    std::unique_ptr<HostOrderedCudaBackend> b;
    GC_CHECK(create(device, &b));
    GC_INFO(DEVICE,
            "cuda executor: backend for device %d (kernels on a private stream, "
            "scratch in mapped pinned memory)",
            device);
    it = backends.emplace(device, b.release()).first;
  }
  *out = it->second;
  return Status::Ok();
}

HostOrderedCudaBackend::~HostOrderedCudaBackend() {
  if (!enter().ok()) return;
  if (stream_) cudaStreamSynchronize(stream_);
  inner_.reset();  // workspace, plans and the pinned pool
  if (stream_) cudaStreamDestroy(stream_);
}

Status HostOrderedCudaBackend::enter() {
  const cudaError_t e = cudaSetDevice(device_);
  GC_REQUIRE(e == cudaSuccess, Err::SystemError, "cuda executor: cudaSetDevice(%d): %s", device_,
             cudaGetErrorString(e));
  return Status::Ok();
}

void* HostOrderedCudaBackend::allocate(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  return enter().ok() ? inner_->allocate(bytes) : nullptr;
}

void HostOrderedCudaBackend::deallocate(void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  inner_->deallocate(p, bytes);
}

// Enqueue on the private stream, then wait for it: the primitive's effects
// are visible to host code when this returns (device/backend.h contract).
#define GC_HOST_ORDERED(call)              \
  do {                                     \
    std::lock_guard<std::mutex> lock(mu_); \
    GC_CHECK(enter());                     \
    GC_CHECK(inner_->call);                \
    return inner_->synchronize();          \
  } while (0)

Status HostOrderedCudaBackend::add(void* dst, const void* a, const void* b, size_t n, DataType t) {
  GC_HOST_ORDERED(add(dst, a, b, n, t));
}

Status HostOrderedCudaBackend::divide(void* buf, size_t n, DataType t, int divisor) {
  GC_HOST_ORDERED(divide(buf, n, t, divisor));
}

Status HostOrderedCudaBackend::copy(void* dst, const void* src, size_t bytes) {
  GC_HOST_ORDERED(copy(dst, src, bytes));
}

Status HostOrderedCudaBackend::convert(void* dst, DataType dstType, const void* src,
                                       DataType srcType, size_t n) {
  GC_HOST_ORDERED(convert(dst, dstType, src, srcType, n));
}

Status HostOrderedCudaBackend::kthLargestAbs(const float* x, size_t n, size_t k, float* threshold) {
  GC_HOST_ORDERED(kthLargestAbs(x, n, k, threshold));
}

Status HostOrderedCudaBackend::countAbove(const float* x, size_t n, float threshold,
                                          size_t* count) {
  GC_HOST_ORDERED(countAbove(x, n, threshold, count));
}

Status HostOrderedCudaBackend::compactAbove(const float* x, size_t n, float threshold,
                                            size_t tieBudget, uint64_t indexBase, uint64_t* idx,
                                            float* val, size_t capacity, size_t* count) {
  GC_HOST_ORDERED(compactAbove(x, n, threshold, tieBudget, indexBase, idx, val, capacity, count));
}

Status HostOrderedCudaBackend::scatterAdd(float* dst, size_t n, uint64_t base, const uint64_t* idx,
                                          const float* val, size_t count) {
  GC_HOST_ORDERED(scatterAdd(dst, n, base, idx, val, count));
}

Status HostOrderedCudaBackend::scatterZero(float* dst, size_t n, uint64_t base, const uint64_t* idx,
                                           size_t count) {
  GC_HOST_ORDERED(scatterZero(dst, n, base, idx, count));
}

Status HostOrderedCudaBackend::denseStreamSize(const uint64_t* idx, size_t count, int indexBytes,
                                               size_t* bytes, size_t* blocks) {
  GC_HOST_ORDERED(denseStreamSize(idx, count, indexBytes, bytes, blocks));
}

Status HostOrderedCudaBackend::denseStreamEncode(const uint64_t* idx, const float* val,
                                                 size_t count, uint64_t base, int indexBytes,
                                                 void* out, size_t capacity, size_t* bytes) {
  GC_HOST_ORDERED(denseStreamEncode(idx, val, count, base, indexBytes, out, capacity, bytes));
}

Status HostOrderedCudaBackend::denseStreamDecode(const void* in, size_t bytes, size_t blocks,
                                                 uint64_t n, uint64_t base, int indexBytes,
                                                 uint64_t* idx, float* val, size_t capacity,
                                                 size_t* count) {
  GC_HOST_ORDERED(
      denseStreamDecode(in, bytes, blocks, n, base, indexBytes, idx, val, capacity, count));
}

Status HostOrderedCudaBackend::absStats(const float* src, size_t n, AbsStats* out) {
  GC_HOST_ORDERED(absStats(src, n, out));
}

Status HostOrderedCudaBackend::quantizeMaxMin(const float* src, size_t n, const MaxMinSpec& spec,
                                              uint64_t indexBase, float* meta, uint8_t* codes) {
  GC_HOST_ORDERED(quantizeMaxMin(src, n, spec, indexBase, meta, codes));
}

Status HostOrderedCudaBackend::dequantizeMaxMin(const float* meta, const uint8_t* codes, size_t n,
                                                const MaxMinSpec& spec, float* dst,
                                                bool accumulate) {
  GC_HOST_ORDERED(dequantizeMaxMin(meta, codes, n, spec, dst, accumulate));
}

Status HostOrderedCudaBackend::rbfEncode(const float* src, size_t n, const RbfSpec& spec,
                                         uint8_t* codes) {
  GC_HOST_ORDERED(rbfEncode(src, n, spec, codes));
}

Status HostOrderedCudaBackend::rbfDecode(const uint8_t* codes, size_t n, const RbfSpec& spec,
                                         float* dst, bool accumulate) {
  GC_HOST_ORDERED(rbfDecode(codes, n, spec, dst, accumulate));
}

Status HostOrderedCudaBackend::signPack(const float* src, size_t n, uint8_t* bits) {
  GC_HOST_ORDERED(signPack(src, n, bits));
}

Status HostOrderedCudaBackend::signCountAdd(const uint8_t* countsIn, int inBits, int maxIn,
                                            const uint8_t* signBits, size_t n, uint8_t* countsOut,
                                            int outBits) {
  GC_HOST_ORDERED(signCountAdd(countsIn, inBits, maxIn, signBits, n, countsOut, outBits));
}

Status HostOrderedCudaBackend::signMajority(const uint8_t* counts, int bits, size_t n, int nranks,
                                            uint8_t* decision) {
  GC_HOST_ORDERED(signMajority(counts, bits, n, nranks, decision));
}

Status HostOrderedCudaBackend::signExpand(const uint8_t* bits, size_t n, float pos, float neg,
                                          float* dst) {
  GC_HOST_ORDERED(signExpand(bits, n, pos, neg, dst));
}

Status HostOrderedCudaBackend::fftForward(const float* src, size_t n, size_t chunk,
                                          float* spectrum) {
  GC_HOST_ORDERED(fftForward(src, n, chunk, spectrum));
}

Status HostOrderedCudaBackend::fftInverse(const float* spectrum, size_t n, size_t chunk,
                                          float* dst) {
  GC_HOST_ORDERED(fftInverse(spectrum, n, chunk, dst));
}

Status HostOrderedCudaBackend::fftSelectBins(const float* spectrum, size_t n, size_t chunk,
                                             double keep, uint8_t* bitmap) {
  GC_HOST_ORDERED(fftSelectBins(spectrum, n, chunk, keep, bitmap));
}

Status HostOrderedCudaBackend::gatherBins(const float* spectrum, const uint8_t* bitmap, size_t bins,
                                          float* packed) {
  GC_HOST_ORDERED(gatherBins(spectrum, bitmap, bins, packed));
}

Status HostOrderedCudaBackend::scatterAddBins(const float* packed, const uint8_t* bitmap,
                                              size_t bins, float* spectrum) {
  GC_HOST_ORDERED(scatterAddBins(packed, bitmap, bins, spectrum));
}

#undef GC_HOST_ORDERED

}  // namespace gradcomp::device
