// Sign votes and vote counts of all-reducible signSGD on the GPU, and the
// per-block scales of its output (blockDot's fixed summation order, the sign
// expansion). Bit-identical to device/cpu/sign_counts.cc. Packed outputs give
// each thread a group of 8 fields (whole bytes, padding bits zero).
#include "device/cuda/cuda_backend.h"
#include "device/cuda/kernel_common.cuh"

namespace gradcomp::device {
namespace {

using namespace cuda;

constexpr int kLanes = 256;  // blockDot's lanes (device/backend.h), one thread each

struct SignCode {
  const float* src;
  __device__ uint32_t operator()(size_t i) const { return src[i] > 0.0f ? 1u : 0u; }
};
__global__ void signPackKernel(Ctl ctl, const float* src, size_t n, uint8_t* out) {
  if (skipBlock(ctl)) return;
  GC_GRID_STRIDE(g, groupCount(n)) packGroup(g, n, 1, out, SignCode{src});
}

// Counts above maxIn fail the call (kind 2) and are written clamped (the
// output is not used then).
struct CountCode {
  const uint8_t* countsIn;
  int inBits;
  uint32_t maxIn;
  const uint8_t* signBits;
  Ctl ctl;
  __device__ uint32_t operator()(size_t i) const {
    uint32_t c = countsIn ? getBits(countsIn, i, inBits) : 0;
    if (c > maxIn) {
      fail(ctl, keyKind(2, i), c);
      c = maxIn;
    }
    return c + ((signBits[i / 8] >> (i % 8)) & 1u);
  }
};
// The votes' padding (kind 0), then the counts' (kind 1), as the CPU checks.
__global__ void signCountKernel(Ctl ctl, CountCode code, size_t n, int outBits, uint8_t* out) {
  if (skipBlock(ctl)) return;
  code.ctl = ctl;
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    if (!paddingClear(code.signBits, n, 1)) fail(ctl, keyKind(0));
    if (code.countsIn && !paddingClear(code.countsIn, n, code.inBits)) fail(ctl, keyKind(1));
  }
  GC_GRID_STRIDE(g, groupCount(n)) packGroup(g, n, outBits, out, code);
}

Status countFailure(const OpInfo& op, const FailureRecord& f) {
  const std::string from = fromRank(op.source);
  const unsigned long long n = op.p[0];
  switch (keyKindFirst(f.key)) {
    case 0:
      return makeStatus(Err::RemoteError,
                        "sign votes: padding bits after %llu votes are set (corrupt payload)", n);
    case 1:
      return makeStatus(Err::RemoteError,
                        "sign counts%s: padding bits after %llu counts are set (corrupt payload)",
                        from.c_str(), n);
    default:
      return makeStatus(Err::RemoteError,
                        "sign counts%s: element %llu has count %llu but covers at most %d ranks",
                        from.c_str(), keyKindPos(f.key), f.a, int(op.p[1]));
  }
}

// A tie (2 * count == nranks) goes up by signTieUp (quant_types.h), twin here.
struct MajorityCode {
  const uint8_t* counts;
  int bits;
  uint32_t nranks;
  bool hashTies;
  uint64_t tieSeed;
  uint64_t indexBase;
  Ctl ctl;
  __device__ uint32_t operator()(size_t i) const {
    const uint32_t c = getBits(counts, i, bits);
    if (c > nranks) fail(ctl, keyKind(1, i), c);
    const uint64_t twice = 2 * uint64_t(c);
    if (twice != uint64_t(nranks)) return twice > uint64_t(nranks) ? 1u : 0u;
    return hashTies && (cuda::mix64(tieSeed ^ cuda::mix64(indexBase + i)) & 1u) ? 1u : 0u;
  }
};
__global__ void majorityKernel(Ctl ctl, MajorityCode code, size_t n, uint8_t* out) {
  if (skipBlock(ctl)) return;
  code.ctl = ctl;
  if (blockIdx.x == 0 && threadIdx.x == 0 && !paddingClear(code.counts, n, code.bits))
    fail(ctl, keyKind(0));
  GC_GRID_STRIDE(g, groupCount(n)) packGroup(g, n, 1, out, code);
}

Status majorityFailure(const OpInfo& op, const FailureRecord& f) {
  if (keyKindFirst(f.key) == 0)
    return makeStatus(Err::RemoteError,
                      "sign counts: padding bits after %llu counts are set (corrupt payload)",
                      op.p[0]);
  return makeStatus(Err::RemoteError, "sign counts: element %llu has count %llu of %d ranks",
                    keyKindPos(f.key), f.a, int(op.p[1]));
}

__global__ void signExpandKernel(Ctl ctl, const uint8_t* bits, size_t n, float pos, float neg,
                                 float* dst) {
  if (skipBlock(ctl)) return;
  if (blockIdx.x == 0 && threadIdx.x == 0 && !paddingClear(bits, n, 1)) fail(ctl, 0);
  GC_GRID_STRIDE(i, n) dst[i] = (bits[i / 8] >> (i % 8)) & 1u ? pos : neg;
}

Status expandFailure(const OpInfo& op, const FailureRecord&) {
  return makeStatus(Err::RemoteError,
                    "sign decisions%s: padding bits after %llu decisions are set (corrupt payload)",
                    fromRank(op.source).c_str(), op.p[0]);
}

// One CUDA block per sign block: lane l sums i = l, l + 256, ... in fp64 in
// turn, then lanes add pairwise (l += l + s for s = 128 .. 1): the order of
// device/backend.h, so every bit matches the CPU.
__global__ void blockDotKernel(Ctl ctl, const float* x, const float* d, size_t n, size_t block,
                               float* out) {
  if (skipBlock(ctl)) return;
  __shared__ double lane[kLanes];
  const size_t blocks = (n + block - 1) / block;
  for (size_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const size_t begin = b * block, len = n - begin < block ? n - begin : block;
    double s = 0;
    for (size_t i = threadIdx.x; i < len; i += kLanes)
      s = __dadd_rn(s, __dmul_rn(double(x[begin + i]), double(d[begin + i])));
    lane[threadIdx.x] = s;
    __syncthreads();
    for (int w = kLanes / 2; w >= 1; w /= 2) {
      if (int(threadIdx.x) < w) lane[threadIdx.x] = __dadd_rn(lane[threadIdx.x], lane[threadIdx.x + w]);
      __syncthreads();
    }
    if (threadIdx.x == 0) out[b] = __double2float_rn(__ddiv_rn(lane[0], double(len)));
    __syncthreads();
  }
}

__global__ void expandBlocksKernel(Ctl ctl, const float* d, size_t n, size_t block,
                                   const float* scales, float* dst, bool subtractFrom) {
  if (skipBlock(ctl)) return;
  GC_GRID_STRIDE(i, n) {
    const float s = scales[i / block];
    const float v = d[i] > 0 ? s : -s;
    dst[i] = subtractFrom ? __fsub_rn(dst[i], v) : v;
  }
}

Status checkWidth(int bits, const char* what) {
  GC_REQUIRE(bits >= 1 && bits <= 16, Err::InvalidArgument,
             "%s: count width %d bits not supported (accepted: 1..16)", what, bits);
  return Status::Ok();
}

}  // namespace

Status CudaBackend::signPack(const float* src, size_t n, uint8_t* bits) {
  Prim p(state(), "signPack");
  if (n == 0) return Status::Ok();
  const size_t bytes = packedBytes(n, 1);
  p.reads(src, n * 4);
  p.writes(bits, bytes);
  void* ws = nullptr;
  GC_CHECK(p.scratch(p.stageBytes(bits, bytes), &ws));
  Carve carve(ws);
  uint8_t* out = p.landing(bits, bytes, carve);
  signPackKernel<<<blocksFor(groupCount(n)), kThreads, 0, p.stream()>>>(p.ctl(), src, n, out);
  GC_CHECK(p.launched());
  return p.land(bits, out, bytes);
}

Status CudaBackend::signCountAdd(const uint8_t* countsIn, int inBits, int maxIn,
                                 const uint8_t* signBits, size_t n, uint8_t* countsOut,
                                 int outBits, int source) {
  Prim p(state(), "signCountAdd");
  GC_CHECK(checkWidth(outBits, "signCountAdd"));
  if (countsIn) GC_CHECK(checkWidth(inBits, "signCountAdd"));
  GC_REQUIRE(maxIn >= 0 && uint64_t(maxIn) + 1 < (uint64_t(1) << outBits), Err::InvalidArgument,
             "signCountAdd: %d-bit output cannot hold a count of %d", outBits, maxIn + 1);
  if (n == 0) return Status::Ok();
  const size_t voteBytes = packedBytes(n, 1), inBytes = countsIn ? packedBytes(n, inBits) : 0;
  p.reads(signBits, voteBytes);
  if (countsIn) p.reads(countsIn, inBytes);
  const size_t outBytes = packedBytes(n, outBits);
  p.writes(countsOut, outBytes);
  void* ws = nullptr;
  GC_CHECK(p.scratch(p.stageBytes(signBits, voteBytes) + p.stageBytes(countsIn, inBytes) +
                         p.stageBytes(countsOut, outBytes),
                     &ws));
  Carve carve(ws);
  GC_CHECK(p.stage(signBits, voteBytes, carve, &signBits));
  if (countsIn) GC_CHECK(p.stage(countsIn, inBytes, carve, &countsIn));
  uint8_t* out = p.landing(countsOut, outBytes, carve);
  p.onFailure(source, &countFailure, n, uint64_t(maxIn));
  const CountCode code{countsIn, inBits, uint32_t(maxIn), signBits, Ctl{}};
  signCountKernel<<<blocksFor(groupCount(n)), kThreads, 0, p.stream()>>>(p.ctl(), code, n,
                                                                         outBits, out);
  GC_CHECK(p.launched());
  return p.land(countsOut, out, outBytes);
}

Status CudaBackend::signMajority(const uint8_t* counts, int bits, size_t n, int nranks,
                                 const SignTies& ties, uint64_t indexBase, uint8_t* decision) {
  Prim p(state(), "signMajority");
  GC_CHECK(checkWidth(bits, "signMajority"));
  if (n == 0) return Status::Ok();
  const size_t bytes = packedBytes(n, bits);
  p.reads(counts, bytes);
  const size_t outBytes = packedBytes(n, 1);
  p.writes(decision, outBytes);
  void* ws = nullptr;
  GC_CHECK(p.scratch(p.stageBytes(counts, bytes) + p.stageBytes(decision, outBytes), &ws));
  Carve carve(ws);
  GC_CHECK(p.stage(counts, bytes, carve, &counts));
  uint8_t* out = p.landing(decision, outBytes, carve);
  p.onFailure(-1, &majorityFailure, n, uint64_t(nranks));
  majorityKernel<<<blocksFor(groupCount(n)), kThreads, 0, p.stream()>>>(
      p.ctl(), MajorityCode{counts, bits, uint32_t(nranks), ties.hash, ties.seed, indexBase, Ctl{}},
      n, out);
  GC_CHECK(p.launched());
  return p.land(decision, out, outBytes);
}

Status CudaBackend::signExpand(const uint8_t* bits, size_t n, float pos, float neg, float* dst,
                               int source) {
  Prim p(state(), "signExpand");
  if (n == 0) return Status::Ok();
  const size_t bytes = packedBytes(n, 1);
  p.reads(bits, bytes);
  p.writes(dst, n * 4);
  void* ws = nullptr;
  GC_CHECK(p.scratch(p.stageBytes(bits, bytes), &ws));
  Carve carve(ws);
  GC_CHECK(p.stage(bits, bytes, carve, &bits));
  p.onFailure(source, &expandFailure, n);
  signExpandKernel<<<blocksFor(n, 4), kThreads, 0, p.stream()>>>(p.ctl(), bits, n, pos, neg, dst);
  return p.launched();
}

Status CudaBackend::blockDot(const float* x, const float* d, size_t n, size_t block, float* out) {
  Prim p(state(), "blockDot");
  GC_REQUIRE(block >= 1, Err::InvalidArgument, "blockDot: block must be >= 1");
  if (n == 0) return Status::Ok();
  const size_t blocks = (n + block - 1) / block;
  p.reads(x, n * 4);
  p.reads(d, n * 4);
  p.writes(out, blocks * 4);
  blockDotKernel<<<unsigned(std::min<size_t>(blocks, 8 * kMaxBlocks)), kLanes, 0, p.stream()>>>(
      p.ctl(), x, d, n, block, out);
  return p.launched();
}

Status CudaBackend::expandBlocks(const float* d, size_t n, size_t block, const float* scales,
                                 float* dst, bool subtractFrom) {
  Prim p(state(), "expandBlocks");
  GC_REQUIRE(block >= 1, Err::InvalidArgument, "expandBlocks: block must be >= 1");
  if (n == 0) return Status::Ok();
  const size_t blocks = (n + block - 1) / block;
  p.reads(d, n * 4);
  p.reads(scales, blocks * 4);
  if (subtractFrom) p.reads(dst, n * 4);
  p.writes(dst, n * 4);
  void* ws = nullptr;
  GC_CHECK(p.scratch(p.stageBytes(scales, blocks * 4), &ws));
  Carve carve(ws);
  GC_CHECK(p.stage(scales, blocks * 4, carve, &scales));
  expandBlocksKernel<<<blocksFor(n, 4), kThreads, 0, p.stream()>>>(p.ctl(), d, n, block, scales,
                                                                   dst, subtractFrom);
  return p.launched();
}

}  // namespace gradcomp::device
