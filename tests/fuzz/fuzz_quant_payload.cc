// Quantized payloads as a receiver decodes them (algorithms/quant/chunk_codecs.h
// over device cpu dequantizeMaxMin / rbfDecode): qsgd max-min buckets + codes,
// and RBF vmax + words.
// Input: u8 codec (bit 0: RBF), u8 bits, u8 mantissa, u16 bucket, u16 count,
// u8 accumulate, then the payload (padded or cut to the codec's exact size).
// A successful max-min decode lies within each bucket's [min, max] (up to the
// fp64 rounding of min + code * step); an RBF one is at most vmax in magnitude.
#include <cmath>

#include "algorithms/quant/chunk_codecs.h"
#include "tests/fuzz/fuzz_common.h"

using namespace gradcomp;
using namespace gradcomp::algo::quant;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const bool rbf = in.u8() & 1;
  const uint8_t bitsByte = in.u8(), mantissa = in.u8() % 16;
  const size_t bucket = 1 + in.u16() % 1024;
  const size_t count = in.u16() % 8193;
  const bool accumulate = in.u8() & 1;
  device::Backend& dev = device::cpuBackend();
  std::vector<float> dst(count, 0.0f);
  if (!rbf) {
    static const int kBits[] = {1, 2, 4, 8};
    const int bits = kBits[bitsByte % 4];
    MaxMinCodec codec(bits, bucket);
    const std::vector<uint8_t> payload = in.exact(codec.encodedBytes(count));
    Status s = codec.decode(dev, payload.data(), count, 1, dst.data(), accumulate);
    if (!s.ok()) {
      FUZZ_CHECK(s.code() == Err::RemoteError);
      return 0;
    }
    for (size_t i = 0; i < count; ++i) {
      float lo, hi;
      std::memcpy(&lo, &payload[8 * (i / bucket)], 4);
      std::memcpy(&hi, &payload[8 * (i / bucket) + 4], 4);
      // min + code * step is computed in fp64: off by at most a few ulps of the range.
      const double tol = (double(hi) - double(lo)) * 0x1p-50;
      FUZZ_CHECK(dst[i] >= lo - tol && dst[i] <= hi + tol);
    }
  } else {
    const int bits = 3 + bitsByte % 14;
    if (!device::rbfValidLayout(bits, mantissa)) return 0;  // the registry rejects these
    RbfCodec codec(bits, mantissa, 0.0);
    const std::vector<uint8_t> payload = in.exact(codec.encodedBytes(count));
    Status s = codec.decode(dev, payload.data(), count, 1, dst.data(), accumulate);
    if (!s.ok()) {
      FUZZ_CHECK(s.code() == Err::RemoteError);
      return 0;
    }
    float vmax;
    std::memcpy(&vmax, payload.data(), 4);
    // eps is rounded so that the largest code decodes to at most vmax: every
    // decoded value is finite and within [-vmax, vmax] (a vmax of FLT_MAX once
    // decoded to Inf).
    for (size_t i = 0; i < count; ++i)
      FUZZ_CHECK(std::isfinite(dst[i]) && std::fabs(dst[i]) <= vmax);
  }
  return 0;
}
