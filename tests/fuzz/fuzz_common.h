// Shared by the libFuzzer targets of tests/fuzz (one per decoder of bytes that
// arrive from a peer or a file) and by gen_corpus.cc, which writes their seeds.
//
// Input layout of every target: a few parameter bytes read front to back with
// Input (little-endian, zero when the input runs out), then the bytes given to
// the decoder. Decoders get exactly-sized heap buffers, so ASan sees any access
// past what their contract allows; FUZZ_CHECK asserts what a successful decode
// promises (a failed property aborts: a finding).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define FUZZ_CHECK(cond)                                                               \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      std::fprintf(stderr, "%s:%d: property failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                    \
    }                                                                                  \
  } while (0)

namespace gradcomp::fuzz {

class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint64_t uint(int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i, ++pos_)
      if (pos_ < size_) v |= uint64_t(data_[pos_]) << (8 * i);
    return v;
  }
  uint8_t u8() { return uint8_t(uint(1)); }
  uint16_t u16() { return uint16_t(uint(2)); }
  uint32_t u32() { return uint32_t(uint(4)); }
  uint64_t u64() { return uint(8); }
  // Everything not consumed yet.
  std::vector<uint8_t> rest() const {
    return pos_ < size_ ? std::vector<uint8_t>(data_ + pos_, data_ + size_) : std::vector<uint8_t>();
  }
  // The next `bytes` bytes (zero-padded past the end), in a buffer of exactly that size.
  std::vector<uint8_t> exact(size_t bytes) {
    std::vector<uint8_t> out(bytes, 0);
    for (size_t i = 0; i < bytes && pos_ < size_; ++i) out[i] = data_[pos_++];
    return out;
  }

 private:
  const uint8_t* data_;
  size_t size_, pos_ = 0;
};

// The seed generator's side of Input.
inline void putUint(std::vector<uint8_t>* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(uint8_t(v >> (8 * i)));
}

inline bool sameBits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace gradcomp::fuzz
