// The per-rank payload of FFT sparsification (notes section 7), shared by the
// distributed algorithm and its Reference:
//
//   [bitmap: one bit per complex bin of the chunked spectrum, ceil(B/8) bytes]
//   then per chunk c with k_c kept bins (k_c = fftKeepCount(bins_c, keep)):
//     bits > 0: [vmax_c fp32][2 k_c RBF words (re, im) of `bits` bits, packed]
//     bits = 0: [2 k_c fp32 values]
//
// The size depends only on (n, chunk, keep, bits), so it is the same on every
// rank. vmax_c is GRADCOMP_RBF_VMAX when set, else the largest |re|, |im| the
// chunk keeps. A decoder rejects a payload whose bitmap does not keep exactly
// k_c bins in every chunk, whose padding bits are set, or whose vmax is not
// finite and >= 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "device/arrays.h"

namespace gradcomp::algo::quant {

struct FftLayout {
  size_t n = 0;
  size_t chunk = 16384;
  double keep = 0.15;   // 1 - theta
  int bits = 10;        // 0: raw fp32 values
  int mantissa = 6;
  double vmax = 0;      // 0: per chunk from the data
};

size_t fftPayloadBytes(const FftLayout& layout);

// Device temporaries of encode/decode, kept by the caller across calls.
// nullptr: fresh ones per call (references, tests, fuzzers).
struct FftScratch {
  device::DeviceArray<float> spectrum, packed;
};

// Encodes acc[0..n) (device memory) into payload (fftPayloadBytes bytes of
// host memory, complete after the next sync): forward FFT, bin selection
// straight into the payload's bitmap, gather, and the values' encoding
// (rbfEncodeSegments: one run per chunk) straight into the payload.
Status fftEncode(device::Backend& dev, const FftLayout& layout, const float* acc,
                 uint8_t* payload, FftScratch* scratch = nullptr);

// spectrum (fftBinCount complex bins, device memory) += the payload's
// decoded bins; `peer` names the sender in errors (the checks run on the
// device: reported by the next sync).
Status fftDecodeAdd(device::Backend& dev, const FftLayout& layout, const uint8_t* payload,
                    int peer, float* spectrum, FftScratch* scratch = nullptr);

}  // namespace gradcomp::algo::quant
