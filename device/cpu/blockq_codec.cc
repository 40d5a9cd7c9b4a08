// Block quantization for the blockq allgather (CPU reference). Every value
// comes from the per-element functions of device/quant_types.h in fp32, so
// the result depends only on (src, spec): a backend that follows them
// reproduces it bit for bit.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "device/cpu/quant_primitives.h"

namespace gradcomp::device::cpu {
namespace {

Status checkSpec(const BlockQuantSpec& spec, const char* what) {
  GC_REQUIRE(spec.bits == 8 || (spec.bits == 4 && !spec.fp8), Err::InvalidArgument,
             "%s: bits %d not supported (accepted: 8, 4; fp8: 8)", what, spec.bits);
  GC_REQUIRE(spec.block >= 1, Err::InvalidArgument, "%s: block size must be >= 1", what);
  return Status::Ok();
}

void putCode(uint8_t* codes, size_t i, int c, int bits) {
  if (bits == 8) {
    codes[i] = uint8_t(c & 0xFF);  // two's complement, or an fp8 byte
    return;
  }
  const uint8_t nib = uint8_t(c) & 0xF;
  if (i % 2 == 0)
    codes[i / 2] = nib;
  else
    codes[i / 2] |= uint8_t(nib << 4);
}

int getCode(const uint8_t* codes, size_t i, int bits, bool fp8) {
  if (fp8) return int(codes[i]);
  if (bits == 8) return int(int8_t(codes[i]));
  const int nib = (codes[i / 2] >> (i % 2 ? 4 : 0)) & 0xF;
  return nib >= 8 ? nib - 16 : nib;  // two's complement in 4 bits
}

}  // namespace

Status blockqEncode(const float* src, size_t n, const BlockQuantSpec& spec, uint8_t* out) {
  GC_CHECK(checkSpec(spec, "blockqEncode"));
  const size_t blocks = blockqBlocks(n, spec.block);
  uint8_t* codes = out + 4 * blocks;
  for (size_t b = 0; b < blocks; ++b) {
    const size_t lo = b * spec.block, hi = std::min(n, lo + spec.block);
    float maxAbs = 0.0f;
    bool nonFinite = false;
    for (size_t i = lo; i < hi; ++i) {
      const float a = std::fabs(src[i]);
      if (!std::isfinite(a))
        nonFinite = true;
      else if (a > maxAbs)
        maxAbs = a;
    }
    const float scale = blockqScale(maxAbs, nonFinite, spec);
    std::memcpy(out + 4 * b, &scale, 4);
    for (size_t i = lo; i < hi; ++i) putCode(codes, i, blockqEncodeOne(src[i], scale, spec),
                                             spec.bits);
  }
  return Status::Ok();
}

Status blockqDecode(const uint8_t* in, size_t n, const BlockQuantSpec& spec, float* dst,
                    int source) {
  GC_CHECK(checkSpec(spec, "blockqDecode"));
  const size_t blocks = blockqBlocks(n, spec.block);
  const uint8_t* codes = in + 4 * blocks;
  GC_REQUIRE(spec.bits == 8 || n % 2 == 0 || (codes[n / 2] >> 4) == 0, Err::RemoteError,
             "blockqDecode: padding bits set in the payload from rank %d", source);
  for (size_t b = 0; b < blocks; ++b) {
    float scale;
    std::memcpy(&scale, in + 4 * b, 4);
    GC_REQUIRE(!std::isnan(scale) && !std::isinf(scale), Err::RemoteError,
               "blockqDecode: block %zu from rank %d has a non-finite scale", b, source);
    const size_t lo = b * spec.block, hi = std::min(n, lo + spec.block);
    bool ok = true;
    for (size_t i = lo; i < hi; ++i)
      dst[i] = blockqDecodeOne(getCode(codes, i, spec.bits, spec.fp8), scale, spec, &ok);
    GC_REQUIRE(ok, Err::RemoteError,
               "blockqDecode: block %zu from rank %d holds a code reserved for non-finite "
               "values without its flag", b, source);
  }
  return Status::Ok();
}

}  // namespace gradcomp::device::cpu
