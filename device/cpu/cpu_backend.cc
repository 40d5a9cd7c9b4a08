// The CPU reference backend: plain loops over host memory, the semantics of
// device/backend.h and device/cpu/element_traits.h. Stateless, thread-safe.
#include <cstring>

#include "device/backend.h"
#include "device/cpu/element_traits.h"
#include "device/cpu/sparse_ops.h"
#include "device/cpu/quant_primitives.h"

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

  Status copy(void* dst, const void* src, size_t bytes) override {
    if (bytes && dst != src) std::memmove(dst, src, bytes);
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

  // Sparse primitives: device/cpu/sparse_*.cc.
  Status kthLargestAbs(const float* x, size_t n, size_t k, float* th) override {
    return cpu::kthLargestAbs(x, n, k, th);
  }
  Status countAbove(const float* x, size_t n, float th, size_t* count) override {
    return cpu::countAbove(x, n, th, count);
  }
  Status compactAbove(const float* x, size_t n, float th, size_t tieBudget, uint64_t indexBase,
                      uint64_t* idx, float* val, size_t capacity, size_t* count) override {
    return cpu::compactAbove(x, n, th, tieBudget, indexBase, idx, val, capacity, count);
  }
  Status scatterAdd(float* dst, size_t n, uint64_t base, const uint64_t* idx, const float* val,
                    size_t count) override {
    return cpu::scatterAdd(dst, n, base, idx, val, count);
  }
  Status scatterZero(float* dst, size_t n, uint64_t base, const uint64_t* idx,
                     size_t count) override {
    return cpu::scatterZero(dst, n, base, idx, count);
  }
  Status denseStreamSize(const uint64_t* idx, size_t count, int indexBytes, size_t* bytes,
                         size_t* blocks) override {
    return cpu::denseStreamSize(idx, count, indexBytes, bytes, blocks);
  }
  Status denseStreamEncode(const uint64_t* idx, const float* val, size_t count, uint64_t base,
                           int indexBytes, void* out, size_t capacity, size_t* bytes) override {
    return cpu::denseStreamEncode(idx, val, count, base, indexBytes, out, capacity, bytes);
  }
  Status denseStreamDecode(const void* in, size_t bytes, size_t blocks, uint64_t n,
                           uint64_t base, int indexBytes, uint64_t* idx, float* val,
                           size_t capacity, size_t* count) override {
    return cpu::denseStreamDecode(in, bytes, blocks, n, base, indexBytes, idx, val, capacity,
                                  count);
  }

  // Quantized family: device/cpu/{quant_maxmin,rbf_codec,sign_counts,fft_fftw}.cc.
  Status absStats(const float* src, size_t n, AbsStats* out) override {
    return cpu::absStats(src, n, out);
  }
  Status quantizeMaxMin(const float* src, size_t n, const MaxMinSpec& spec, uint64_t indexBase,
                        float* meta, uint8_t* codes) override {
    return cpu::quantizeMaxMin(src, n, spec, indexBase, meta, codes);
  }
  Status dequantizeMaxMin(const float* meta, const uint8_t* codes, size_t n,
                          const MaxMinSpec& spec, float* dst, bool accumulate) override {
    return cpu::dequantizeMaxMin(meta, codes, n, spec, dst, accumulate);
  }
  Status rbfEncode(const float* src, size_t n, const RbfSpec& spec, uint8_t* codes) override {
    return cpu::rbfEncode(src, n, spec, codes);
  }
  Status rbfDecode(const uint8_t* codes, size_t n, const RbfSpec& spec, float* dst,
                   bool accumulate) override {
    return cpu::rbfDecode(codes, n, spec, dst, accumulate);
  }
  Status signPack(const float* src, size_t n, uint8_t* bits) override {
    return cpu::signPack(src, n, bits);
  }
  Status signCountAdd(const uint8_t* countsIn, int inBits, int maxIn, const uint8_t* signBits,
                      size_t n, uint8_t* countsOut, int outBits) override {
    return cpu::signCountAdd(countsIn, inBits, maxIn, signBits, n, countsOut, outBits);
  }
  Status signMajority(const uint8_t* counts, int bits, size_t n, int nranks,
                      uint8_t* decision) override {
    return cpu::signMajority(counts, bits, n, nranks, decision);
  }
  Status signExpand(const uint8_t* bits, size_t n, float pos, float neg, float* dst) override {
    return cpu::signExpand(bits, n, pos, neg, dst);
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
  Status gatherBins(const float* spectrum, const uint8_t* bitmap, size_t bins,
                    float* packed) override {
    return cpu::gatherBins(spectrum, bitmap, bins, packed);
  }
  Status scatterAddBins(const float* packed, const uint8_t* bitmap, size_t bins,
                        float* spectrum) override {
    return cpu::scatterAddBins(packed, bitmap, bins, spectrum);
  }
};

}  // namespace

Backend& cpuBackend() {
  static CpuBackend backend;
  return backend;
}

}  // namespace gradcomp::device
