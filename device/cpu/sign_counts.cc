// Sign votes and vote counts of all-reducible signSGD (notes section 8): votes
// are 1-bit streams, partial counts are fixed-width fields whose width grows
// with the number of ranks a count covers.
#include <algorithm>
#include <cmath>

#include "device/cpu/quant_bitpack.h"
#include "device/cpu/quant_primitives.h"
#include "device/cpu/sparse_ops.h"

namespace gradcomp::device::cpu {
namespace {

Status checkWidth(int bits, const char* what) {
  GC_REQUIRE(bits >= 1 && bits <= 16, Err::InvalidArgument,
             "%s: count width %d bits not supported (accepted: 1..16)", what, bits);
  return Status::Ok();
}

}  // namespace

Status signPack(const float* src, size_t n, uint8_t* bits) {
  zeroStream(bits, n, 1);
  // Branch-free: random signs would mispredict every other element.
  for (size_t i = 0; i < n; ++i) bits[i / 8] |= uint8_t(uint32_t(src[i] > 0.0f) << (i % 8));
  return Status::Ok();
}

Status signCountAdd(const uint8_t* countsIn, int inBits, int maxIn, const uint8_t* signBits,
                    size_t n, uint8_t* countsOut, int outBits, int source) {
  // The arguments first, then the payload (as the CUDA backend checks them).
  GC_CHECK(checkWidth(outBits, "signCountAdd"));
  if (countsIn) GC_CHECK(checkWidth(inBits, "signCountAdd"));
  GC_REQUIRE(maxIn >= 0 && uint64_t(maxIn) + 1 < (uint64_t(1) << outBits), Err::InvalidArgument,
             "signCountAdd: %d-bit output cannot hold a count of %d", outBits, maxIn + 1);
  char from[32];
  sourceText(source, from);
  GC_REQUIRE(paddingClear(signBits, n, 1), Err::RemoteError,
             "sign votes: padding bits after %zu votes are set (corrupt payload)", n);
  if (countsIn)
    GC_REQUIRE(paddingClear(countsIn, n, inBits), Err::RemoteError,
               "sign counts%s: padding bits after %zu counts are set (corrupt payload)", from, n);
  zeroStream(countsOut, n, outBits);
  for (size_t i = 0; i < n; ++i) {
    uint32_t c = countsIn ? getBits(countsIn, i, inBits) : 0;
    GC_REQUIRE(c <= uint32_t(maxIn), Err::RemoteError,
               "sign counts%s: element %zu has count %u but covers at most %d ranks", from, i, c,
               maxIn);
    c += (signBits[i / 8] >> (i % 8)) & 1u;
    putBits(countsOut, i, outBits, c);
  }
  return Status::Ok();
}

Status signMajority(const uint8_t* counts, int bits, size_t n, int nranks, const SignTies& ties,
                    uint64_t indexBase, uint8_t* decision) {
  GC_CHECK(checkWidth(bits, "signMajority"));
  GC_REQUIRE(paddingClear(counts, n, bits), Err::RemoteError,
             "sign counts: padding bits after %zu counts are set (corrupt payload)", n);
  zeroStream(decision, n, 1);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t c = getBits(counts, i, bits);
    GC_REQUIRE(c <= uint32_t(nranks), Err::RemoteError,
               "sign counts: element %zu has count %u of %d ranks", i, c, nranks);
    const uint64_t twice = 2 * uint64_t(c);
    const bool up = twice > uint64_t(nranks) ||
                    (twice == uint64_t(nranks) && signTieUp(ties, indexBase + i));
    decision[i / 8] |= uint8_t(uint32_t(up) << (i % 8));
  }
  return Status::Ok();
}

Status signExpand(const uint8_t* bits, size_t n, float pos, float neg, float* dst, int source) {
  char from[32];
  GC_REQUIRE(paddingClear(bits, n, 1), Err::RemoteError,
             "sign decisions%s: padding bits after %zu decisions are set (corrupt payload)",
             sourceText(source, from), n);
  const float value[2] = {neg, pos};
  for (size_t i = 0; i < n; ++i) dst[i] = value[(bits[i / 8] >> (i % 8)) & 1u];
  return Status::Ok();
}

Status blockDot(const float* x, const float* d, size_t n, size_t block, float* out) {
  GC_REQUIRE(block >= 1, Err::InvalidArgument, "blockDot: block must be >= 1");
  constexpr size_t kLanes = kBlockDotLanes;
  double lane[kLanes];
  for (size_t b = 0, begin = 0; begin < n; ++b, begin += block) {
    const size_t len = std::min(block, n - begin);
    for (size_t l = 0; l < kLanes; ++l) {
      double s = 0;
      for (size_t i = l; i < len; i += kLanes) {
        const size_t e = begin + i;
        s += double(x[e]) * double(d[e]);
      }
      lane[l] = s;
    }
    for (size_t s = kLanes / 2; s >= 1; s /= 2)
      for (size_t l = 0; l < s; ++l) lane[l] += lane[l + s];
    out[b] = float(lane[0] / double(len));
  }
  return Status::Ok();
}

Status expandBlocks(const float* d, size_t n, size_t block, const float* scales, float* dst,
                    bool subtractFrom) {
  GC_REQUIRE(block >= 1, Err::InvalidArgument, "expandBlocks: block must be >= 1");
  for (size_t b = 0, begin = 0; begin < n; ++b, begin += block) {
    const float s = scales[b];
    const size_t end = std::min(n, begin + block);
    if (subtractFrom) {
      for (size_t i = begin; i < end; ++i) dst[i] -= d[i] > 0 ? s : -s;
    } else {
      for (size_t i = begin; i < end; ++i) dst[i] = d[i] > 0 ? s : -s;
    }
  }
  return Status::Ok();
}

}  // namespace gradcomp::device::cpu
