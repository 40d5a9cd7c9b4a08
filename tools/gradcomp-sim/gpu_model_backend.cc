// The GPU model's backend decorator (gpu_model.h): forwards every primitive
// to the CPU reference and hands the bytes its arguments span, by memory
// space, to GpuClock. Extents follow the primitive contracts
// (device/backend.h) as device/cpu/cpu_device_backend.cc checks them; reads
// and writes count separately (read-modify-write twice); scattered accesses
// count one 32-byte DRAM sector per element (kSector).
#include <time.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <map>
#include <mutex>

#include "tools/gradcomp-sim/gpu_clock.h"

namespace gradcomp::sim {
namespace {

using device::AbsStats;
using device::AccumulateStats;
using device::MaxMinSpec;
using device::RbfSpec;

constexpr double kSector = 32;
enum Dir { R = 1, W = 2, RW = 3 };

struct Arg {
  const void* p;
  double bytes;
  int dir;
};

double threadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double sectors(double count) { return count * kSector; }

size_t setBits(const uint8_t* bitmap, size_t bits) {
  size_t n = 0;
  for (size_t i = 0; i < bits; ++i) n += (bitmap[i / 8] >> (i % 8)) & 1u;
  return n;
}

class ModelBackend final : public GpuModel {
 public:
  ModelBackend(SimTransport& net, const GpuModelOptions& o) : net_(net), o_(o), clock_(net, o) {}

  const char* name() const override { return "gpu-model"; }
  bool hostAccessible() const override { return false; }

  // Device memory is the base class's heap; host memory is tracked so that
  // arguments in it are priced as PCIe traffic.
  void* allocateHost(size_t bytes) override {
    void* p = Backend::allocateHost(bytes);
    if (p) {
      std::lock_guard<std::mutex> lock(mu_);
      host_[uintptr_t(p)] = bytes ? bytes : 1;
    }
    return p;
  }
  void deallocateHost(void* p, size_t bytes) override {
    if (!p) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      host_.erase(uintptr_t(p));
    }
    Backend::deallocateHost(p, bytes);
  }

  Status sync() override {
    clock_.sync();
    return Status::Ok();  // the reference ran every primitive already
  }

  void beginCall(size_t count, DataType dtype) override {
    clock_.beginCall(double(count) * double(dtypeSize(dtype)) * o_.scale,
                     double(count) * o_.scale);
  }
  void endCall() override { clock_.endCall(); }
  std::vector<GpuCallStats> takeCallStats() override { return clock_.take(); }

  // ---- Element-wise ----
  Status add(void* dst, const void* a, const void* b, size_t n, DataType t) override {
    const double bytes = double(n) * dtypeSize(t);
    return op({"add", "add_f32"}, PrimKind::Kernel, {{a, bytes, R}, {b, bytes, R}, {dst, bytes, W}},
              0, [&] { return cpu().add(dst, a, b, n, t); });
  }
  Status divide(void* buf, size_t n, DataType t, int divisor) override {
    return op({"divide", nullptr}, PrimKind::Kernel, {{buf, double(n) * dtypeSize(t), RW}}, 0,
              [&] { return cpu().divide(buf, n, t, divisor); });
  }
  Status scale(void* buf, size_t n, DataType t, double factor) override {
    return op({"scale", nullptr}, PrimKind::Kernel, {{buf, double(n) * dtypeSize(t), RW}}, 0,
              [&] { return cpu().scale(buf, n, t, factor); });
  }
  Status copy(void* dst, const void* src, size_t bytes) override {
    return op({"copy", "copy_d2d"}, PrimKind::Copy,
              {{src, double(bytes), R}, {dst, double(bytes), W}}, 0,
              [&] { return cpu().copy(dst, src, bytes); });
  }
  Status zero(void* dst, size_t bytes) override {
    return op({"zero", nullptr}, PrimKind::Fill, {{dst, double(bytes), W}}, 0,
              [&] { return cpu().zero(dst, bytes); });
  }
  Status convert(void* dst, DataType dstType, const void* src, DataType srcType,
                 size_t n) override {
    const bool f32bf16 = srcType == DataType::Float32 && dstType == DataType::BFloat16;
    return op({"convert", f32bf16 ? "convert_f32_bf16" : nullptr}, PrimKind::Copy,
              {{src, double(n) * dtypeSize(srcType), R}, {dst, double(n) * dtypeSize(dstType), W}},
              0, [&] { return cpu().convert(dst, dstType, src, srcType, n); });
  }
  Status subtract(float* dst, const float* a, const float* b, size_t n) override {
    const double bytes = 4.0 * n;
    return op({"subtract", "subtract_f32"}, PrimKind::Kernel,
              {{a, bytes, R}, {b, bytes, R}, {dst, bytes, W}}, 0,
              [&] { return cpu().subtract(dst, a, b, n); });
  }
  Status accumulate(float* acc, const void* in, DataType inType, size_t n, bool add,
                    float countThreshold, AccumulateStats* stats) override {
    // v1 (staged): copy of the input into the accumulator, residual add
    // (read acc, read residual, write acc), allFinite (read acc).
    const double staged = double(n) * (dtypeSize(inType) + 4 + 12 + 4);
    const char* kernel = inType == DataType::BFloat16  ? "accumulate_bf16_stats"
                         : inType == DataType::Float32 ? "accumulate_f32_stats"
                                                       : nullptr;
    return op(
        {"accumulate", kernel}, PrimKind::Accumulate,
        {{in, double(n) * dtypeSize(inType), R}, {acc, 4.0 * n, add ? RW : W}}, sizeof *stats,
        [&] { return cpu().accumulate(acc, in, inType, n, add, countThreshold, stats); }, staged);
  }

  // ---- Sparse ----
  Status kthLargestAbs(const float* x, size_t n, size_t k, float* threshold,
                       size_t* above) override {
    return op({"kthLargestAbs", "kth_largest_abs_4pass"}, PrimKind::Kernel,
              {{x, 4.0 * n * o_.c.selectPasses, R}},
              sizeof *threshold + (above ? sizeof *above : 0),
              [&] { return cpu().kthLargestAbs(x, n, k, threshold, above); });
  }
  Status countAbove(const float* x, size_t n, float threshold, size_t* count) override {
    return op({"countAbove", "count_above"}, PrimKind::Kernel, {{x, 4.0 * n, R}}, sizeof *count,
              [&] { return cpu().countAbove(x, n, threshold, count); });
  }
  Status compactAbove(float* x, size_t n, float threshold, size_t tieBudget, uint64_t indexBase,
                      uint64_t* idx, float* val, size_t capacity, size_t* count,
                      bool zeroSelected) override {
    const double cap = double(capacity);
    return op({"compactAbove", zeroSelected ? "compact_above_zero_1pct" : "compact_above_1pct"},
              PrimKind::Kernel,
              {{x, 4.0 * n, R},
               {x, zeroSelected ? sectors(cap) : 0, W},
               {idx, 8 * cap, W},
               {val, 4 * cap, W}},
              count ? sizeof *count : 0, [&] {
                return cpu().compactAbove(x, n, threshold, tieBudget, indexBase, idx, val,
                                          capacity, count, zeroSelected);
              });
  }
  Status scatterAdd(float* dst, size_t n, uint64_t base, const uint64_t* idx, const float* val,
                    size_t count) override {
    return op({"scatterAdd", nullptr}, PrimKind::Kernel,
              {{idx, 8.0 * count, R}, {val, 4.0 * count, R}, {dst, sectors(count), RW}}, 0,
              [&] { return cpu().scatterAdd(dst, n, base, idx, val, count); });
  }
  Status scatterZero(float* dst, size_t n, uint64_t base, const uint64_t* idx,
                     size_t count) override {
    return op({"scatterZero", nullptr}, PrimKind::Kernel,
              {{idx, 8.0 * count, R}, {dst, sectors(count), W}}, 0,
              [&] { return cpu().scatterZero(dst, n, base, idx, count); });
  }
  Status countAboveMany(const float* x, size_t n, const float* thresholds, size_t m,
                        size_t* counts) override {
    return op({"countAboveMany", "count_above_64_thresholds"}, PrimKind::Kernel,
              {{x, 4.0 * n, R}, {thresholds, 4.0 * m, R}}, m * sizeof *counts,
              [&] { return cpu().countAboveMany(x, n, thresholds, m, counts); });
  }
  Status moments(const float* x, size_t n, double* sum, double* sumSquares) override {
    return op({"moments", "moments_f64"}, PrimKind::Kernel, {{x, 4.0 * n, R}},
              sizeof *sum + sizeof *sumSquares,
              [&] { return cpu().moments(x, n, sum, sumSquares); });
  }
  Status gatherValues(float* dst, const float* x, size_t n, const uint64_t* idx,
                      size_t count) override {
    return op({"gatherValues", "gather_values_1pct"}, PrimKind::Kernel,
              {{idx, 8.0 * count, R}, {x, sectors(count), R}, {dst, 4.0 * count, W}}, 0,
              [&] { return cpu().gatherValues(dst, x, n, idx, count); });
  }
  Status gather(uint64_t* dst, const uint64_t* src, size_t srcCount, const uint64_t* pos,
                size_t count) override {
    return op({"gather", nullptr}, PrimKind::Kernel,
              {{pos, 8.0 * count, R}, {src, sectors(count), R}, {dst, 8.0 * count, W}}, 0,
              [&] { return cpu().gather(dst, src, srcCount, pos, count); });
  }
  Status lowerBound(const uint64_t* sorted, size_t n, const uint64_t* keys, size_t nkeys,
                    uint64_t* pos) override {
    const double probes = std::ceil(std::log2(double(n) + 1));
    return op({"lowerBound", nullptr}, PrimKind::Kernel,
              {{keys, 8.0 * nkeys, R}, {sorted, sectors(nkeys * probes), R}, {pos, 8.0 * nkeys, W}},
              0, [&] { return cpu().lowerBound(sorted, n, keys, nkeys, pos); });
  }
  Status zeroIntersection(float* x, size_t n, uint64_t base, const uint64_t* a, size_t na,
                          const uint64_t* b, size_t nb) override {
    return op({"zeroIntersection", nullptr}, PrimKind::Kernel,
              {{a, 8.0 * na, R}, {b, 8.0 * nb, R}, {x, sectors(std::min(na, nb)), W}}, 0,
              [&] { return cpu().zeroIntersection(x, n, base, a, na, b, nb); });
  }
  Status mergeAdd(const uint64_t* aIdx, const float* aVal, size_t na, const uint64_t* bIdx,
                  const float* bVal, size_t nb, uint64_t* outIdx, float* outVal, size_t capacity,
                  size_t* count) override {
    const double m = double(std::min(capacity, na + nb));
    return op({"mergeAdd", nullptr}, PrimKind::Kernel,
              {{aIdx, 8.0 * na, R},
               {aVal, 4.0 * na, R},
               {bIdx, 8.0 * nb, R},
               {bVal, 4.0 * nb, R},
               {outIdx, 8 * m, W},
               {outVal, 4 * m, W}},
              count ? sizeof *count : 0, [&] {
                return cpu().mergeAdd(aIdx, aVal, na, bIdx, bVal, nb, outIdx, outVal, capacity,
                                      count);
              });
  }
  Status intersect(const uint64_t* a, size_t na, const uint64_t* b, size_t nb, uint64_t* out,
                   size_t capacity, size_t* count) override {
    const double m = double(std::min({capacity, na, nb}));
    return op({"intersect", nullptr}, PrimKind::Kernel,
              {{a, 8.0 * na, R}, {b, 8.0 * nb, R}, {out, 8 * m, W}}, count ? sizeof *count : 0,
              [&] { return cpu().intersect(a, na, b, nb, out, capacity, count); });
  }
  Status checkSubset(const uint64_t* sub, size_t nsub, const uint64_t* set, size_t nset,
                     int source) override {
    return op({"checkSubset", nullptr}, PrimKind::Kernel,
              {{sub, 8.0 * nsub, R}, {set, 8.0 * nset, R}}, 0,
              [&] { return cpu().checkSubset(sub, nsub, set, nset, source); });
  }
  Status checkAscending(const uint64_t* idx, size_t n, int source) override {
    return op({"checkAscending", nullptr}, PrimKind::Kernel, {{idx, 8.0 * n, R}}, 0,
              [&] { return cpu().checkAscending(idx, n, source); });
  }
  Status cooEncode(const uint64_t* idx, const float* val, size_t nnz, uint64_t base,
                   uint64_t count, int indexBytes, void* out) override {
    return op({"cooEncode", nullptr}, PrimKind::Kernel,
              {{idx, 8.0 * nnz, R}, {val, 4.0 * nnz, R}, {out, double(nnz) * (indexBytes + 4), W}},
              0, [&] { return cpu().cooEncode(idx, val, nnz, base, count, indexBytes, out); });
  }
  Status cooDecode(const void* in, size_t nnz, uint64_t base, uint64_t count, int indexBytes,
                   uint64_t* idx, float* val, int source) override {
    return op({"cooDecode", nullptr}, PrimKind::Kernel,
              {{in, double(nnz) * (indexBytes + 4), R}, {idx, 8.0 * nnz, W}, {val, 4.0 * nnz, W}},
              0,
              [&] { return cpu().cooDecode(in, nnz, base, count, indexBytes, idx, val, source); });
  }
  Status indexEncode(const uint64_t* idx, size_t count, uint64_t base, uint64_t n,
                     int indexBytes, void* out) override {
    const double body = double(indexSetBytes(count, n, indexBytes));
    return op({"indexEncode", nullptr}, PrimKind::Kernel, {{idx, 8.0 * count, R}, {out, body, W}},
              0, [&] { return cpu().indexEncode(idx, count, base, n, indexBytes, out); });
  }
  Status indexDecode(const void* in, size_t count, uint64_t base, uint64_t n, int indexBytes,
                     uint64_t* idx, int source) override {
    const double body = double(indexSetBytes(count, n, indexBytes));
    return op({"indexDecode", nullptr}, PrimKind::Kernel, {{in, body, R}, {idx, 8.0 * count, W}}, 0,
              [&] { return cpu().indexDecode(in, count, base, n, indexBytes, idx, source); });
  }
  Status denseEncode(const uint64_t* idx, const float* val, size_t nnz, uint64_t base,
                     uint64_t count, void* out) override {
    return op({"denseEncode", nullptr}, PrimKind::Kernel,
              {{idx, 8.0 * nnz, R}, {val, 4.0 * nnz, R}, {out, 4.0 * count, W}}, 0,
              [&] { return cpu().denseEncode(idx, val, nnz, base, count, out); });
  }
  Status denseDecode(const void* in, uint64_t count, uint64_t base, size_t nnz, uint64_t* idx,
                     float* val, int source) override {
    return op({"denseDecode", nullptr}, PrimKind::Kernel,
              {{in, 4.0 * count, R}, {idx, 8.0 * nnz, W}, {val, 4.0 * nnz, W}}, 0,
              [&] { return cpu().denseDecode(in, count, base, nnz, idx, val, source); });
  }
  Status denseStreamSize(const uint64_t* idx, size_t count, int indexBytes, size_t* bytes,
                         size_t* blocks) override {
    return op({"denseStreamSize", nullptr}, PrimKind::Kernel, {{idx, 8.0 * count, R}},
              sizeof *bytes + sizeof *blocks,
              [&] { return cpu().denseStreamSize(idx, count, indexBytes, bytes, blocks); });
  }
  Status denseStreamEncode(const uint64_t* idx, const float* val, size_t count, uint64_t base,
                           int indexBytes, void* out, size_t bytes) override {
    return op({"denseStreamEncode", "dense_stream_encode_1pct"}, PrimKind::Kernel,
              {{idx, 8.0 * count, R}, {val, 4.0 * count, R}, {out, double(bytes), W}}, 0, [&] {
                return cpu().denseStreamEncode(idx, val, count, base, indexBytes, out, bytes);
              });
  }
  Status denseStreamDecode(const void* in, size_t bytes, size_t blocks, uint64_t n, uint64_t base,
                           int indexBytes, size_t nnz, uint64_t* idx, float* val,
                           int source) override {
    return op({"denseStreamDecode", nullptr}, PrimKind::Kernel,
              {{in, double(bytes), R}, {idx, 8.0 * nnz, W}, {val, 4.0 * nnz, W}}, 0, [&] {
                return cpu().denseStreamDecode(in, bytes, blocks, n, base, indexBytes, nnz, idx,
                                               val, source);
              });
  }

  // ---- Quantized ----
  Status absStats(const float* src, size_t n, AbsStats* out) override {
    return op({"absStats", nullptr}, PrimKind::Kernel, {{src, 4.0 * n, R}}, sizeof *out,
              [&] { return cpu().absStats(src, n, out); });
  }
  Status quantizeMaxMin(const float* src, size_t n, const MaxMinSpec& spec, uint64_t indexBase,
                        float* meta, uint8_t* codes, float* residual) override {
    return op({"quantizeMaxMin", "quantize_maxmin_4b_residual"}, PrimKind::Kernel,
              {{src, 4.0 * n, R},
               {meta, 8.0 * device::maxMinBuckets(n, spec.bucket), W},
               {codes, double(device::packedBytes(n, spec.bits)), W},
               {residual, residual ? 4.0 * n : 0, W}},
              0,
              [&] { return cpu().quantizeMaxMin(src, n, spec, indexBase, meta, codes, residual); });
  }
  Status dequantizeMaxMin(const float* meta, const uint8_t* codes, size_t n,
                          const MaxMinSpec& spec, float* dst, bool accumulate,
                          int source) override {
    return op(
        {"dequantizeMaxMin", "dequantize_maxmin_4b_add"}, PrimKind::Kernel,
        {{meta, 8.0 * device::maxMinBuckets(n, spec.bucket), R},
         {codes, double(device::packedBytes(n, spec.bits)), R},
         {dst, 4.0 * n, accumulate ? RW : W}},
        0, [&] { return cpu().dequantizeMaxMin(meta, codes, n, spec, dst, accumulate, source); });
  }
  Status rbfEncode(const float* src, size_t n, const RbfSpec& spec, uint8_t* codes,
                   float* residual) override {
    return op({"rbfEncode", "rbf_encode_10b_residual"}, PrimKind::Kernel,
              {{src, 4.0 * n, R},
               {codes, double(device::packedBytes(n, spec.bits)), W},
               {residual, residual ? 4.0 * n : 0, W}},
              0, [&] { return cpu().rbfEncode(src, n, spec, codes, residual); });
  }
  Status rbfDecode(const uint8_t* codes, size_t n, const RbfSpec& spec, float* dst,
                   bool accumulate, int source) override {
    return op({"rbfDecode", "rbf_decode_10b"}, PrimKind::Kernel,
              {{codes, double(device::packedBytes(n, spec.bits)), R},
               {dst, 4.0 * n, accumulate ? RW : W}},
              0, [&] { return cpu().rbfDecode(codes, n, spec, dst, accumulate, source); });
  }
  Status rbfEncodeSegments(const float* values, size_t segments, size_t perSegment,
                           size_t lastSegment, int bits, int mantissa, double fixedVmax,
                           uint8_t* out) override {
    const double total = segments ? double((segments - 1) * perSegment + lastSegment) : 0;
    const double outBytes = double(device::rbfSegmentsBytes(segments, perSegment, lastSegment, bits));
    return op({"rbfEncodeSegments", nullptr}, PrimKind::Kernel,
              {{values, 4 * total, R}, {out, outBytes, W}}, 0, [&] {
                return cpu().rbfEncodeSegments(values, segments, perSegment, lastSegment, bits,
                                               mantissa, fixedVmax, out);
              });
  }
  Status rbfDecodeSegments(const uint8_t* in, size_t segments, size_t perSegment,
                           size_t lastSegment, int bits, int mantissa, float* values,
                           int source) override {
    const double total = segments ? double((segments - 1) * perSegment + lastSegment) : 0;
    const double inBytes = double(device::rbfSegmentsBytes(segments, perSegment, lastSegment, bits));
    return op({"rbfDecodeSegments", nullptr}, PrimKind::Kernel,
              {{in, inBytes, R}, {values, 4 * total, W}}, 0, [&] {
                return cpu().rbfDecodeSegments(in, segments, perSegment, lastSegment, bits,
                                               mantissa, values, source);
              });
  }
  Status signPack(const float* src, size_t n, uint8_t* bits) override {
    return op({"signPack", "sign_pack"}, PrimKind::Kernel,
              {{src, 4.0 * n, R}, {bits, double(device::packedBytes(n, 1)), W}}, 0,
              [&] { return cpu().signPack(src, n, bits); });
  }
  Status signCountAdd(const uint8_t* countsIn, int inBits, int maxIn, const uint8_t* signBits,
                      size_t n, uint8_t* countsOut, int outBits, int source) override {
    return op({"signCountAdd", nullptr}, PrimKind::Kernel,
              {{countsIn, countsIn ? double(device::packedBytes(n, inBits)) : 0, R},
               {signBits, double(device::packedBytes(n, 1)), R},
               {countsOut, double(device::packedBytes(n, outBits)), W}},
              0, [&] {
                return cpu().signCountAdd(countsIn, inBits, maxIn, signBits, n, countsOut,
                                          outBits, source);
              });
  }
  Status signMajority(const uint8_t* counts, int bits, size_t n, int nranks,
                      const device::SignTies& ties, uint64_t indexBase,
                      uint8_t* decision) override {
    return op(
        {"signMajority", nullptr}, PrimKind::Kernel,
        {{counts, double(device::packedBytes(n, bits)), R},
         {decision, double(device::packedBytes(n, 1)), W}},
        0, [&] { return cpu().signMajority(counts, bits, n, nranks, ties, indexBase, decision); });
  }
  Status signExpand(const uint8_t* bits, size_t n, float pos, float neg, float* dst,
                    int source) override {
    return op({"signExpand", "sign_expand"}, PrimKind::Kernel,
              {{bits, double(device::packedBytes(n, 1)), R}, {dst, 4.0 * n, W}}, 0,
              [&] { return cpu().signExpand(bits, n, pos, neg, dst, source); });
  }
  Status blockDot(const float* x, const float* d, size_t n, size_t block, float* out) override {
    const double blocks = block ? double((n + block - 1) / block) : 0;
    return op({"blockDot", "block_dot_1024"}, PrimKind::Kernel,
              {{x, 4.0 * n, R}, {d, 4.0 * n, R}, {out, 4 * blocks, W}}, 0,
              [&] { return cpu().blockDot(x, d, n, block, out); });
  }
  Status expandBlocks(const float* d, size_t n, size_t block, const float* scales, float* dst,
                      bool subtractFrom) override {
    const double blocks = block ? double((n + block - 1) / block) : 0;
    return op({"expandBlocks", "expand_blocks_subtract"}, PrimKind::Kernel,
              {{d, 4.0 * n, R}, {scales, 4 * blocks, R}, {dst, 4.0 * n, subtractFrom ? RW : W}}, 0,
              [&] { return cpu().expandBlocks(d, n, block, scales, dst, subtractFrom); });
  }
  Status fftForward(const float* src, size_t n, size_t chunk, float* spectrum) override {
    return op({"fftForward", "fft_forward_16k"}, PrimKind::Kernel,
              {{src, 4.0 * n, R}, {spectrum, 8.0 * device::fftBinCount(n, chunk), W}}, 0,
              [&] { return cpu().fftForward(src, n, chunk, spectrum); });
  }
  Status fftInverse(const float* spectrum, size_t n, size_t chunk, float* dst) override {
    return op({"fftInverse", nullptr}, PrimKind::Kernel,
              {{spectrum, 8.0 * device::fftBinCount(n, chunk), R}, {dst, 4.0 * n, W}}, 0,
              [&] { return cpu().fftInverse(spectrum, n, chunk, dst); });
  }
  Status fftSelectBins(const float* spectrum, size_t n, size_t chunk, double keep,
                       uint8_t* bitmap) override {
    const size_t bins = device::fftBinCount(n, chunk);
    return op({"fftSelectBins", "fft_select_bins_15pct"}, PrimKind::Kernel,
              {{spectrum, 8.0 * bins, R}, {bitmap, double(device::packedBytes(bins, 1)), W}}, 0,
              [&] { return cpu().fftSelectBins(spectrum, n, chunk, keep, bitmap); });
  }
  Status fftCheckBitmap(const uint8_t* bitmap, size_t n, size_t chunk, double keep,
                        int source) override {
    const size_t bins = device::fftBinCount(n, chunk);
    return op({"fftCheckBitmap", nullptr}, PrimKind::Kernel,
              {{bitmap, double(device::packedBytes(bins, 1)), R}}, 0,
              [&] { return cpu().fftCheckBitmap(bitmap, n, chunk, keep, source); });
  }
  Status gatherBins(const float* spectrum, const uint8_t* bitmap, size_t bins,
                    float* packed) override {
    const double set = double(setBits(bitmap, bins));
    return op({"gatherBins", nullptr}, PrimKind::Kernel,
              {{bitmap, double(device::packedBytes(bins, 1)), R},
               {spectrum, sectors(set), R},
               {packed, 8 * set, W}},
              0, [&] { return cpu().gatherBins(spectrum, bitmap, bins, packed); });
  }
  Status scatterAddBins(const float* packed, const uint8_t* bitmap, size_t bins,
                        float* spectrum) override {
    const double set = double(setBits(bitmap, bins));
    return op({"scatterAddBins", nullptr}, PrimKind::Kernel,
              {{bitmap, double(device::packedBytes(bins, 1)), R},
               {packed, 8 * set, R},
               {spectrum, sectors(set), RW}},
              0, [&] { return cpu().scatterAddBins(packed, bitmap, bins, spectrum); });
  }
  Status checkFinite(const float* x, size_t n, int source) override {
    return op({"checkFinite", nullptr}, PrimKind::Kernel, {{x, 4.0 * n, R}}, 0,
              [&] { return cpu().checkFinite(x, n, source); });
  }

 private:
  static Backend& cpu() { return device::cpuBackend(); }

  bool isHost(const void* p) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = host_.upper_bound(uintptr_t(p));
    if (it == host_.begin()) return false;
    --it;
    return uintptr_t(p) < it->first + it->second;
  }

  // Runs the reference, then prices the primitive from its arguments.
  template <class F>
  Status op(PrimName name, PrimKind kind, std::initializer_list<Arg> args, double scalarBytes,
            F&& run, double stagedHost = 0) {
    const double t0 = o_.excludeCpu ? threadCpuSeconds() : 0;
    const Status s = run();
    if (o_.excludeCpu) net_.excludeCpu(threadCpuSeconds() - t0);
    PrimBytes b;
    b.name = name;
    b.scalar = scalarBytes;
    b.stagedHost = stagedHost * o_.scale;
    for (const Arg& a : args) {
      if (!a.p || a.bytes <= 0) continue;
      const double moved = a.bytes * o_.scale * (((a.dir & R) ? 1 : 0) + ((a.dir & W) ? 1 : 0));
      (isHost(a.p) ? b.host : b.device) += moved;
    }
    clock_.primitive(kind, b);
    return s;
  }

  SimTransport& net_;
  const GpuModelOptions o_;
  GpuClock clock_;
  mutable std::mutex mu_;
  std::map<uintptr_t, size_t> host_;  // host allocations: base -> bytes
};

}  // namespace

std::unique_ptr<GpuModel> makeGpuModel(SimTransport& net, const GpuModelOptions& options) {
  return std::unique_ptr<GpuModel>(new ModelBackend(net, options));
}

}  // namespace gradcomp::sim
