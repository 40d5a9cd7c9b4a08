#include "tools/gradcomp-sim/payload_framing.h"

#include "algorithms/sparse/wire_format.h"

namespace gradcomp::sim {
namespace {

uint64_t loadU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int b = 0; b < 8; ++b) v |= uint64_t(p[b]) << (8 * b);
  return v;
}

// A whole sparse wire message of exactly `bytes` bytes.
bool wireMessage(const uint8_t* m, size_t bytes) {
  using namespace algo::sparse;
  if (bytes < kWireHeaderBytes) return false;
  const uint32_t magic = uint32_t(loadU64(m) & 0xffffffffu);
  return magic == kWireMagic && m[4] == kWireVersion &&
         loadU64(m + 32) == uint64_t(bytes - kWireHeaderBytes);
}

size_t framing(const uint8_t* m, size_t bytes, int depth);

// d block lengths adding up to the rest: the framing of the bundle, or
// SIZE_MAX when this is no bundle. The lengths of d = 1, 2, 4, ... share
// their prefix, so the sum only grows: past `bytes` no larger d fits.
size_t bundle(const uint8_t* m, size_t bytes, int depth) {
  uint64_t sum = 0;
  size_t read = 0;
  for (size_t d = 1; 8 * d <= bytes; d *= 2) {
    for (; read < d; ++read) {
      const uint64_t len = loadU64(m + 8 * read);
      if (len > bytes || sum + len > bytes) return SIZE_MAX;
      sum += len;
    }
    if (sum + 8 * d > bytes) return SIZE_MAX;
    if (sum + 8 * d < bytes) continue;
    // The allgather's blocks are wire messages or control words, never all
    // empty: anything else is payload that happens to add up.
    if (sum == 0) return SIZE_MAX;
    size_t f = 8 * d, at = 8 * d;
    for (size_t i = 0; i < d; ++i) {
      const size_t len = size_t(loadU64(m + 8 * i));
      const size_t blockFraming = framing(m + at, len, depth + 1);
      if (len > 0 && blockFraming == 0) return SIZE_MAX;
      f += blockFraming;
      at += len;
    }
    return f;
  }
  return SIZE_MAX;
}

size_t framing(const uint8_t* m, size_t bytes, int depth) {
  if (bytes <= kControlBytes) return bytes;
  if (wireMessage(m, bytes)) return algo::sparse::kWireHeaderBytes;
  if (depth == 0) {  // bundles hold blocks, not bundles
    const size_t f = bundle(m, bytes, depth);
    if (f != SIZE_MAX) return f;
  }
  return 0;
}

}  // namespace

size_t payloadFraming(const uint8_t* data, size_t bytes) {
  return data ? framing(data, bytes, 0) : 0;
}

}  // namespace gradcomp::sim
