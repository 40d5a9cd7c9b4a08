// Range-based float codec on the GPU: whole streams with the fused residual,
// and the segmented form of FFT payloads ([vmax][codes] per run). Bit-
// identical to device/cpu/rbf_codec.cc: the same fp64 steps (frexp, round-
// half-even rint, ldexp, each product and sum rounded once). Encoders give
// each thread a group of 8 words (= `bits` whole bytes), so every word is
// computed once and a residual may overwrite its input.
#include "device/cuda/cuda_backend.h"
#include "device/cuda/kernel_common.cuh"

namespace gradcomp::device {
namespace {

using namespace cuda;

struct RbfLayout {
  int bits, mantissa;
  float eps;
  double unitMax;  // rbfUnitMax(bits, mantissa), computed once on the host
};

__device__ inline uint32_t rbfMagnitudeCode(double a, const RbfLayout& L) {
  const uint32_t cmax = (uint32_t(1) << (L.bits - 1)) - 1;
  const double eps = double(L.eps);
  if (!(a >= __dmul_rn(0.5, eps)) || L.eps == 0) return 0;  // also NaN
  if (a >= __dmul_rn(eps, L.unitMax)) return cmax;          // also Inf
  const double r = __ddiv_rn(a, eps);
  if (r < 1.0) return 1;  // [eps/2, eps) rounds to eps
  int ex = 0;
  const double fr = frexp(r, &ex);  // r = fr * 2^ex, fr in [0.5, 1)
  const double scale = double(uint32_t(1) << L.mantissa);
  const double f = rint(__dmul_rn(__dsub_rn(__dmul_rn(2.0, fr), 1.0), scale));  // ties to even
  const double t = __dadd_rn(__dmul_rn(double(ex - 1), scale), f);
  const double c = __dadd_rn(t, 1.0);
  return c >= double(cmax) ? cmax : uint32_t(c);
}

__device__ inline uint32_t rbfEncodeOne(float x, const RbfLayout& L) {
  const uint32_t sign = signbit(x) && !isnan(x) ? 1u : 0u;
  return sign << (L.bits - 1) | rbfMagnitudeCode(fabs(double(x)), L);
}

__device__ inline float rbfDecodeOne(uint32_t word, const RbfLayout& L) {
  const uint32_t c = word & ((uint32_t(1) << (L.bits - 1)) - 1);
  float mag = 0.0f;
  if (c != 0) {
    const uint32_t t = c - 1;
    const int e = int(t >> L.mantissa);
    const uint32_t f = t & ((uint32_t(1) << L.mantissa) - 1);
    mag = __double2float_rn(
        ldexp(__dmul_rn(double(L.eps), __dadd_rn(1.0, ldexp(double(f), -L.mantissa))), e));
  }
  return (word >> (L.bits - 1)) & 1u ? -mag : mag;
}

// eps for a run's vmax, as rbfEpsForVmax: float(vmax / unitMax), one step
// lower where that rounded up (the largest code decodes to at most vmax).
__device__ inline float epsFor(float vmax, double unitMax) {
  const float eps = __double2float_rn(__ddiv_rn(double(vmax), unitMax));
  return __dmul_rn(double(eps), unitMax) > double(vmax) ? nextafterf(eps, 0.0f) : eps;
}

struct EncodeCode {
  const float* src;
  float* residual;
  RbfLayout L;
  __device__ uint32_t operator()(size_t i) const {
    const float x = src[i];
    const uint32_t w = rbfEncodeOne(x, L);
    if (residual) residual[i] = __fsub_rn(x, rbfDecodeOne(w, L));
    return w;
  }
};

__global__ void rbfEncodeKernel(Ctl ctl, const float* src, size_t n, RbfLayout L, uint8_t* codes,
                                float* residual) {
  if (skipBlock(ctl)) return;
  GC_GRID_STRIDE(g, groupCount(n)) packGroup(g, n, L.bits, codes, EncodeCode{src, residual, L});
}

// Padding first (key 0): the CPU rejects the stream before decoding.
__global__ void rbfDecodeKernel(Ctl ctl, const uint8_t* codes, size_t n, RbfLayout L, float* dst,
                                bool accumulate) {
  if (skipBlock(ctl)) return;
  if (blockIdx.x == 0 && threadIdx.x == 0 && !paddingClear(codes, n, L.bits)) fail(ctl, 0);
  GC_GRID_STRIDE(i, n) {
    const float v = rbfDecodeOne(getBits(codes, i, L.bits), L);
    dst[i] = accumulate ? __fadd_rn(dst[i], v) : v;
  }
}

Status rbfDecodeFailure(const OpInfo& op, const FailureRecord&) {
  return makeStatus(Err::RemoteError,
                    "RBF payload%s: padding bits after %llu words are set (corrupt payload)",
                    fromRank(op.source).c_str(), op.p[0]);
}

// ---- segments -------------------------------------------------------------------
struct Segments {
  size_t segments, perSegment, lastSegment;
  int bits;
  __device__ __host__ size_t length(size_t s) const {
    return s + 1 == segments ? lastSegment : perSegment;
  }
  // Byte offset of run s: every earlier run holds perSegment values.
  __device__ __host__ size_t offset(size_t s) const {
    return perSegment ? s * (4 + (perSegment * size_t(bits) + 7) / 8) : 0;
  }
};

struct MaxOf {
  __device__ float operator()(float a, float b) const { return a > b ? a : b; }
};

// vmax[s] = the run's largest finite |value| (one CUDA block per run).
__global__ void segmentMax(Ctl ctl, const float* values, Segments sg, float* vmax) {
  if (skipBlock(ctl)) return;
  using Reduce = cub::BlockReduce<float, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  for (size_t s = blockIdx.x; s < sg.segments; s += gridDim.x) {
    const float* v = values + s * sg.perSegment;
    float m = 0.0f;
    for (size_t i = threadIdx.x; i < sg.length(s); i += blockDim.x) {
      const float a = fabsf(v[i]);
      if (a <= 3.402823466e38f && a > m) m = a;
    }
    m = Reduce(tmp).Reduce(m, MaxOf());
    if (threadIdx.x == 0) vmax[s] = m;
    __syncthreads();
  }
}

__global__ void segmentEncode(Ctl ctl, const float* values, Segments sg, int mantissa,
                              double unitMax, const float* vmax, float fixedVmax, uint8_t* out) {
  if (skipBlock(ctl)) return;
  for (size_t s = blockIdx.x; s < sg.segments; s += gridDim.x) {
    const size_t len = sg.length(s);
    if (len == 0) continue;
    const float vm = vmax ? vmax[s] : fixedVmax;
    uint8_t* run = out + sg.offset(s);
    if (threadIdx.x == 0) putFloat(run, vm);
    const EncodeCode code{values + s * sg.perSegment, nullptr,
                          RbfLayout{sg.bits, mantissa, epsFor(vm, unitMax), unitMax}};
    for (size_t g = threadIdx.x; g < groupCount(len); g += blockDim.x)
      packGroup(g, len, sg.bits, run + 4, code);
  }
}

// Per run, in the CPU's order: vmax finite and >= 0 (kind 0), padding (kind 1).
__global__ void segmentDecode(Ctl ctl, const uint8_t* in, Segments sg, int mantissa,
                              double unitMax, float* values) {
  if (skipBlock(ctl)) return;
  __shared__ float eps;
  __shared__ bool ok;
  for (size_t s = blockIdx.x; s < sg.segments; s += gridDim.x) {
    const size_t len = sg.length(s);
    if (len == 0) continue;
    const uint8_t* run = in + sg.offset(s);
    if (threadIdx.x == 0) {
      const float vm = getFloat(run);
      ok = isfinite(vm) && vm >= 0;
      if (!ok) fail(ctl, keyAt(s, 0), __float_as_uint(vm));
      else if (!paddingClear(run + 4, len, sg.bits)) fail(ctl, keyAt(s, 1), len);
      eps = ok ? epsFor(vm, unitMax) : 0.0f;
    }
    __syncthreads();
    if (ok) {
      const RbfLayout L{sg.bits, mantissa, eps, unitMax};
      float* v = values + s * sg.perSegment;
      for (size_t i = threadIdx.x; i < len; i += blockDim.x)
        v[i] = rbfDecodeOne(getBits(run + 4, i, sg.bits), L);
    }
    __syncthreads();
  }
}

Status segmentFailure(const OpInfo& op, const FailureRecord& f) {
  const std::string from = fromRank(op.source);
  if (keyKindOf(f.key) == 0)
    return makeStatus(Err::RemoteError,
                      "RBF payload%s: segment %llu has vmax %g (expected finite and >= 0)",
                      from.c_str(), keyPos(f.key), floatOfBits(f.a));
  return makeStatus(Err::RemoteError,
                    "RBF payload%s: padding bits after %llu words are set (corrupt payload)",
                    from.c_str(), f.a);
}

Status checkLayout(int bits, int mantissa, const char* what) {
  GC_REQUIRE(bits >= 3 && bits <= 16, Err::InvalidArgument,
             "%s: RBF width %d bits not supported (accepted: 3..16)", what, bits);
  GC_REQUIRE(rbfValidLayout(bits, mantissa), Err::InvalidArgument,
             "%s: RBF mantissa %d bits not supported for %d-bit words (accepted: m <= %d with "
             "at most 64 binades, i.e. (2^(N-1) - 2) >> m <= 63)",
             what, mantissa, bits, bits - 2);
  return Status::Ok();
}

Status checkSpec(const RbfSpec& spec, const char* what) {
  GC_CHECK(checkLayout(spec.bits, spec.mantissa, what));
  GC_REQUIRE(std::isfinite(spec.eps) && spec.eps >= 0, Err::InvalidArgument,
             "%s: RBF eps %g must be finite and >= 0", what, double(spec.eps));
  return Status::Ok();
}

RbfLayout layoutOf(const RbfSpec& spec) {
  return RbfLayout{spec.bits, spec.mantissa, spec.eps, rbfUnitMax(spec.bits, spec.mantissa)};
}

}  // namespace

Status CudaBackend::rbfEncode(const float* src, size_t n, const RbfSpec& spec, uint8_t* codes,
                              float* residual) {
  Prim p(state(), "rbfEncode");
  GC_CHECK(checkSpec(spec, "rbfEncode"));
  if (n == 0) return Status::Ok();
  const size_t bytes = packedBytes(n, spec.bits);
  p.reads(src, n * 4);
  p.writes(codes, bytes);
  if (residual) p.writes(residual, n * 4);
  void* ws = nullptr;
  GC_CHECK(p.scratch(p.stageBytes(codes, bytes), &ws));
  Carve carve(ws);
  uint8_t* out = p.landing(codes, bytes, carve);
  rbfEncodeKernel<<<blocksFor(groupCount(n)), kThreads, 0, p.stream()>>>(
      p.ctl(), src, n, layoutOf(spec), out, residual);
  GC_CHECK(p.launched());
  return p.land(codes, out, bytes);
}

Status CudaBackend::rbfDecode(const uint8_t* codes, size_t n, const RbfSpec& spec, float* dst,
                              bool accumulate, int source) {
  Prim p(state(), "rbfDecode");
  GC_CHECK(checkSpec(spec, "rbfDecode"));
  if (n == 0) return Status::Ok();
  const size_t bytes = packedBytes(n, spec.bits);
  p.reads(codes, bytes);
  if (accumulate) p.reads(dst, n * 4);
  p.writes(dst, n * 4);
  void* ws = nullptr;
  GC_CHECK(p.scratch(p.stageBytes(codes, bytes), &ws));
  Carve carve(ws);
  GC_CHECK(p.stage(codes, bytes, carve, &codes));
  p.onFailure(source, &rbfDecodeFailure, n);
  rbfDecodeKernel<<<blocksFor(n, 4), kThreads, 0, p.stream()>>>(p.ctl(), codes, n, layoutOf(spec),
                                                                dst, accumulate);
  return p.launched();
}

Status CudaBackend::rbfEncodeSegments(const float* values, size_t segments, size_t perSegment,
                                      size_t lastSegment, int bits, int mantissa,
                                      double fixedVmax, uint8_t* out) {
  Prim p(state(), "rbfEncodeSegments");
  GC_CHECK(checkLayout(bits, mantissa, "rbfEncodeSegments"));
  const size_t bytes = rbfSegmentsBytes(segments, perSegment, lastSegment, bits);
  if (bytes == 0) return Status::Ok();
  const size_t total = (segments - 1) * perSegment + lastSegment;
  const bool host = p.isHost(out, bytes);  // built in device memory, copied once
  const bool fixed = !(fixedVmax <= 0);  // NaN is a fixed vmax, rejected below (as the CPU does)
  GC_REQUIRE(!fixed || std::isfinite(rbfEpsForVmax(double(float(fixedVmax)), bits, mantissa)),
             Err::InvalidArgument, "rbfEncodeSegments: RBF vmax %g gives no finite eps",
             fixedVmax);
  void* ws = nullptr;
  GC_CHECK(p.scratch((fixed ? 0 : Carve::bytes<float>(segments)) +
                         (host ? Carve::bytes<uint8_t>(bytes) : 0),
                     &ws));
  Carve carve(ws);
  float* vmax = fixed ? nullptr : carve.take<float>(segments);
  uint8_t* body = host ? carve.take<uint8_t>(bytes) : out;
  p.reads(values, total * 4);
  p.writes(out, bytes);
  const Segments sg{segments, perSegment, lastSegment, bits};
  const unsigned grid = unsigned(std::min<size_t>(segments, 8 * kMaxBlocks));
  if (!fixed) segmentMax<<<grid, kThreads, 0, p.stream()>>>(p.ctl(), values, sg, vmax);
  segmentEncode<<<grid, kThreads, 0, p.stream()>>>(p.ctl(), values, sg, mantissa,
                                                   rbfUnitMax(bits, mantissa), vmax,
                                                   float(fixedVmax), body);
  GC_CHECK(p.launched());
  if (host)
    GC_CHECK(p.check(cudaMemcpyAsync(out, body, bytes, cudaMemcpyDefault, p.stream()),
                     "cudaMemcpyAsync"));
  return Status::Ok();
}

Status CudaBackend::rbfDecodeSegments(const uint8_t* in, size_t segments, size_t perSegment,
                                      size_t lastSegment, int bits, int mantissa, float* values,
                                      int source) {
  Prim p(state(), "rbfDecodeSegments");
  GC_CHECK(checkLayout(bits, mantissa, "rbfDecodeSegments"));
  const size_t bytes = rbfSegmentsBytes(segments, perSegment, lastSegment, bits);
  if (bytes == 0) return Status::Ok();
  const size_t total = (segments - 1) * perSegment + lastSegment;
  p.reads(in, bytes);
  p.writes(values, total * 4);
  void* ws = nullptr;
  GC_CHECK(p.scratch(p.stageBytes(in, bytes), &ws));
  Carve carve(ws);
  GC_CHECK(p.stage(in, bytes, carve, &in));
  p.onFailure(source, &segmentFailure);
  const Segments sg{segments, perSegment, lastSegment, bits};
  segmentDecode<<<unsigned(std::min<size_t>(segments, 8 * kMaxBlocks)), kThreads, 0,
                  p.stream()>>>(p.ctl(), in, sg, mantissa, rbfUnitMax(bits, mantissa), values);
  return p.launched();
}

}  // namespace gradcomp::device
