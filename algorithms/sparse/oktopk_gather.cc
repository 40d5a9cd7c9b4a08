// Ok-Topk global selection, balance and allgatherv (Algorithm 1 lines 9-13,
// Figure 3). Tag steps: counts 0x20000, region allgather 0x20100, balance
// 0x20200, final allgatherv 0x20300.
#include <algorithm>

#include "algorithms/sparse/collectives.h"
#include "algorithms/sparse/oktopk.h"
#include "algorithms/sparse/wire_format.h"
#include "common/log.h"

namespace gradcomp::algo::sparse::oktopk {
namespace {

constexpr uint64_t kStepCounts = 0x20000, kStepRegions = 0x20100, kStepBalance = 0x20200,
                   kStepFinal = 0x20300;

// Decodes the blocks gathered from every rank (block r over [bases[r],
// bases[r] + counts[r]), at most caps[r] entries) and appends them in rank
// order: sorted, since every block covers indexes above the previous one's.
Status decodeAll(device::Backend& dev, const std::vector<Bytes>& blocks,
                 const std::vector<uint64_t>& bases, const std::vector<uint64_t>& counts,
                 const std::vector<size_t>& caps, Coo* all) {
  all->clear();
  all->bind(dev);
  for (size_t r = 0; r < blocks.size(); ++r) {
    const size_t at = all->size();
    all->idx.resize(at + std::max<size_t>(caps[r], 1));
    all->val.resize(at + std::max<size_t>(caps[r], 1));
    size_t nnz = 0, used = 0;
    GC_CHECK(decodeSparse(dev, blocks[r].data(), blocks[r].size(), bases[r], counts[r],
                          all->idx.data() + at, all->val.data() + at, caps[r], &nnz, &used));
    GC_REQUIRE(used == blocks[r].size(), Err::RemoteError,
               "oktopk: rank %zu's block has %zu bytes after its end", r, blocks[r].size() - used);
    GC_REQUIRE(at == 0 || nnz == 0 || all->idx[at] > all->idx[at - 1], Err::RemoteError,
               "oktopk: rank %zu's block overlaps the previous ranks' indexes", r);
    all->idx.resize(at + nnz);
    all->val.resize(at + nnz);
  }
  return Status::Ok();
}

// Moves entries so that rank q holds global positions [T_q, T_{q+1}) with
// T_q = floor(q K / P) (order preserved); *counts becomes the new counts.
Status balance(Context& ctx, const Coo& mine, uint64_t n, std::vector<uint64_t>* counts,
               Coo* balanced) {
  const int P = ctx.net.size(), me = ctx.net.rank();
  uint64_t K = 0;
  std::vector<uint64_t> S(P + 1, 0), T(P + 1, 0);
  for (int r = 0; r < P; ++r) S[r + 1] = S[r] + (*counts)[r];
  K = S[P];
  for (int q = 0; q <= P; ++q) T[q] = K * uint64_t(q) / uint64_t(P);
  auto overlap = [&](int r, int q, uint64_t* a, uint64_t* b) {
    *a = std::max(S[r], T[q]);
    *b = std::min(S[r + 1], T[q + 1]);
    if (*b < *a) *b = *a;
  };
  const uint64_t tag = transport::makeTag(ctx.callSeq, kStepBalance);
  std::vector<Bytes> out = bytesOn(ctx.dev, P), in = bytesOn(ctx.dev, P);
  std::vector<size_t> got(P, 0);
  RequestSet req(ctx.net);
  for (int r = 0; r < P; ++r) {
    if (r == me) continue;
    uint64_t a, b;
    overlap(r, me, &a, &b);  // what r sends me
    if (b > a) {
      in[r].resize(wireBound(n, b - a));
      GC_CHECK(req.recv(r, tag, in[r].data(), in[r].size(), &got[r]));
    }
    overlap(me, r, &a, &b);  // what I send r
    if (b > a) {
      const size_t off = size_t(a - S[me]);
      GC_CHECK(encodeSparse(ctx.dev, mine.idx.data() + off, mine.val.data() + off, size_t(b - a),
                            0, n, &out[r]));
      GC_CHECK(req.send(r, tag, out[r].data(), out[r].size()));
    }
  }
  GC_CHECK(req.waitAll());
  balanced->clear();
  balanced->bind(ctx.dev);
  for (int r = 0; r < P; ++r) {
    uint64_t a, b;
    overlap(r, me, &a, &b);
    if (b <= a) continue;
    const size_t at = balanced->size(), m = size_t(b - a);
    if (r == me) {
      const size_t off = size_t(a - S[me]);
      balanced->idx.insert(balanced->idx.end(), mine.idx.begin() + off, mine.idx.begin() + off + m);
      balanced->val.insert(balanced->val.end(), mine.val.begin() + off, mine.val.begin() + off + m);
      continue;
    }
    balanced->idx.resize(at + m);
    balanced->val.resize(at + m);
    size_t nnz = 0, used = 0;
    GC_CHECK(decodeSparse(ctx.dev, in[r].data(), got[r], 0, n, balanced->idx.data() + at,
                          balanced->val.data() + at, m, &nnz, &used));
    GC_REQUIRE(nnz == m && used == got[r], Err::RemoteError,
               "oktopk balance: rank %d sent %zu entries in %zu of %zu bytes, expected %zu", r, nnz,
               used, got[r], m);
  }
  for (int q = 0; q < P; ++q) (*counts)[q] = T[q + 1] - T[q];
  return Status::Ok();
}

// The region's entries with |x| > threshold as COO. Counted first so the
// lists are sized to what is selected, not to the region: zero-filling
// region-sized lists every call cost more than the selection (perf, 100 MiB).
Status compactRegion(device::Backend& dev, const device::Buffer<float>& region, float threshold,
                     uint64_t base, Coo* out, size_t* count) {
  size_t expected = 0;
  out->bind(dev);
  GC_CHECK(dev.countAbove(region.data(), region.size(), threshold, &expected));
  out->idx.resize(std::max<size_t>(expected, 1));
  out->val.resize(std::max<size_t>(expected, 1));
  GC_CHECK(dev.compactAbove(region.data(), region.size(), threshold, 0, base, out->idx.data(),
                            out->val.data(), expected, count));
  GC_REQUIRE(*count == expected, Err::Internal,
             "oktopk: compaction selected %zu entries where %zu were counted", *count, expected);
  return Status::Ok();
}

}  // namespace

// Every rank's reduced region non-zeros to every rank (evaluation calls).
Status gatherRegions(Context& ctx, const device::Buffer<float>& region,
                     const std::vector<uint64_t>& bounds, size_t k, Coo* all) {
  const int P = ctx.net.size(), me = ctx.net.rank();
  Coo mine(ctx.dev);
  size_t cnt = 0;
  GC_CHECK(compactRegion(ctx.dev, region, 0.0f, bounds[me], &mine, &cnt));
  std::vector<Bytes> blocks = bytesOn(ctx.dev, P);
  GC_CHECK(encodeSparse(ctx.dev, mine.idx.data(), mine.val.data(), cnt, bounds[me], region.size(),
                        &blocks[me]));
  std::vector<uint64_t> bases(P), counts(P);
  std::vector<size_t> caps(P), entryCaps(P);
  for (int r = 0; r < P; ++r) {
    bases[r] = bounds[r];
    counts[r] = bounds[r + 1] - bounds[r];
    entryCaps[r] = size_t(std::min<uint64_t>(counts[r], uint64_t(P) * k));
    caps[r] = wireBound(counts[r], entryCaps[r]);
  }
  GC_CHECK(allgatherBlocks(ctx, kStepRegions, caps, &blocks));
  return decodeAll(ctx.dev, blocks, bases, counts, entryCaps, all);
}

Status globalPhase(Context& ctx, const device::Buffer<float>& region,
                   const std::vector<uint64_t>& bounds, size_t k, bool evaluate,
                   Threshold* global, Coo* result) {
  const int P = ctx.net.size(), me = ctx.net.rank();
  if (evaluate || !global->valid) {
    Coo all(ctx.dev);
    GC_CHECK(gatherRegions(ctx, region, bounds, k, &all));
    return globalEvaluate(ctx.dev, all, k, global, result);
  }
  Coo mine(ctx.dev);
  size_t cnt = 0;
  GC_CHECK(compactRegion(ctx.dev, region, global->th, bounds[me], &mine, &cnt));
  mine.idx.resize(cnt);
  mine.val.resize(cnt);
  std::vector<uint64_t> counts;
  GC_CHECK(allgatherWords(ctx, kStepCounts, {uint64_t(cnt)}, &counts));
  for (int r = 0; r < P; ++r)  // counts size buffers below: a peer's must fit its region
    GC_REQUIRE(counts[r] <= bounds[r + 1] - bounds[r], Err::RemoteError,
               "oktopk: rank %d announced %llu candidates in a region of %llu entries", r,
               (unsigned long long)counts[r], (unsigned long long)(bounds[r + 1] - bounds[r]));
  uint64_t K = 0, maxCount = 0;
  for (uint64_t c : counts) K += c, maxCount = std::max(maxCount, c);
  const uint64_t n = bounds[P];
  Coo piece(ctx.dev);
  if (maxCount * uint64_t(P) > 4 * K) GC_CHECK(balance(ctx, mine, n, &counts, &piece));
  else piece = std::move(mine);

  std::vector<Bytes> blocks = bytesOn(ctx.dev, P);
  GC_CHECK(encodeSparse(ctx.dev, piece.idx.data(), piece.val.data(), piece.size(), 0, n,
                        &blocks[me]));
  std::vector<size_t> caps(P), entryCaps(P);
  for (int r = 0; r < P; ++r) entryCaps[r] = size_t(counts[r]), caps[r] = wireBound(n, counts[r]);
  GC_CHECK(allgatherBlocks(ctx, kStepFinal, caps, &blocks));
  Coo candidates(ctx.dev);
  GC_CHECK(decodeAll(ctx.dev, blocks, std::vector<uint64_t>(P, 0), std::vector<uint64_t>(P, n),
                     entryCaps, &candidates));
  GC_REQUIRE(candidates.size() == K, Err::RemoteError,
             "oktopk: allgatherv delivered %zu candidates, the counts announced %llu",
             candidates.size(), (unsigned long long)K);
  return globalFromCandidates(ctx.dev, candidates, k, global, result);
}

}  // namespace gradcomp::algo::sparse::oktopk
