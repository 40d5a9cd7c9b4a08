// FFT sparsification payloads (algorithms/quant/fft_payload.h): bitmap of kept
// bins, then per chunk raw fp32 or RBF-coded (vmax + words) values.
// Input: u16 n, u16 chunk, u8 keep (/255), u8 bits (0 or 3..16), u8 mantissa,
// then the payload (padded or cut to fftPayloadBytes).
// A successful decode adds finite values to exactly the bins the bitmap sets.
#include <cmath>

#include "algorithms/quant/fft_payload.h"
#include "device/quant_types.h"
#include "tests/fuzz/fuzz_common.h"

using namespace gradcomp;
using namespace gradcomp::algo::quant;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  FftLayout l;
  l.n = in.u16() % 4097;
  l.chunk = 2 + in.u16() % 1024;  // GRADCOMP_FFT_CHUNK accepts 2..
  l.keep = in.u8() / 255.0;
  const uint8_t bitsByte = in.u8();
  l.bits = bitsByte % 15 == 0 ? 0 : 2 + bitsByte % 15;
  l.mantissa = in.u8() % 15;
  if (l.bits && !device::rbfValidLayout(l.bits, l.mantissa)) return 0;  // rejected by the registry
  const std::vector<uint8_t> payload = in.exact(fftPayloadBytes(l));
  const size_t bins = device::fftBinCount(l.n, l.chunk);
  std::vector<float> spectrum(2 * bins, 0.0f);
  Status s = fftDecodeAdd(device::cpuBackend(), l, payload.data(), 3, spectrum.data());
  if (!s.ok()) {
    FUZZ_CHECK(s.code() == Err::RemoteError);
    return 0;
  }
  for (size_t b = 0; b < bins; ++b) {
    const bool kept = (payload[b / 8] >> (b % 8)) & 1u;
    FUZZ_CHECK(std::isfinite(spectrum[2 * b]) && std::isfinite(spectrum[2 * b + 1]));
    if (!kept) FUZZ_CHECK(spectrum[2 * b] == 0.0f && spectrum[2 * b + 1] == 0.0f);
  }
  return 0;
}
