// The element-wise codecs of qsgd and rbf as ChunkCodecs (code_exchange.h).
//
// MaxMinCodec payload: [min, max] fp32 per bucket, then the packed b-bit codes
//   (device/quant_types.h); encodedBytes = 8 * buckets + ceil(count * b / 8).
// RbfCodec payload: vmax as fp32, then the packed N-bit RBF words;
//   encodedBytes = 4 + ceil(count * N / 8). eps = rbfEpsForVmax(vmax, N, m) is
//   derived from the transmitted vmax on both sides, so they agree exactly.
//   A vmax taken from the data (vmax 0) is a control word: one sync.
#pragma once

#include <numeric>

#include "algorithms/quant/code_exchange.h"

namespace gradcomp::algo::quant {

class MaxMinCodec final : public ChunkCodec {
 public:
  MaxMinCodec(int bits, size_t bucket) : bits_(bits), bucket_(bucket) {}
  size_t align() const override { return bucket_; }
  // Whole buckets, and codes that end on a float boundary at any width.
  size_t sliceAlign() const override { return std::lcm(bucket_, size_t(32)); }
  size_t encodedBytes(size_t count) const override;
  Status encode(device::Backend& dev, const float* src, size_t count, size_t offset,
                uint64_t stream, uint8_t* out, float* residual) const override;
  Status decode(device::Backend& dev, const uint8_t* in, size_t count, int peer, float* dst,
                bool accumulate) const override;

 private:
  int bits_;
  size_t bucket_;
};

class RbfCodec final : public ChunkCodec {
 public:
  // vmax > 0: every chunk uses it (values above saturate); vmax == 0: each
  // chunk uses the largest |value| it holds.
  RbfCodec(int bits, int mantissa, double vmax) : bits_(bits), mantissa_(mantissa), vmax_(vmax) {}
  size_t encodedBytes(size_t count) const override;
  Status encode(device::Backend& dev, const float* src, size_t count, size_t offset,
                uint64_t stream, uint8_t* out, float* residual) const override;
  Status decode(device::Backend& dev, const uint8_t* in, size_t count, int peer, float* dst,
                bool accumulate) const override;

 private:
  int bits_, mantissa_;
  double vmax_;
};

// Validated RBF spec for a transmitted vmax (RemoteError naming `peer` when
// vmax is not finite and >= 0).
Status rbfSpecForVmax(float vmax, int bits, int mantissa, int peer, device::RbfSpec* spec);

}  // namespace gradcomp::algo::quant
