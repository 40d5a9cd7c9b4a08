#include "algorithms/quant/chunk_codecs.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace gradcomp::algo::quant {

size_t MaxMinCodec::encodedBytes(size_t count) const {
  return 2 * sizeof(float) * device::maxMinBuckets(count, bucket_) +
         device::packedBytes(count, bits_);
}

Status MaxMinCodec::encode(device::Backend& dev, const float* src, size_t count, size_t offset,
                           uint64_t stream, uint8_t* out, float* residual) const {
  // The payload starts with the bucket meta: the primitive writes it in
  // place (payloads begin a backend buffer, so it is float-aligned).
  GC_REQUIRE(uintptr_t(out) % alignof(float) == 0, Err::Internal,
             "qsgd encode: payload at %p is not float-aligned", static_cast<void*>(out));
  const size_t metaBytes = 2 * sizeof(float) * device::maxMinBuckets(count, bucket_);
  device::MaxMinSpec spec{bits_, bucket_, stream};
  return dev.quantizeMaxMin(src, count, spec, offset, reinterpret_cast<float*>(out),
                            out + metaBytes, residual);
}

Status MaxMinCodec::decode(device::Backend& dev, const uint8_t* in, size_t count, int peer,
                           float* dst, bool accumulate) const {
  GC_REQUIRE(uintptr_t(in) % alignof(float) == 0, Err::Internal,
             "qsgd decode: payload at %p is not float-aligned", static_cast<const void*>(in));
  const size_t metaBytes = 2 * sizeof(float) * device::maxMinBuckets(count, bucket_);
  device::MaxMinSpec spec{bits_, bucket_, 0};
  return dev.dequantizeMaxMin(reinterpret_cast<const float*>(in), in + metaBytes, count, spec, dst,
                              accumulate, peer);
}

Status rbfSpecForVmax(float vmax, int bits, int mantissa, int peer, device::RbfSpec* spec) {
  GC_REQUIRE(std::isfinite(vmax) && vmax >= 0, Err::RemoteError,
             "RBF payload from rank %d: vmax %g (expected finite and >= 0)", peer, double(vmax));
  spec->bits = bits;
  spec->mantissa = mantissa;
  spec->eps = device::rbfEpsForVmax(double(vmax), bits, mantissa);
  return Status::Ok();
}

size_t RbfCodec::encodedBytes(size_t count) const {
  return sizeof(float) + device::packedBytes(count, bits_);
}

Status RbfCodec::encode(device::Backend& dev, const float* src, size_t count, size_t offset,
                        uint64_t stream, uint8_t* out, float* residual) const {
  (void)offset, (void)stream;  // round to nearest: no randomness
  float vmax = float(vmax_);
  if (vmax_ == 0) {
    device::AbsStats st;
    GC_CHECK(dev.absStats(src, count, &st));
    GC_CHECK(dev.sync());
    vmax = float(st.maxAbs);
  }
  device::RbfSpec spec;
  GC_CHECK(rbfSpecForVmax(vmax, bits_, mantissa_, -1, &spec));
  std::memcpy(out, &vmax, sizeof(float));
  return dev.rbfEncode(src, count, spec, out + sizeof(float), residual);
}

Status RbfCodec::decode(device::Backend& dev, const uint8_t* in, size_t count, int peer,
                        float* dst, bool accumulate) const {
  float vmax = 0;
  std::memcpy(&vmax, in, sizeof(float));
  device::RbfSpec spec;
  GC_CHECK(rbfSpecForVmax(vmax, bits_, mantissa_, peer, &spec));
  return dev.rbfDecode(in + sizeof(float), count, spec, dst, accumulate, peer);
}

}  // namespace gradcomp::algo::quant
