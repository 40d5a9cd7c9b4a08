// The allreduce schedule of the element-wise codecs (qsgd, rbf, and the exact
// fallback), in one place for the distributed run and its central mirror:
//
//   reduce-scatter: the buffer is split into P chunks (boundaries aligned to
//     the codec's bucket); rank r encodes chunk j of its acc and sends it to
//     rank j (phase 1); rank j decodes every contribution and sums in fp32 in
//     rank order, its own chunk taken exactly (avg: / P, fp64, one rounding);
//   allgather: owner j encodes its sum once (phase 2) and sends it to every
//     rank; every rank, the owner included, decodes it, so all ranks return
//     bit-identical results. With owner feedback the owner keeps what that
//     encoding lost in its residual on its chunk (exchangeCodes).
//
// Data path: acc, the sums and the output are device memory; payloads are
// host memory written and read by the codec primitives (only they cross).
// One sync before each phase's sends.
//
// Wire volume per rank: sum over the P-1 other chunks of the phase-1 payload +
// (P-1) times its own phase-2 payload, i.e. 2(P-1)/P of the encoded buffer:
// for b-bit codes about b/32 of the dense ring's 2(P-1)/P * 4n bytes.
// Payload sizes depend only on (count, P, codec), so they are identical on
// every rank and a receive of any other length is a RemoteError.
//
// The reduce-scatter form (reduceScatterCodes) is phase 1 alone over NCCL's
// fixed shards: rank j owns [j * recvcount, (j + 1) * recvcount), which need
// not be bucket-aligned; a codec's buckets restart at each shard's start
// (stochastic rounding still draws by the element's index in the tensor).
// Wire per rank: the P-1 payloads of the shards it does not own, (P-1)/P of
// the encoded tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "algorithms/algorithm.h"
#include "device/arrays.h"
#include "device/quant_types.h"

namespace gradcomp::algo::quant {

// Buffers an algorithm object keeps across calls (grown, never shrunk): large
// calls then neither allocate nor fault in fresh pages every time.
// bind(dev) at the start of a call moves them to the call's backend (a no-op
// once there). Device memory: out, sum, scratch, spectrum, own, packed;
// host memory (payloads): send, recv, bytes.
struct Workspace {
  device::DeviceArray<float> out, sum, scratch, spectrum, own, packed;
  std::vector<device::HostArray<uint8_t>> send, recv;  // by peer
  device::HostArray<uint8_t> bytes;
  void bind(device::Backend& dev);
  // send/recv sized to P buffers, each in dev's host memory.
  void bindPeers(device::Backend& dev, int P);
};

// Encodes fp32 chunks into self-describing-enough payloads of a fixed size.
class ChunkCodec {
 public:
  virtual ~ChunkCodec() = default;
  // Chunk boundaries are multiples of this (qsgd: its bucket).
  virtual size_t align() const { return 1; }
  // Phase 1 may cut a chunk's payload into slices, each encoded and sent as
  // a message of its own, of lengths that are multiples of this (the last
  // excepted): a codec says so when a slice encoded on its own gives the
  // chunk's codes for it, at a float-aligned payload size, and the slices'
  // sizes add up to encodedBytes(chunk). 0 (the default): never cut.
  virtual size_t sliceAlign() const { return 0; }
  virtual size_t encodedBytes(size_t count) const = 0;
  // src[0..count) (device memory) is the buffer's range starting at element
  // `offset`; `stream` seeds stochastic rounding (device::streamSeed); out is
  // host memory, complete after the next sync. residual (nullable, may alias
  // src) gets src - decoded in the same pass.
  virtual Status encode(device::Backend& dev, const float* src, size_t count, size_t offset,
                        uint64_t stream, uint8_t* out, float* residual) const = 0;
  // dst (+)= decoded payload (host memory); RemoteError naming `peer` when
  // it is malformed (at once for what the host checks, else at the next sync).
  virtual Status decode(device::Backend& dev, const uint8_t* in, size_t count, int peer,
                        float* dst, bool accumulate) const = 0;
};

// fp32 values as they are (the exact fallback).
class RawCodec final : public ChunkCodec {
 public:
  size_t sliceAlign() const override { return 1; }
  size_t encodedBytes(size_t count) const override { return count * sizeof(float); }
  Status encode(device::Backend& dev, const float* src, size_t count, size_t offset,
                uint64_t stream, uint8_t* out, float* residual) const override;
  Status decode(device::Backend& dev, const uint8_t* in, size_t count, int peer, float* dst,
                bool accumulate) const override;
};

struct ChunkRange {
  size_t begin = 0, size = 0;
};
// Chunk c of P: units of `align` elements split as evenly as possible.
ChunkRange chunkRange(size_t n, int P, int c, size_t align);

// Which rounding stream each encoding uses: phase 1 by the sending rank,
// phase 2 by the owner.
struct ExchangeSeeds {
  uint64_t userSeed = 0;
  uint64_t call = 0;
  uint64_t phase1(int rank) const { return device::streamSeed(userSeed, call, uint64_t(rank), 1); }
  uint64_t phase2(int rank) const { return device::streamSeed(userSeed, call, uint64_t(rank), 2); }
};

// Distributed. acc: this rank's n fp32 values; out: n results (device
// memory). residual (nullable; acc itself with error feedback): left holding
// acc - contribution, where the contribution is what this rank's phase-1
// encodings decode to, and acc on its own chunk (so 0 there). Uses tag steps
// firstStep and firstStep + 1.
//
// ownerFeedback (owner-side error feedback, GRADCOMP_QUANT_OWNER_EF; only
// with a residual): on its own chunk the residual holds instead what the
// owner's phase-2 encoding lost, in this rank's input units: k * (sum -
// decoded sum), k = 1 for sum and P for avg (the next call's result is the
// sum of the ranks' inputs, divided by P for avg, so a residual of P * e
// there moves it by e). Computed in the phase-2 encoding pass, then scaled
// by the backend (fp64, one rounding; exact for P a power of two).
Status exchangeCodes(Context& ctx, const ChunkCodec& phase1, const ChunkCodec& phase2,
                     const ExchangeSeeds& seeds, RedOp op, const float* acc, size_t n,
                     float* out, float* residual, uint64_t firstStep, Workspace* ws,
                     bool ownerFeedback = false);

// What owner-side error feedback leaves in rank r's residual on its own
// chunk [begin, begin + values.size()) (the central mirror's output).
struct OwnerResidual {
  size_t begin = 0;
  std::vector<float> values;
};

// Central mirror: acc[r] for every rank; out gets the result every rank
// returns, contribution[r] (nullable) what exchangeCodes gives rank r.
// owner (nullable): owner-side error feedback on; (*owner)[r] is what
// exchangeCodes with ownerFeedback leaves in rank r's residual on its own
// chunk (bit for bit: the same encoding pass and the same scaling).
Status simulateExchange(device::Backend& dev, const ChunkCodec& phase1, const ChunkCodec& phase2,
                        const ExchangeSeeds& seeds, RedOp op,
                        const std::vector<std::vector<float>>& acc, std::vector<float>* out,
                        std::vector<std::vector<float>>* contribution,
                        std::vector<OwnerResidual>* owner = nullptr);

// The reduce-scatter (phase 1 alone, shards as above): acc holds the whole
// tensor (P * recvCount fp32 values), out gets this rank's recvCount sums
// (device memory; fp32 in rank order, its own shard exact, avg: / P).
// residual (nullable; acc itself with error feedback): acc - contribution,
// 0 on the own shard. Uses tag step firstStep; complete on return.
Status reduceScatterCodes(Context& ctx, const ChunkCodec& codec, const ExchangeSeeds& seeds,
                          RedOp op, const float* acc, size_t recvCount, float* out,
                          float* residual, uint64_t firstStep, Workspace* ws);
// Its central mirror: out gets the whole tensor's n values (shard j as rank
// j returns it), contribution[r] (nullable) what reduceScatterCodes gives
// rank r. n = acc[r].size() must be a multiple of P.
Status simulateReduceScatter(device::Backend& dev, const ChunkCodec& codec,
                             const ExchangeSeeds& seeds, RedOp op,
                             const std::vector<std::vector<float>>& acc, std::vector<float>* out,
                             std::vector<std::vector<float>>* contribution);

// Posts every receive, then every send, and waits; each receive must be
// exactly its expected length (RemoteError naming the peer and `what`).
struct Transfer {
  int peer;
  void* data;
  size_t bytes;
};
Status exchangeAll(transport::Transport& net, uint64_t tag, const std::vector<Transfer>& recvs,
                   const std::vector<Transfer>& sends, const char* what);

}  // namespace gradcomp::algo::quant
