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

bool bitSet(const uint8_t* bitmap, size_t b) { return (bitmap[b / 8] >> (b % 8)) & 1u; }

}  // namespace

size_t fftPayloadBytes(const FftLayout& l) {
  size_t bytes = device::packedBytes(device::fftBinCount(l.n, l.chunk), 1);
  for (size_t c = 0; c < device::fftChunkCount(l.n, l.chunk); ++c) bytes += valueBytes(l, keptIn(l, c));
  return bytes;
}

Status fftEncode(device::Backend& dev, const FftLayout& l, const float* acc, uint8_t* payload,
                 FftScratch* scratch) {
  const size_t bins = device::fftBinCount(l.n, l.chunk);
  FftScratch local;
  if (scratch == nullptr) scratch = &local;
  device::Buffer<float>& spectrum = device::bound(scratch->spectrum, dev);
  spectrum.resize(2 * bins);
  GC_CHECK(dev.fftForward(acc, l.n, l.chunk, spectrum.data()));
  uint8_t* bitmap = payload;
  GC_CHECK(dev.fftSelectBins(spectrum.data(), l.n, l.chunk, l.keep, bitmap));
  size_t total = 0;
  for (size_t c = 0; c < device::fftChunkCount(l.n, l.chunk); ++c) total += keptIn(l, c);
  device::Buffer<float>& packed = device::bound(scratch->packed, dev);
  packed.resize(2 * total);
  GC_CHECK(dev.gatherBins(spectrum.data(), bitmap, bins, packed.data()));
  uint8_t* p = payload + device::packedBytes(bins, 1);
  const float* values = packed.data();
  for (size_t c = 0; c < device::fftChunkCount(l.n, l.chunk); ++c) {
    const size_t k = keptIn(l, c);
    if (k == 0) continue;
    if (l.bits == 0) {
      std::memcpy(p, values, 2 * k * sizeof(float));
    } else {
      float vmax = float(l.vmax);
      if (l.vmax == 0) {
        device::AbsStats st;
        GC_CHECK(dev.absStats(values, 2 * k, &st));
        vmax = float(st.maxAbs);
      }
      device::RbfSpec spec;
      GC_CHECK(rbfSpecForVmax(vmax, l.bits, l.mantissa, -1, &spec));
      std::memcpy(p, &vmax, sizeof(float));
      GC_CHECK(dev.rbfEncode(values, 2 * k, spec, p + sizeof(float)));
    }
    p += valueBytes(l, k);
    values += 2 * k;
  }
  return Status::Ok();
}

Status fftDecodeAdd(device::Backend& dev, const FftLayout& l, const uint8_t* payload, int peer,
                    float* spectrum, FftScratch* scratch) {
  FftScratch local;
  if (scratch == nullptr) scratch = &local;
  const size_t bins = device::fftBinCount(l.n, l.chunk);
  const uint8_t* bitmap = payload;
  size_t total = 0;
  for (size_t c = 0, bin = 0; c < device::fftChunkCount(l.n, l.chunk); ++c) {
    const size_t len = device::fftChunkLength(l.n, l.chunk, c), nb = device::fftBinsOfLength(len);
    size_t set = 0;
    for (size_t b = bin; b < bin + nb; ++b) set += bitSet(bitmap, b);
    GC_REQUIRE(set == keptIn(l, c), Err::RemoteError,
               "FFT payload from rank %d: chunk %zu keeps %zu bins where %zu are expected", peer,
               c, set, keptIn(l, c));
    total += set;
    bin += nb;
  }
  GC_REQUIRE(bins % 8 == 0 || (bitmap[bins / 8] >> (bins % 8)) == 0, Err::RemoteError,
             "FFT payload from rank %d: bitmap padding bits are set", peer);
  device::Buffer<float>& packed = device::bound(scratch->packed, dev);
  packed.resize(2 * total);
  const uint8_t* p = payload + device::packedBytes(bins, 1);
  float* values = packed.data();
  for (size_t c = 0; c < device::fftChunkCount(l.n, l.chunk); ++c) {
    const size_t k = keptIn(l, c);
    if (k == 0) continue;
    if (l.bits == 0) {
      std::memcpy(values, p, 2 * k * sizeof(float));
      for (size_t i = 0; i < 2 * k; ++i)
        GC_REQUIRE(std::isfinite(values[i]), Err::RemoteError,
                   "FFT payload from rank %d, chunk %zu: raw bin value %zu is not finite", peer,
                   c, i / 2);
    } else {
      float vmax = 0;
      std::memcpy(&vmax, p, sizeof(float));
      device::RbfSpec spec;
      GC_CHECK(rbfSpecForVmax(vmax, l.bits, l.mantissa, peer, &spec));
      Status s = dev.rbfDecode(p + sizeof(float), 2 * k, spec, values, false);
      if (s.code() == Err::RemoteError)
        return makeStatus(Err::RemoteError, "FFT payload from rank %d, chunk %zu: %s", peer, c,
                          s.message().c_str());
      GC_CHECK(s);
    }
    p += valueBytes(l, k);
    values += 2 * k;
  }
  return dev.scatterAddBins(packed.data(), bitmap, bins, spectrum);
}

}  // namespace gradcomp::algo::quant
