// Sorted index lists on the GPU: scatters, gather, lower bounds, and the
// merge family (union with sums, intersection, zeroing of an intersection,
// subset and order checks). Lists are COO indexes, strictly ascending by
// contract, so a merge is rank arithmetic: entry a[i] of the union lands at
// i + #{b < a[i]} - #{common values < a[i]}, the last term an exclusive scan
// of "a[i] is also in b" (binary searches). Output equals the CPU's
// sequential merge (device/cpu/sparse_select.cc) entry for entry.
#include "device/cuda/cuda_backend.h"
#include "device/cuda/kernel_common.cuh"

namespace gradcomp::device {
namespace {

using namespace cuda;

// ---- scatterAdd / scatterZero -------------------------------------------------
// Check pass: the first index outside [base, base + n) fails the primitive
// (nothing is applied, as the contract allows: nothing past it is); an index
// not above its predecessor tags this launch so the apply pass runs the adds
// in order on one thread (repeated indexes: the CPU's order of additions).
__global__ void scatterCheck(Ctl ctl, const uint64_t* idx, size_t count, size_t n, uint64_t base,
                             unsigned long long* unorderedTag) {
  if (skipBlock(ctl)) return;
  GC_GRID_STRIDE(i, count) {
    const uint64_t v = idx[i];
    if (!(v >= base && v - base < n)) fail(ctl, keyAt(i), v);
    if (i > 0 && v <= idx[i - 1]) *reinterpret_cast<volatile unsigned long long*>(unorderedTag) = ctl.launch;
  }
}

__global__ void scatterApply(Ctl ctl, float* dst, uint64_t base, const uint64_t* idx,
                             const float* val, size_t count, const unsigned long long* unorderedTag,
                             unsigned long long checkLaunch) {
  if (skipBlock(ctl)) return;
  const bool serial = val && loadVolatile(unorderedTag) == checkLaunch;
  if (!serial) {
    GC_GRID_STRIDE(i, count) {
      float* d = dst + (idx[i] - base);
      *d = val ? __fadd_rn(*d, val[i]) : 0.0f;
    }
  } else if (blockIdx.x == 0 && threadIdx.x == 0) {
    for (size_t i = 0; i < count; ++i) {
      float* d = dst + (idx[i] - base);
      *d = __fadd_rn(*d, val[i]);
    }
  }
}

Status scatterFailure(const OpInfo& op, const FailureRecord& f) {
  return makeStatus(Err::InvalidArgument, "%s: index %llu (entry %llu) outside [%llu, %llu)",
                    op.name, f.a, keyPos(f.key), op.p[0], op.p[0] + op.p[1]);
}

Status scatter(CudaBackend& be, const char* what, float* dst, size_t n, uint64_t base,
               const uint64_t* idx, const float* val, size_t count) {
  Prim p(be.state(), what);
  if (count == 0) return Status::Ok();
  p.reads(idx, count * 8);
  if (val) p.reads(val, count * 4);
  if (val) p.reads(dst, n * 4, count * 4);
  p.writes(dst, n * 4, count * 4);
  p.onFailure(-1, &scatterFailure, base, n);
  unsigned long long* tag = &p.control()->flagLaunch;
  scatterCheck<<<blocksFor(count, 4), kThreads, 0, p.stream()>>>(p.ctl(), idx, count, n, base, tag);
  const unsigned long long checkLaunch = p.lastLaunch();
  scatterApply<<<blocksFor(count, 4), kThreads, 0, p.stream()>>>(p.ctl(), dst, base, idx, val,
                                                                 count, tag, checkLaunch);
  return p.launched();
}

// ---- gather / lowerBound ------------------------------------------------------
__global__ void gatherKernel(Ctl ctl, uint64_t* dst, const uint64_t* src, size_t srcCount,
                             const uint64_t* pos, size_t count) {
  if (skipBlock(ctl)) return;
  GC_GRID_STRIDE(i, count) {
    const uint64_t at = pos[i];
    if (at >= srcCount) fail(ctl, keyAt(i), at);
    else dst[i] = src[at];
  }
}

Status gatherFailure(const OpInfo& op, const FailureRecord& f) {
  return makeStatus(Err::Internal, "gather: position %llu (entry %llu) outside a list of %llu",
                    f.a, keyPos(f.key), op.p[0]);
}

__global__ void lowerBoundKernel(Ctl ctl, const uint64_t* sorted, size_t n, const uint64_t* keys,
                                 size_t nkeys, uint64_t* pos) {
  if (skipBlock(ctl)) return;
  GC_GRID_STRIDE(j, nkeys) pos[j] = lowerBoundOf(sorted, n, keys[j]);
}

// ---- zeroIntersection -----------------------------------------------------------
__global__ void zeroIntersectionKernel(Ctl ctl, float* x, size_t n, uint64_t base,
                                       const uint64_t* a, size_t na, const uint64_t* b,
                                       size_t nb) {
  if (skipBlock(ctl)) return;
  GC_GRID_STRIDE(i, na) {
    const uint64_t v = a[i];
    const size_t j = lowerBoundOf(b, nb, v);
    if (j == nb || b[j] != v) continue;
    if (!(v >= base && v - base < n)) fail(ctl, keyAt(i), v);
    else x[v - base] = 0.0f;
  }
}

Status zeroIntersectionFailure(const OpInfo& op, const FailureRecord& f) {
  return makeStatus(Err::InvalidArgument, "zeroIntersection: index %llu outside [%llu, %llu)",
                    f.a, op.p[0], op.p[0] + op.p[1]);
}

// ---- mergeAdd / intersect ---------------------------------------------------------
// (a[i] also in b, 0).
struct InOther {
  const uint64_t* a;
  const uint64_t* b;
  size_t nb;
  __device__ Pair operator()(size_t i, const Ctl&) const {
    const size_t j = lowerBoundOf(b, nb, a[i]);
    return {j < nb && b[j] == a[i] ? 1ull : 0ull, 0};
  }
};

// Union size na + nb - common; more than capacity fails before any write.
// common[na] = the total, for the b side's ranks.
struct MergeTotal {
  size_t na, nb, capacity;
  uint64_t* common;
  size_t* count;
  __device__ void operator()(const Pair& all, const Ctl& ctl) const {
    const unsigned long long out = na + nb - all.a;
    common[na] = all.a;
    if (out > capacity) fail(ctl, 0, out);
    else *count = size_t(out);
  }
};

struct MergeWriteA {
  const uint64_t* aIdx;
  const float* aVal;
  const uint64_t* bIdx;
  const float* bVal;
  size_t nb;
  uint64_t* common;  // exclusive count of common values before a[i]
  uint64_t* outIdx;
  float* outVal;
  __device__ void operator()(size_t i, Pair before, Pair mine, const Ctl&) const {
    const uint64_t v = aIdx[i];
    const size_t j = lowerBoundOf(bIdx, nb, v);
    const size_t pos = i + j - size_t(before.a);
    common[i] = before.a;
    outIdx[pos] = v;
    outVal[pos] = mine.a ? __fadd_rn(aVal[i], bVal[j]) : aVal[i];
  }
};

// Entries of b not in a: b[j] lands at j + #{a < b[j]} - common[#{a < b[j]}].
__global__ void mergeWriteB(Ctl ctl, const uint64_t* aIdx, size_t na, const uint64_t* bIdx,
                            const float* bVal, size_t nb, const uint64_t* common,
                            uint64_t* outIdx, float* outVal) {
  if (skipBlock(ctl)) return;
  GC_GRID_STRIDE(j, nb) {
    const uint64_t v = bIdx[j];
    const size_t k = lowerBoundOf(aIdx, na, v);
    if (k < na && aIdx[k] == v) continue;  // written by the a side
    const size_t pos = j + k - size_t(common[k]);
    outIdx[pos] = v;
    outVal[pos] = bVal[j];
  }
}

Status mergeFailure(const OpInfo& op, const FailureRecord&) {
  return makeStatus(Err::Internal, "%s: more than capacity = %llu entries", op.name, op.p[0]);
}

struct IntersectTotal {
  size_t capacity;
  size_t* count;
  __device__ void operator()(const Pair& all, const Ctl& ctl) const {
    if (all.a > capacity) fail(ctl, 0, all.a);
    else *count = size_t(all.a);
  }
};
struct IntersectWrite {
  const uint64_t* a;
  uint64_t* out;
  __device__ void operator()(size_t i, Pair before, Pair mine, const Ctl&) const {
    if (mine.a) out[before.a] = a[i];
  }
};

// ---- checkAscending / checkSubset ---------------------------------------------
// Kind 0 (order) over the whole list comes before kind 1 (membership), as the
// CPU checks the order first.
__global__ void checkListKernel(Ctl ctl, const uint64_t* sub, size_t nsub, const uint64_t* set,
                                size_t nset, bool membership) {
  if (skipBlock(ctl)) return;
  GC_GRID_STRIDE(i, nsub) {
    const uint64_t v = sub[i];
    if (i > 0 && v <= sub[i - 1]) fail(ctl, keyKind(0, i), v, sub[i - 1]);
    if (membership) {
      const size_t j = lowerBoundOf(set, nset, v);
      if (j == nset || set[j] != v) fail(ctl, keyKind(1, i), v);
    }
  }
}

Status listFailure(const OpInfo& op, const FailureRecord& f) {
  const std::string from = fromRank(op.source);
  if (keyKindFirst(f.key) == 0)
    return makeStatus(Err::RemoteError,
                      "sparse data%s: indexes not strictly ascending at entry %llu (%llu after %llu)",
                      from.c_str(), keyKindPos(f.key), f.a, f.b);
  return makeStatus(Err::RemoteError,
                    "sparse data%s: index %llu (entry %llu) is not in the expected set",
                    from.c_str(), f.a, keyKindPos(f.key));
}

}  // namespace

Status CudaBackend::scatterAdd(float* dst, size_t n, uint64_t base, const uint64_t* idx,
                               const float* val, size_t count) {
  return scatter(*this, "scatterAdd", dst, n, base, idx, val, count);
}

Status CudaBackend::scatterZero(float* dst, size_t n, uint64_t base, const uint64_t* idx,
                                size_t count) {
  return scatter(*this, "scatterZero", dst, n, base, idx, nullptr, count);
}

Status CudaBackend::gather(uint64_t* dst, const uint64_t* src, size_t srcCount,
                           const uint64_t* pos, size_t count) {
  Prim p(state(), "gather");
  if (count == 0) return Status::Ok();
  p.reads(pos, count * 8);
  p.reads(src, srcCount * 8, count * 8);
  p.writes(dst, count * 8);
  p.onFailure(-1, &gatherFailure, srcCount);
  gatherKernel<<<blocksFor(count, 4), kThreads, 0, p.stream()>>>(p.ctl(), dst, src, srcCount, pos,
                                                                 count);
  return p.launched();
}

Status CudaBackend::lowerBound(const uint64_t* sorted, size_t n, const uint64_t* keys,
                               size_t nkeys, uint64_t* pos) {
  Prim p(state(), "lowerBound");
  if (nkeys == 0) return Status::Ok();
  p.reads(keys, nkeys * 8);
  p.reads(sorted, n * 8, nkeys * 8 * 64);
  p.writes(pos, nkeys * 8);
  lowerBoundKernel<<<blocksFor(nkeys), kThreads, 0, p.stream()>>>(p.ctl(), sorted, n, keys, nkeys,
                                                                  pos);
  return p.launched();
}

Status CudaBackend::zeroIntersection(float* x, size_t n, uint64_t base, const uint64_t* a,
                                     size_t na, const uint64_t* b, size_t nb) {
  Prim p(state(), "zeroIntersection");
  if (na == 0 || nb == 0) return Status::Ok();
  p.reads(a, na * 8);
  p.reads(b, nb * 8);
  p.writes(x, n * 4, (na < nb ? na : nb) * 4);
  p.onFailure(-1, &zeroIntersectionFailure, base, n);
  zeroIntersectionKernel<<<blocksFor(na), kThreads, 0, p.stream()>>>(p.ctl(), x, n, base, a, na,
                                                                     b, nb);
  return p.launched();
}

Status CudaBackend::mergeAdd(const uint64_t* aIdx, const float* aVal, size_t na,
                             const uint64_t* bIdx, const float* bVal, size_t nb, uint64_t* outIdx,
                             float* outVal, size_t capacity, size_t* count) {
  Prim p(state(), "mergeAdd");
  size_t* slot = nullptr;
  GC_CHECK(p.result(count, &slot));
  void* ws = nullptr;
  GC_CHECK(p.scratch(TileScratch::bytes(na) + Carve::bytes<uint64_t>(na + 1), &ws));
  Carve carve(ws);
  const TileScratch ts = TileScratch::take(carve, na);
  uint64_t* common = carve.take<uint64_t>(na + 1);
  p.reads(aIdx, na * 8);
  p.reads(aVal, na * 4);
  p.reads(bIdx, nb * 8);
  p.reads(bVal, nb * 4);
  p.writes(outIdx, capacity * 8);
  p.writes(outVal, capacity * 4);
  p.onFailure(-1, &mergeFailure, capacity);
  launchTileScan(p, ts, na, InOther{aIdx, bIdx, nb}, MergeTotal{na, nb, capacity, common, slot},
                 MergeWriteA{aIdx, aVal, bIdx, bVal, nb, common, outIdx, outVal});
  if (nb)
    mergeWriteB<<<blocksFor(nb), kThreads, 0, p.stream()>>>(p.ctl(), aIdx, na, bIdx, bVal, nb,
                                                            common, outIdx, outVal);
  return p.launched();
}

Status CudaBackend::intersect(const uint64_t* a, size_t na, const uint64_t* b, size_t nb,
                              uint64_t* out, size_t capacity, size_t* count) {
  Prim p(state(), "intersect");
  size_t* slot = nullptr;
  GC_CHECK(p.result(count, &slot));
  void* ws = nullptr;
  GC_CHECK(p.scratch(TileScratch::bytes(na), &ws));
  Carve carve(ws);
  const TileScratch ts = TileScratch::take(carve, na);
  p.reads(a, na * 8);
  p.reads(b, nb * 8);
  p.writes(out, capacity * 8);
  p.onFailure(-1, &mergeFailure, capacity);
  launchTileScan(p, ts, na, InOther{a, b, nb}, IntersectTotal{capacity, slot},
                 IntersectWrite{a, out});
  return p.launched();
}

Status CudaBackend::checkSubset(const uint64_t* sub, size_t nsub, const uint64_t* set,
                                size_t nset, int source) {
  Prim p(state(), "checkSubset");
  if (nsub == 0) return Status::Ok();
  p.reads(sub, nsub * 8);
  p.reads(set, nset * 8, nsub * 8 * 64);
  p.onFailure(source, &listFailure);
  checkListKernel<<<blocksFor(nsub), kThreads, 0, p.stream()>>>(p.ctl(), sub, nsub, set, nset,
                                                                true);
  return p.launched();
}

Status CudaBackend::checkAscending(const uint64_t* idx, size_t n, int source) {
  Prim p(state(), "checkAscending");
  if (n < 2) return Status::Ok();
  p.reads(idx, n * 8);
  p.onFailure(source, &listFailure);
  checkListKernel<<<blocksFor(n, 4), kThreads, 0, p.stream()>>>(p.ctl(), idx, n, nullptr, 0,
                                                                false);
  return p.launched();
}

}  // namespace gradcomp::device
