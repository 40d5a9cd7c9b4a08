// Ok-Topk global selection, balance and allgatherv (Algorithm 1 lines 9-13,
// Figure 3). Tag steps: counts 0x20000, region allgather 0x20100, balance
// 0x20200, final allgatherv 0x20300.
//
// Data path: reduced regions and every COO list stay in device memory; the
// blocks of the allgathers are host messages encoded from and decoded into
// them by primitives; the counts are control words.
#include <algorithm>

#include "algorithms/sparse/collectives.h"
#include "algorithms/sparse/oktopk.h"
#include "algorithms/sparse/wire_format.h"
#include "common/log.h"

namespace gradcomp::algo::sparse::oktopk {
namespace {

constexpr uint64_t kStepCounts = 0x20000, kStepRegions = 0x20100, kStepBalance = 0x20200,
                   kStepFinal = 0x20300;

// nnz announced by a message's header (0 when it is too short to have one:
// decodeSparse then reports it).
size_t headerCount(const Bytes& block) {
  if (block.size() < kWireHeaderBytes) return 0;
  uint64_t v = 0;
  for (int b = 0; b < 8; ++b) v |= uint64_t(block[16 + b]) << (8 * b);
  return size_t(v);
}

// Decodes the blocks gathered from every rank (block r over [bases[r],
// bases[r] + counts[r]), at most caps[r] entries) and appends them in rank
// order; the result must be strictly ascending (checked on the device).
Status decodeAll(device::Backend& dev, const std::vector<Bytes>& blocks,
                 const std::vector<uint64_t>& bases, const std::vector<uint64_t>& counts,
                 const std::vector<size_t>& caps, Coo* all) {
  size_t total = 0;
  for (size_t r = 0; r < blocks.size(); ++r) total += std::min(headerCount(blocks[r]), caps[r]);
  all->bind(dev);
  all->resize(total);
  size_t at = 0;
  for (size_t r = 0; r < blocks.size(); ++r) {
    size_t nnz = 0, used = 0;
    GC_CHECK(decodeSparse(dev, blocks[r].data(), blocks[r].size(), bases[r], counts[r],
                          all->idx.data() + at, all->val.data() + at,
                          std::min(caps[r], total - at), int(r), &nnz, &used));
    GC_REQUIRE(used == blocks[r].size(), Err::RemoteError,
               "oktopk: rank %zu's block has %zu bytes after its end", r, blocks[r].size() - used);
    at += nnz;
  }
  GC_REQUIRE(at == total, Err::Internal, "oktopk: decoded %zu of %zu announced entries", at, total);
  // Blocks of later ranks hold later indexes.
  return dev.checkAscending(all->idx.data(), all->size(), -1);
}

// Moves entries so that rank q holds global positions [T_q, T_{q+1}) with
// T_q = floor(q K / P) (order preserved); *counts becomes the new counts.
Status balance(Context& ctx, const Coo& mine, uint64_t n, std::vector<uint64_t>* counts,
               Coo* balanced) {
  device::Backend& dev = ctx.dev;
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
  std::vector<Bytes> out = bytesOn(dev, P), in = bytesOn(dev, P);
  std::vector<size_t> got(P, 0);
  std::vector<SparsePiece> pieces;
  std::vector<Bytes*> outs;
  std::vector<int> sendTo;
  for (int r = 0; r < P; ++r) {
    uint64_t a, b;
    overlap(me, r, &a, &b);  // what I send r
    if (r == me || b <= a) continue;
    pieces.push_back({&mine, size_t(a - S[me]), size_t(b - a), 0, n});
    outs.push_back(&out[r]);
    sendTo.push_back(r);
  }
  GC_CHECK(encodeSparse(dev, pieces, outs));
  GC_CHECK(dev.sync());
  RequestSet req(ctx.net);
  for (int r = 0; r < P; ++r) {
    uint64_t a, b;
    overlap(r, me, &a, &b);  // what r sends me
    if (r == me || b <= a) continue;
    in[r].resize(wireBound(n, b - a));
    GC_CHECK(req.irecvUpTo(r, tag, in[r].data(), in[r].size(), &got[r]));
  }
  for (int r : sendTo) GC_CHECK(req.isend(r, tag, out[r].data(), out[r].size()));
  GC_CHECK(req.waitAll());
  balanced->bind(dev);
  balanced->resize(size_t(T[me + 1] - T[me]));
  size_t at = 0;
  for (int r = 0; r < P; ++r) {
    uint64_t a, b;
    overlap(r, me, &a, &b);
    if (b <= a) continue;
    const size_t m = size_t(b - a);
    if (r == me) {
      const size_t off = size_t(a - S[me]);
      GC_CHECK(dev.copy(balanced->idx.data() + at, mine.idx.data() + off, m * 8));
      GC_CHECK(dev.copy(balanced->val.data() + at, mine.val.data() + off, m * 4));
    } else {
      size_t nnz = 0, used = 0;
      GC_CHECK(decodeSparse(dev, in[r].data(), got[r], 0, n, balanced->idx.data() + at,
                            balanced->val.data() + at, m, r, &nnz, &used));
      GC_REQUIRE(nnz == m && used == got[r], Err::RemoteError,
                 "oktopk balance: rank %d sent %zu entries in %zu of %zu bytes, expected %zu", r,
                 nnz, used, got[r], m);
    }
    at += m;
  }
  for (int q = 0; q < P; ++q) (*counts)[q] = T[q + 1] - T[q];
  return dev.sync();  // the decodes read `in`
}

}  // namespace

// Every rank's reduced region non-zeros to every rank (evaluation calls).
Status gatherRegions(Context& ctx, const device::DeviceArray<float>& region,
                     const std::vector<uint64_t>& bounds, size_t k, Coo* all) {
  device::Backend& dev = ctx.dev;
  const int P = ctx.net.size(), me = ctx.net.rank();
  Coo mine(dev);
  GC_CHECK(compactRegion(dev, region.data(), region.size(), 0.0f, bounds[me], &mine));
  std::vector<Bytes> blocks = bytesOn(dev, P);
  GC_CHECK(encodeSparse(dev, SparsePiece{&mine, 0, mine.size(), bounds[me], region.size()},
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
  GC_CHECK(decodeAll(dev, blocks, bases, counts, entryCaps, all));
  return dev.sync();  // the decodes read `blocks`
}

Status globalPhase(Context& ctx, const device::DeviceArray<float>& region,
                   const std::vector<uint64_t>& bounds, size_t k, bool evaluate,
                   Threshold* global, Coo* result) {
  device::Backend& dev = ctx.dev;
  const int P = ctx.net.size(), me = ctx.net.rank();
  if (evaluate || !global->valid) {
    Coo all(dev);
    GC_CHECK(gatherRegions(ctx, region, bounds, k, &all));
    return globalEvaluate(dev, all, k, global, result);
  }
  Coo mine(dev);
  GC_CHECK(compactRegion(dev, region.data(), region.size(), global->th, bounds[me], &mine));
  const size_t cnt = mine.size();
  std::vector<uint64_t> counts;
  GC_CHECK(allgatherWords(ctx, kStepCounts, {uint64_t(cnt)}, &counts));
  for (int r = 0; r < P; ++r)  // counts size buffers below: a peer's must fit its region
    GC_REQUIRE(counts[r] <= bounds[r + 1] - bounds[r], Err::RemoteError,
               "oktopk: rank %d announced %llu candidates in a region of %llu entries", r,
               (unsigned long long)counts[r], (unsigned long long)(bounds[r + 1] - bounds[r]));
  uint64_t K = 0, maxCount = 0;
  for (uint64_t c : counts) K += c, maxCount = std::max(maxCount, c);
  const uint64_t n = bounds[P];
  Coo piece(dev);
  if (maxCount * uint64_t(P) > 4 * K) GC_CHECK(balance(ctx, mine, n, &counts, &piece));
  else piece = std::move(mine);

  std::vector<Bytes> blocks = bytesOn(dev, P);
  GC_CHECK(encodeSparse(dev, SparsePiece{&piece, 0, piece.size(), 0, n}, &blocks[me]));
  std::vector<size_t> caps(P), entryCaps(P);
  for (int r = 0; r < P; ++r) entryCaps[r] = size_t(counts[r]), caps[r] = wireBound(n, counts[r]);
  GC_CHECK(allgatherBlocks(ctx, kStepFinal, caps, &blocks));
  Coo candidates(dev);
  GC_CHECK(decodeAll(dev, blocks, std::vector<uint64_t>(P, 0), std::vector<uint64_t>(P, n),
                     entryCaps, &candidates));
  GC_REQUIRE(candidates.size() == K, Err::RemoteError,
             "oktopk: allgatherv delivered %zu candidates, the counts announced %llu",
             candidates.size(), (unsigned long long)K);
  GC_CHECK(globalFromCandidates(dev, candidates, k, global, result));
  return dev.sync();  // the decodes read `blocks`
}

}  // namespace gradcomp::algo::sparse::oktopk
