// acc = (add ? acc : 0) + fp32(in) with the frame's statistics in the same
// pass (device/backend.h). This pass is the one O(n) step every compressed
// call makes, so the float32 and bfloat16 inputs have branch-free,
// vectorized loops (multiversion.h); other dtypes convert element by element.
#include "device/cpu/accumulate.h"

#include <cfloat>
#include <cstring>

#include "device/cpu/element_traits.h"
#include "device/cpu/multiversion.h"
#include "device/cpu/sparse_ops.h"

namespace gradcomp::device::cpu {
namespace {

// Statistics of one block, reduced exactly (max, integer counts), so the
// result does not depend on how the loop is vectorized.
struct Partial {
  float maxAbs = 0;
  uint64_t nonFinite = 0, above = 0;
};

constexpr size_t kBlock = 4096;

// The largest |v| is reduced on the bit patterns: for non-negative finite
// floats they order like unsigned integers, and an integer max vectorizes.
__attribute__((always_inline)) inline uint32_t bitsOf(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}

// th: the count threshold (>= 0; FLT_MAX counts nothing but Inf, which the
// caller discounts). For non-negative floats `m > th` is `bits(m) > bits(th)`.
template <bool Add, class Load>
__attribute__((always_inline)) inline void block(float* acc, size_t begin, size_t end, float th,
                                                 Load load, Partial* p) {
  const uint32_t thBits = bitsOf(th);
  uint32_t bmax = 0, bad = 0, over = 0;
  for (size_t i = begin; i < end; ++i) {
    const float v = (Add ? acc[i] : 0.0f) + load(i);
    acc[i] = v;
    // |v| as bits: the sign cleared. Finite iff below the Inf pattern
    // (NaN patterns are above it), so everything here is integer arithmetic.
    const uint32_t mb = bitsOf(v) & 0x7fffffffu;
    const uint32_t finite = mb < 0x7f800000u;
    const uint32_t kept = mb & (0u - finite);  // 0 for NaN and Inf
    bmax = kept > bmax ? kept : bmax;
    bad += 1u - finite;
    over += uint32_t(mb > thBits) & uint32_t(mb <= 0x7f800000u);  // |v| > th; NaN never
  }
  float bm;
  std::memcpy(&bm, &bmax, 4);
  p->maxAbs = bm > p->maxAbs ? bm : p->maxAbs;
  p->nonFinite += bad;
  p->above += over;
}

template <bool Add>
GC_CPU_CLONES void runF32(float* acc, const float* in, size_t n, float th, Partial* p) {
  for (size_t b = 0; b < n; b += kBlock)
    block<Add>(acc, b, b + kBlock < n ? b + kBlock : n, th, [in](size_t i) { return in[i]; }, p);
}

template <bool Add>
GC_CPU_CLONES void runBf16(float* acc, const uint16_t* in, size_t n, float th, Partial* p) {
  auto load = [in](size_t i) {
    const uint32_t bits = uint32_t(in[i]) << 16;  // bfloat16 is the top half of a float
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  };
  for (size_t b = 0; b < n; b += kBlock) block<Add>(acc, b, b + kBlock < n ? b + kBlock : n, th, load, p);
}

template <bool Add, class Load>
void runGeneric(float* acc, size_t n, float th, Load load, Partial* p) {
  for (size_t b = 0; b < n; b += kBlock) block<Add>(acc, b, b + kBlock < n ? b + kBlock : n, th, load, p);
}

// acc[0..n) from in[0..n) into *p (which it extends); false for a DataType
// value that is none.
bool accumulateRange(float* acc, const void* in, DataType inType, size_t n, bool add, float th,
                     Partial* p) {
  if (inType == DataType::Float32) {
    auto* src = static_cast<const float*>(in);
    add ? runF32<true>(acc, src, n, th, p) : runF32<false>(acc, src, n, th, p);
    return true;
  }
  if (inType == DataType::BFloat16) {
    auto* src = static_cast<const uint16_t*>(in);
    add ? runBf16<true>(acc, src, n, th, p) : runBf16<false>(acc, src, n, th, p);
    return true;
  }
  return dispatchType(inType, [&](auto traits) {
    using T = decltype(traits);
    using S = typename T::Storage;
    const S* src = static_cast<const S*>(in);
    auto load = [src](size_t i) { return convertOne<F32, T>(src[i]); };
    add ? runGeneric<true>(acc, n, th, load, p) : runGeneric<false>(acc, n, th, load, p);
  });
}

void report(const Partial& p, float countThreshold, AccumulateStats* stats) {
  stats->maxAbs = p.maxAbs;
  stats->nonFinite = p.nonFinite;
  stats->above = countThreshold >= 0 ? p.above : 0;
}

}  // namespace

Status accumulate(float* acc, const void* in, DataType inType, size_t n, bool add,
                  float countThreshold, AccumulateStats* stats) {
  Partial p;
  // |x| > FLT_MAX never holds; + 0.0f: a -0.0 threshold counts like +0.0
  // (compared as bits below, its sign bit would count nothing).
  const float th = countThreshold >= 0 ? countThreshold + 0.0f : FLT_MAX;
  GC_REQUIRE(accumulateRange(acc, in, inType, n, add, th, &p), Err::InvalidArgument,
             "cpu accumulate: dtype value %d is not a DataType", int(inType));
  report(p, countThreshold, stats);
  return Status::Ok();
}

Status accumulateCompact(float* acc, const void* in, DataType inType, size_t n, bool add,
                         float countThreshold, uint64_t* idx, float* val, size_t capacity,
                         AccumulateStats* stats, size_t* compacted) {
  GC_REQUIRE(countThreshold >= 0, Err::InvalidArgument,
             "cpu accumulateCompact: threshold %g must be >= 0", double(countThreshold));
  countThreshold += 0.0f;  // -0.0 counts like +0.0 (see accumulate)
  const size_t esz = dtypeSize(inType);
  GC_REQUIRE(esz > 0, Err::InvalidArgument, "cpu accumulateCompact: dtype value %d is not a "
             "DataType", int(inType));
  Partial p;
  size_t c = 0;
  bool fits = true;
  for (size_t b = 0; b < n; b += kBlock) {
    const size_t len = n - b < kBlock ? n - b : kBlock;
    const uint64_t before = p.above;
    accumulateRange(acc + b, static_cast<const uint8_t*>(in) + b * esz, inType, len, add,
                    countThreshold, &p);
    const size_t more = size_t(p.above - before);
    fits = fits && more <= capacity - c;
    if (!fits || more == 0) continue;
    // The block is in cache: its entries above the threshold, in index order
    // (the count above and compactAbove agree on NaN, Inf and -0.0).
    const size_t got = compactAboveCounted(acc + b, len, countThreshold, b, idx + c, val + c);
    GC_REQUIRE(got == more, Err::Internal, "cpu accumulateCompact: compacted %zu entries of a "
               "block where %zu were counted", got, more);
    c += got;
  }
  report(p, countThreshold, stats);
  *compacted = fits ? c : Backend::kNotCompacted;
  return Status::Ok();
}

}  // namespace gradcomp::device::cpu
