// The CPU reference backend: plain loops over host memory, the semantics of
// device/backend.h and device/cpu/element_traits.h. Thread-safe,
// synchronous: every primitive has completed (and reported its errors) when
// it returns, and its "device memory" is the heap (hostAccessible), through a
// block cache so per-call scratch does not fault pages in every call.
#include <cmath>
#include <cstring>

#include "device/backend.h"
#include "device/cpu/element_traits.h"
#include "device/cpu/sparse_ops.h"
#include "device/cpu/quant_primitives.h"
#include "device/cpu/accumulate.h"
#include "device/cpu/block_cache.h"

namespace gradcomp::device {
namespace {

using namespace cpu;

Status unknownType(const char* what, DataType t) {
  return makeStatus(Err::InvalidArgument,
                    "%s: dtype value %d is not a DataType (expected int32=2, int64=4, "
                    "float16=6, float32=7, float64=8, bfloat16=9)",
                    what, int(t));
}

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }
  bool hostAccessible() const override { return true; }

  // Device and host memory are both the heap, through a block cache.
  void* allocate(size_t bytes) override { return cache_.allocate(bytes); }
  void deallocate(void* p, size_t bytes) override { cache_.deallocate(p, bytes); }
  void* allocateHost(size_t bytes) override { return cache_.allocate(bytes); }
  void deallocateHost(void* p, size_t bytes) override { cache_.deallocate(p, bytes); }

  Status add(void* dst, const void* a, const void* b, size_t n, DataType t) override {
    const bool known = dispatchType(t, [&](auto traits) {
      using T = decltype(traits);
      using S = typename T::Storage;
      S* d = static_cast<S*>(dst);
      const S* x = static_cast<const S*>(a);
      const S* y = static_cast<const S*>(b);
      for (size_t i = 0; i < n; ++i) d[i] = T::add(x[i], y[i]);
    });
    return known ? Status::Ok() : unknownType("cpu add", t);
  }

  // Floating: x / divisor in fp64, rounded once. Integers: C++ integer
  // division (truncates toward zero), as NCCL's ncclAvg does for integers;
  // this is exact in fp64 terms too, just without fp64's 2^53 limit.
  Status divide(void* buf, size_t n, DataType t, int divisor) override {
    GC_REQUIRE(divisor > 0, Err::InvalidArgument, "cpu divide: divisor %d must be >= 1", divisor);
    const bool known = dispatchType(t, [&](auto traits) {
      using T = decltype(traits);
      using S = typename T::Storage;
      S* p = static_cast<S*>(buf);
      if constexpr (T::kFloating) {
        const double d = divisor;
        for (size_t i = 0; i < n; ++i) p[i] = T::fromDouble(T::toDouble(p[i]) / d);
      } else {
        for (size_t i = 0; i < n; ++i) p[i] = S(p[i] / S(divisor));
      }
    });
    return known ? Status::Ok() : unknownType("cpu divide", t);
  }

  Status scale(void* buf, size_t n, DataType t, double factor) override {
    GC_REQUIRE(isFloating(t), Err::InvalidArgument, "cpu scale: dtype %s is not floating",
               dtypeName(t));
    dispatchType(t, [&](auto traits) {
      using T = decltype(traits);
      if constexpr (T::kFloating) {
        auto* p = static_cast<typename T::Storage*>(buf);
        for (size_t i = 0; i < n; ++i) p[i] = T::fromDouble(T::toDouble(p[i]) * factor);
      }
    });
    return Status::Ok();
  }

  Status copy(void* dst, const void* src, size_t bytes) override {
    if (bytes && dst != src) std::memmove(dst, src, bytes);
    return Status::Ok();
  }

  Status zero(void* dst, size_t bytes) override {
    if (bytes) std::memset(dst, 0, bytes);
    return Status::Ok();
  }

  Status convert(void* dst, DataType dstType, const void* src, DataType srcType,
                 size_t n) override {
    if (dstType == srcType && dtypeSize(srcType) != 0) return copy(dst, src, n * dtypeSize(srcType));
    bool dstKnown = false;
    const bool srcKnown = dispatchType(srcType, [&](auto srcTraits) {
      using Src = decltype(srcTraits);
      dstKnown = dispatchType(dstType, [&](auto dstTraits) {
        using Dst = decltype(dstTraits);
        const auto* s = static_cast<const typename Src::Storage*>(src);
        auto* d = static_cast<typename Dst::Storage*>(dst);
        for (size_t i = 0; i < n; ++i) d[i] = convertOne<Dst, Src>(s[i]);
      });
    });
    if (!srcKnown) return unknownType("cpu convert (source)", srcType);
    if (!dstKnown) return unknownType("cpu convert (destination)", dstType);
    return Status::Ok();
  }

  Status subtract(float* dst, const float* a, const float* b, size_t n) override {
    for (size_t i = 0; i < n; ++i) dst[i] = a[i] - b[i];
    return Status::Ok();
  }

  Status accumulate(float* acc, const void* in, DataType inType, size_t n, bool add,
                    float countThreshold, AccumulateStats* stats) override {
    return cpu::accumulate(acc, in, inType, n, add, countThreshold, stats);
  }
  bool compactsInAccumulate() const override { return true; }
  bool synchronous() const override { return true; }
  Status accumulateCompact(float* acc, const void* in, DataType inType, size_t n, bool add,
                           float countThreshold, uint64_t* idx, float* val, size_t capacity,
                           AccumulateStats* stats, size_t* compacted) override {
    return cpu::accumulateCompact(acc, in, inType, n, add, countThreshold, idx, val, capacity,
                                  stats, compacted);
  }

  Status checkFinite(const float* x, size_t n, int source) override {
    char from[32];
    for (size_t i = 0; i < n; ++i)
      GC_REQUIRE(std::isfinite(x[i]), Err::RemoteError,
                 "payload%s: value %zu is not finite (%g)", sourceText(source, from), i,
                 double(x[i]));
    return Status::Ok();
  }

  // Sparse primitives: device/cpu/sparse_*.cc.
  Status kthLargestAbs(const float* x, size_t n, size_t k, float* th, size_t* above) override {
    return cpu::kthLargestAbs(x, n, k, th, above);
  }
  Status countAbove(const float* x, size_t n, float th, size_t* count) override {
    return cpu::countAbove(x, n, th, count);
  }
  Status compactAbove(float* x, size_t n, float th, size_t tieBudget, uint64_t indexBase,
                      uint64_t* idx, float* val, size_t capacity, size_t* count,
                      bool zeroSelected) override {
    return cpu::compactAbove(x, n, th, tieBudget, indexBase, idx, val, capacity, count,
                             zeroSelected);
  }
  Status scatterAdd(float* dst, size_t n, uint64_t base, const uint64_t* idx, const float* val,
                    size_t count) override {
    return cpu::scatterAdd(dst, n, base, idx, val, count);
  }
  Status scatterZero(float* dst, size_t n, uint64_t base, const uint64_t* idx,
                     size_t count) override {
    return cpu::scatterZero(dst, n, base, idx, count);
  }
  Status countAboveMany(const float* x, size_t n, const float* thresholds, size_t m,
                        size_t* counts) override {
    return cpu::countAboveMany(x, n, thresholds, m, counts);
  }
  Status moments(const float* x, size_t n, double* sum, double* sumSquares) override {
    return cpu::moments(x, n, sum, sumSquares);
  }
  Status gatherValues(float* dst, const float* x, size_t n, const uint64_t* idx,
                      size_t count) override {
    return cpu::gatherValues(dst, x, n, idx, count);
  }
  Status gather(uint64_t* dst, const uint64_t* src, size_t srcCount, const uint64_t* pos,
                size_t count) override {
    return cpu::gather(dst, src, srcCount, pos, count);
  }
  Status lowerBound(const uint64_t* sorted, size_t n, const uint64_t* keys, size_t nkeys,
                    uint64_t* pos) override {
    return cpu::lowerBound(sorted, n, keys, nkeys, pos);
  }
  Status zeroIntersection(float* x, size_t n, uint64_t base, const uint64_t* a, size_t na,
                          const uint64_t* b, size_t nb) override {
    return cpu::zeroIntersection(x, n, base, a, na, b, nb);
  }
  Status mergeAdd(const uint64_t* aIdx, const float* aVal, size_t na, const uint64_t* bIdx,
                  const float* bVal, size_t nb, uint64_t* outIdx, float* outVal, size_t capacity,
                  size_t* count) override {
    return cpu::mergeAdd(aIdx, aVal, na, bIdx, bVal, nb, outIdx, outVal, capacity, count);
  }
  Status intersect(const uint64_t* a, size_t na, const uint64_t* b, size_t nb, uint64_t* out,
                   size_t capacity, size_t* count) override {
    return cpu::intersect(a, na, b, nb, out, capacity, count);
  }
  Status checkSubset(const uint64_t* sub, size_t nsub, const uint64_t* set, size_t nset,
                     int source) override {
    return cpu::checkSubset(sub, nsub, set, nset, source);
  }
  Status checkAscending(const uint64_t* idx, size_t n, int source) override {
    return cpu::checkAscending(idx, n, source);
  }
  Status cooEncode(const uint64_t* idx, const float* val, size_t nnz, uint64_t base,
                   uint64_t count, int indexBytes, void* out) override {
    return cpu::cooEncode(idx, val, nnz, base, count, indexBytes, out);
  }
  Status cooDecode(const void* in, size_t nnz, uint64_t base, uint64_t count, int indexBytes,
                   uint64_t* idx, float* val, int source) override {
    return cpu::cooDecode(in, nnz, base, count, indexBytes, idx, val, source);
  }
  Status indexEncode(const uint64_t* idx, size_t count, uint64_t base, uint64_t n,
                     int indexBytes, void* out) override {
    return cpu::indexEncode(idx, count, base, n, indexBytes, out);
  }
  Status indexDecode(const void* in, size_t count, uint64_t base, uint64_t n, int indexBytes,
                     uint64_t* idx, int source) override {
    return cpu::indexDecode(in, count, base, n, indexBytes, idx, source);
  }
  Status denseEncode(const uint64_t* idx, const float* val, size_t nnz, uint64_t base,
                     uint64_t count, void* out) override {
    return cpu::denseEncode(idx, val, nnz, base, count, out);
  }
  Status denseDecode(const void* in, uint64_t count, uint64_t base, size_t nnz, uint64_t* idx,
                     float* val, int source) override {
    return cpu::denseDecode(in, count, base, nnz, idx, val, source);
  }
  Status denseStreamSize(const uint64_t* idx, size_t count, int indexBytes, size_t* bytes,
                         size_t* blocks) override {
    return cpu::denseStreamSize(idx, count, indexBytes, bytes, blocks);
  }
  Status denseStreamEncode(const uint64_t* idx, const float* val, size_t count, uint64_t base,
                           int indexBytes, void* out, size_t bytes) override {
    return cpu::denseStreamEncode(idx, val, count, base, indexBytes, out, bytes);
  }
  Status denseStreamDecode(const void* in, size_t bytes, size_t blocks, uint64_t n,
                           uint64_t base, int indexBytes, size_t nnz, uint64_t* idx, float* val,
                           int source) override {
    return cpu::denseStreamDecode(in, bytes, blocks, n, base, indexBytes, nnz, idx, val, source);
  }

  // Quantized family: device/cpu/{quant_maxmin,rbf_codec,sign_counts,fft_fftw}.cc.
  Status blockqEncode(const float* src, size_t n, const BlockQuantSpec& spec,
                      uint8_t* out) override {
    return cpu::blockqEncode(src, n, spec, out);
  }
  Status blockqDecode(const uint8_t* in, size_t n, const BlockQuantSpec& spec, float* dst,
                      int source) override {
    return cpu::blockqDecode(in, n, spec, dst, source);
  }
  Status absStats(const float* src, size_t n, AbsStats* out) override {
    return cpu::absStats(src, n, out);
  }
  Status quantizeMaxMin(const float* src, size_t n, const MaxMinSpec& spec, uint64_t indexBase,
                        float* meta, uint8_t* codes, float* residual) override {
    return cpu::quantizeMaxMin(src, n, spec, indexBase, meta, codes, residual);
  }
  Status dequantizeMaxMin(const float* meta, const uint8_t* codes, size_t n,
                          const MaxMinSpec& spec, float* dst, bool accumulate,
                          int source) override {
    return cpu::dequantizeMaxMin(meta, codes, n, spec, dst, accumulate, source);
  }
  Status rbfEncode(const float* src, size_t n, const RbfSpec& spec, uint8_t* codes,
                   float* residual) override {
    return cpu::rbfEncode(src, n, spec, codes, residual);
  }
  Status rbfDecode(const uint8_t* codes, size_t n, const RbfSpec& spec, float* dst,
                   bool accumulate, int source) override {
    return cpu::rbfDecode(codes, n, spec, dst, accumulate, source);
  }
  Status rbfEncodeSegments(const float* values, size_t segments, size_t perSegment,
                           size_t lastSegment, int bits, int mantissa, double fixedVmax,
                           uint8_t* out) override {
    return cpu::rbfEncodeSegments(values, segments, perSegment, lastSegment, bits, mantissa,
                                  fixedVmax, out);
  }
  Status rbfDecodeSegments(const uint8_t* in, size_t segments, size_t perSegment,
                           size_t lastSegment, int bits, int mantissa, float* values,
                           int source) override {
    return cpu::rbfDecodeSegments(in, segments, perSegment, lastSegment, bits, mantissa, values,
                                  source);
  }
  Status signPack(const float* src, size_t n, uint8_t* bits) override {
    return cpu::signPack(src, n, bits);
  }
  Status signCountAdd(const uint8_t* countsIn, int inBits, int maxIn, const uint8_t* signBits,
                      size_t n, uint8_t* countsOut, int outBits, int source) override {
    return cpu::signCountAdd(countsIn, inBits, maxIn, signBits, n, countsOut, outBits, source);
  }
  Status signMajority(const uint8_t* counts, int bits, size_t n, int nranks,
                      const SignTies& ties, uint64_t indexBase, uint8_t* decision) override {
    return cpu::signMajority(counts, bits, n, nranks, ties, indexBase, decision);
  }
  Status signExpand(const uint8_t* bits, size_t n, float pos, float neg, float* dst,
                    int source) override {
    return cpu::signExpand(bits, n, pos, neg, dst, source);
  }
  Status blockDot(const float* x, const float* d, size_t n, size_t block,
                  float* out) override {
    return cpu::blockDot(x, d, n, block, out);
  }
  Status expandBlocks(const float* d, size_t n, size_t block, const float* scales, float* dst,
                      bool subtractFrom) override {
    return cpu::expandBlocks(d, n, block, scales, dst, subtractFrom);
  }
  Status fftForward(const float* src, size_t n, size_t chunk, float* spectrum) override {
    return cpu::fftForward(src, n, chunk, spectrum);
  }
  Status fftInverse(const float* spectrum, size_t n, size_t chunk, float* dst) override {
    return cpu::fftInverse(spectrum, n, chunk, dst);
  }
  Status fftSelectBins(const float* spectrum, size_t n, size_t chunk, double keep,
                       uint8_t* bitmap) override {
    return cpu::fftSelectBins(spectrum, n, chunk, keep, bitmap);
  }
  Status fftCheckBitmap(const uint8_t* bitmap, size_t n, size_t chunk, double keep,
                        int source) override {
    return cpu::fftCheckBitmap(bitmap, n, chunk, keep, source);
  }
  Status gatherBins(const float* spectrum, const uint8_t* bitmap, size_t bins,
                    float* packed) override {
    return cpu::gatherBins(spectrum, bitmap, bins, packed);
  }
  Status scatterAddBins(const float* packed, const uint8_t* bitmap, size_t bins,
                        float* spectrum) override {
    return cpu::scatterAddBins(packed, bitmap, bins, spectrum);
  }

 private:
  BlockCache cache_{size_t(1) << 30};
};

}  // namespace

Backend& cpuBackend() {
  static CpuBackend backend;
  return backend;
}

}  // namespace gradcomp::device
