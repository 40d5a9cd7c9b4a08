#include "support/checked_backend.h"

#include <cstdio>

#include "common/dtype.h"
#include "device/quant_types.h"

namespace gradcomp::testing {
namespace {

using device::packedBytes;

bool inside(const std::map<uintptr_t, size_t>& ranges, uintptr_t p, size_t bytes) {
  auto it = ranges.upper_bound(p);
  if (it == ranges.begin()) return false;
  --it;
  return p >= it->first && p + bytes <= it->first + it->second;
}

size_t setBits(const uint8_t* bitmap, size_t bits) {
  size_t n = 0;
  for (size_t i = 0; i < bits; ++i) n += (bitmap[i / 8] >> (i % 8)) & 1;
  return n;
}

}  // namespace

void* CheckedBackend::allocate(size_t bytes) {
  void* p = cpu_.allocate(bytes);
  if (p) {
    std::lock_guard<std::mutex> lock(mu_);
    allocated_[uintptr_t(p)] = bytes;
  }
  return p;
}

void CheckedBackend::deallocate(void* p, size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = allocated_.find(uintptr_t(p));
    if (it == allocated_.end() || it->second != bytes) {
      violations_.push_back("deallocate of memory this backend did not allocate (or of "
                            "another size)");
    } else {
      allocated_.erase(it);
    }
  }
  cpu_.deallocate(p, bytes);
}

void CheckedBackend::allow(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  allowed_[uintptr_t(p)] = bytes;
}

void CheckedBackend::disallow(const void* p) {
  std::lock_guard<std::mutex> lock(mu_);
  allowed_.erase(uintptr_t(p));
}

std::vector<std::string> CheckedBackend::violations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return violations_;
}

size_t CheckedBackend::liveAllocations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return allocated_.size();
}

uint64_t CheckedBackend::checkedPointers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return checked_;
}

void CheckedBackend::need(const char* primitive, const char* arg, const void* p, size_t bytes) {
  if (bytes == 0) return;  // nothing is read or written: any pointer (even null) is fine
  std::lock_guard<std::mutex> lock(mu_);
  ++checked_;
  const uintptr_t a = uintptr_t(p);
  if (inside(allocated_, a, bytes) || inside(allowed_, a, bytes)) return;
  char line[200];
  std::snprintf(line, sizeof line, "%s: argument '%s' (%zu bytes) is not backend memory",
                primitive, arg, bytes);
  violations_.emplace_back(line);
}

Status CheckedBackend::add(void* dst, const void* a, const void* b, size_t n, DataType t) {
  const size_t bytes = n * dtypeSize(t);
  need("add", "dst", dst, bytes);
  need("add", "a", a, bytes);
  need("add", "b", b, bytes);
  return cpu_.add(dst, a, b, n, t);
}

Status CheckedBackend::divide(void* buf, size_t n, DataType t, int divisor) {
  need("divide", "buf", buf, n * dtypeSize(t));
  return cpu_.divide(buf, n, t, divisor);
}

Status CheckedBackend::copy(void* dst, const void* src, size_t bytes) {
  need("copy", "dst", dst, bytes);
  need("copy", "src", src, bytes);
  return cpu_.copy(dst, src, bytes);
}

Status CheckedBackend::convert(void* dst, DataType dstType, const void* src, DataType srcType,
                               size_t n) {
  need("convert", "dst", dst, n * dtypeSize(dstType));
  need("convert", "src", src, n * dtypeSize(srcType));
  return cpu_.convert(dst, dstType, src, srcType, n);
}

Status CheckedBackend::kthLargestAbs(const float* x, size_t n, size_t k, float* threshold) {
  need("kthLargestAbs", "x", x, n * 4);
  return cpu_.kthLargestAbs(x, n, k, threshold);
}

Status CheckedBackend::countAbove(const float* x, size_t n, float threshold, size_t* count) {
  need("countAbove", "x", x, n * 4);
  return cpu_.countAbove(x, n, threshold, count);
}

Status CheckedBackend::compactAbove(const float* x, size_t n, float threshold, size_t tieBudget,
                                    uint64_t indexBase, uint64_t* idx, float* val,
                                    size_t capacity, size_t* count) {
  need("compactAbove", "x", x, n * 4);
  need("compactAbove", "idx", idx, capacity * 8);
  need("compactAbove", "val", val, capacity * 4);
  return cpu_.compactAbove(x, n, threshold, tieBudget, indexBase, idx, val, capacity, count);
}

Status CheckedBackend::scatterAdd(float* dst, size_t n, uint64_t base, const uint64_t* idx,
                                  const float* val, size_t count) {
  need("scatterAdd", "dst", dst, n * 4);
  need("scatterAdd", "idx", idx, count * 8);
  need("scatterAdd", "val", val, count * 4);
  return cpu_.scatterAdd(dst, n, base, idx, val, count);
}

Status CheckedBackend::scatterZero(float* dst, size_t n, uint64_t base, const uint64_t* idx,
                                   size_t count) {
  need("scatterZero", "dst", dst, n * 4);
  need("scatterZero", "idx", idx, count * 8);
  return cpu_.scatterZero(dst, n, base, idx, count);
}

Status CheckedBackend::denseStreamSize(const uint64_t* idx, size_t count, int indexBytes,
                                       size_t* bytes, size_t* blocks) {
  need("denseStreamSize", "idx", idx, count * 8);
  return cpu_.denseStreamSize(idx, count, indexBytes, bytes, blocks);
}

Status CheckedBackend::denseStreamEncode(const uint64_t* idx, const float* val, size_t count,
                                         uint64_t base, int indexBytes, void* out,
                                         size_t capacity, size_t* bytes) {
  need("denseStreamEncode", "idx", idx, count * 8);
  need("denseStreamEncode", "val", val, count * 4);
  need("denseStreamEncode", "out", out, capacity);
  return cpu_.denseStreamEncode(idx, val, count, base, indexBytes, out, capacity, bytes);
}

Status CheckedBackend::denseStreamDecode(const void* in, size_t bytes, size_t blocks, uint64_t n,
                                         uint64_t base, int indexBytes, uint64_t* idx, float* val,
                                         size_t capacity, size_t* count) {
  need("denseStreamDecode", "in", in, bytes);
  need("denseStreamDecode", "idx", idx, capacity * 8);
  need("denseStreamDecode", "val", val, capacity * 4);
  return cpu_.denseStreamDecode(in, bytes, blocks, n, base, indexBytes, idx, val, capacity, count);
}

Status CheckedBackend::absStats(const float* src, size_t n, device::AbsStats* out) {
  need("absStats", "src", src, n * 4);
  return cpu_.absStats(src, n, out);
}

Status CheckedBackend::quantizeMaxMin(const float* src, size_t n, const device::MaxMinSpec& spec,
                                      uint64_t indexBase, float* meta, uint8_t* codes) {
  need("quantizeMaxMin", "src", src, n * 4);
  need("quantizeMaxMin", "meta", meta, 2 * 4 * device::maxMinBuckets(n, spec.bucket));
  need("quantizeMaxMin", "codes", codes, packedBytes(n, spec.bits));
  return cpu_.quantizeMaxMin(src, n, spec, indexBase, meta, codes);
}

Status CheckedBackend::dequantizeMaxMin(const float* meta, const uint8_t* codes, size_t n,
                                        const device::MaxMinSpec& spec, float* dst,
                                        bool accumulate) {
  need("dequantizeMaxMin", "meta", meta, 2 * 4 * device::maxMinBuckets(n, spec.bucket));
  need("dequantizeMaxMin", "codes", codes, packedBytes(n, spec.bits));
  need("dequantizeMaxMin", "dst", dst, n * 4);
  return cpu_.dequantizeMaxMin(meta, codes, n, spec, dst, accumulate);
}

Status CheckedBackend::rbfEncode(const float* src, size_t n, const device::RbfSpec& spec,
                                 uint8_t* codes) {
  need("rbfEncode", "src", src, n * 4);
  need("rbfEncode", "codes", codes, packedBytes(n, spec.bits));
  return cpu_.rbfEncode(src, n, spec, codes);
}

Status CheckedBackend::rbfDecode(const uint8_t* codes, size_t n, const device::RbfSpec& spec,
                                 float* dst, bool accumulate) {
  need("rbfDecode", "codes", codes, packedBytes(n, spec.bits));
  need("rbfDecode", "dst", dst, n * 4);
  return cpu_.rbfDecode(codes, n, spec, dst, accumulate);
}

Status CheckedBackend::signPack(const float* src, size_t n, uint8_t* bits) {
  need("signPack", "src", src, n * 4);
  need("signPack", "bits", bits, packedBytes(n, 1));
  return cpu_.signPack(src, n, bits);
}

Status CheckedBackend::signCountAdd(const uint8_t* countsIn, int inBits, int maxIn,
                                    const uint8_t* signBits, size_t n, uint8_t* countsOut,
                                    int outBits) {
  if (countsIn) need("signCountAdd", "countsIn", countsIn, packedBytes(n, size_t(inBits)));
  need("signCountAdd", "signBits", signBits, packedBytes(n, 1));
  need("signCountAdd", "countsOut", countsOut, packedBytes(n, size_t(outBits)));
  return cpu_.signCountAdd(countsIn, inBits, maxIn, signBits, n, countsOut, outBits);
}

Status CheckedBackend::signMajority(const uint8_t* counts, int bits, size_t n, int nranks,
                                    uint8_t* decision) {
  need("signMajority", "counts", counts, packedBytes(n, size_t(bits)));
  need("signMajority", "decision", decision, packedBytes(n, 1));
  return cpu_.signMajority(counts, bits, n, nranks, decision);
}

Status CheckedBackend::signExpand(const uint8_t* bits, size_t n, float pos, float neg,
                                  float* dst) {
  need("signExpand", "bits", bits, packedBytes(n, 1));
  need("signExpand", "dst", dst, n * 4);
  return cpu_.signExpand(bits, n, pos, neg, dst);
}

Status CheckedBackend::fftForward(const float* src, size_t n, size_t chunk, float* spectrum) {
  need("fftForward", "src", src, n * 4);
  need("fftForward", "spectrum", spectrum, device::fftBinCount(n, chunk) * 8);
  return cpu_.fftForward(src, n, chunk, spectrum);
}

Status CheckedBackend::fftInverse(const float* spectrum, size_t n, size_t chunk, float* dst) {
  need("fftInverse", "spectrum", spectrum, device::fftBinCount(n, chunk) * 8);
  need("fftInverse", "dst", dst, n * 4);
  return cpu_.fftInverse(spectrum, n, chunk, dst);
}

Status CheckedBackend::fftSelectBins(const float* spectrum, size_t n, size_t chunk, double keep,
                                     uint8_t* bitmap) {
  const size_t bins = device::fftBinCount(n, chunk);
  need("fftSelectBins", "spectrum", spectrum, bins * 8);
  need("fftSelectBins", "bitmap", bitmap, packedBytes(bins, 1));
  return cpu_.fftSelectBins(spectrum, n, chunk, keep, bitmap);
}

Status CheckedBackend::gatherBins(const float* spectrum, const uint8_t* bitmap, size_t bins,
                                  float* packed) {
  need("gatherBins", "spectrum", spectrum, bins * 8);
  need("gatherBins", "bitmap", bitmap, packedBytes(bins, 1));
  if (bitmap) need("gatherBins", "packed", packed, setBits(bitmap, bins) * 8);
  return cpu_.gatherBins(spectrum, bitmap, bins, packed);
}

Status CheckedBackend::scatterAddBins(const float* packed, const uint8_t* bitmap, size_t bins,
                                      float* spectrum) {
  need("scatterAddBins", "bitmap", bitmap, packedBytes(bins, 1));
  if (bitmap) need("scatterAddBins", "packed", packed, setBits(bitmap, bins) * 8);
  need("scatterAddBins", "spectrum", spectrum, bins * 8);
  return cpu_.scatterAddBins(packed, bitmap, bins, spectrum);
}

}  // namespace gradcomp::testing
