// The compute interface algorithms use: primitives over buffers in the
// backend's memory spaces. device/cpu is the reference every other backend is
// checked against; device/cuda implements the same primitives as kernels;
// device/cpu_device runs the reference with a GPU's memory discipline (CI).
//
// Memory spaces (the device-resident data path, docs/design.md):
// - device memory (allocate): every O(n) buffer: accumulators, residuals,
//   received data, scratch, COO lists. Host code never reads or writes it;
//   only primitives do. On a GPU it is HBM; the CPU reference uses the heap
//   (hostAccessible() is true there, for references and tests only).
// - host memory (allocateHost): payloads and control words, sized to what
//   crosses the network. Transports send from it and receive into it; host
//   code may read it once the primitives writing it have completed. On a GPU
//   it is mapped pinned memory that kernels address directly.
// - the user's buffers (AllreduceArgs) live in device memory.
// Primitives accept either space for any argument; a primitive that reads
// host memory moves those bytes host -> device, one that writes host memory
// moves them device -> host (Traffic counts both).
//
// Ordering: primitives may run asynchronously, in the order they were called
// (one stream per backend). Scalar results (thresholds, counts, stats,
// verdicts) are written through plain host pointers, which must stay valid
// until the next sync() (never a local of a function that returns first),
// and are valid after it; so is host memory a primitive writes. Host memory a pending
// primitive reads must stay unchanged until sync(). A returned Status
// reports argument errors at the call; errors found while running (malformed
// wire data, out-of-range indexes) are reported by sync(), the first one,
// naming the primitive and `source` (the rank the data came from; -1 none).
// After such an error the outputs of the failing primitive and of every later
// one up to that sync() are unspecified (a backend may skip them or run
// copies and fills regardless); the caller discards the call's results.
// deallocate()/deallocateHost() are ordered after every earlier primitive.
// Algorithms therefore sync at communication rounds, never per primitive.
//
// Arithmetic contract (the reference semantics):
// - float16/bfloat16 are computed in fp32 and rounded to nearest even once per
//   primitive; float32 in fp32; float64 in fp64.
// - divide() and scale() compute in fp64 and round once to the element type.
// - NaN and Inf propagate as IEEE arithmetic does; nothing is flushed to zero.
// - Reductions whose order shows in the result (blockDot) use one fixed order
//   that every backend reproduces (documented at the primitive).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <new>
#include <stdexcept>
#include <string>

#include "common/dtype.h"
#include "common/status.h"
#include "device/quant_types.h"

namespace gradcomp::device {

// Bytes a backend moved between host and device memory, and its host
// synchronizations (cumulative since creation or resetTraffic()).
struct Traffic {
  uint64_t d2hBytes = 0;  // device -> host: payloads written, scalars read back
  uint64_t h2dBytes = 0;  // host -> device: payloads read
  uint64_t syncs = 0;     // sync() calls that had work to wait for
  uint64_t primitives = 0;
};

// One pass over a call's input (Backend::accumulate): the fused load of the
// error-feedback accumulator and everything the frames decide from it.
struct AccumulateStats {
  double maxAbs = 0;       // largest |acc[i]| over finite values
  uint64_t nonFinite = 0;  // NaN and +-Inf in acc
  uint64_t above = 0;      // #{i : |acc[i]| > threshold} (threshold >= 0)
};

// What a primitive of a refusing backend throws (Backend::setRefusal): it
// carries the refusal's status; the call runner (algorithms/call_check.h)
// turns it into the call's error.
class BackendRefused : public std::runtime_error {
 public:
  explicit BackendRefused(Status why) : std::runtime_error(why.toString()), why_(std::move(why)) {}
  const Status& status() const { return why_; }

 private:
  Status why_;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // ---- Memory ----------------------------------------------------------
  // Device memory, 64-byte aligned; nullptr when it cannot be had.
  // Thread-safe. The default (the CPU reference) is the heap.
  virtual void* allocate(size_t bytes) {
    return ::operator new(bytes ? bytes : 1, std::align_val_t(64), std::nothrow);
  }
  virtual void deallocate(void* p, size_t bytes) {
    (void)bytes;
    ::operator delete(p, std::align_val_t(64));
  }
  // Host memory for payloads and control words, 64-byte aligned.
  virtual void* allocateHost(size_t bytes) { return Backend::allocate(bytes); }
  virtual void deallocateHost(void* p, size_t bytes) { Backend::deallocate(p, bytes); }
  // True when host code may read device memory (the CPU reference only: its
  // references and tests inspect results in place). Algorithms never ask.
  virtual bool hostAccessible() const { return false; }
  // True when every primitive completes inside its call on the calling
  // thread (the CPU reference): sync() waits for nothing, and a schedule may
  // sync as often as it likes to interleave its host work with transfers.
  virtual bool synchronous() const { return false; }

  // ---- The proxy contract (docs/design.md, "Who may call what, and when") ----
  // While a caller's stream is parked on a call, the threads running it make
  // no call that can take the driver's locks or synchronize: memory comes
  // from what reserve() set aside, FFT plans from prepareFft(). Backends with
  // no driver (the CPU reference) accept everything and check nothing.
  struct Reservation {
    size_t deviceBytes = 0;
    size_t hostBytes = 0;
  };
  // Calling thread, before the wait is enqueued: after it, `r` more bytes of
  // each space can be allocated without growing the backend's memory.
  virtual Status reserve(const Reservation& r) {
    (void)r;
    return Status::Ok();
  }
  // Calling thread: whether reserve(r) would grow memory now (a driver call
  // that may wait for a stream parked on an earlier call: CallBudget::plan
  // then has the executor let earlier calls finish first).
  virtual bool reserveWouldGrow(const Reservation& r) const {
    (void)r;
    return false;
  }
  // Calling thread: creates the FFT plans fftForward/fftInverse(n, chunk) use.
  virtual Status prepareFft(size_t n, size_t chunk) {
    (void)n, (void)chunk;
    return Status::Ok();
  }
  // Brackets the part of a call that runs while its caller's stream is parked
  // (`what` names the call in messages). strict: growth and plan creation
  // while parked are refused (GRADCOMP_PROXY_CHECK=error), else only recorded.
  virtual void park(const std::string& what, bool strict) { (void)what, (void)strict; }
  // The CUDA executor's watchdog (plugin/nccl/cuda_executor_proxy.h): once
  // `refused` answers an error (the watchdog released the caller's stream
  // while the call's job still runs), every later primitive throws
  // BackendRefused with it before it enqueues anything, so nothing of that
  // job writes behind the caller's stream. Set once, before the first call;
  // `refused` must be cheap and thread-safe. Backends that never run under a
  // watchdog ignore it.
  virtual void setRefusal(std::function<Status()> refused) { (void)refused; }
  // Ends it: *drawn = the bytes the call carved beyond the backend's free
  // blocks (what a later call of its shape reserves). An error lists what the
  // call did against the contract.
  virtual Status unpark(const Reservation& promised, Reservation* drawn) {
    (void)promised;
    if (drawn) *drawn = Reservation{};
    return Status::Ok();
  }
  // The primitive enqueued last (for a watchdog's message); nullptr if none.
  virtual const char* lastPrimitive() const { return nullptr; }

  // ---- Ordering ----------------------------------------------------------
  // Waits for every primitive called so far (bounded: a device that makes no
  // progress for GRADCOMP_TIMEOUT_S is a Timeout) and returns the first error
  // one of them found. Synchronous backends return Ok at once.
  virtual Status sync() { return Status::Ok(); }
  virtual Traffic traffic() const { return Traffic{}; }
  virtual void resetTraffic() {}

  // ---- Element-wise ------------------------------------------------------
  // dst[i] = a[i] + b[i]; dst may alias a or b.
  virtual Status add(void* dst, const void* a, const void* b, size_t n, DataType t) = 0;
  // buf[i] = buf[i] / divisor (fp64, one rounding; integers truncate).
  virtual Status divide(void* buf, size_t n, DataType t, int divisor) = 0;
  // buf[i] = buf[i] * factor (floating dtypes; fp64, one rounding: exact for
  // -1 and for powers of two in range).
  virtual Status scale(void* buf, size_t n, DataType t, double factor) = 0;
  // Any direction between the spaces; dst may overlap src only if equal.
  virtual Status copy(void* dst, const void* src, size_t bytes) = 0;
  // dst[0..bytes) = 0 (+0.0 in every float type).
  virtual Status zero(void* dst, size_t bytes) = 0;
  // Element conversion between any two DataTypes (float ones round to nearest even).
  virtual Status convert(void* dst, DataType dstType, const void* src, DataType srcType,
                         size_t n) = 0;
  // dst[i] = a[i] - b[i] in fp32; dst may alias a or b.
  virtual Status subtract(float* dst, const float* a, const float* b, size_t n) = 0;

  // ---- Error feedback ------------------------------------------------------
  // The error-feedback accumulator in one pass: acc[i] = (add ? acc[i] : 0) +
  // fp32(in[i]) (one rounding for float64 inputs; none for the others), and
  // *stats of the new acc (above: countThreshold >= 0, else 0). With add,
  // acc is the residual and becomes residual + gradient in place.
  virtual Status accumulate(float* acc, const void* in, DataType inType, size_t n, bool add,
                            float countThreshold, AccumulateStats* stats) = 0;
  // accumulate() that may also compact, in the same pass, every i with
  // |acc[i]| > countThreshold (>= 0) into (idx, val) as compactAbove(acc, n,
  // countThreshold, 0, 0, idx, val, ...) would, when they fit: *compacted
  // (valid after the next sync, like *stats) is stats->above when it did and
  // it is at most `capacity`, else kNotCompacted (idx and val then hold
  // nothing the caller may use). The default compacts nothing; the CPU
  // reference, for which the extra pass over acc is what a top-k call costs
  // most after this one, compacts while each block is in cache.
  static constexpr size_t kNotCompacted = ~size_t(0);
  // True when accumulateCompact compacts (callers then provide buffers).
  virtual bool compactsInAccumulate() const { return false; }
  virtual Status accumulateCompact(float* acc, const void* in, DataType inType, size_t n,
                                   bool add, float countThreshold, uint64_t* idx, float* val,
                                   size_t capacity, AccumulateStats* stats, size_t* compacted) {
    (void)idx, (void)val, (void)capacity;
    *compacted = kNotCompacted;
    return accumulate(acc, in, inType, n, add, countThreshold, stats);
  }

  // ---- Sparse (top-k family, algorithms/sparse) ----------------------------
  // Values are fp32, indexes uint64; a COO list is (idx[], val[], count) sorted
  // strictly ascending by index. "Zero" means the bit pattern +0.0: -0.0 is a
  // value. Selection is by |x|; NaN is never selected and counts as smaller
  // than every number.

  // *threshold = the k-th largest |x[i]| (1 <= k <= n; 0 when fewer than k
  // are numbers), by selection, not a sort; *above (nullable) = the number of
  // |x[i]| > *threshold, so a top-k compaction (tieBudget k - above) selects
  // exactly k entries when *threshold > 0 and `above` when it is 0.
  virtual Status kthLargestAbs(const float* x, size_t n, size_t k, float* threshold,
                               size_t* above) = 0;
  // *count = #{i : |x[i]| > threshold}.
  virtual Status countAbove(const float* x, size_t n, float threshold, size_t* count) = 0;
  // Compaction to COO: every i with |x[i]| > threshold, plus (threshold > 0
  // only) the first `tieBudget` i with |x[i]| == threshold, in index order;
  // written indexes are indexBase + i. More than `capacity` is Internal.
  // count (nullable: callers that know it) receives the number selected.
  // zeroSelected: every selected x[i] becomes +0.0 in the same pass (the
  // residual update of top-k error feedback).
  virtual Status compactAbove(float* x, size_t n, float threshold, size_t tieBudget,
                              uint64_t indexBase, uint64_t* idx, float* val, size_t capacity,
                              size_t* count, bool zeroSelected) = 0;
  // dst[idx[i] - base] += val[i] for i in order; an index outside
  // [base, base + n) is InvalidArgument (nothing past it is applied).
  virtual Status scatterAdd(float* dst, size_t n, uint64_t base, const uint64_t* idx,
                            const float* val, size_t count) = 0;
  // dst[idx[i] - base] = +0.0 (same range rule as scatterAdd).
  virtual Status scatterZero(float* dst, size_t n, uint64_t base, const uint64_t* idx,
                             size_t count) = 0;
  // counts[j] = #{i : |x[i]| > thresholds[j]} for j < m <= kCountAboveManyMax
  // (more is InvalidArgument), in one pass; a NaN threshold counts nothing.
  static constexpr size_t kCountAboveManyMax = 256;
  virtual Status countAboveMany(const float* x, size_t n, const float* thresholds, size_t m,
                                size_t* counts) = 0;
  // *sum = sum of x[i], *sumSquares = sum of x[i]^2 over finite x (fp64), in
  // this fixed order: blocks of 4096 elements, each summed by 256 lanes (lane
  // l adds i = l, l + 256, ... in turn, lanes then added pairwise l += l + s
  // for s = 128, ..., 1), block results added in block order.
  virtual Status moments(const float* x, size_t n, double* sum, double* sumSquares) = 0;
  // dst[i] = x[idx[i]] (fp32); an index >= n is InvalidArgument.
  virtual Status gatherValues(float* dst, const float* x, size_t n, const uint64_t* idx,
                              size_t count) = 0;
  // dst[i] = src[pos[i]]; a position >= srcCount is Internal.
  virtual Status gather(uint64_t* dst, const uint64_t* src, size_t srcCount, const uint64_t* pos,
                        size_t count) = 0;
  // pos[j] = first i with sorted[i] >= keys[j] (n when none).
  virtual Status lowerBound(const uint64_t* sorted, size_t n, const uint64_t* keys, size_t nkeys,
                            uint64_t* pos) = 0;
  // x[i - base] = +0.0 for every i in both sorted lists a and b.
  virtual Status zeroIntersection(float* x, size_t n, uint64_t base, const uint64_t* a,
                                  size_t na, const uint64_t* b, size_t nb) = 0;
  // out = a + b as COO (union of the indexes, values summed in fp32 where both
  // have one: a + b); more than capacity entries is Internal.
  virtual Status mergeAdd(const uint64_t* aIdx, const float* aVal, size_t na,
                          const uint64_t* bIdx, const float* bVal, size_t nb, uint64_t* outIdx,
                          float* outVal, size_t capacity, size_t* count) = 0;
  // out = a AND b (sorted); more than capacity entries is Internal.
  virtual Status intersect(const uint64_t* a, size_t na, const uint64_t* b, size_t nb,
                           uint64_t* out, size_t capacity, size_t* count) = 0;
  // RemoteError (deferred) unless sub is strictly ascending and every entry
  // is in the sorted list `set`.
  virtual Status checkSubset(const uint64_t* sub, size_t nsub, const uint64_t* set, size_t nset,
                             int source) = 0;
  // RemoteError (deferred) unless idx is strictly ascending.
  virtual Status checkAscending(const uint64_t* idx, size_t n, int source) = 0;

  // Message bodies of the sparse wire format (algorithms/sparse/wire_format.h).
  // Encoders validate their input (ascending, in [base, base + count), not
  // +0.0: Internal otherwise); decoders validate everything they read
  // (RemoteError naming `source`) and never access outside their buffers.
  // COO: nnz offsets (indexBytes = 4 or 8, little-endian, relative to base)
  // then nnz fp32 values.
  virtual Status cooEncode(const uint64_t* idx, const float* val, size_t nnz, uint64_t base,
                           uint64_t count, int indexBytes, void* out) = 0;
  virtual Status cooDecode(const void* in, size_t nnz, uint64_t base, uint64_t count,
                           int indexBytes, uint64_t* idx, float* val, int source) = 0;
  // Dense: count fp32 values, zero where the list has no entry.
  virtual Status denseEncode(const uint64_t* idx, const float* val, size_t nnz, uint64_t base,
                             uint64_t count, void* out) = 0;
  // Exactly nnz values whose bits are not +0.0 (RemoteError otherwise).
  virtual Status denseDecode(const void* in, uint64_t count, uint64_t base, size_t nnz,
                             uint64_t* idx, float* val, int source) = 0;
  // DenseStream (algorithms.md section 4): blocks [start, length, values],
  // start/length as little-endian `indexBytes` (4 or 8) relative to base, fp32
  // values; blocks begin and end with a non-zero and hold zero runs of at
  // most T = 2 * indexBytes / 4. Exact size first, then the encoding:
  virtual Status denseStreamSize(const uint64_t* idx, size_t count, int indexBytes, size_t* bytes,
                                 size_t* blocks) = 0;
  virtual Status denseStreamEncode(const uint64_t* idx, const float* val, size_t count,
                                   uint64_t base, int indexBytes, void* out, size_t bytes) = 0;
  // Decodes exactly `blocks` blocks filling exactly `bytes` into exactly
  // `nnz` non-zero entries (indexes base + offset) over a region of n.
  virtual Status denseStreamDecode(const void* in, size_t bytes, size_t blocks, uint64_t n,
                                   uint64_t base, int indexBytes, size_t nnz, uint64_t* idx,
                                   float* val, int source) = 0;
  // Index sets without values (a shared index set, cltk): indexBytes 4 or 8:
  // `count` little-endian offsets relative to base; kIndexBitmap: ceil(n / 8)
  // bytes, bit i (least significant first) set iff base + i is in the set.
  // Encode takes `count` strictly ascending indexes in [base, base + n)
  // (Internal otherwise); decode yields exactly `count` such indexes, a bitmap
  // with exactly `count` bits set and zero padding bits (RemoteError naming
  // `source` otherwise).
  static constexpr int kIndexBitmap = 0;
  static size_t indexSetBytes(size_t count, uint64_t n, int indexBytes) {
    return indexBytes == kIndexBitmap ? size_t((n + 7) / 8) : count * size_t(indexBytes);
  }
  virtual Status indexEncode(const uint64_t* idx, size_t count, uint64_t base, uint64_t n,
                             int indexBytes, void* out) = 0;
  virtual Status indexDecode(const void* in, size_t count, uint64_t base, uint64_t n,
                             int indexBytes, uint64_t* idx, int source) = 0;

  // ---- Quantized family (algorithms/quant): max-min, RBF, sign, FFT ---------
  // Layouts, rounding and edge-value rules are in device/quant_types.h. Code
  // streams are packed bit streams. `residual` (nullable) receives
  // src[i] - decoded(code i) in fp32 in the same pass (may alias src): the
  // error-feedback update of the encoding.

  // Largest finite |x| and the non-finite count.
  virtual Status absStats(const float* src, size_t n, AbsStats* out) = 0;
  // Bucketed max-min quantization with counter-based stochastic rounding:
  // meta gets 2 floats per bucket, codes packedBytes(n, spec.bits) bytes.
  // Element i draws counterUniform(spec.seed, indexBase + i).
  virtual Status quantizeMaxMin(const float* src, size_t n, const MaxMinSpec& spec,
                                uint64_t indexBase, float* meta, uint8_t* codes,
                                float* residual) = 0;
  // dst[i] = decoded (accumulate: dst[i] += decoded, in fp32). RemoteError when
  // meta is not finite with min <= max, or padding bits are set.
  virtual Status dequantizeMaxMin(const float* meta, const uint8_t* codes, size_t n,
                                  const MaxMinSpec& spec, float* dst, bool accumulate,
                                  int source) = 0;
  // RBF words of spec.bits bits: codes gets packedBytes(n, spec.bits) bytes.
  virtual Status rbfEncode(const float* src, size_t n, const RbfSpec& spec, uint8_t* codes,
                           float* residual) = 0;
  // dst[i] (+)= decoded; RemoteError on set padding bits.
  virtual Status rbfDecode(const uint8_t* codes, size_t n, const RbfSpec& spec, float* dst,
                           bool accumulate, int source) = 0;
  // Segmented RBF (FFT payloads): `segments` runs of values, run s holding
  // `perSegment` values (the last one `lastSegment`). Each non-empty run is
  // written as [vmax fp32][packedBytes(len, bits) code bytes], vmax =
  // fixedVmax when > 0, else the run's largest finite |value|; runs follow
  // each other (rbfSegmentsBytes). Decoding checks each vmax (finite, >= 0)
  // and the padding bits.
  virtual Status rbfEncodeSegments(const float* values, size_t segments, size_t perSegment,
                                   size_t lastSegment, int bits, int mantissa, double fixedVmax,
                                   uint8_t* out) = 0;
  virtual Status rbfDecodeSegments(const uint8_t* in, size_t segments, size_t perSegment,
                                   size_t lastSegment, int bits, int mantissa, float* values,
                                   int source) = 0;
  // bits[i] = (src[i] > 0): -0, 0 and NaN vote negative. packedBytes(n, 1) bytes.
  virtual Status signPack(const float* src, size_t n, uint8_t* bits) = 0;
  // countsOut[i] = countsIn[i] + signBits[i] as outBits-wide fields (countsIn
  // nullptr: 0). RemoteError when an input count exceeds maxIn (it covers at
  // most maxIn ranks), or padding bits are set.
  virtual Status signCountAdd(const uint8_t* countsIn, int inBits, int maxIn,
                              const uint8_t* signBits, size_t n, uint8_t* countsOut, int outBits,
                              int source) = 0;
  // Majority of nranks votes: bit = (2 * count > nranks); a tie (2 * count
  // == nranks) gives signTieUp(ties, indexBase + i) (quant_types.h). RemoteError
  // when a count exceeds nranks.
  virtual Status signMajority(const uint8_t* counts, int bits, size_t n, int nranks,
                              const SignTies& ties, uint64_t indexBase, uint8_t* decision) = 0;
  // dst[i] = bit ? pos : neg. RemoteError on set padding bits.
  virtual Status signExpand(const uint8_t* bits, size_t n, float pos, float neg, float* dst,
                            int source) = 0;
  // Per block b of `block` elements (the last one shorter): out[b] =
  // fp32(D_b / |b|), D_b = sum over the block of x[i] * d[i] in fp64, summed
  // in this fixed order: lane l in [0, 256) adds i = l, l + 256, l + 512, ...
  // of the block in turn, then lanes are added pairwise, lane l += lane
  // l + s for s = 128, 64, ..., 1; the result is lane 0.
  virtual Status blockDot(const float* x, const float* d, size_t n, size_t block,
                          float* out) = 0;
  // v = d[i] > 0 ? scales[b] : -scales[b] for i in block b; dst[i] = v, or
  // dst[i] - v with subtractFrom (fp32). dst may alias d.
  virtual Status expandBlocks(const float* d, size_t n, size_t block, const float* scales,
                              float* dst, bool subtractFrom) = 0;
  // Chunked real-to-complex FFT of src[0..n) into fftBinCount(n, chunk)
  // interleaved complex bins (unnormalized).
  virtual Status fftForward(const float* src, size_t n, size_t chunk, float* spectrum) = 0;
  // Inverse of fftForward, normalized by each chunk's length. spectrum is read only.
  virtual Status fftInverse(const float* spectrum, size_t n, size_t chunk, float* dst) = 0;
  // Per chunk, set in `bitmap` (packedBytes(bins, 1) bytes, bit = bin index in
  // the whole spectrum) the fftKeepCount(bins_c, keep) bins of largest energy
  // w*|X|^2, w = 1 for DC and Nyquist, 2 otherwise (what they carry in the time
  // domain); ties go to the lower bin.
  virtual Status fftSelectBins(const float* spectrum, size_t n, size_t chunk, double keep,
                               uint8_t* bitmap) = 0;
  // RemoteError unless every chunk of `bitmap` keeps exactly
  // fftKeepCount(bins_c, keep) bins and the padding bits are zero.
  virtual Status fftCheckBitmap(const uint8_t* bitmap, size_t n, size_t chunk, double keep,
                                int source) = 0;
  // packed gets (re, im) of every bin set in bitmap, in bin order.
  virtual Status gatherBins(const float* spectrum, const uint8_t* bitmap, size_t bins,
                            float* packed) = 0;
  // spectrum[bin] += packed value, for bins set in bitmap, in bin order.
  virtual Status scatterAddBins(const float* packed, const uint8_t* bitmap, size_t bins,
                                float* spectrum) = 0;
  // RemoteError unless every x[i] is finite.
  virtual Status checkFinite(const float* x, size_t n, int source) = 0;

  // ---- Block quantization (allgather blockq; quant_types.h) ----------------
  // out gets blockqBytes(n, spec): the block scales then the packed codes.
  // Backends without these kernels answer Unsupported (the CPU reference,
  // cpu-device and CUDA have them).
  virtual Status blockqEncode(const float* src, size_t n, const BlockQuantSpec& spec,
                              uint8_t* out) {
    (void)src, (void)n, (void)spec, (void)out;
    return makeStatus(Err::Unsupported, "backend %s has no blockq primitives", name());
  }
  // dst[i] = decoded. RemoteError naming `source` when a scale is NaN, a code
  // is one its block cannot hold, or padding bits are set.
  virtual Status blockqDecode(const uint8_t* in, size_t n, const BlockQuantSpec& spec,
                              float* dst, int source) {
    (void)in, (void)n, (void)spec, (void)dst, (void)source;
    return makeStatus(Err::Unsupported, "backend %s has no blockq primitives", name());
  }
};

// Bytes of rbfEncodeSegments' output.
inline size_t rbfSegmentsBytes(size_t segments, size_t perSegment, size_t lastSegment, int bits) {
  if (segments == 0) return 0;
  auto one = [bits](size_t len) { return len ? sizeof(float) + packedBytes(len, bits) : 0; };
  return (segments - 1) * one(perSegment) + one(lastSegment);
}

// The process-wide CPU reference backend (stateless, thread-safe, synchronous,
// hostAccessible).
Backend& cpuBackend();

}  // namespace gradcomp::device
