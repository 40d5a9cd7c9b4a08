#include "algorithms/quant/fft_payload.h"

#include <cmath>
#include <cstring>

#include "algorithms/quant/chunk_codecs.h"

namespace gradcomp::algo::quant {
namespace {

size_t keptIn(const FftLayout& l, size_t c) {
  return device::fftKeepCount(device::fftBinsOfLength(device::fftChunkLength(l.n, l.chunk, c)),
                              l.keep);
}

size_t valueBytes(const FftLayout& l, size_t kept) {
  if (kept == 0) return 0;
  return l.bits ? sizeof(float) + device::packedBytes(2 * kept, l.bits) : 2 * kept * sizeof(float);
}


}  // namespace

size_t fftPayloadBytes(const FftLayout& l) {
  size_t bytes = device::packedBytes(device::fftBinCount(l.n, l.chunk), 1);
  for (size_t c = 0; c < device::fftChunkCount(l.n, l.chunk); ++c) bytes += valueBytes(l, keptIn(l, c));
  return bytes;
}

namespace {

// The values section as runs of rbfEncodeSegments: one per chunk, all but
// the last chunk equally long.
struct Runs {
  size_t segments, perSegment, lastSegment, total;
};
Runs runsOf(const FftLayout& l) {
  const size_t chunks = device::fftChunkCount(l.n, l.chunk);
  Runs r{chunks, 0, 0, 0};
  if (chunks == 0) return r;
  r.perSegment = 2 * keptIn(l, 0);
  r.lastSegment = 2 * keptIn(l, chunks - 1);
  r.total = (chunks - 1) * r.perSegment + r.lastSegment;
  return r;
}

}  // namespace

Status fftEncode(device::Backend& dev, const FftLayout& l, const float* acc, uint8_t* payload,
                 FftScratch* scratch) {
  const size_t bins = device::fftBinCount(l.n, l.chunk);
  FftScratch local;
  if (scratch == nullptr) scratch = &local;
  device::DeviceArray<float>& spectrum = scratch->spectrum.bind(dev);
  spectrum.resize(2 * bins);
  GC_CHECK(dev.fftForward(acc, l.n, l.chunk, spectrum.data()));
  uint8_t* bitmap = payload;
  GC_CHECK(dev.fftSelectBins(spectrum.data(), l.n, l.chunk, l.keep, bitmap));
  const Runs runs = runsOf(l);
  device::DeviceArray<float>& packed = scratch->packed.bind(dev);
  packed.resize(runs.total);
  GC_CHECK(dev.gatherBins(spectrum.data(), bitmap, bins, packed.data()));
  uint8_t* values = payload + device::packedBytes(bins, 1);
  if (l.bits == 0) return dev.copy(values, packed.data(), runs.total * sizeof(float));
  return dev.rbfEncodeSegments(packed.data(), runs.segments, runs.perSegment, runs.lastSegment,
                               l.bits, l.mantissa, l.vmax, values);
}

Status fftDecodeAdd(device::Backend& dev, const FftLayout& l, const uint8_t* payload, int peer,
                    float* spectrum, FftScratch* scratch) {
  FftScratch local;
  if (scratch == nullptr) scratch = &local;
  const size_t bins = device::fftBinCount(l.n, l.chunk);
  const uint8_t* bitmap = payload;
  GC_CHECK(dev.fftCheckBitmap(bitmap, l.n, l.chunk, l.keep, peer));
  const Runs runs = runsOf(l);
  device::DeviceArray<float>& packed = scratch->packed.bind(dev);
  packed.resize(runs.total);
  const uint8_t* values = payload + device::packedBytes(bins, 1);
  if (l.bits == 0) {
    GC_CHECK(dev.copy(packed.data(), values, runs.total * sizeof(float)));
    GC_CHECK(dev.checkFinite(packed.data(), runs.total, peer));
  } else {
    GC_CHECK(dev.rbfDecodeSegments(values, runs.segments, runs.perSegment, runs.lastSegment,
                                   l.bits, l.mantissa, packed.data(), peer));
  }
  return dev.scatterAddBins(packed.data(), bitmap, bins, spectrum);
}

}  // namespace gradcomp::algo::quant
