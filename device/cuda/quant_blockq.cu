// Block quantization (the blockq allgather, cast fp8) on the GPU. Every code,
// scale and decoded value comes from the per-element functions of
// device/quant_types.h, compiled for the device (GC_HOST_DEVICE), so the
// bytes and bits are those of the CPU reference (device/cpu/blockq_codec.cc).
//
// Encode: blockqScales gives each block of the spec one warp (the largest
// finite |x| as the CPU's scanBlock takes it, on bit patterns, and whether
// any x is not finite), then blockqCodes writes every code byte from one
// thread (int4: the two elements of a byte), so padding bits come out zero
// and no two threads write one byte. Decode: one kernel, one element per
// thread; errors are recorded in the CPU's order (padding first, then per
// block: its scale, then its codes) and worded as the CPU words them.
// Payloads in host memory are staged into device scratch (decode) or built
// there and copied once (encode), as the other codecs do.
#include "device/cuda/cuda_backend.h"
#include "device/cuda/kernel_common.cuh"

namespace gradcomp::device {
namespace {

using namespace cuda;

constexpr int kWarps = kThreads / 32;

// Scale words of every block, little-endian at out[4b] (any alignment).
__global__ void blockqScales(Ctl ctl, const float* src, size_t n, size_t blocks,
                             BlockQuantSpec spec, uint8_t* out) {
  if (skipBlock(ctl)) return;
  const unsigned lane = threadIdx.x % 32;
  const size_t warps = size_t(gridDim.x) * kWarps;
  for (size_t b = blockIdx.x * size_t(kWarps) + threadIdx.x / 32; b < blocks; b += warps) {
    const size_t lo = b * spec.block, hi = lo + spec.block < n ? lo + spec.block : n;
    uint32_t maxBits = 0;
    bool nonFinite = false;
    for (size_t i = lo + lane; i < hi; i += 32) {
      const uint32_t bits = __float_as_uint(src[i]) & 0x7fffffffu;
      if (bits < 0x7f800000u) maxBits = bits > maxBits ? bits : maxBits;
      else nonFinite = true;
    }
    // Non-negative floats order as their bits do: an integer max is exact.
    for (int off = 16; off > 0; off /= 2) {
      const uint32_t other = __shfl_xor_sync(0xffffffffu, maxBits, off);
      maxBits = other > maxBits ? other : maxBits;
    }
    nonFinite = __any_sync(0xffffffffu, nonFinite);
    if (lane == 0) putFloat(out + 4 * b, blockqScale(__uint_as_float(maxBits), nonFinite, spec));
  }
}

__device__ inline uint8_t codeByte(const float* src, size_t i, const uint8_t* scales,
                                   const BlockQuantSpec& spec) {
  return uint8_t(blockqEncodeOne(src[i], getFloat(scales + 4 * (i / spec.block)), spec));
}

// Code byte j: element j (8 bits), or elements 2j (low nibble), 2j + 1 (high).
__global__ void blockqCodes(Ctl ctl, const float* src, size_t n, BlockQuantSpec spec,
                            const uint8_t* scales, uint8_t* codes) {
  if (skipBlock(ctl)) return;
  if (spec.bits == 8) {
    GC_GRID_STRIDE(j, n) codes[j] = codeByte(src, j, scales, spec);
    return;
  }
  GC_GRID_STRIDE(j, (n + 1) / 2) {
    const size_t i = 2 * j;
    uint8_t byte = codeByte(src, i, scales, spec) & 0xF;
    if (i + 1 < n) byte |= uint8_t((codeByte(src, i + 1, scales, spec) & 0xF) << 4);
    codes[j] = byte;
  }
}

// Failure keys: padding (position 0, kind 0) before everything, then block
// b's scale (b, 1) before its codes (b, 2) before block b + 1.
__global__ void blockqDecodeKernel(Ctl ctl, const uint8_t* in, size_t n, size_t blocks,
                                   BlockQuantSpec spec, float* dst) {
  if (skipBlock(ctl)) return;
  const uint8_t* codes = in + 4 * blocks;
  if (blockIdx.x == 0 && threadIdx.x == 0 && !paddingClear(codes, n, spec.bits))
    fail(ctl, keyAt(0, 0));
  GC_GRID_STRIDE(i, n) {
    const size_t b = i / spec.block;
    const float scale = getFloat(in + 4 * b);
    if (isnan(scale) || isinf(scale)) {
      if (i == b * spec.block) fail(ctl, keyAt(b, 1), b);
      continue;
    }
    int c;
    if (spec.fp8) c = int(codes[i]);
    else if (spec.bits == 8) c = int(int8_t(codes[i]));
    else c = int(int8_t(uint8_t(codes[i / 2] >> (i % 2 ? 4 : 0) << 4))) >> 4;
    bool ok = true;
    dst[i] = blockqDecodeOne(c, scale, spec, &ok);
    if (!ok) fail(ctl, keyAt(b, 2), b);
  }
}

Status blockqDecodeFailure(const OpInfo& op, const FailureRecord& f) {
  const int source = op.source;
  switch (keyKindOf(f.key)) {
    case 0:
      return makeStatus(Err::RemoteError,
                        "blockqDecode: padding bits set in the payload from rank %d", source);
    case 1:
      return makeStatus(Err::RemoteError,
                        "blockqDecode: block %zu from rank %d has a non-finite scale",
                        size_t(f.a), source);
    default:
      return makeStatus(Err::RemoteError,
                        "blockqDecode: block %zu from rank %d holds a code reserved for "
                        "non-finite values without its flag",
                        size_t(f.a), source);
  }
}

// As the CPU reference's (device/cpu/blockq_codec.cc), word for word.
Status checkSpec(const BlockQuantSpec& spec, const char* what) {
  GC_REQUIRE(spec.bits == 8 || (spec.bits == 4 && !spec.fp8), Err::InvalidArgument,
             "%s: bits %d not supported (accepted: 8, 4; fp8: 8)", what, spec.bits);
  GC_REQUIRE(spec.block >= 1, Err::InvalidArgument, "%s: block size must be >= 1", what);
  return Status::Ok();
}

unsigned warpBlocksFor(size_t blocks) {
  return unsigned(std::max<size_t>(
      1, std::min<size_t>((blocks + kWarps - 1) / kWarps, 8 * kMaxBlocks)));
}

}  // namespace

Status CudaBackend::blockqEncode(const float* src, size_t n, const BlockQuantSpec& spec,
                                 uint8_t* out) {
  Prim p(state(), "blockqEncode");
  GC_CHECK(checkSpec(spec, "blockqEncode"));
  if (n == 0) return Status::Ok();
  const size_t bytes = blockqBytes(n, spec), blocks = blockqBlocks(n, spec.block);
  p.reads(src, n * 4);
  p.writes(out, bytes);
  void* ws = nullptr;
  // src is read twice (scales, codes): a host input is staged once.
  GC_CHECK(p.scratch(p.stageBytes(src, n * 4) + p.stageBytes(out, bytes), &ws));
  Carve carve(ws);
  GC_CHECK(p.stage(src, n * 4, carve, &src));
  uint8_t* payload = p.landing(out, bytes, carve);
  blockqScales<<<warpBlocksFor(blocks), kThreads, 0, p.stream()>>>(p.ctl(), src, n, blocks,
                                                                    spec, payload);
  const size_t codeBytes = spec.bits == 8 ? n : (n + 1) / 2;
  blockqCodes<<<blocksFor(codeBytes, 4), kThreads, 0, p.stream()>>>(
      p.ctl(), src, n, spec, payload, payload + 4 * blocks);
  GC_CHECK(p.launched());
  return p.land(out, payload, bytes);
}

Status CudaBackend::blockqDecode(const uint8_t* in, size_t n, const BlockQuantSpec& spec,
                                 float* dst, int source) {
  Prim p(state(), "blockqDecode");
  GC_CHECK(checkSpec(spec, "blockqDecode"));
  if (n == 0) return Status::Ok();
  const size_t bytes = blockqBytes(n, spec), blocks = blockqBlocks(n, spec.block);
  p.reads(in, bytes);
  p.writes(dst, n * 4);
  void* ws = nullptr;
  GC_CHECK(p.scratch(p.stageBytes(in, bytes), &ws));
  Carve carve(ws);
  GC_CHECK(p.stage(in, bytes, carve, &in));
  p.onFailure(source, &blockqDecodeFailure);
  blockqDecodeKernel<<<blocksFor(n, 4), kThreads, 0, p.stream()>>>(p.ctl(), in, n, blocks, spec,
                                                                    dst);
  return p.launched();
}

}  // namespace gradcomp::device
