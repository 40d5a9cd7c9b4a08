// Range-based float codec and sign votes / counts on the GPU. Bit-identical
// to device/cpu/rbf_codec.cc and sign_counts.cc: the same fp64 steps (frexp,
// round-half-even rint, ldexp, each product and sum rounded once), and every
// packed stream built one output byte per thread (padding bits zero).
#include "device/cuda/backend_internal.h"
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
  if (r < 1.0) return 1;
  int ex = 0;
  const double fr = frexp(r, &ex);
  const double scale = double(uint32_t(1) << L.mantissa);
  const double scaled = __dmul_rn(__dsub_rn(__dmul_rn(2.0, fr), 1.0), scale);
  const double f = rint(scaled);  // ties to even, as nearbyint in the default mode
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

struct RbfField {
  const float* src;
  RbfLayout L;
  __device__ uint32_t operator()(size_t i) const { return rbfEncodeOne(src[i], L); }
};

__global__ void rbfEncodeKernel(RbfField field, size_t n, uint8_t* out, size_t bytes) {
  GC_GRID_STRIDE(byte, bytes) out[byte] = packByte(byte, n, field.L.bits, field);
}

__global__ void rbfDecodeKernel(const uint8_t* codes, size_t n, RbfLayout L, float* dst,
                                bool accumulate) {
  GC_GRID_STRIDE(i, n) {
    const float v = rbfDecodeOne(getBits(codes, i, L.bits), L);
    dst[i] = accumulate ? __fadd_rn(dst[i], v) : v;
  }
}

// Sets *flag when a stream's padding bits are set (one thread).
__global__ void paddingKernel(const uint8_t* s, size_t n, int width, uint64_t* flag) {
  if (!paddingClear(s, n, width)) *flag = 1;
}

struct SignField {
  const float* src;
  __device__ uint32_t operator()(size_t i) const { return src[i] > 0.0f ? 1u : 0u; }
};
__global__ void signPackKernel(const float* src, size_t n, uint8_t* out, size_t bytes) {
  GC_GRID_STRIDE(byte, bytes) out[byte] = packByte(byte, n, 1, SignField{src});
}

// Counts above maxIn are reported (first element) and written clamped; the
// call fails then, so the output is never used.
struct CountField {
  const uint8_t* countsIn;
  int inBits;
  uint32_t maxIn;
  const uint8_t* signBits;
  uint64_t* firstBad;
  __device__ uint32_t operator()(size_t i) const {
    uint32_t c = countsIn ? getBits(countsIn, i, inBits) : 0;
    if (c > maxIn) {
      reportFirst(firstBad, i);
      c = maxIn;
    }
    return c + ((signBits[i / 8] >> (i % 8)) & 1u);
  }
};
__global__ void signCountKernel(CountField field, size_t n, int outBits, uint8_t* out,
                                size_t bytes) {
  GC_GRID_STRIDE(byte, bytes) out[byte] = packByte(byte, n, outBits, field);
}

struct MajorityField {
  const uint8_t* counts;
  int bits;
  uint32_t nranks;
  uint64_t* firstBad;
  __device__ uint32_t operator()(size_t i) const {
    const uint32_t c = getBits(counts, i, bits);
    if (c > nranks) reportFirst(firstBad, i);
    return 2 * uint64_t(c) > uint64_t(nranks) ? 1u : 0u;
  }
};
__global__ void majorityKernel(MajorityField field, size_t n, uint8_t* out, size_t bytes) {
  GC_GRID_STRIDE(byte, bytes) out[byte] = packByte(byte, n, 1, field);
}

__global__ void signExpandKernel(const uint8_t* bits, size_t n, float pos, float neg, float* dst) {
  GC_GRID_STRIDE(i, n) dst[i] = (bits[i / 8] >> (i % 8)) & 1u ? pos : neg;
}

Status checkRbf(const RbfSpec& spec, const char* what) {
  GC_REQUIRE(spec.bits >= 3 && spec.bits <= 16, Err::InvalidArgument,
             "%s: RBF width %d bits not supported (accepted: 3..16)", what, spec.bits);
  GC_REQUIRE(rbfValidLayout(spec.bits, spec.mantissa), Err::InvalidArgument,
             "%s: RBF mantissa %d bits not supported for %d-bit words", what, spec.mantissa,
             spec.bits);
  GC_REQUIRE(std::isfinite(spec.eps) && spec.eps >= 0, Err::InvalidArgument,
             "%s: RBF eps %g must be finite and >= 0", what, double(spec.eps));
  return Status::Ok();
}

Status checkWidth(int bits, const char* what) {
  GC_REQUIRE(bits >= 1 && bits <= 16, Err::InvalidArgument,
             "%s: count width %d bits not supported (accepted: 1..16)", what, bits);
  return Status::Ok();
}

RbfLayout layoutOf(const RbfSpec& spec) {
  return RbfLayout{spec.bits, spec.mantissa, spec.eps, rbfUnitMax(spec.bits, spec.mantissa)};
}

}  // namespace

Status CudaBackend::rbfEncode(const float* src, size_t n, const RbfSpec& spec, uint8_t* codes) {
  GC_CHECK(checkRbf(spec, "rbfEncode"));
  if (n == 0) return Status::Ok();
  const size_t bytes = packedBytes(n, spec.bits);
  rbfEncodeKernel<<<blocksFor(bytes), kThreads, 0, stream_>>>(RbfField{src, layoutOf(spec)}, n,
                                                              codes, bytes);
  return launched("rbfEncode");
}

Status CudaBackend::rbfDecode(const uint8_t* codes, size_t n, const RbfSpec& spec, float* dst,
                              bool accumulate) {
  GC_CHECK(checkRbf(spec, "rbfDecode"));
  if (n == 0) return Status::Ok();
  GC_CHECK(resetResults());
  paddingKernel<<<1, 1, 0, stream_>>>(codes, n, spec.bits, deviceResults());
  uint64_t host[kResultWords];
  GC_CHECK(fetchResults(host));
  GC_REQUIRE(host[0] == 0, Err::RemoteError,
             "RBF payload: padding bits after %zu words are set (corrupt payload)", n);
  rbfDecodeKernel<<<blocksFor(n, 4), kThreads, 0, stream_>>>(codes, n, layoutOf(spec), dst,
                                                             accumulate);
  return launched("rbfDecode");
}

Status CudaBackend::signPack(const float* src, size_t n, uint8_t* bits) {
  if (n == 0) return Status::Ok();
  const size_t bytes = packedBytes(n, 1);
  signPackKernel<<<blocksFor(bytes), kThreads, 0, stream_>>>(src, n, bits, bytes);
  return launched("signPack");
}

Status CudaBackend::signCountAdd(const uint8_t* countsIn, int inBits, int maxIn,
                                 const uint8_t* signBits, size_t n, uint8_t* countsOut,
                                 int outBits) {
  GC_CHECK(checkWidth(outBits, "signCountAdd"));
  if (countsIn) GC_CHECK(checkWidth(inBits, "signCountAdd"));
  GC_REQUIRE(uint64_t(maxIn) + 1 < (uint64_t(1) << outBits), Err::InvalidArgument,
             "signCountAdd: %d-bit output cannot hold a count of %d", outBits, maxIn + 1);
  if (n == 0) return Status::Ok();
  GC_CHECK(resetResults());
  uint64_t* res = deviceResults();
  paddingKernel<<<1, 1, 0, stream_>>>(signBits, n, 1, res);
  if (countsIn) paddingKernel<<<1, 1, 0, stream_>>>(countsIn, n, inBits, res + 1);
  const size_t bytes = packedBytes(n, outBits);
  const CountField field{countsIn, inBits, uint32_t(maxIn), signBits, res + kFirstBad};
  signCountKernel<<<blocksFor(bytes), kThreads, 0, stream_>>>(field, n, outBits, countsOut, bytes);
  GC_CHECK(launched("signCountAdd"));
  uint64_t host[kResultWords];
  GC_CHECK(fetchResults(host));
  GC_REQUIRE(host[0] == 0, Err::RemoteError,
             "sign votes: padding bits after %zu votes are set (corrupt payload)", n);
  GC_REQUIRE(host[1] == 0, Err::RemoteError,
             "sign counts: padding bits after %zu counts are set (corrupt payload)", n);
  GC_REQUIRE(host[kFirstBad] == kNoneHost, Err::RemoteError,
             "sign counts: element %llu has a count above the %d ranks it covers",
             (unsigned long long)host[kFirstBad], maxIn);
  return Status::Ok();
}

Status CudaBackend::signMajority(const uint8_t* counts, int bits, size_t n, int nranks,
                                 uint8_t* decision) {
  GC_CHECK(checkWidth(bits, "signMajority"));
  if (n == 0) return Status::Ok();
  GC_CHECK(resetResults());
  uint64_t* res = deviceResults();
  paddingKernel<<<1, 1, 0, stream_>>>(counts, n, bits, res);
  const size_t bytes = packedBytes(n, 1);
  majorityKernel<<<blocksFor(bytes), kThreads, 0, stream_>>>(
      MajorityField{counts, bits, uint32_t(nranks), res + kFirstBad}, n, decision, bytes);
  GC_CHECK(launched("signMajority"));
  uint64_t host[kResultWords];
  GC_CHECK(fetchResults(host));
  GC_REQUIRE(host[0] == 0, Err::RemoteError,
             "sign counts: padding bits after %zu counts are set (corrupt payload)", n);
  GC_REQUIRE(host[kFirstBad] == kNoneHost, Err::RemoteError,
             "sign counts: element %llu has a count above %d ranks",
             (unsigned long long)host[kFirstBad], nranks);
  return Status::Ok();
}

Status CudaBackend::signExpand(const uint8_t* bits, size_t n, float pos, float neg, float* dst) {
  if (n == 0) return Status::Ok();
  GC_CHECK(resetResults());
  paddingKernel<<<1, 1, 0, stream_>>>(bits, n, 1, deviceResults());
  uint64_t host[kResultWords];
  GC_CHECK(fetchResults(host));
  GC_REQUIRE(host[0] == 0, Err::RemoteError,
             "sign decisions: padding bits after %zu decisions are set (corrupt payload)", n);
  signExpandKernel<<<blocksFor(n, 4), kThreads, 0, stream_>>>(bits, n, pos, neg, dst);
  return launched("signExpand");
}

}  // namespace gradcomp::device
