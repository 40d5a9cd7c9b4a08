// Chunked real FFT over FFTW (single precision) and the bin selection of FFT
// sparsification (notes section 7). FFTW's planner is not thread-safe, its
// new-array execute functions are: plans are made once per length under a
// mutex and kept for the process. FFTW_ESTIMATE | FFTW_UNALIGNED makes the
// plan (and so every result bit) independent of timing and buffer alignment.
#include <fftw3.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <numeric>
#include <vector>

#include "device/cpu/quant_bitpack.h"
#include "device/cpu/quant_primitives.h"
#include "device/cpu/sparse_ops.h"

namespace gradcomp::device::cpu {
namespace {

struct Plans {
  fftwf_plan forward = nullptr;
  fftwf_plan inverse = nullptr;
};

Status plansFor(size_t len, Plans* out) {
  static std::mutex mutex;
  static std::map<size_t, Plans> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(len);
  if (it == cache.end()) {
    // Planning with FFTW_ESTIMATE does not touch the arrays' contents.
    std::vector<float> real(len);
    std::vector<fftwf_complex> cplx(len / 2 + 1);
    Plans p;
    const unsigned flags = FFTW_ESTIMATE | FFTW_UNALIGNED;
    p.forward = fftwf_plan_dft_r2c_1d(int(len), real.data(), cplx.data(), flags);
    p.inverse = fftwf_plan_dft_c2r_1d(int(len), cplx.data(), real.data(), flags);
    GC_REQUIRE(p.forward && p.inverse, Err::SystemError,
               "FFTW could not plan a real transform of length %zu", len);
    it = cache.emplace(len, p).first;
  }
  *out = it->second;
  return Status::Ok();
}

Status checkChunk(size_t chunk, const char* what) {
  GC_REQUIRE(chunk >= 2 && chunk <= (size_t(1) << 30), Err::InvalidArgument,
             "%s: FFT chunk length %zu not supported (accepted: 2..2^30)", what, chunk);
  return Status::Ok();
}

}  // namespace

Status fftForward(const float* src, size_t n, size_t chunk, float* spectrum) {
  GC_CHECK(checkChunk(chunk, "fftForward"));
  std::vector<float> in;
  for (size_t c = 0, bin = 0; c < fftChunkCount(n, chunk); ++c) {
    const size_t len = fftChunkLength(n, chunk, c);
    float* out = spectrum + 2 * bin;
    if (len == 1) {  // FFTW handles length 1, but keep the trivial case explicit
      out[0] = src[c * chunk];
      out[1] = 0;
    } else {
      Plans p;
      GC_CHECK(plansFor(len, &p));
      in.assign(src + c * chunk, src + c * chunk + len);  // r2c may not preserve input
      fftwf_execute_dft_r2c(p.forward, in.data(), reinterpret_cast<fftwf_complex*>(out));
    }
    bin += fftBinsOfLength(len);
  }
  return Status::Ok();
}

Status fftInverse(const float* spectrum, size_t n, size_t chunk, float* dst) {
  GC_CHECK(checkChunk(chunk, "fftInverse"));
  std::vector<float> in;  // c2r destroys its input: work on a copy
  for (size_t c = 0, bin = 0; c < fftChunkCount(n, chunk); ++c) {
    const size_t len = fftChunkLength(n, chunk, c);
    const size_t bins = fftBinsOfLength(len);
    float* out = dst + c * chunk;
    if (len == 1) {
      out[0] = spectrum[2 * bin];
    } else {
      Plans p;
      GC_CHECK(plansFor(len, &p));
      in.assign(spectrum + 2 * bin, spectrum + 2 * (bin + bins));
      fftwf_execute_dft_c2r(p.inverse, reinterpret_cast<fftwf_complex*>(in.data()), out);
      const float scale = 1.0f / float(len);
      for (size_t i = 0; i < len; ++i) out[i] *= scale;
    }
    bin += bins;
  }
  return Status::Ok();
}

Status fftSelectBins(const float* spectrum, size_t n, size_t chunk, double keep,
                     uint8_t* bitmap) {
  GC_CHECK(checkChunk(chunk, "fftSelectBins"));
  GC_REQUIRE(keep >= 0 && keep <= 1, Err::InvalidArgument,
             "fftSelectBins: keep fraction %g outside [0, 1]", keep);
  zeroStream(bitmap, fftBinCount(n, chunk), 1);
  std::vector<double> energy;
  std::vector<uint32_t> order;
  for (size_t c = 0, bin = 0; c < fftChunkCount(n, chunk); ++c) {
    const size_t len = fftChunkLength(n, chunk, c);
    const size_t bins = fftBinsOfLength(len);
    const size_t k = fftKeepCount(bins, keep);
    energy.resize(bins);
    for (size_t j = 0; j < bins; ++j) {
      const double re = spectrum[2 * (bin + j)], im = spectrum[2 * (bin + j) + 1];
      const bool single = j == 0 || (len % 2 == 0 && j == len / 2);  // DC, Nyquist
      energy[j] = (single ? 1.0 : 2.0) * (re * re + im * im);
    }
    order.resize(bins);
    std::iota(order.begin(), order.end(), 0u);
    auto larger = [&](uint32_t a, uint32_t b) {
      return energy[a] > energy[b] || (energy[a] == energy[b] && a < b);
    };
    if (k < bins) std::nth_element(order.begin(), order.begin() + k, order.end(), larger);
    for (size_t j = 0; j < k; ++j) {
      const size_t b = bin + order[j];
      bitmap[b / 8] |= uint8_t(1u << (b % 8));
    }
    bin += bins;
  }
  return Status::Ok();
}

Status fftCheckBitmap(const uint8_t* bitmap, size_t n, size_t chunk, double keep, int source) {
  GC_CHECK(checkChunk(chunk, "fftCheckBitmap"));
  char from[32];
  sourceText(source, from);
  const size_t total = fftBinCount(n, chunk);
  for (size_t c = 0, bin = 0; c < fftChunkCount(n, chunk); ++c) {
    const size_t bins = fftBinsOfLength(fftChunkLength(n, chunk, c));
    size_t set = 0;
    for (size_t b = bin; b < bin + bins; ++b) set += (bitmap[b / 8] >> (b % 8)) & 1u;
    GC_REQUIRE(set == fftKeepCount(bins, keep), Err::RemoteError,
               "FFT payload%s: chunk %zu keeps %zu bins where %zu are expected", from, c, set,
               fftKeepCount(bins, keep));
    bin += bins;
  }
  GC_REQUIRE(paddingClear(bitmap, total, 1), Err::RemoteError,
             "FFT payload%s: bitmap padding bits after %zu bins are set", from, total);
  return Status::Ok();
}

Status gatherBins(const float* spectrum, const uint8_t* bitmap, size_t bins, float* packed) {
  size_t k = 0;
  for (size_t b = 0; b < bins; ++b) {
    if (!((bitmap[b / 8] >> (b % 8)) & 1u)) continue;
    packed[2 * k] = spectrum[2 * b];
    packed[2 * k + 1] = spectrum[2 * b + 1];
    ++k;
  }
  return Status::Ok();
}

Status scatterAddBins(const float* packed, const uint8_t* bitmap, size_t bins, float* spectrum) {
  GC_REQUIRE(paddingClear(bitmap, bins, 1), Err::RemoteError,
             "FFT bitmap: padding bits after %zu bins are set (corrupt payload)", bins);
  size_t k = 0;
  for (size_t b = 0; b < bins; ++b) {
    if (!((bitmap[b / 8] >> (b % 8)) & 1u)) continue;
    spectrum[2 * b] += packed[2 * k];
    spectrum[2 * b + 1] += packed[2 * k + 1];
    ++k;
  }
  return Status::Ok();
}

}  // namespace gradcomp::device::cpu
