// Chunked real FFT through cuFFT (R2C / C2R, batched over the full chunks,
// one more plan for a shorter tail) and FFT sparsification's bin selection.
// Layout and semantics: device/quant_types.h, device/cpu/fft_fftw.cc.
// Transforms are not bit-identical to FFTW (different algorithms; tests
// bound the difference); the selection, gather and scatter are exact given
// the same spectrum. Plans are cached per (length, batch) in the backend.
//
// cuFFT is loaded with dlopen the first time a transform runs, never linked:
// libgradcomp.so is LD_PRELOADed into jobs whose CUDA libraries live in
// unusual places (pip wheels under site-packages), and a DT_NEEDED on
// libcufft would stop the job from starting. Only the FFT path needs it.
#include <cufft.h>
#include <dlfcn.h>

#include <map>
#include <string>
#include <type_traits>
#include <utility>

#include "device/cuda/cuda_backend.h"
#include "device/cuda/kernel_common.cuh"

namespace gradcomp::device {
namespace {

// The few cuFFT entry points this file calls, resolved once per process.
struct CufftApi {
  decltype(&::cufftPlan1d) plan1d = nullptr;
  decltype(&::cufftSetStream) setStream = nullptr;
  decltype(&::cufftExecR2C) execR2C = nullptr;
  decltype(&::cufftExecC2R) execC2R = nullptr;
  decltype(&::cufftDestroy) destroy = nullptr;
};

#define GC_STR2(x) #x
#define GC_STR(x) GC_STR2(x)

// The versioned name of the cuFFT these headers describe first (an
// already-loaded copy, e.g. PyTorch's, is found by this soname), then the
// development symlink.
Status openCufft(CufftApi* api) {
  const char* names[] = {"libcufft.so." GC_STR(CUFFT_VER_MAJOR), "libcufft.so"};
  void* lib = nullptr;
  std::string tried;
  for (const char* name : names) {
    lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib) break;
    const char* why = dlerror();
    tried += std::string(tried.empty() ? "" : "; ") + name + ": " + (why ? why : "not found");
  }
  GC_REQUIRE(lib != nullptr, Err::Unsupported,
             "the FFT algorithm on a GPU needs cuFFT, which could not be loaded (%s); install "
             "libcufft (CUDA toolkit or the nvidia-cufft wheel) or add its directory to "
             "LD_LIBRARY_PATH",
             tried.c_str());
  bool ok = true;
  auto sym = [&](auto* fn, const char* name) {
    *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(lib, name));
    ok = ok && *fn != nullptr;
  };
  sym(&api->plan1d, "cufftPlan1d");
  sym(&api->setStream, "cufftSetStream");
  sym(&api->execR2C, "cufftExecR2C");
  sym(&api->execC2R, "cufftExecC2R");
  sym(&api->destroy, "cufftDestroy");
  GC_REQUIRE(ok, Err::Unsupported,
             "the loaded cuFFT library lacks one of cufftPlan1d, cufftSetStream, cufftExecR2C, "
             "cufftExecC2R, cufftDestroy");
  return Status::Ok();
}

// Loaded once per process (thread-safe static initialization); a failure is
// remembered and returned to every caller.
Status loadCufft(const CufftApi** out) {
  static CufftApi api;
  static const Status status = openCufft(&api);
  *out = status.ok() ? &api : nullptr;
  return status;
}

#undef GC_STR
#undef GC_STR2

}  // namespace

struct FftPlanCache {
  std::map<std::pair<size_t, size_t>, std::pair<cufftHandle, cufftHandle>> plans;  // r2c, c2r
};

namespace cuda {

void destroyFftPlans(void* p) {
  auto* cache = static_cast<FftPlanCache*>(p);
  const CufftApi* fft = nullptr;
  // Plans exist only after a successful load.
  if (!cache->plans.empty() && loadCufft(&fft).ok()) {
    for (auto& kv : cache->plans) {
      fft->destroy(kv.second.first);
      fft->destroy(kv.second.second);
    }
  }
  delete cache;
}

}  // namespace cuda


namespace {

using namespace cuda;

// The plan for `batch` transforms of length `len`, bound to the backend's
// stream. Created on first use (cuFFT allocates its work area then) and kept
// for the backend's life: later calls allocate nothing.
Status planFor(Prim& p, BackendState& s, size_t len, size_t batch, bool forward,
               cufftHandle* out, const CufftApi** api) {
  const CufftApi* fft = nullptr;
  GC_CHECK(loadCufft(&fft));
  *api = fft;
  auto* cache = static_cast<FftPlanCache*>(s.fftPlans);
  if (cache == nullptr) {
    cache = new FftPlanCache();
    s.fftPlans = cache;
  }
  auto it = cache->plans.find({len, batch});
  if (it == cache->plans.end()) {
    cufftHandle r2c = 0, c2r = 0;
    cufftResult rc = fft->plan1d(&r2c, int(len), CUFFT_R2C, int(batch));
    if (rc == CUFFT_SUCCESS) rc = fft->plan1d(&c2r, int(len), CUFFT_C2R, int(batch));
    GC_REQUIRE(rc == CUFFT_SUCCESS, Err::SystemError,
               "cuda %s: cuFFT could not plan %zu real transforms of length %zu (cufftResult %d)",
               p.name(), batch, len, int(rc));
    it = cache->plans.emplace(std::make_pair(len, batch), std::make_pair(r2c, c2r)).first;
  }
  *out = forward ? it->second.first : it->second.second;
  GC_REQUIRE(fft->setStream(*out, s.stream) == CUFFT_SUCCESS, Err::SystemError,
             "cuda %s: cufftSetStream failed", p.name());
  return Status::Ok();
}

Status checkChunk(size_t chunk, const char* what) {
  GC_REQUIRE(chunk >= 2 && chunk <= (size_t(1) << 30), Err::InvalidArgument,
             "%s: FFT chunk length %zu not supported (accepted: 2..2^30)", what, chunk);
  return Status::Ok();
}

__global__ void lengthOneForward(Ctl ctl, const float* src, float* out) {
  if (skipBlock(ctl)) return;
  if (threadIdx.x == 0) {
    out[0] = src[0];
    out[1] = 0.0f;
  }
}

__global__ void lengthOneInverse(Ctl ctl, const float* spectrum, float* out) {
  if (skipBlock(ctl)) return;
  if (threadIdx.x == 0) out[0] = spectrum[0];
}

// out[i] *= 1 / len in fp32, as the CPU scales FFTW's output.
__global__ void scaleKernel(Ctl ctl, float* x, size_t n, float scale) {
  if (skipBlock(ctl)) return;
  GC_GRID_STRIDE(i, n) x[i] = __fmul_rn(x[i], scale);
}

// Energy key of bin j of a chunk of length len: the bits of w*|X|^2 (>= 0,
// so its bit pattern orders like the value). Products of floats are exact in
// fp64, the sum is rounded once, as on the CPU.
__device__ inline unsigned long long energyKey(const float* bins, size_t j, size_t len) {
  const double re = bins[2 * j], im = bins[2 * j + 1];
  const bool single = j == 0 || (len % 2 == 0 && j == len / 2);
  const double e = __dmul_rn(single ? 1.0 : 2.0, __dadd_rn(__dmul_rn(re, re), __dmul_rn(im, im)));
  return (unsigned long long)__double_as_longlong(e);
}

// One CUDA block per chunk: radix select of the k-th largest energy key
// (8 passes of 8 bits), then every larger bin and the first ties in bin
// order up to k get flag 1 (ties go to the lower bin, as the CPU's order).
__global__ void selectBinsKernel(Ctl ctl, const float* spectrum, size_t n, size_t chunk,
                                 size_t kFull, size_t kTail, uint8_t* flags) {
  if (skipBlock(ctl)) return;
  using Scan = cub::BlockScan<unsigned, kThreads>;
  __shared__ typename Scan::TempStorage tmp;
  __shared__ unsigned long long hist[256];
  __shared__ unsigned long long prefix, mask, remaining;
  const size_t chunks = (n + chunk - 1) / chunk;
  const size_t fullBins = chunk / 2 + 1;
  for (size_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    const size_t len = n - c * chunk < chunk ? n - c * chunk : chunk;
    const size_t bins = len / 2 + 1;
    const size_t k = len == chunk ? kFull : kTail;
    const size_t first = c * fullBins;  // every earlier chunk is full
    const float* spec = spectrum + 2 * first;
    uint8_t* f = flags + first;
    if (k == 0 || k >= bins) {
      for (size_t j = threadIdx.x; j < bins; j += blockDim.x) f[j] = k ? 1 : 0;
      continue;
    }
    if (threadIdx.x == 0) {
      prefix = 0;
      mask = 0;
      remaining = k;
    }
    for (int shift = 56; shift >= 0; shift -= 8) {
      for (int d = threadIdx.x; d < 256; d += blockDim.x) hist[d] = 0;
      __syncthreads();
      for (size_t j = threadIdx.x; j < bins; j += blockDim.x) {
        const unsigned long long key = energyKey(spec, j, len);
        if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 0xFF], 1ull);
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        unsigned long long above = 0;
        int digit = 0;
        for (int d = 255; d >= 0; --d) {
          if (above + hist[d] >= remaining) {
            digit = d;
            break;
          }
          above += hist[d];
        }
        remaining -= above;
        prefix |= (unsigned long long)digit << shift;
        mask |= 0xFFull << shift;
      }
      __syncthreads();
    }
    // prefix = the k-th largest key; `remaining` ties with it are taken.
    const unsigned long long kth = prefix, ties = remaining;
    unsigned long long carry = 0;
    for (size_t j0 = 0; j0 < bins; j0 += blockDim.x) {
      const size_t j = j0 + threadIdx.x;
      const unsigned long long key = j < bins ? energyKey(spec, j, len) : 0;
      const unsigned tie = j < bins && key == kth ? 1u : 0u;
      unsigned before = 0, total = 0;
      Scan(tmp).ExclusiveSum(tie, before, total);
      if (j < bins) f[j] = (key > kth || (tie && carry + before < ties)) ? 1 : 0;
      carry += total;
      __syncthreads();
    }
  }
}

struct FlagCode {
  const uint8_t* flags;
  __device__ uint32_t operator()(size_t i) const { return flags[i]; }
};
__global__ void packFlags(Ctl ctl, const uint8_t* flags, size_t bins, uint8_t* bitmap) {
  if (skipBlock(ctl)) return;
  GC_GRID_STRIDE(g, groupCount(bins)) packGroup(g, bins, 1, bitmap, FlagCode{flags});
}

__device__ inline unsigned bitAt(const uint8_t* bitmap, size_t b) {
  return (bitmap[b / 8] >> (b % 8)) & 1u;
}

// One warp per chunk: its set bits against the keep count (key = chunk);
// then the padding (key = chunks), as the CPU checks them.
__global__ void checkBitmapKernel(Ctl ctl, const uint8_t* bitmap, size_t n, size_t chunk,
                                  size_t kFull, size_t kTail, size_t totalBins) {
  if (skipBlock(ctl)) return;
  const size_t chunks = (n + chunk - 1) / chunk;
  const size_t fullBins = chunk / 2 + 1;
  const size_t warp = (blockIdx.x * size_t(blockDim.x) + threadIdx.x) / 32;
  const unsigned lane = threadIdx.x % 32;
  const size_t warps = size_t(gridDim.x) * blockDim.x / 32;
  if (warp == 0 && lane == 0 && !paddingClear(bitmap, totalBins, 1)) fail(ctl, keyAt(chunks));
  for (size_t c = warp; c < chunks; c += warps) {
    const size_t len = n - c * chunk < chunk ? n - c * chunk : chunk;
    const size_t bins = len / 2 + 1, first = c * fullBins;
    unsigned long long set = 0;
    for (size_t j = lane; j < bins; j += 32) set += bitAt(bitmap, first + j);
    for (int o = 16; o; o /= 2) set += __shfl_down_sync(0xFFFFFFFFu, set, o);
    const size_t expect = len == chunk ? kFull : kTail;
    if (lane == 0 && set != expect) fail(ctl, keyAt(c), set, expect);
  }
}

Status checkBitmapFailure(const OpInfo& op, const FailureRecord& f) {
  const std::string from = fromRank(op.source);
  if (keyPos(f.key) == op.p[0])
    return makeStatus(Err::RemoteError, "FFT payload%s: bitmap padding bits after %llu bins are set",
                      from.c_str(), op.p[1]);
  return makeStatus(Err::RemoteError,
                    "FFT payload%s: chunk %llu keeps %llu bins where %llu are expected",
                    from.c_str(), keyPos(f.key), f.a, f.b);
}

struct BitOf {
  const uint8_t* bitmap;
  __device__ Pair operator()(size_t b, const Ctl&) const { return {bitAt(bitmap, b), 0}; }
};
struct GatherWrite {
  const float* spectrum;
  float* packed;
  __device__ void operator()(size_t b, Pair before, Pair mine, const Ctl&) const {
    if (!mine.a) return;
    packed[2 * before.a] = spectrum[2 * b];
    packed[2 * before.a + 1] = spectrum[2 * b + 1];
  }
};
struct PaddingCheck {
  const uint8_t* bitmap;
  size_t bins;
  __device__ void operator()(const Pair&, const Ctl& ctl) const {
    if (!paddingClear(bitmap, bins, 1)) fail(ctl, 0);
  }
};
struct ScatterAddWrite {
  const float* packed;
  float* spectrum;
  __device__ void operator()(size_t b, Pair before, Pair mine, const Ctl&) const {
    if (!mine.a) return;
    spectrum[2 * b] = __fadd_rn(spectrum[2 * b], packed[2 * before.a]);
    spectrum[2 * b + 1] = __fadd_rn(spectrum[2 * b + 1], packed[2 * before.a + 1]);
  }
};

Status scatterBinsFailure(const OpInfo& op, const FailureRecord&) {
  return makeStatus(Err::RemoteError,
                    "FFT bitmap: padding bits after %llu bins are set (corrupt payload)", op.p[0]);
}

}  // namespace

Status CudaBackend::fftForward(const float* src, size_t n, size_t chunk, float* spectrum) {
  Prim p(state(), "fftForward");
  GC_CHECK(checkChunk(chunk, "fftForward"));
  if (n == 0) return Status::Ok();
  const size_t full = n / chunk, rest = n % chunk;
  p.reads(src, n * 4);
  p.writes(spectrum, fftBinCount(n, chunk) * 8);
  cufftHandle plan;
  const CufftApi* fft = nullptr;
  if (full) {
    GC_CHECK(planFor(p, state(), chunk, full, true, &plan, &fft));
    GC_REQUIRE(fft->execR2C(plan, const_cast<float*>(src),
                            reinterpret_cast<cufftComplex*>(spectrum)) == CUFFT_SUCCESS,
               Err::SystemError, "cuda fftForward: cufftExecR2C failed");
  }
  float* tailOut = spectrum + 2 * full * fftBinsOfLength(chunk);
  if (rest == 1) {
    lengthOneForward<<<1, 32, 0, p.stream()>>>(p.ctl(), src + full * chunk, tailOut);
  } else if (rest > 1) {
    GC_CHECK(planFor(p, state(), rest, 1, true, &plan, &fft));
    GC_REQUIRE(fft->execR2C(plan, const_cast<float*>(src + full * chunk),
                            reinterpret_cast<cufftComplex*>(tailOut)) == CUFFT_SUCCESS,
               Err::SystemError, "cuda fftForward: cufftExecR2C (tail) failed");
  }
  return p.launched();
}

Status CudaBackend::fftInverse(const float* spectrum, size_t n, size_t chunk, float* dst) {
  Prim p(state(), "fftInverse");
  GC_CHECK(checkChunk(chunk, "fftInverse"));
  if (n == 0) return Status::Ok();
  const size_t full = n / chunk, rest = n % chunk;
  const size_t bins = fftBinCount(n, chunk);
  p.reads(spectrum, bins * 8);
  p.writes(dst, n * 4);
  // C2R overwrites its input; the contract keeps `spectrum` read-only.
  void* ws = nullptr;
  GC_CHECK(p.scratch(Carve::bytes<float>(2 * bins), &ws));
  float* work = Carve(ws).take<float>(2 * bins);
  GC_CHECK(p.check(cudaMemcpyAsync(work, spectrum, 2 * bins * sizeof(float), cudaMemcpyDefault,
                                   p.stream()),
                   "cudaMemcpyAsync"));
  cufftHandle plan;
  const CufftApi* fft = nullptr;
  if (full) {
    GC_CHECK(planFor(p, state(), chunk, full, false, &plan, &fft));
    GC_REQUIRE(fft->execC2R(plan, reinterpret_cast<cufftComplex*>(work), dst) == CUFFT_SUCCESS,
               Err::SystemError, "cuda fftInverse: cufftExecC2R failed");
    scaleKernel<<<blocksFor(full * chunk, 4), kThreads, 0, p.stream()>>>(
        p.ctl(), dst, full * chunk, 1.0f / float(chunk));
  }
  float* tailIn = work + 2 * full * fftBinsOfLength(chunk);
  if (rest == 1) {
    lengthOneInverse<<<1, 32, 0, p.stream()>>>(p.ctl(), tailIn, dst + full * chunk);
  } else if (rest > 1) {
    GC_CHECK(planFor(p, state(), rest, 1, false, &plan, &fft));
    GC_REQUIRE(fft->execC2R(plan, reinterpret_cast<cufftComplex*>(tailIn), dst + full * chunk) ==
                   CUFFT_SUCCESS,
               Err::SystemError, "cuda fftInverse: cufftExecC2R (tail) failed");
    scaleKernel<<<blocksFor(rest, 4), kThreads, 0, p.stream()>>>(p.ctl(), dst + full * chunk,
                                                                 rest, 1.0f / float(rest));
  }
  return p.launched();
}

Status CudaBackend::fftSelectBins(const float* spectrum, size_t n, size_t chunk, double keep,
                                  uint8_t* bitmap) {
  Prim p(state(), "fftSelectBins");
  GC_CHECK(checkChunk(chunk, "fftSelectBins"));
  GC_REQUIRE(keep >= 0 && keep <= 1, Err::InvalidArgument,
             "fftSelectBins: keep fraction %g outside [0, 1]", keep);
  const size_t bins = fftBinCount(n, chunk);
  if (bins == 0) return Status::Ok();
  const size_t bytes = packedBytes(bins, 1);
  p.reads(spectrum, bins * 8);
  p.writes(bitmap, bytes);
  void* ws = nullptr;
  GC_CHECK(p.scratch(Carve::bytes<uint8_t>(bins) + p.stageBytes(bitmap, bytes), &ws));
  Carve carve(ws);
  uint8_t* flags = carve.take<uint8_t>(bins);
  uint8_t* out = p.landing(bitmap, bytes, carve);
  const size_t rest = n % chunk;
  const size_t kFull = fftKeepCount(fftBinsOfLength(chunk), keep);
  const size_t kTail = rest ? fftKeepCount(fftBinsOfLength(rest), keep) : 0;
  const size_t chunks = fftChunkCount(n, chunk);
  selectBinsKernel<<<unsigned(std::min<size_t>(chunks, 8 * kMaxBlocks)), kThreads, 0,
                     p.stream()>>>(p.ctl(), spectrum, n, chunk, kFull, kTail, flags);
  packFlags<<<blocksFor(groupCount(bins)), kThreads, 0, p.stream()>>>(p.ctl(), flags, bins, out);
  GC_CHECK(p.launched());
  return p.land(bitmap, out, bytes);
}

Status CudaBackend::fftCheckBitmap(const uint8_t* bitmap, size_t n, size_t chunk, double keep,
                                   int source) {
  Prim p(state(), "fftCheckBitmap");
  GC_CHECK(checkChunk(chunk, "fftCheckBitmap"));
  const size_t bins = fftBinCount(n, chunk);
  if (bins == 0) return Status::Ok();
  const size_t bytes = packedBytes(bins, 1);
  p.reads(bitmap, bytes);
  void* ws = nullptr;
  GC_CHECK(p.scratch(p.stageBytes(bitmap, bytes), &ws));
  Carve carve(ws);
  GC_CHECK(p.stage(bitmap, bytes, carve, &bitmap));
  const size_t rest = n % chunk, chunks = fftChunkCount(n, chunk);
  const size_t kFull = fftKeepCount(fftBinsOfLength(chunk), keep);
  const size_t kTail = rest ? fftKeepCount(fftBinsOfLength(rest), keep) : 0;
  p.onFailure(source, &checkBitmapFailure, chunks, bins);
  checkBitmapKernel<<<blocksFor(chunks * 32), kThreads, 0, p.stream()>>>(p.ctl(), bitmap, n, chunk,
                                                                         kFull, kTail, bins);
  return p.launched();
}

Status CudaBackend::gatherBins(const float* spectrum, const uint8_t* bitmap, size_t bins,
                               float* packed) {
  Prim p(state(), "gatherBins");
  if (bins == 0) return Status::Ok();
  const size_t bytes = packedBytes(bins, 1);
  p.reads(bitmap, bytes);
  p.reads(spectrum, bins * 8);
  p.writes(packed, bins * 8);
  void* ws = nullptr;
  GC_CHECK(p.scratch(p.stageBytes(bitmap, bytes) + TileScratch::bytes(bins), &ws));
  Carve carve(ws);
  GC_CHECK(p.stage(bitmap, bytes, carve, &bitmap));
  const TileScratch ts = TileScratch::take(carve, bins);
  launchTileScan(p, ts, bins, BitOf{bitmap}, NoFinish{}, GatherWrite{spectrum, packed});
  return p.launched();
}

Status CudaBackend::scatterAddBins(const float* packed, const uint8_t* bitmap, size_t bins,
                                   float* spectrum) {
  Prim p(state(), "scatterAddBins");
  if (bins == 0) return Status::Ok();
  const size_t bytes = packedBytes(bins, 1);
  p.reads(bitmap, bytes);
  p.reads(packed, bins * 8);
  p.reads(spectrum, bins * 8);
  p.writes(spectrum, bins * 8);
  void* ws = nullptr;
  GC_CHECK(p.scratch(p.stageBytes(bitmap, bytes) + TileScratch::bytes(bins), &ws));
  Carve carve(ws);
  GC_CHECK(p.stage(bitmap, bytes, carve, &bitmap));
  const TileScratch ts = TileScratch::take(carve, bins);
  p.onFailure(-1, &scatterBinsFailure, bins);
  launchTileScan(p, ts, bins, BitOf{bitmap}, PaddingCheck{bitmap, bins},
                 ScatterAddWrite{packed, spectrum});
  return p.launched();
}

}  // namespace gradcomp::device
