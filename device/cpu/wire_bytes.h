// Little-endian field access shared by the CPU wire-body codecs.
#pragma once

#include <cstdint>
#include <cstring>

namespace gradcomp::device::cpu {

inline bool isPlusZero(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  return bits == 0;
}
inline void putUint(uint8_t* p, uint64_t v, int bytes) {
  for (int b = 0; b < bytes; ++b) p[b] = uint8_t(v >> (8 * b));
}
inline uint64_t getUint(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int b = 0; b < bytes; ++b) v |= uint64_t(p[b]) << (8 * b);
  return v;
}
inline void putFloat(uint8_t* p, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  putUint(p, bits, 4);
}
inline float getFloat(const uint8_t* p) {
  const uint32_t bits = uint32_t(getUint(p, 4));
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

}  // namespace gradcomp::device::cpu
