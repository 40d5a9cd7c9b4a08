// Allgather schedules (GRADCOMP_AG_ALGO; layout at algo::Collective): one
// ring over encoded shards, with a codec per algorithm.
//
// Convention: every rank encodes its own shard, and every rank -- the owner
// included -- writes decode(encode(shard)) into the shard's slot. So all
// ranks end with identical bytes, even where the codec is lossy (an owner
// that kept its exact shard would disagree with its peers about its own
// parameters).
//
// Wire bytes per rank (sent, and as many received), m = sendcount, e = the
// dtype's element size, P ranks, B = GRADCOMP_AG_BLOCK, b = GRADCOMP_BITS:
//   dense   (P-1) * m * e
//   cast    (P-1) * m * 2                          (bfloat16, GRADCOMP_AG_CAST=bf16)
//           (P-1) * (4 * ceil(m / B) + m)          (fp8 e4m3, GRADCOMP_AG_CAST=fp8)
//   blockq  (P-1) * (4 * ceil(m / B) + ceil(m * b / 8))
// in P-1 messages; nothing else (no header, no counts: every payload's size
// follows from sendcount, which the call check makes every rank agree on).
// Hierarchical (GRADCOMP_HIERARCHY, hierarchy/hierarchical.h), H hosts of L
// ranks, payload(m) the codec's bytes above for one shard:
//   between hosts   (H-1) * payload(m)   in H-1 messages (the ring on the rail)
//   inside a host   (L-1) * H * m * e    in L-1 messages (decoded shards, dense)
//
// Non-finite values: dense carries them exactly; cast bf16 converts them (NaN
// stays NaN, +-Inf stays +-Inf, finite values beyond bfloat16's range round
// to +-Inf as IEEE conversion does); blockq and cast fp8 flag the block and carry NaN
// and +-Inf as reserved codes, its scale computed over the finite values, so
// they never poison the block's other values (device/quant_types.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "algorithms/algorithm.h"
#include "device/arrays.h"

namespace gradcomp::algo::allgather {

// How one algorithm turns a shard of m elements of dtype t into a payload
// and back. Both run as primitives of `dev` (payloads in its host memory,
// shards in device memory); the same code serves the schedule and the
// Reference (on the CPU reference backend).
class ShardCodec {
 public:
  virtual ~ShardCodec() = default;
  virtual size_t payloadBytes(size_t m, DataType t) const = 0;
  // payload (host) = encode(shard) (device or host).
  virtual Status encode(device::Backend& dev, const void* shard, size_t m, DataType t,
                        uint8_t* payload) = 0;
  // dst (m elements of t) = decode(payload); `source`: the rank it came from.
  virtual Status decode(device::Backend& dev, const uint8_t* payload, size_t m, DataType t,
                        void* dst, int source) = 0;
};

// The codec of algorithm `name` (dense, cast, blockq) with the parameters of
// `config` (GRADCOMP_BITS, GRADCOMP_AG_BLOCK); InvalidConfig naming a bad one.
Status makeCodec(const std::string& name, const param::Overrides& config,
                 std::unique_ptr<ShardCodec>* out);

// Wire bytes one rank sends (and receives) in an allgather of `count`
// elements (the whole output) over `nranks` ranks with `name`'s codec.
Status wireBytes(const std::string& name, const param::Overrides& config, size_t count,
                 DataType t, int nranks, uint64_t* bytes);

// The hierarchical form's (above) over `hosts` hosts of `perHost` ranks:
// what one rank sends (and receives) to other hosts and inside its own.
Status hierarchicalWireBytes(const std::string& name, const param::Overrides& config,
                             size_t count, DataType t, int hosts, int perHost,
                             uint64_t* interHost, uint64_t* intraHost);

}  // namespace gradcomp::algo::allgather
