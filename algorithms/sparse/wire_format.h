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
// Decoding validates every field, length, index range and ordering against
// what the receiver expects and fails with RemoteError; it never reads or
// writes outside the buffers it was given.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "device/buffer.h"

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

// Appends one message for the sorted COO list (idx absolute, in
// [base, base + count), values non-zero) to *out. *format (nullable) reports
// the body chosen.
Status encodeSparse(device::Backend& dev, const uint64_t* idx, const float* val, size_t nnz,
                    uint64_t base, uint64_t count, device::Buffer<uint8_t>* out,
                    WireFormat* format = nullptr);

// Decodes the message at the start of `data` (`avail` bytes there; the
// message may be followed by others). The header's count must equal
// `expectCount`; entries go to idx/val (absolute indexes base + offset) and
// must fit `capacity`. *consumed = header + payload bytes.
Status decodeSparse(device::Backend& dev, const uint8_t* data, size_t avail, uint64_t base,
                    uint64_t expectCount, uint64_t* idx, float* val, size_t capacity,
                    size_t* nnz, size_t* consumed);

}  // namespace gradcomp::algo::sparse
