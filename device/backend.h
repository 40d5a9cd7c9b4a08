// The compute interface algorithms use: element-wise work on buffers in the
// backend's memory space. device/cpu is the reference every other backend is
// checked against; device/cuda implements the same primitives as kernels.
// Later families (sparse, quantized, sign, FFT) add their primitives here, kept
// few and kernel-shaped.
//
// Arithmetic contract (the reference semantics):
// - float16/bfloat16 are computed in fp32 and rounded to nearest even once per
//   primitive; float32 in fp32; float64 in fp64.
// - divide() computes x / d in fp64 and rounds once to the element type (ncclAvg).
// - NaN and Inf propagate as IEEE arithmetic does; nothing is flushed to zero.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>

#include "common/dtype.h"
#include "common/status.h"
#include "device/quant_types.h"

namespace gradcomp::device {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // ---- Memory (algorithm scratch; device/buffer.h wraps it) ----
  // Memory every primitive of this backend accepts, that host code may read
  // and write between primitives, and that transports send from and receive
  // into. Algorithms run on a backend whose primitives have completed when
  // they return (the CPU backend; on a GPU the executor's host-ordered
  // CudaBackend). CPU: the heap. CUDA: mapped pinned host memory, which
  // kernels address directly (UVA) and UCX sends from. 64-byte aligned;
  // nullptr when it cannot be had. Thread-safe.
  virtual void* allocate(size_t bytes) {
    return ::operator new(bytes ? bytes : 1, std::align_val_t(64), std::nothrow);
  }
  virtual void deallocate(void* p, size_t bytes) {
    (void)bytes;
    ::operator delete(p, std::align_val_t(64));
  }

  // dst[i] = a[i] + b[i]; dst may alias a or b.
  virtual Status add(void* dst, const void* a, const void* b, size_t n, DataType t) = 0;
  // buf[i] = buf[i] / divisor.
  virtual Status divide(void* buf, size_t n, DataType t, int divisor) = 0;
  virtual Status copy(void* dst, const void* src, size_t bytes) = 0;
  // Element conversion between any two DataTypes (float ones round to nearest even).
  virtual Status convert(void* dst, DataType dstType, const void* src, DataType srcType,
                         size_t n) = 0;

  // ---- Sparse primitives (top-k family, algorithms/sparse) ----
  // Values are fp32, indexes uint64; a COO list is (idx[], val[], count) sorted
  // strictly ascending by index. "Zero" means the bit pattern +0.0: -0.0 is a
  // value. Selection is by |x|; NaN is never selected and counts as smaller
  // than every number. Defaults return Unsupported naming the backend.

  // *threshold = the k-th largest |x[i]| (1 <= k <= n), by selection, not a sort.
  virtual Status kthLargestAbs(const float* x, size_t n, size_t k, float* threshold) {
    (void)x, (void)n, (void)k, (void)threshold;
    return unsupported("kthLargestAbs");
  }
  // *count = #{i : |x[i]| > threshold}.
  virtual Status countAbove(const float* x, size_t n, float threshold, size_t* count) {
    (void)x, (void)n, (void)threshold, (void)count;
    return unsupported("countAbove");
  }
  // Compaction to COO: every i with |x[i]| > threshold, plus (threshold > 0
  // only) the first `tieBudget` i with |x[i]| == threshold, in index order;
  // written indexes are indexBase + i. More than `capacity` is Internal.
  virtual Status compactAbove(const float* x, size_t n, float threshold, size_t tieBudget,
                              uint64_t indexBase, uint64_t* idx, float* val, size_t capacity,
                              size_t* count) {
    (void)x, (void)n, (void)threshold, (void)tieBudget, (void)indexBase, (void)idx, (void)val,
        (void)capacity, (void)count;
    return unsupported("compactAbove");
  }
  // dst[idx[i] - base] += val[i] for i in order; an index outside
  // [base, base + n) is InvalidArgument (nothing past it is applied).
  virtual Status scatterAdd(float* dst, size_t n, uint64_t base, const uint64_t* idx,
                            const float* val, size_t count) {
    (void)dst, (void)n, (void)base, (void)idx, (void)val, (void)count;
    return unsupported("scatterAdd");
  }
  // dst[idx[i] - base] = +0.0 (same range rule as scatterAdd).
  virtual Status scatterZero(float* dst, size_t n, uint64_t base, const uint64_t* idx,
                             size_t count) {
    (void)dst, (void)n, (void)base, (void)idx, (void)count;
    return unsupported("scatterZero");
  }
  // DenseStream body (algorithms.md section 4) of a COO list over the region
  // [base, base + n): blocks [start, length, values], start/length as
  // little-endian `indexBytes` (4 or 8) relative to base, fp32 values; blocks
  // begin and end with a non-zero and hold zero runs of at most
  // T = 2 * indexBytes / 4. Values must not be +0.0. Exact size first:
  virtual Status denseStreamSize(const uint64_t* idx, size_t count, int indexBytes,
                                 size_t* bytes, size_t* blocks) {
    (void)idx, (void)count, (void)indexBytes, (void)bytes, (void)blocks;
    return unsupported("denseStreamSize");
  }
  virtual Status denseStreamEncode(const uint64_t* idx, const float* val, size_t count,
                                   uint64_t base, int indexBytes, void* out, size_t capacity,
                                   size_t* bytes) {
    (void)idx, (void)val, (void)count, (void)base, (void)indexBytes, (void)out, (void)capacity,
        (void)bytes;
    return unsupported("denseStreamEncode");
  }
  // Decodes exactly `blocks` blocks filling exactly `bytes` into COO (non-zero
  // values only, indexes base + offset). Every length, range, ordering and
  // structure rule above is checked: violations are RemoteError, never an
  // out-of-bounds access.
  virtual Status denseStreamDecode(const void* in, size_t bytes, size_t blocks, uint64_t n,
                                   uint64_t base, int indexBytes, uint64_t* idx, float* val,
                                   size_t capacity, size_t* count) {
    (void)in, (void)bytes, (void)blocks, (void)n, (void)base, (void)indexBytes, (void)idx,
        (void)val, (void)capacity, (void)count;
    return unsupported("denseStreamDecode");
  }

  // ---- Quantized family (algorithms/quant): max-min, RBF, sign, FFT. -------
  // Layouts, rounding and edge-value rules are in device/quant_types.h. Buffers
  // are fp32 in the backend's memory space; code streams are packed bit streams.

  // Reduction over src[0..n) used to agree on a call's parameters (vmax, sign
  // scale, the non-finite fallback) before anything is encoded.
  virtual Status absStats(const float* src, size_t n, AbsStats* out) {
    (void)src, (void)n, (void)out;
    return unsupported("absStats");
  }
  // Bucketed max-min quantization with counter-based stochastic rounding:
  // meta gets 2 floats per bucket, codes packedBytes(n, spec.bits) bytes.
  // Element i draws counterUniform(spec.seed, indexBase + i).
  virtual Status quantizeMaxMin(const float* src, size_t n, const MaxMinSpec& spec,
                                uint64_t indexBase, float* meta, uint8_t* codes) {
    (void)src, (void)n, (void)spec, (void)indexBase, (void)meta, (void)codes;
    return unsupported("quantizeMaxMin");
  }
  // dst[i] = decoded (accumulate: dst[i] += decoded, in fp32). RemoteError when
  // meta is not finite with min <= max, or padding bits are set.
  virtual Status dequantizeMaxMin(const float* meta, const uint8_t* codes, size_t n,
                                  const MaxMinSpec& spec, float* dst, bool accumulate) {
    (void)meta, (void)codes, (void)n, (void)spec, (void)dst, (void)accumulate;
    return unsupported("dequantizeMaxMin");
  }
  // RBF words of spec.bits bits: codes gets packedBytes(n, spec.bits) bytes.
  virtual Status rbfEncode(const float* src, size_t n, const RbfSpec& spec, uint8_t* codes) {
    (void)src, (void)n, (void)spec, (void)codes;
    return unsupported("rbfEncode");
  }
  // dst[i] (+)= decoded; RemoteError on set padding bits.
  virtual Status rbfDecode(const uint8_t* codes, size_t n, const RbfSpec& spec, float* dst,
                           bool accumulate) {
    (void)codes, (void)n, (void)spec, (void)dst, (void)accumulate;
    return unsupported("rbfDecode");
  }
  // bits[i] = (src[i] > 0): -0, 0 and NaN vote negative. packedBytes(n, 1) bytes.
  virtual Status signPack(const float* src, size_t n, uint8_t* bits) {
    (void)src, (void)n, (void)bits;
    return unsupported("signPack");
  }
  // countsOut[i] = countsIn[i] + signBits[i] as outBits-wide fields (countsIn
  // nullptr: 0). RemoteError when an input count exceeds maxIn (it covers at
  // most maxIn ranks), or padding bits are set.
  virtual Status signCountAdd(const uint8_t* countsIn, int inBits, int maxIn,
                              const uint8_t* signBits, size_t n, uint8_t* countsOut,
                              int outBits) {
    (void)countsIn, (void)inBits, (void)maxIn, (void)signBits, (void)n, (void)countsOut,
        (void)outBits;
    return unsupported("signCountAdd");
  }
  // Majority of nranks votes: bit = (2 * count > nranks), ties to 0 (-1).
  // RemoteError when a count exceeds nranks.
  virtual Status signMajority(const uint8_t* counts, int bits, size_t n, int nranks,
                              uint8_t* decision) {
    (void)counts, (void)bits, (void)n, (void)nranks, (void)decision;
    return unsupported("signMajority");
  }
  // dst[i] = bit ? pos : neg. RemoteError on set padding bits.
  virtual Status signExpand(const uint8_t* bits, size_t n, float pos, float neg, float* dst) {
    (void)bits, (void)n, (void)pos, (void)neg, (void)dst;
    return unsupported("signExpand");
  }
  // Chunked real-to-complex FFT of src[0..n) into fftBinCount(n, chunk)
  // interleaved complex bins (unnormalized).
  virtual Status fftForward(const float* src, size_t n, size_t chunk, float* spectrum) {
    (void)src, (void)n, (void)chunk, (void)spectrum;
    return unsupported("fftForward");
  }
  // Inverse of fftForward, normalized by each chunk's length. spectrum is read only.
  virtual Status fftInverse(const float* spectrum, size_t n, size_t chunk, float* dst) {
    (void)spectrum, (void)n, (void)chunk, (void)dst;
    return unsupported("fftInverse");
  }
  // Per chunk, set in `bitmap` (packedBytes(bins, 1) bytes, bit = bin index in
  // the whole spectrum) the fftKeepCount(bins_c, keep) bins of largest energy
  // w*|X|^2, w = 1 for DC and Nyquist, 2 otherwise (what they carry in the time
  // domain); ties go to the lower bin.
  virtual Status fftSelectBins(const float* spectrum, size_t n, size_t chunk, double keep,
                               uint8_t* bitmap) {
    (void)spectrum, (void)n, (void)chunk, (void)keep, (void)bitmap;
    return unsupported("fftSelectBins");
  }
  // packed gets (re, im) of every bin set in bitmap, in bin order.
  virtual Status gatherBins(const float* spectrum, const uint8_t* bitmap, size_t bins,
                            float* packed) {
    (void)spectrum, (void)bitmap, (void)bins, (void)packed;
    return unsupported("gatherBins");
  }
  // spectrum[bin] += packed value, for bins set in bitmap, in bin order.
  virtual Status scatterAddBins(const float* packed, const uint8_t* bitmap, size_t bins,
                                float* spectrum) {
    (void)packed, (void)bitmap, (void)bins, (void)spectrum;
    return unsupported("scatterAddBins");
  }

 protected:
  Status unsupported(const char* primitive) const {
    return makeStatus(Err::Unsupported, "%s is not implemented by the %s backend", primitive,
                      name());
  }
};

// The process-wide CPU reference backend (stateless, thread-safe).
Backend& cpuBackend();

}  // namespace gradcomp::device
