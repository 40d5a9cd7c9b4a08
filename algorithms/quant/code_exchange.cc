#include "algorithms/quant/code_exchange.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "algorithms/shared/requests.h"

namespace gradcomp::algo::quant {

Status RawCodec::encode(device::Backend& dev, const float* src, size_t count, size_t offset,
                        uint64_t stream, uint8_t* out, float* residual) const {
  (void)offset, (void)stream;
  GC_CHECK(dev.copy(out, src, count * sizeof(float)));
  return residual ? dev.zero(residual, count * sizeof(float)) : Status::Ok();  // exact
}

Status RawCodec::decode(device::Backend& dev, const uint8_t* in, size_t count, int peer,
                        float* dst, bool accumulate) const {
  (void)peer;
  if (!accumulate) return dev.copy(dst, in, count * sizeof(float));
  // Payloads begin a backend buffer (code_exchange.h), so they are
  // float-aligned and the primitive reads them in place.
  GC_REQUIRE(uintptr_t(in) % alignof(float) == 0, Err::Internal,
             "raw decode: payload at %p is not float-aligned", static_cast<const void*>(in));
  return dev.add(dst, dst, in, count, DataType::Float32);
}

ChunkRange chunkRange(size_t n, int P, int c, size_t align) {
  const size_t units = (n + align - 1) / align;
  const size_t lo = units * size_t(c) / size_t(P), hi = units * size_t(c + 1) / size_t(P);
  const size_t begin = std::min(n, lo * align), end = std::min(n, hi * align);
  return {begin, end - begin};
}

Status exchangeAll(transport::Transport& net, uint64_t tag, const std::vector<Transfer>& recvs,
                   const std::vector<Transfer>& sends, const char* what) {
  shared::RequestSet req(net, what);
  for (const Transfer& t : recvs) GC_CHECK(req.irecv(t.peer, tag, t.data, t.bytes));
  for (const Transfer& t : sends) GC_CHECK(req.isend(t.peer, tag, t.data, t.bytes));
  return req.waitAll();  // checks every receive's length
}

void Workspace::bind(device::Backend& dev) {
  for (auto* b : {&out, &sum, &scratch, &spectrum, &own, &packed}) b->bind(dev);
  bytes.bind(dev);
}

void Workspace::bindPeers(device::Backend& dev, int P) {
  for (auto* v : {&send, &recv}) {
    while (v->size() < size_t(P)) v->emplace_back(dev);
    for (auto& b : *v) b.bind(dev);
  }
}

namespace {

// Owner's sum for its chunk: contributions in rank order, its own exact.
Status finishSum(device::Backend& dev, RedOp op, int P, float* sum, size_t count) {
  if (op == RedOp::Avg && count) GC_CHECK(dev.divide(sum, count, DataType::Float32, P));
  return Status::Ok();
}

}  // namespace

namespace {

// Phase-1 payloads of a codec with a sliceAlign go out in slices of about
// this many elements (1 MiB of fp32 input), each a message of its own (the
// same on every rank: a function of count, P and the codec). Where encoding
// is host work (Backend::synchronous: the CPU reference) each slice is sent
// as soon as it is encoded and the transport is driven between slices, so
// payloads travel while the next slice encodes instead of after the last
// one (P = 4, 64 MiB qsgd reduce-scatter at 1 Gbit/s: results/
// reduce_scatter.md). Elsewhere (a GPU encodes at HBM speed) the slices of
// kSendGroups groups of peers are encoded, synced once and sent: host syncs
// stay O(rounds), not O(n). Slices are cut from the chunk's start, so the
// codes are those of the whole chunk.
constexpr size_t kSliceElements = size_t(1) << 18;
// Peers get their phase-1 payloads in this many groups on a device backend.
constexpr int kSendGroups = 4;

// A chunk's phase-1 slices: [begin, begin + size) relative to the chunk and
// where each payload starts in the chunk's payload buffer.
struct Slice {
  size_t begin = 0, size = 0, offset = 0, bytes = 0;
};
std::vector<Slice> slicesOf(const ChunkCodec& codec, size_t count) {
  const size_t a = codec.sliceAlign();
  const size_t len = a == 0 ? count : std::max(a, kSliceElements / a * a);
  std::vector<Slice> out;
  size_t offset = 0;
  for (size_t b = 0; b < count || out.empty(); b += len) {
    const size_t n = std::min(len, count - b);
    out.push_back({b, n, offset, codec.encodedBytes(n)});
    offset += out.back().bytes;
  }
  return out;
}

// Phase 1 over `ranges` (ranges[j]: owner j's chunk): posts every receive,
// encodes every other rank's chunk of acc for it and sends it (in slices,
// starting with the next rank: rotated, so the ranks do not all send to the
// same owner first), residual (nullable, may alias acc) getting acc -
// decoded in the encoding pass, and leaves in sum[0..ranges[r].size) the
// owner's fp32 sum in rank order, its own chunk exact (avg: / P). zeroOwn:
// the residual's own chunk is zeroed after the sum read it (nothing of it
// stays behind). The sends stay posted in *p1 (their payloads in ws->send);
// the decodes complete at the next sync.
Status reducePhase(Context& ctx, const ChunkCodec& codec, uint64_t stream, RedOp op,
                   const float* acc, const std::vector<ChunkRange>& ranges, float* sum,
                   float* residual, bool zeroOwn, uint64_t tag, Workspace* ws,
                   shared::RequestSet* p1) {
  device::Backend& dev = ctx.dev;
  const int P = ctx.net.size(), r = ctx.net.rank();
  const ChunkRange mine = ranges[size_t(r)];
  ws->bindPeers(dev, P);
  std::vector<device::HostArray<uint8_t>>& sendBuf = ws->send;
  std::vector<device::HostArray<uint8_t>>& recvBuf = ws->recv;

  // Every receive first: one per slice of the own chunk from every peer
  // (FIFO per peer and tag keeps them in order).
  const std::vector<Slice> mySlices = slicesOf(codec, mine.size);
  std::vector<std::vector<size_t>> slot(static_cast<size_t>(P));
  for (int j = 0; j < P; ++j) {
    if (j == r) continue;
    recvBuf[j].resize(codec.encodedBytes(mine.size));
    for (const Slice& q : mySlices) {
      slot[j].push_back(0);
      GC_CHECK(p1->irecv(j, tag, recvBuf[j].data() + q.offset, q.bytes, &slot[j].back()));
    }
  }
  // Encode, sync and send: slice by slice where encoding is host work (the
  // transport driven after each), else in kSendGroups groups of peers.
  struct Unit {
    int peer;
    Slice q;
  };
  std::vector<Unit> group;
  auto flush = [&]() -> Status {
    GC_CHECK(dev.sync());
    for (const Unit& u : group)
      GC_CHECK(p1->isend(u.peer, tag, sendBuf[u.peer].data() + u.q.offset, u.q.bytes));
    group.clear();
    // Host encoding: let what was posted travel while the next slice encodes.
    if (dev.synchronous()) p1->progress();
    return Status::Ok();
  };
  const int peersPerGroup = std::max(1, (P - 1 + kSendGroups - 1) / kSendGroups);
  for (int s = 1; s < P; ++s) {
    const int j = (r + s) % P;
    const ChunkRange c = ranges[size_t(j)];
    sendBuf[j].resize(codec.encodedBytes(c.size));
    for (const Slice& q : slicesOf(codec, c.size)) {
      const size_t at = c.begin + q.begin;
      GC_CHECK(codec.encode(dev, acc + at, q.size, at, stream, sendBuf[j].data() + q.offset,
                            residual ? residual + at : nullptr));
      group.push_back({j, q});
      if (dev.synchronous()) GC_CHECK(flush());
    }
    if (s % peersPerGroup == 0 || s == P - 1) GC_CHECK(flush());
  }

  // The owner's sum in rank order, its own chunk exact, slice by slice: a
  // slice of the sum stays in cache through its P additions (one pass over
  // the sum, not P), each contribution decoded as soon as it arrived. The
  // residual's own slice is zeroed, in stream order, after the sum read it.
  for (size_t i = 0; i < mySlices.size(); ++i) {
    const Slice& q = mySlices[i];
    float* part = sum + q.begin;
    for (int s = 0; s < P; ++s) {
      if (s == r) {
        const float* own = acc + mine.begin + q.begin;
        if (s == 0) GC_CHECK(dev.copy(part, own, q.size * 4));
        else GC_CHECK(dev.add(part, part, own, q.size, DataType::Float32));
        continue;
      }
      GC_CHECK(p1->wait(slot[s][i]));
      GC_CHECK(codec.decode(dev, recvBuf[s].data() + q.offset, q.size, s, part, s != 0));
    }
    if (residual && zeroOwn && q.size)
      GC_CHECK(dev.zero(residual + mine.begin + q.begin, q.size * 4));
  }
  return finishSum(dev, op, P, sum, mine.size);
}

// Owner j's sum over chunk c (central mirror of reducePhase): sum gets it,
// contribution[s] (nullable) what rank s's part decodes to there.
Status simulateOwnerSum(device::Backend& dev, const ChunkCodec& codec, const ExchangeSeeds& seeds,
                        RedOp op, const std::vector<std::vector<float>>& acc, ChunkRange c, int j,
                        std::vector<float>* sum, std::vector<std::vector<float>>* contribution) {
  const int P = int(acc.size());
  std::vector<uint8_t> buf;
  std::vector<float> part;
  sum->assign(c.size, 0.0f);
  for (int s = 0; s < P; ++s) {
    const float* src = acc[s].data() + c.begin;
    if (s == j) {
      part.assign(src, src + c.size);
    } else {
      buf.resize(codec.encodedBytes(c.size));
      part.resize(c.size);
      GC_CHECK(codec.encode(dev, src, c.size, c.begin, seeds.phase1(s), buf.data(), nullptr));
      GC_CHECK(codec.decode(dev, buf.data(), c.size, s, part.data(), false));
    }
    if (contribution) std::copy(part.begin(), part.end(), (*contribution)[s].begin() + c.begin);
    // Same fp32 operations as the owner: copy for rank 0, add after.
    if (s == 0) *sum = part;
    else GC_CHECK(dev.add(sum->data(), sum->data(), part.data(), c.size, DataType::Float32));
  }
  return finishSum(dev, op, P, sum->data(), c.size);
}

}  // namespace

Status exchangeCodes(Context& ctx, const ChunkCodec& phase1, const ChunkCodec& phase2,
                     const ExchangeSeeds& seeds, RedOp op, const float* acc, size_t n,
                     float* out, float* residual, uint64_t firstStep, Workspace* ws,
                     bool ownerFeedback) {
  device::Backend& dev = ctx.dev;
  const int P = ctx.net.size(), r = ctx.net.rank();
  const size_t align = phase1.align();
  std::vector<ChunkRange> ranges(static_cast<size_t>(P));
  for (int j = 0; j < P; ++j) ranges[j] = chunkRange(n, P, j, align);
  const ChunkRange mine = ranges[size_t(r)];
  const uint64_t tag1 = transport::makeTag(ctx.callSeq, firstStep);
  const uint64_t tag2 = transport::makeTag(ctx.callSeq, firstStep + 1);
  ws->bind(dev);
  ws->bindPeers(dev, P);
  std::vector<device::HostArray<uint8_t>>& recvBuf = ws->recv;
  std::vector<size_t> slot(size_t(P), 0);

  // Phase 1. With owner feedback the phase-2 encoding below writes the own
  // chunk's residual instead of zeroing it.
  shared::RequestSet p1(ctx.net, "quantized reduce-scatter");
  float* ownerResidual = residual && ownerFeedback ? residual + mine.begin : nullptr;
  device::DeviceArray<float>& sum = ws->sum;
  sum.resize(mine.size);
  GC_CHECK(reducePhase(ctx, phase1, seeds.phase1(r), op, acc, ranges, sum.data(), residual,
                       !ownerResidual, tag1, ws, &p1));

  // Phase 2: the owner's encoded sum to everyone; all decode the same bytes.
  device::HostArray<uint8_t>& ownBuf = ws->bytes;
  ownBuf.resize(phase2.encodedBytes(mine.size));
  GC_CHECK(phase2.encode(dev, sum.data(), mine.size, mine.begin, seeds.phase2(r), ownBuf.data(),
                         ownerResidual));
  if (ownerResidual && op == RedOp::Avg && P > 1 && mine.size)
    GC_CHECK(dev.scale(ownerResidual, mine.size, DataType::Float32, double(P)));
  GC_CHECK(phase2.decode(dev, ownBuf.data(), mine.size, r, out + mine.begin, false));
  // The sync completes the phase-1 decodes (recvBuf is reused) and the encoding.
  GC_CHECK(dev.sync());
  GC_CHECK(p1.waitAll());  // phase-1 sends
  shared::RequestSet p2(ctx.net, "quantized allgather");
  for (int j = 0; j < P; ++j) {
    if (j == r) continue;
    const ChunkRange c = chunkRange(n, P, j, align);
    recvBuf[j].resize(phase2.encodedBytes(c.size));
    GC_CHECK(p2.irecv(j, tag2, recvBuf[j].data(), recvBuf[j].size(), &slot[j]));
  }
  for (int s = 1; s < P; ++s) GC_CHECK(p2.isend((r + s) % P, tag2, ownBuf.data(), ownBuf.size()));
  for (int s = 1; s < P; ++s) {  // decode in arrival-friendly order: each owns its chunk
    const int j = (r - s + P) % P;
    const ChunkRange c = chunkRange(n, P, j, align);
    GC_CHECK(p2.wait(slot[j]));
    GC_CHECK(phase2.decode(dev, recvBuf[j].data(), c.size, j, out + c.begin, false));
  }
  GC_CHECK(p2.waitAll());
  return dev.sync();  // the decodes read recvBuf
}

Status simulateExchange(device::Backend& dev, const ChunkCodec& phase1, const ChunkCodec& phase2,
                        const ExchangeSeeds& seeds, RedOp op,
                        const std::vector<std::vector<float>>& acc, std::vector<float>* out,
                        std::vector<std::vector<float>>* contribution,
                        std::vector<OwnerResidual>* owner) {
  const int P = int(acc.size());
  const size_t n = acc.empty() ? 0 : acc[0].size();
  out->assign(n, 0.0f);
  if (contribution) contribution->assign(P, std::vector<float>(n, 0.0f));
  if (owner) owner->assign(P, OwnerResidual{});
  std::vector<uint8_t> buf;
  std::vector<float> sum;
  for (int j = 0; j < P; ++j) {  // owner j's chunk
    const ChunkRange c = chunkRange(n, P, j, phase1.align());
    GC_CHECK(simulateOwnerSum(dev, phase1, seeds, op, acc, c, j, &sum, contribution));
    buf.resize(phase2.encodedBytes(c.size));
    float* ownerResidual = nullptr;
    if (owner) {
      (*owner)[j].begin = c.begin;
      (*owner)[j].values.assign(c.size, 0.0f);
      ownerResidual = (*owner)[j].values.data();
    }
    GC_CHECK(phase2.encode(dev, sum.data(), c.size, c.begin, seeds.phase2(j), buf.data(),
                           ownerResidual));
    if (ownerResidual && op == RedOp::Avg && P > 1 && c.size)
      GC_CHECK(dev.scale(ownerResidual, c.size, DataType::Float32, double(P)));
    GC_CHECK(phase2.decode(dev, buf.data(), c.size, j, out->data() + c.begin, false));
  }
  return Status::Ok();
}

ChunkRange shardRange(size_t recvCount, int j) { return {size_t(j) * recvCount, recvCount}; }

Status reduceScatterCodes(Context& ctx, const ChunkCodec& codec, const ExchangeSeeds& seeds,
                          RedOp op, const float* acc, size_t recvCount, float* out,
                          float* residual, uint64_t firstStep, Workspace* ws) {
  const int P = ctx.net.size(), r = ctx.net.rank();
  std::vector<ChunkRange> ranges(static_cast<size_t>(P));
  for (int j = 0; j < P; ++j) ranges[j] = shardRange(recvCount, j);
  ws->bind(ctx.dev);
  shared::RequestSet p1(ctx.net, "quantized reduce-scatter");
  GC_CHECK(reducePhase(ctx, codec, seeds.phase1(r), op, acc, ranges, out, residual, true,
                       transport::makeTag(ctx.callSeq, firstStep), ws, &p1));
  // The decodes read ws->recv and the sends ws->send: both complete here.
  GC_CHECK(ctx.dev.sync());
  GC_CHECK(p1.waitAll());
  return Status::Ok();
}

Status simulateReduceScatter(device::Backend& dev, const ChunkCodec& codec,
                             const ExchangeSeeds& seeds, RedOp op,
                             const std::vector<std::vector<float>>& acc, std::vector<float>* out,
                             std::vector<std::vector<float>>* contribution) {
  const int P = int(acc.size());
  const size_t n = acc.empty() ? 0 : acc[0].size(), recvCount = n / size_t(std::max(P, 1));
  out->assign(n, 0.0f);
  if (contribution) contribution->assign(P, std::vector<float>(n, 0.0f));
  std::vector<float> sum;
  for (int j = 0; j < P; ++j) {
    const ChunkRange c = shardRange(recvCount, j);
    GC_CHECK(simulateOwnerSum(dev, codec, seeds, op, acc, c, j, &sum, contribution));
    std::copy(sum.begin(), sum.end(), out->begin() + c.begin);
  }
  return Status::Ok();
}

}  // namespace gradcomp::algo::quant
