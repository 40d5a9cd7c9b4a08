// cpu-device: the CPU reference run with a GPU's memory discipline (see
// cpu_device_backend.h). Each primitive is recorded as a closure that checks
// its arguments' memory, counts host traffic and runs the reference; sync()
// opens the arena, runs the closures in order and closes it again.
#include "device/cpu/cpu_device_backend.h"

#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <vector>

#include "common/log.h"
#include "device/cpu/accumulate.h"
#include "device/cpu/cpu_device_memory.h"
#include "device/cpu/quant_primitives.h"
#include "device/cpu/sparse_ops.h"

namespace gradcomp::device {
namespace {

size_t setBits(const uint8_t* bitmap, size_t bits) {
  size_t n = 0;
  for (size_t i = 0; i < bits; ++i) n += (bitmap[i / 8] >> (i % 8)) & 1u;
  return n;
}

enum class Access { Read, Write, ReadWrite };

class CpuDeviceBackend final : public Backend {
 public:
  CpuDeviceBackend() = default;
  ~CpuDeviceBackend() override { (void)sync(); }

  const char* name() const override { return "cpu-device"; }

  // ---- Memory ----
  // Not under mu_ (the lock rule, sync()): the heaps have their own locks. A
  // slab that appears while sync() has the arena open stays closed until the
  // next sync opens it, and no primitive of the running batch uses it: a
  // primitive's memory was allocated before it was recorded.
  void* allocate(size_t bytes) override { return mem_.allocateDevice(bytes); }
  void deallocate(void* p, size_t bytes) override {
    if (!p) return;
    // Ordered after the primitives recorded so far, like cudaFreeAsync.
    record("deallocate", [this, p, bytes] { return mem_.releaseDevice(p, bytes); },
           /*always=*/true);
  }
  void* allocateHost(size_t bytes) override { return mem_.allocateHost(bytes); }
  void deallocateHost(void* p, size_t bytes) override {
    if (!p) return;
    record("deallocateHost", [this, p, bytes] { return mem_.releaseHost(p, bytes); },
           /*always=*/true);
  }

  // ---- The proxy contract ----
  Status reserve(const Reservation& r) override { return mem_.reserve(r); }
  bool reserveWouldGrow(const Reservation& r) const override { return mem_.reserveWouldGrow(r); }
  Status prepareFft(size_t n, size_t chunk) override { return mem_.prepareFft(n, chunk); }
  void park(const std::string& what, bool strict) override { mem_.park(what, strict); }
  void setRefusal(std::function<Status()> refused) override { refusal_ = std::move(refused); }
  Status unpark(const Reservation& promised, Reservation* drawn) override {
    return mem_.unpark(promised, drawn);
  }
  const char* lastPrimitive() const override { return last_.load(); }

  // ---- Ordering ----
  // The lock rule of the CUDA backend (docs/design.md): running the batch is
  // this backend's wait for the device, so mu_ is not held through it. The
  // batch is taken under mu_ and run without it; reserve(), allocation,
  // recording the next batch and traffic() go on meanwhile. One batch runs
  // at a time (running_): a second sync waits for the first (cv_, mu_
  // released) and then runs what was recorded since, in stream order.
  Status sync() override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !running_; });
    if (queue_.empty()) return takeError();
    std::vector<Op> ops;
    ops.swap(queue_);
    Status err = error_;
    running_ = true;
    ++traffic_.syncs;
    lock.unlock();
    // The running batch's own state, touched by this thread only.
    // Frames of sync's callers lie above this address; what lies below it on
    // this thread's stack belongs to functions that have returned.
    syncFrame_ = uintptr_t(__builtin_frame_address(0));
    run_ = Traffic{};
    setOpen(true);
    for (Op& op : ops) {
      if (!err.ok() && !op.always) continue;  // a failed stream runs no more kernels
      Status s = op.run();
      if (!s.ok() && err.ok()) err = s;
    }
    setOpen(false);
    lock.lock();
    traffic_.h2dBytes += run_.h2dBytes;
    traffic_.d2hBytes += run_.d2hBytes;
    error_ = err;
    running_ = false;
    cv_.notify_all();
    return takeError();
  }
  Traffic traffic() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return traffic_;
  }
  void resetTraffic() override {
    std::lock_guard<std::mutex> lock(mu_);
    traffic_ = Traffic{};
  }

  // ---- Element-wise ----
  Status add(void* dst, const void* a, const void* b, size_t n, DataType t) override {
    const size_t bytes = n * dtypeSize(t);
    return defer("add", [=]() -> Status {
      GC_CHECK(arg("add", "a", a, bytes, Access::Read));
      GC_CHECK(arg("add", "b", b, bytes, Access::Read));
      GC_CHECK(arg("add", "dst", dst, bytes, Access::Write));
      return cpu().add(dst, a, b, n, t);
    });
  }
  Status divide(void* buf, size_t n, DataType t, int divisor) override {
    return defer("divide", [=]() -> Status {
      GC_CHECK(arg("divide", "buf", buf, n * dtypeSize(t), Access::ReadWrite));
      return cpu().divide(buf, n, t, divisor);
    });
  }
  Status scale(void* buf, size_t n, DataType t, double factor) override {
    return defer("scale", [=]() -> Status {
      GC_CHECK(arg("scale", "buf", buf, n * dtypeSize(t), Access::ReadWrite));
      return cpu().scale(buf, n, t, factor);
    });
  }
  Status copy(void* dst, const void* src, size_t bytes) override {
    return defer("copy", [=]() -> Status {
      GC_CHECK(arg("copy", "src", src, bytes, Access::Read));
      GC_CHECK(arg("copy", "dst", dst, bytes, Access::Write));
      return cpu().copy(dst, src, bytes);
    });
  }
  Status zero(void* dst, size_t bytes) override {
    return defer("zero", [=]() -> Status {
      GC_CHECK(arg("zero", "dst", dst, bytes, Access::Write));
      return cpu().zero(dst, bytes);
    });
  }
  Status convert(void* dst, DataType dstType, const void* src, DataType srcType,
                 size_t n) override {
    return defer("convert", [=]() -> Status {
      GC_CHECK(arg("convert", "src", src, n * dtypeSize(srcType), Access::Read));
      GC_CHECK(arg("convert", "dst", dst, n * dtypeSize(dstType), Access::Write));
      return cpu().convert(dst, dstType, src, srcType, n);
    });
  }
  Status subtract(float* dst, const float* a, const float* b, size_t n) override {
    return defer("subtract", [=]() -> Status {
      GC_CHECK(arg("subtract", "a", a, n * 4, Access::Read));
      GC_CHECK(arg("subtract", "b", b, n * 4, Access::Read));
      GC_CHECK(arg("subtract", "dst", dst, n * 4, Access::Write));
      return cpu().subtract(dst, a, b, n);
    });
  }
  Status accumulate(float* acc, const void* in, DataType inType, size_t n, bool add,
                    float countThreshold, AccumulateStats* stats) override {
    poison(stats);
    return defer("accumulate", [=]() -> Status {
      GC_CHECK(arg("accumulate", "in", in, n * dtypeSize(inType), Access::Read));
      GC_CHECK(arg("accumulate", "acc", acc, n * 4, add ? Access::ReadWrite : Access::Write));
      GC_CHECK(scalar(stats, sizeof *stats));
      return cpu().accumulate(acc, in, inType, n, add, countThreshold, stats);
    });
  }

  // recordCpuDevicePrimitiveForTest.
  void recordForTest(const char* name, std::function<Status()> op) { (void)defer(name, std::move(op)); }

  // ---- Sparse ----
  Status kthLargestAbs(const float* x, size_t n, size_t k, float* threshold,
                       size_t* above) override {
    poison(threshold);
    if (above) poison(above);
    return defer("kthLargestAbs", [=]() -> Status {
      GC_CHECK(arg("kthLargestAbs", "x", x, n * 4, Access::Read));
      GC_CHECK(scalar(threshold, sizeof *threshold));
      if (above) GC_CHECK(scalar(above, sizeof *above));
      return cpu().kthLargestAbs(x, n, k, threshold, above);
    });
  }
  Status countAbove(const float* x, size_t n, float threshold, size_t* count) override {
    poison(count);
    return defer("countAbove", [=]() -> Status {
      GC_CHECK(arg("countAbove", "x", x, n * 4, Access::Read));
      GC_CHECK(scalar(count, sizeof *count));
      return cpu().countAbove(x, n, threshold, count);
    });
  }
  Status compactAbove(float* x, size_t n, float threshold, size_t tieBudget, uint64_t indexBase,
                      uint64_t* idx, float* val, size_t capacity, size_t* count,
                      bool zeroSelected) override {
    if (count) poison(count);
    return defer("compactAbove", [=]() -> Status {
      GC_CHECK(arg("compactAbove", "x", x, n * 4, zeroSelected ? Access::ReadWrite : Access::Read));
      GC_CHECK(arg("compactAbove", "idx", idx, capacity * 8, Access::Write));
      GC_CHECK(arg("compactAbove", "val", val, capacity * 4, Access::Write));
      if (count) GC_CHECK(scalar(count, sizeof *count));
      return cpu().compactAbove(x, n, threshold, tieBudget, indexBase, idx, val, capacity, count,
                                zeroSelected);
    });
  }
  Status scatterAdd(float* dst, size_t n, uint64_t base, const uint64_t* idx, const float* val,
                    size_t count) override {
    return defer("scatterAdd", [=]() -> Status {
      GC_CHECK(arg("scatterAdd", "idx", idx, count * 8, Access::Read));
      GC_CHECK(arg("scatterAdd", "val", val, count * 4, Access::Read));
      GC_CHECK(arg("scatterAdd", "dst", dst, n * 4, Access::ReadWrite, count * 4));
      return cpu().scatterAdd(dst, n, base, idx, val, count);
    });
  }
  Status scatterZero(float* dst, size_t n, uint64_t base, const uint64_t* idx,
                     size_t count) override {
    return defer("scatterZero", [=]() -> Status {
      GC_CHECK(arg("scatterZero", "idx", idx, count * 8, Access::Read));
      GC_CHECK(arg("scatterZero", "dst", dst, n * 4, Access::Write, count * 4));
      return cpu().scatterZero(dst, n, base, idx, count);
    });
  }
  Status countAboveMany(const float* x, size_t n, const float* thresholds, size_t m,
                        size_t* counts) override {
    for (size_t j = 0; j < m; ++j) poison(&counts[j]);
    return defer("countAboveMany", [=]() -> Status {
      GC_CHECK(arg("countAboveMany", "x", x, n * 4, Access::Read));
      GC_CHECK(arg("countAboveMany", "thresholds", thresholds, m * 4, Access::Read));
      for (size_t j = 0; j < m; ++j) GC_CHECK(scalar(&counts[j], sizeof counts[j]));
      return cpu().countAboveMany(x, n, thresholds, m, counts);
    });
  }
  Status moments(const float* x, size_t n, double* sum, double* sumSquares) override {
    *sum = *sumSquares = std::numeric_limits<double>::quiet_NaN();
    return defer("moments", [=]() -> Status {
      GC_CHECK(arg("moments", "x", x, n * 4, Access::Read));
      GC_CHECK(scalar(sum, sizeof *sum));
      GC_CHECK(scalar(sumSquares, sizeof *sumSquares));
      return cpu().moments(x, n, sum, sumSquares);
    });
  }
  Status gatherValues(float* dst, const float* x, size_t n, const uint64_t* idx,
                      size_t count) override {
    return defer("gatherValues", [=]() -> Status {
      GC_CHECK(arg("gatherValues", "idx", idx, count * 8, Access::Read));
      GC_CHECK(arg("gatherValues", "x", x, n * 4, Access::Read, count * 4));
      GC_CHECK(arg("gatherValues", "dst", dst, count * 4, Access::Write));
      return cpu().gatherValues(dst, x, n, idx, count);
    });
  }
  Status gather(uint64_t* dst, const uint64_t* src, size_t srcCount, const uint64_t* pos,
                size_t count) override {
    return defer("gather", [=]() -> Status {
      GC_CHECK(arg("gather", "pos", pos, count * 8, Access::Read));
      GC_CHECK(arg("gather", "src", src, srcCount * 8, Access::Read, count * 8));
      GC_CHECK(arg("gather", "dst", dst, count * 8, Access::Write));
      return cpu().gather(dst, src, srcCount, pos, count);
    });
  }
  Status lowerBound(const uint64_t* sorted, size_t n, const uint64_t* keys, size_t nkeys,
                    uint64_t* pos) override {
    return defer("lowerBound", [=]() -> Status {
      GC_CHECK(arg("lowerBound", "keys", keys, nkeys * 8, Access::Read));
      GC_CHECK(arg("lowerBound", "sorted", sorted, n * 8, Access::Read, nkeys * 8 * 64));
      GC_CHECK(arg("lowerBound", "pos", pos, nkeys * 8, Access::Write));
      return cpu().lowerBound(sorted, n, keys, nkeys, pos);
    });
  }
  Status zeroIntersection(float* x, size_t n, uint64_t base, const uint64_t* a, size_t na,
                          const uint64_t* b, size_t nb) override {
    return defer("zeroIntersection", [=]() -> Status {
      GC_CHECK(arg("zeroIntersection", "a", a, na * 8, Access::Read));
      GC_CHECK(arg("zeroIntersection", "b", b, nb * 8, Access::Read));
      GC_CHECK(arg("zeroIntersection", "x", x, n * 4, Access::Write, std::min(na, nb) * 4));
      return cpu().zeroIntersection(x, n, base, a, na, b, nb);
    });
  }
  Status mergeAdd(const uint64_t* aIdx, const float* aVal, size_t na, const uint64_t* bIdx,
                  const float* bVal, size_t nb, uint64_t* outIdx, float* outVal, size_t capacity,
                  size_t* count) override {
    poison(count);
    return defer("mergeAdd", [=]() -> Status {
      GC_CHECK(arg("mergeAdd", "aIdx", aIdx, na * 8, Access::Read));
      GC_CHECK(arg("mergeAdd", "aVal", aVal, na * 4, Access::Read));
      GC_CHECK(arg("mergeAdd", "bIdx", bIdx, nb * 8, Access::Read));
      GC_CHECK(arg("mergeAdd", "bVal", bVal, nb * 4, Access::Read));
      GC_CHECK(arg("mergeAdd", "outIdx", outIdx, capacity * 8, Access::Write));
      GC_CHECK(arg("mergeAdd", "outVal", outVal, capacity * 4, Access::Write));
      GC_CHECK(scalar(count, sizeof *count));
      return cpu().mergeAdd(aIdx, aVal, na, bIdx, bVal, nb, outIdx, outVal, capacity, count);
    });
  }
  Status intersect(const uint64_t* a, size_t na, const uint64_t* b, size_t nb, uint64_t* out,
                   size_t capacity, size_t* count) override {
    poison(count);
    return defer("intersect", [=]() -> Status {
      GC_CHECK(arg("intersect", "a", a, na * 8, Access::Read));
      GC_CHECK(arg("intersect", "b", b, nb * 8, Access::Read));
      GC_CHECK(arg("intersect", "out", out, capacity * 8, Access::Write));
      GC_CHECK(scalar(count, sizeof *count));
      return cpu().intersect(a, na, b, nb, out, capacity, count);
    });
  }
  Status checkSubset(const uint64_t* sub, size_t nsub, const uint64_t* set, size_t nset,
                     int source) override {
    return defer("checkSubset", [=]() -> Status {
      GC_CHECK(arg("checkSubset", "sub", sub, nsub * 8, Access::Read));
      GC_CHECK(arg("checkSubset", "set", set, nset * 8, Access::Read));
      return cpu().checkSubset(sub, nsub, set, nset, source);
    });
  }
  Status checkAscending(const uint64_t* idx, size_t n, int source) override {
    return defer("checkAscending", [=]() -> Status {
      GC_CHECK(arg("checkAscending", "idx", idx, n * 8, Access::Read));
      return cpu().checkAscending(idx, n, source);
    });
  }
  Status cooEncode(const uint64_t* idx, const float* val, size_t nnz, uint64_t base,
                   uint64_t count, int indexBytes, void* out) override {
    return defer("cooEncode", [=]() -> Status {
      GC_CHECK(arg("cooEncode", "idx", idx, nnz * 8, Access::Read));
      GC_CHECK(arg("cooEncode", "val", val, nnz * 4, Access::Read));
      GC_CHECK(arg("cooEncode", "out", out, nnz * (size_t(indexBytes) + 4), Access::Write));
      return cpu().cooEncode(idx, val, nnz, base, count, indexBytes, out);
    });
  }
  Status cooDecode(const void* in, size_t nnz, uint64_t base, uint64_t count, int indexBytes,
                   uint64_t* idx, float* val, int source) override {
    return defer("cooDecode", [=]() -> Status {
      GC_CHECK(arg("cooDecode", "in", in, nnz * (size_t(indexBytes) + 4), Access::Read));
      GC_CHECK(arg("cooDecode", "idx", idx, nnz * 8, Access::Write));
      GC_CHECK(arg("cooDecode", "val", val, nnz * 4, Access::Write));
      return cpu().cooDecode(in, nnz, base, count, indexBytes, idx, val, source);
    });
  }
  Status indexEncode(const uint64_t* idx, size_t count, uint64_t base, uint64_t n,
                     int indexBytes, void* out) override {
    return defer("indexEncode", [=]() -> Status {
      GC_CHECK(arg("indexEncode", "idx", idx, count * 8, Access::Read));
      GC_CHECK(arg("indexEncode", "out", out, indexSetBytes(count, n, indexBytes), Access::Write));
      return cpu().indexEncode(idx, count, base, n, indexBytes, out);
    });
  }
  Status indexDecode(const void* in, size_t count, uint64_t base, uint64_t n, int indexBytes,
                     uint64_t* idx, int source) override {
    return defer("indexDecode", [=]() -> Status {
      GC_CHECK(arg("indexDecode", "in", in, indexSetBytes(count, n, indexBytes), Access::Read));
      GC_CHECK(arg("indexDecode", "idx", idx, count * 8, Access::Write));
      return cpu().indexDecode(in, count, base, n, indexBytes, idx, source);
    });
  }
  Status denseEncode(const uint64_t* idx, const float* val, size_t nnz, uint64_t base,
                     uint64_t count, void* out) override {
    return defer("denseEncode", [=]() -> Status {
      GC_CHECK(arg("denseEncode", "idx", idx, nnz * 8, Access::Read));
      GC_CHECK(arg("denseEncode", "val", val, nnz * 4, Access::Read));
      GC_CHECK(arg("denseEncode", "out", out, count * 4, Access::Write));
      return cpu().denseEncode(idx, val, nnz, base, count, out);
    });
  }
  Status denseDecode(const void* in, uint64_t count, uint64_t base, size_t nnz, uint64_t* idx,
                     float* val, int source) override {
    return defer("denseDecode", [=]() -> Status {
      GC_CHECK(arg("denseDecode", "in", in, count * 4, Access::Read));
      GC_CHECK(arg("denseDecode", "idx", idx, nnz * 8, Access::Write));
      GC_CHECK(arg("denseDecode", "val", val, nnz * 4, Access::Write));
      return cpu().denseDecode(in, count, base, nnz, idx, val, source);
    });
  }
  Status denseStreamSize(const uint64_t* idx, size_t count, int indexBytes, size_t* bytes,
                         size_t* blocks) override {
    poison(bytes);
    poison(blocks);
    return defer("denseStreamSize", [=]() -> Status {
      GC_CHECK(arg("denseStreamSize", "idx", idx, count * 8, Access::Read));
      GC_CHECK(scalar(bytes, sizeof *bytes));
      GC_CHECK(scalar(blocks, sizeof *blocks));
      return cpu().denseStreamSize(idx, count, indexBytes, bytes, blocks);
    });
  }
  Status denseStreamEncode(const uint64_t* idx, const float* val, size_t count, uint64_t base,
                           int indexBytes, void* out, size_t bytes) override {
    return defer("denseStreamEncode", [=]() -> Status {
      GC_CHECK(arg("denseStreamEncode", "idx", idx, count * 8, Access::Read));
      GC_CHECK(arg("denseStreamEncode", "val", val, count * 4, Access::Read));
      GC_CHECK(arg("denseStreamEncode", "out", out, bytes, Access::Write));
      return cpu().denseStreamEncode(idx, val, count, base, indexBytes, out, bytes);
    });
  }
  Status denseStreamDecode(const void* in, size_t bytes, size_t blocks, uint64_t n,
                           uint64_t base, int indexBytes, size_t nnz, uint64_t* idx, float* val,
                           int source) override {
    return defer("denseStreamDecode", [=]() -> Status {
      GC_CHECK(arg("denseStreamDecode", "in", in, bytes, Access::Read));
      GC_CHECK(arg("denseStreamDecode", "idx", idx, nnz * 8, Access::Write));
      GC_CHECK(arg("denseStreamDecode", "val", val, nnz * 4, Access::Write));
      return cpu().denseStreamDecode(in, bytes, blocks, n, base, indexBytes, nnz, idx, val,
                                     source);
    });
  }

  // ---- Quantized ----
  Status blockqEncode(const float* src, size_t n, const BlockQuantSpec& spec,
                      uint8_t* out) override {
    return defer("blockqEncode", [=]() -> Status {
      if (spec.block == 0) return cpu().blockqEncode(src, n, spec, out);  // its message, no / 0
      GC_CHECK(arg("blockqEncode", "src", src, n * 4, Access::Read));
      GC_CHECK(arg("blockqEncode", "out", out, blockqBytes(n, spec), Access::Write));
      return cpu().blockqEncode(src, n, spec, out);
    });
  }
  Status blockqDecode(const uint8_t* in, size_t n, const BlockQuantSpec& spec, float* dst,
                      int source) override {
    return defer("blockqDecode", [=]() -> Status {
      if (spec.block == 0) return cpu().blockqDecode(in, n, spec, dst, source);
      GC_CHECK(arg("blockqDecode", "in", in, blockqBytes(n, spec), Access::Read));
      GC_CHECK(arg("blockqDecode", "dst", dst, n * 4, Access::Write));
      return cpu().blockqDecode(in, n, spec, dst, source);
    });
  }
  Status absStats(const float* src, size_t n, AbsStats* out) override {
    poison(out);
    return defer("absStats", [=]() -> Status {
      GC_CHECK(arg("absStats", "src", src, n * 4, Access::Read));
      GC_CHECK(scalar(out, sizeof *out));
      return cpu().absStats(src, n, out);
    });
  }
  Status quantizeMaxMin(const float* src, size_t n, const MaxMinSpec& spec, uint64_t indexBase,
                        float* meta, uint8_t* codes, float* residual) override {
    return defer("quantizeMaxMin", [=]() -> Status {
      GC_CHECK(arg("quantizeMaxMin", "src", src, n * 4, Access::Read));
      GC_CHECK(arg("quantizeMaxMin", "meta", meta, 8 * maxMinBuckets(n, spec.bucket),
                   Access::Write));
      GC_CHECK(arg("quantizeMaxMin", "codes", codes, packedBytes(n, spec.bits), Access::Write));
      if (residual) GC_CHECK(arg("quantizeMaxMin", "residual", residual, n * 4, Access::Write));
      return cpu().quantizeMaxMin(src, n, spec, indexBase, meta, codes, residual);
    });
  }
  Status dequantizeMaxMin(const float* meta, const uint8_t* codes, size_t n,
                          const MaxMinSpec& spec, float* dst, bool accumulate,
                          int source) override {
    return defer("dequantizeMaxMin", [=]() -> Status {
      GC_CHECK(arg("dequantizeMaxMin", "meta", meta, 8 * maxMinBuckets(n, spec.bucket),
                   Access::Read));
      GC_CHECK(arg("dequantizeMaxMin", "codes", codes, packedBytes(n, spec.bits), Access::Read));
      GC_CHECK(arg("dequantizeMaxMin", "dst", dst, n * 4,
                   accumulate ? Access::ReadWrite : Access::Write));
      return cpu().dequantizeMaxMin(meta, codes, n, spec, dst, accumulate, source);
    });
  }
  Status rbfEncode(const float* src, size_t n, const RbfSpec& spec, uint8_t* codes,
                   float* residual) override {
    return defer("rbfEncode", [=]() -> Status {
      GC_CHECK(arg("rbfEncode", "src", src, n * 4, Access::Read));
      GC_CHECK(arg("rbfEncode", "codes", codes, packedBytes(n, spec.bits), Access::Write));
      if (residual) GC_CHECK(arg("rbfEncode", "residual", residual, n * 4, Access::Write));
      return cpu().rbfEncode(src, n, spec, codes, residual);
    });
  }
  Status rbfDecode(const uint8_t* codes, size_t n, const RbfSpec& spec, float* dst,
                   bool accumulate, int source) override {
    return defer("rbfDecode", [=]() -> Status {
      GC_CHECK(arg("rbfDecode", "codes", codes, packedBytes(n, spec.bits), Access::Read));
      GC_CHECK(arg("rbfDecode", "dst", dst, n * 4, accumulate ? Access::ReadWrite : Access::Write));
      return cpu().rbfDecode(codes, n, spec, dst, accumulate, source);
    });
  }
  Status rbfEncodeSegments(const float* values, size_t segments, size_t perSegment,
                           size_t lastSegment, int bits, int mantissa, double fixedVmax,
                           uint8_t* out) override {
    const size_t total = segments ? (segments - 1) * perSegment + lastSegment : 0;
    return defer("rbfEncodeSegments", [=]() -> Status {
      GC_CHECK(arg("rbfEncodeSegments", "values", values, total * 4, Access::Read));
      GC_CHECK(arg("rbfEncodeSegments", "out", out,
                   rbfSegmentsBytes(segments, perSegment, lastSegment, bits), Access::Write));
      return cpu().rbfEncodeSegments(values, segments, perSegment, lastSegment, bits, mantissa,
                                     fixedVmax, out);
    });
  }
  Status rbfDecodeSegments(const uint8_t* in, size_t segments, size_t perSegment,
                           size_t lastSegment, int bits, int mantissa, float* values,
                           int source) override {
    const size_t total = segments ? (segments - 1) * perSegment + lastSegment : 0;
    return defer("rbfDecodeSegments", [=]() -> Status {
      GC_CHECK(arg("rbfDecodeSegments", "in", in,
                   rbfSegmentsBytes(segments, perSegment, lastSegment, bits), Access::Read));
      GC_CHECK(arg("rbfDecodeSegments", "values", values, total * 4, Access::Write));
      return cpu().rbfDecodeSegments(in, segments, perSegment, lastSegment, bits, mantissa,
                                     values, source);
    });
  }
  Status signPack(const float* src, size_t n, uint8_t* bits) override {
    return defer("signPack", [=]() -> Status {
      GC_CHECK(arg("signPack", "src", src, n * 4, Access::Read));
      GC_CHECK(arg("signPack", "bits", bits, packedBytes(n, 1), Access::Write));
      return cpu().signPack(src, n, bits);
    });
  }
  Status signCountAdd(const uint8_t* countsIn, int inBits, int maxIn, const uint8_t* signBits,
                      size_t n, uint8_t* countsOut, int outBits, int source) override {
    return defer("signCountAdd", [=]() -> Status {
      if (countsIn)
        GC_CHECK(arg("signCountAdd", "countsIn", countsIn, packedBytes(n, inBits), Access::Read));
      GC_CHECK(arg("signCountAdd", "signBits", signBits, packedBytes(n, 1), Access::Read));
      GC_CHECK(arg("signCountAdd", "countsOut", countsOut, packedBytes(n, outBits),
                   Access::Write));
      return cpu().signCountAdd(countsIn, inBits, maxIn, signBits, n, countsOut, outBits,
                                source);
    });
  }
  Status signMajority(const uint8_t* counts, int bits, size_t n, int nranks,
                      const SignTies& ties, uint64_t indexBase, uint8_t* decision) override {
    return defer("signMajority", [=]() -> Status {
      GC_CHECK(arg("signMajority", "counts", counts, packedBytes(n, bits), Access::Read));
      GC_CHECK(arg("signMajority", "decision", decision, packedBytes(n, 1), Access::Write));
      return cpu().signMajority(counts, bits, n, nranks, ties, indexBase, decision);
    });
  }
  Status signExpand(const uint8_t* bits, size_t n, float pos, float neg, float* dst,
                    int source) override {
    return defer("signExpand", [=]() -> Status {
      GC_CHECK(arg("signExpand", "bits", bits, packedBytes(n, 1), Access::Read));
      GC_CHECK(arg("signExpand", "dst", dst, n * 4, Access::Write));
      return cpu().signExpand(bits, n, pos, neg, dst, source);
    });
  }
  Status blockDot(const float* x, const float* d, size_t n, size_t block,
                  float* out) override {
    const size_t blocks = block ? (n + block - 1) / block : 0;
    return defer("blockDot", [=]() -> Status {
      GC_CHECK(arg("blockDot", "x", x, n * 4, Access::Read));
      GC_CHECK(arg("blockDot", "d", d, n * 4, Access::Read));
      GC_CHECK(arg("blockDot", "out", out, blocks * 4, Access::Write));
      return cpu().blockDot(x, d, n, block, out);
    });
  }
  Status expandBlocks(const float* d, size_t n, size_t block, const float* scales, float* dst,
                      bool subtractFrom) override {
    const size_t blocks = block ? (n + block - 1) / block : 0;
    return defer("expandBlocks", [=]() -> Status {
      GC_CHECK(arg("expandBlocks", "d", d, n * 4, Access::Read));
      GC_CHECK(arg("expandBlocks", "scales", scales, blocks * 4, Access::Read));
      GC_CHECK(arg("expandBlocks", "dst", dst, n * 4,
                   subtractFrom ? Access::ReadWrite : Access::Write));
      return cpu().expandBlocks(d, n, block, scales, dst, subtractFrom);
    });
  }
  Status fftForward(const float* src, size_t n, size_t chunk, float* spectrum) override {
    GC_CHECK(mem_.planFft(n, chunk));
    return defer("fftForward", [=]() -> Status {
      GC_CHECK(arg("fftForward", "src", src, n * 4, Access::Read));
      GC_CHECK(arg("fftForward", "spectrum", spectrum, fftBinCount(n, chunk) * 8, Access::Write));
      return cpu().fftForward(src, n, chunk, spectrum);
    });
  }
  Status fftInverse(const float* spectrum, size_t n, size_t chunk, float* dst) override {
    GC_CHECK(mem_.planFft(n, chunk));
    return defer("fftInverse", [=]() -> Status {
      GC_CHECK(arg("fftInverse", "spectrum", spectrum, fftBinCount(n, chunk) * 8, Access::Read));
      GC_CHECK(arg("fftInverse", "dst", dst, n * 4, Access::Write));
      return cpu().fftInverse(spectrum, n, chunk, dst);
    });
  }
  Status fftSelectBins(const float* spectrum, size_t n, size_t chunk, double keep,
                       uint8_t* bitmap) override {
    return defer("fftSelectBins", [=]() -> Status {
      const size_t bins = fftBinCount(n, chunk);
      GC_CHECK(arg("fftSelectBins", "spectrum", spectrum, bins * 8, Access::Read));
      GC_CHECK(arg("fftSelectBins", "bitmap", bitmap, packedBytes(bins, 1), Access::Write));
      return cpu().fftSelectBins(spectrum, n, chunk, keep, bitmap);
    });
  }
  Status fftCheckBitmap(const uint8_t* bitmap, size_t n, size_t chunk, double keep,
                        int source) override {
    return defer("fftCheckBitmap", [=]() -> Status {
      GC_CHECK(arg("fftCheckBitmap", "bitmap", bitmap, packedBytes(fftBinCount(n, chunk), 1),
                   Access::Read));
      return cpu().fftCheckBitmap(bitmap, n, chunk, keep, source);
    });
  }
  Status gatherBins(const float* spectrum, const uint8_t* bitmap, size_t bins,
                    float* packed) override {
    return defer("gatherBins", [=]() -> Status {
      GC_CHECK(arg("gatherBins", "bitmap", bitmap, packedBytes(bins, 1), Access::Read));
      GC_CHECK(arg("gatherBins", "spectrum", spectrum, bins * 8, Access::Read));
      GC_CHECK(arg("gatherBins", "packed", packed, setBits(bitmap, bins) * 8, Access::Write));
      return cpu().gatherBins(spectrum, bitmap, bins, packed);
    });
  }
  Status scatterAddBins(const float* packed, const uint8_t* bitmap, size_t bins,
                        float* spectrum) override {
    return defer("scatterAddBins", [=]() -> Status {
      GC_CHECK(arg("scatterAddBins", "bitmap", bitmap, packedBytes(bins, 1), Access::Read));
      GC_CHECK(arg("scatterAddBins", "packed", packed, setBits(bitmap, bins) * 8, Access::Read));
      GC_CHECK(arg("scatterAddBins", "spectrum", spectrum, bins * 8, Access::ReadWrite));
      return cpu().scatterAddBins(packed, bitmap, bins, spectrum);
    });
  }
  Status checkFinite(const float* x, size_t n, int source) override {
    return defer("checkFinite", [=]() -> Status {
      GC_CHECK(arg("checkFinite", "x", x, n * 4, Access::Read));
      return cpu().checkFinite(x, n, source);
    });
  }

 private:
  struct Op {
    std::function<Status()> run;
    bool always;  // runs even after an error (releases)
  };

  static Backend& cpu() { return cpuBackend(); }

  template <class F>
  Status defer(const char* name, F&& f) {
    if (refusal_) {  // setRefusal: nothing is recorded
      Status why = refusal_();
      if (!why.ok()) throw BackendRefused(std::move(why));
    }
    last_.store(name);
    record("", std::forward<F>(f), false);
    return Status::Ok();
  }
  template <class F>
  void record(const char*, F&& f, bool always) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!always) ++traffic_.primitives;
    queue_.push_back(Op{std::function<Status()>(std::forward<F>(f)), always});
  }

  // Scalar results are garbage until sync() writes them.
  static void poison(float* p) { *p = std::numeric_limits<float>::quiet_NaN(); }
  static void poison(size_t* p) { *p = ~size_t(0); }
  static void poison(AccumulateStats* p) {
    p->maxAbs = std::numeric_limits<double>::quiet_NaN();
    p->nonFinite = p->above = ~uint64_t(0);
  }
  static void poison(AbsStats* p) {
    p->maxAbs = std::numeric_limits<double>::quiet_NaN();
    p->nonFinite = ~uint64_t(0);
  }

  // Runs inside sync() (the running batch): the argument's memory and its
  // traffic.
  // `touched` (SIZE_MAX: all of it) is what a kernel would move for host
  // memory accessed sparsely (scatters touch only their entries).
  Status arg(const char* primitive, const char* name, const void* p, size_t bytes, Access access,
             size_t touched = SIZE_MAX) {
    if (bytes == 0) return Status::Ok();
    if (mem_.isDevice(p, bytes)) return Status::Ok();
    GC_REQUIRE(mem_.isHost(p, bytes), Err::InvalidArgument,
               "cpu-device %s: argument '%s' (%zu bytes at %p) is neither device nor host "
               "memory of this backend (a GPU kernel would fault here)",
               primitive, name, bytes, p);
    const uint64_t moved = touched < bytes ? touched : bytes;
    if (access != Access::Write) run_.h2dBytes += moved;
    if (access != Access::Read) run_.d2hBytes += moved;
    return Status::Ok();
  }
  // A scalar result: counted, and refused when it points into a stack frame
  // that has returned (a local of a function that did not sync before
  // returning: on a GPU the write would land in whatever lives there now).
  Status scalar(const void* p, size_t bytes) {
    run_.d2hBytes += bytes;
    const uintptr_t a = uintptr_t(p);
    uintptr_t lo = 0, hi = 0;
    if (stackOf(&lo, &hi) && a >= lo && a < syncFrame_)
      return makeStatus(Err::Internal,
                        "cpu-device: a scalar result at %p lies in a returned stack frame (its "
                        "function did not sync before returning)", p);
    return Status::Ok();
  }
  // The calling thread's stack [lo, hi).
  static bool stackOf(uintptr_t* lo, uintptr_t* hi) {
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) != 0) return false;
    void* addr = nullptr;
    size_t size = 0;
    const bool ok = pthread_attr_getstack(&attr, &addr, &size) == 0;
    pthread_attr_destroy(&attr);
    *lo = uintptr_t(addr);
    *hi = uintptr_t(addr) + size;
    return ok;
  }

  void setOpen(bool open) { mem_.setOpen(open); }
  Status takeError() {
    Status s = error_;
    error_ = Status::Ok();
    return s;
  }

  CpuDeviceMemory mem_;  // first: outlives the queue's releases
  std::atomic<const char*> last_{nullptr};  // lastPrimitive()
  std::function<Status()> refusal_;         // setRefusal (set before the first call)
  mutable std::mutex mu_;  // what follows, up to running_
  std::condition_variable cv_;  // running_ went false
  std::vector<Op> queue_;
  Status error_;
  Traffic traffic_;
  bool running_ = false;  // a sync() runs a batch without mu_
  // The running batch's (the thread in sync() with running_ set).
  uintptr_t syncFrame_ = 0;  // see sync()
  Traffic run_;
};

}  // namespace

std::unique_ptr<Backend> makeCpuDeviceBackend() {
  return std::unique_ptr<Backend>(new CpuDeviceBackend());
}

bool recordCpuDevicePrimitiveForTest(Backend& dev, const char* name, std::function<Status()> op) {
  auto* cpuDevice = dynamic_cast<CpuDeviceBackend*>(&dev);
  if (cpuDevice == nullptr) return false;
  cpuDevice->recordForTest(name, std::move(op));
  return true;
}

}  // namespace gradcomp::device
