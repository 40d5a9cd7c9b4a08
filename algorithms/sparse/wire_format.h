// Wire format of every sparse message (algorithms.md sections 2 and 4).
//
// A message describes a sparse vector over a region [base, base + count) of the
// tensor; base is implied by the schedule, count travels in the header. It is a
// 40-byte little-endian header followed by one of three bodies, chosen per
// message by exact size (smallest wins, ties: COO, DenseStream, Dense):
//   COO          nnz offsets (indexBytes each) then nnz fp32 values;
//   DenseStream  blocks [start, length, values] (device/backend.h contract);
//   Dense        count fp32 values.
// Offsets are relative to base and take 4 bytes when count <= 2^32, else 8.
// Only non-zero entries are carried ("zero" = the bit pattern +0.0).
//
// Header: u32 magic "GCSP", u8 version (1), u8 format, u8 dtype (DataType of
// the values; float32 only), u8 indexBytes, u64 count, u64 nnz, u64 blocks
// (DenseStream; 0 otherwise), u64 payload bytes.
//
// Data path: the COO list is in device memory and the message in host
// memory (the transport sends it). The host writes and reads the 40-byte
// headers; bodies are encoded and decoded by primitives straight between
// the two, so only the message bytes cross. Decoding validates every header
// field and length on the host at once, and the body (index range, ordering,
// zeros, DenseStream structure) in the primitive, whose error the next sync
// reports naming the sender; it never reads or writes outside its buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "algorithms/sparse/sparse_common.h"
#include "common/status.h"

namespace gradcomp::algo::sparse {

enum class WireFormat : uint8_t { Dense = 0, Coo = 1, DenseStream = 2 };
const char* wireFormatName(WireFormat f);

constexpr size_t kWireHeaderBytes = 40;
constexpr uint32_t kWireMagic = 0x50534347u;  // "GCSP" little-endian
constexpr uint8_t kWireVersion = 1;

inline int indexBytesFor(uint64_t count) { return count <= (uint64_t(1) << 32) ? 4 : 8; }

// Upper bound of a message carrying at most maxNnz entries over `count`
// elements (what a receiver posts as capacity).
inline size_t wireBound(uint64_t count, size_t maxNnz) {
  const uint64_t coo = uint64_t(maxNnz) * (indexBytesFor(count) + 4);
  const uint64_t dense = count * 4;
  return kWireHeaderBytes + size_t(coo < dense ? coo : dense);
}

// One message to encode: entries [first, first + nnz) of a sorted device
// COO list, over the region [base, base + count).
struct SparsePiece {
  const Coo* list = nullptr;
  size_t first = 0, nnz = 0;
  uint64_t base = 0, count = 0;
};

// Appends one message per piece to (*out)[i] (host memory): the DenseStream
// sizes of all pieces in one sync, then the headers on the host and the
// bodies by primitives. The messages are complete after the next sync.
// formats (nullable) reports the body each one chose.
Status encodeSparse(device::Backend& dev, const std::vector<SparsePiece>& pieces,
                    const std::vector<Bytes*>& out, std::vector<WireFormat>* formats = nullptr);
// One piece: encodeSparse of a single message.
Status encodeSparse(device::Backend& dev, const SparsePiece& piece, Bytes* out,
                    WireFormat* format = nullptr);

// Decodes the message at the start of `data` (host memory of dev, `avail`
// bytes there; the message may be followed by others) into idx/val (device
// memory, at least `capacity` entries): the header is checked now (count
// must equal expectCount, nnz at most capacity), the body by the primitive
// (RemoteError naming `source` at the next sync). *nnz = entries written,
// *consumed = header + payload bytes.
Status decodeSparse(device::Backend& dev, const uint8_t* data, size_t avail, uint64_t base,
                    uint64_t expectCount, uint64_t* idx, float* val, size_t capacity, int source,
                    size_t* nnz, size_t* consumed);

}  // namespace gradcomp::algo::sparse
