// Chunked real FFT through cuFFT (R2C / C2R, batched over the full chunks,
// one more plan for a shorter tail). Layout and semantics:
// device/quant_types.h, device/cpu/fft_fftw.cc. Transforms are not
// bit-identical to FFTW (different algorithms; tests bound the difference).
// Plans are cached per (length, batch) in the backend. Bin selection and the
// bitmap primitives: fft_bins.cu.
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

#include <cstdio>
#include <vector>

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
    // cuFFT allocates and loads its kernels here: the proxy contract wants it
    // done by prepareFft, before the caller's stream is parked.
    if (s.parked) {
      char msg[200];
      std::snprintf(msg, sizeof msg, "a cuFFT plan (%zu transforms of length %zu) made while "
                    "the caller's stream was parked on ", batch, len);
      s.violations.push_back(msg + s.parkedWhat);
      GC_REQUIRE(!s.strict, Err::Internal, "proxy contract: %s%s (Backend::prepareFft makes "
                 "plans on the calling thread)", msg, s.parkedWhat.c_str());
    }
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

// The calling thread, before a call that transforms n values in chunks is
// parked: the plans it needs, each run once forward and back on scratch so
// that cuFFT's kernels are loaded now (lazy loading would load them at their
// first launch, mid-call). Only new plans cost anything.
Status CudaBackend::prepareFft(size_t n, size_t chunk) {
  GC_CHECK(checkChunk(chunk, "prepareFft"));
  if (n == 0) return Status::Ok();
  const size_t full = n / chunk, rest = n % chunk;
  std::vector<std::pair<size_t, size_t>> shapes;  // (length, batch)
  if (full) shapes.push_back({chunk, full});
  if (rest > 1) shapes.push_back({rest, 1});
  for (const auto& shape : shapes) {
    Prim p(state(), "prepareFft");
    auto* cache = static_cast<FftPlanCache*>(state().fftPlans);
    if (cache && cache->plans.count(shape)) continue;
    const size_t len = shape.first, batch = shape.second;
    cufftHandle plan;
    const CufftApi* fft = nullptr;
    GC_CHECK(planFor(p, state(), len, batch, true, &plan, &fft));
    const size_t values = len * batch, bins = fftBinsOfLength(len) * batch;
    float* in = static_cast<float*>(state().deviceHeap->allocate(values * 4));
    float* out = static_cast<float*>(state().deviceHeap->allocate(bins * 8));
    GC_REQUIRE(in && out, Err::SystemError,
               "cuda prepareFft: no device memory to warm up a plan of %zu x %zu", batch, len);
    GC_CHECK(p.check(cudaMemsetAsync(in, 0, values * 4, p.stream()), "cudaMemsetAsync"));
    GC_REQUIRE(fft->execR2C(plan, in, reinterpret_cast<cufftComplex*>(out)) == CUFFT_SUCCESS,
               Err::SystemError, "cuda prepareFft: cufftExecR2C failed");
    GC_CHECK(planFor(p, state(), len, batch, false, &plan, &fft));
    GC_REQUIRE(fft->execC2R(plan, reinterpret_cast<cufftComplex*>(out), in) == CUFFT_SUCCESS,
               Err::SystemError, "cuda prepareFft: cufftExecC2R failed");
    state().deviceHeap->release(in, values * 4);  // reused in stream order
    state().deviceHeap->release(out, bins * 8);
    GC_CHECK(p.launched());
  }
  return Status::Ok();
}

}  // namespace gradcomp::device
