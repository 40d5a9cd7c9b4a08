// Packed bit streams of the quantized family (layout: device/quant_types.h).
// Writers expect a zeroed stream and OR fields in; readers never touch a byte
// past packedBytes(n, width).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "device/quant_types.h"

namespace gradcomp::device::cpu {

// Field widths are at most 16 bits, so a field spans at most 3 bytes.
inline void putBits(uint8_t* stream, size_t index, int width, uint32_t value) {
  size_t bit = index * size_t(width);
  uint8_t* p = stream + bit / 8;
  uint32_t v = value << (bit % 8);
  const int span = int((bit % 8) + size_t(width) + 7) / 8;
  for (int b = 0; b < span; ++b) p[b] |= uint8_t(v >> (8 * b));
}

inline uint32_t getBits(const uint8_t* stream, size_t index, int width) {
  size_t bit = index * size_t(width);
  const uint8_t* p = stream + bit / 8;
  const int span = int((bit % 8) + size_t(width) + 7) / 8;
  uint32_t v = 0;
  for (int b = 0; b < span; ++b) v |= uint32_t(p[b]) << (8 * b);
  return (v >> (bit % 8)) & ((uint32_t(1) << width) - 1);
}

inline void zeroStream(uint8_t* stream, size_t n, int width) {
  const size_t bytes = packedBytes(n, width);
  if (bytes) std::memset(stream, 0, bytes);  // n == 0: stream may be null (an empty chunk)
}

// True when the bits after the last field of the stream are zero.
inline bool paddingClear(const uint8_t* stream, size_t n, int width) {
  const size_t used = n * size_t(width);
  if (used % 8 == 0) return true;
  return (stream[used / 8] >> (used % 8)) == 0;
}

}  // namespace gradcomp::device::cpu
