// acc = (add ? acc : 0) + fp32(in) with the frame's statistics in the same
// pass (device/backend.h). The loop body is branch-free so the compiler
// vectorizes it: this pass is the one O(n) step every compressed call makes.
#include "device/cpu/accumulate.h"

#include <cfloat>
#include <cmath>

#include "device/cpu/element_traits.h"

namespace gradcomp::device::cpu {
namespace {

template <class Load>
void run(float* acc, size_t n, bool add, float threshold, Load load, AccumulateStats* stats) {
  // Per-lane partials over blocks keep the reductions vectorizable.
  constexpr size_t kBlock = 1024;
  float maxAbs = 0;
  uint64_t nonFinite = 0, above = 0;
  const float th = threshold >= 0 ? threshold : FLT_MAX;  // |x| > FLT_MAX never holds
  for (size_t base = 0; base < n; base += kBlock) {
    const size_t end = base + kBlock < n ? base + kBlock : n;
    float blockMax = 0;
    uint32_t blockBad = 0, blockAbove = 0;
    for (size_t i = base; i < end; ++i) {
      const float v = (add ? acc[i] : 0.0f) + load(i);
      acc[i] = v;
      const float m = std::fabs(v);
      const bool finite = m <= FLT_MAX;  // false for NaN and Inf
      blockBad += !finite;
      blockMax = finite && m > blockMax ? m : blockMax;
      blockAbove += m > th;  // NaN compares false
    }
    maxAbs = blockMax > maxAbs ? blockMax : maxAbs;
    nonFinite += blockBad;
    above += blockAbove;
  }
  stats->maxAbs = maxAbs;
  stats->nonFinite = nonFinite;
  stats->above = threshold >= 0 ? above : 0;
}

}  // namespace

Status accumulate(float* acc, const void* in, DataType inType, size_t n, bool add,
                  float countThreshold, AccumulateStats* stats) {
  AccumulateStats s;
  const bool known = dispatchType(inType, [&](auto traits) {
    using T = decltype(traits);
    using S = typename T::Storage;
    const S* src = static_cast<const S*>(in);
    run(acc, n, add, countThreshold, [src](size_t i) { return convertOne<F32, T>(src[i]); }, &s);
  });
  GC_REQUIRE(known, Err::InvalidArgument, "cpu accumulate: dtype value %d is not a DataType",
             int(inType));
  *stats = s;
  return Status::Ok();
}

}  // namespace gradcomp::device::cpu
