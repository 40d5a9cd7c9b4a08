// FFT sparsification's bins on the GPU: per-chunk selection of the bins of
// largest energy, the receiver's bitmap check, gather and scatter-add of the
// kept bins. Exact given the same spectrum (device/cpu/fft_fftw.cc).
#include "device/cuda/cuda_backend.h"
#include "device/cuda/kernel_common.cuh"

namespace gradcomp::device {
namespace {

using namespace cuda;

Status checkChunk(size_t chunk, const char* what) {
  GC_REQUIRE(chunk >= 2 && chunk <= (size_t(1) << 30), Err::InvalidArgument,
             "%s: FFT chunk length %zu not supported (accepted: 2..2^30)", what, chunk);
  return Status::Ok();
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
