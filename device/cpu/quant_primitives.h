// CPU reference implementations of the quantized-family primitives of
// device::Backend (contracts in device/backend.h and device/quant_types.h).
// The CPU backend class forwards to these; tests may call them directly.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "device/quant_types.h"

namespace gradcomp::device::cpu {

// quant_maxmin.cc
Status absStats(const float* src, size_t n, AbsStats* out);
Status quantizeMaxMin(const float* src, size_t n, const MaxMinSpec& spec, uint64_t indexBase,
                      float* meta, uint8_t* codes, float* residual);
Status dequantizeMaxMin(const float* meta, const uint8_t* codes, size_t n, const MaxMinSpec& spec,
                        float* dst, bool accumulate, int source);

// blockq_codec.cc
Status blockqEncode(const float* src, size_t n, const BlockQuantSpec& spec, uint8_t* out);
Status blockqDecode(const uint8_t* in, size_t n, const BlockQuantSpec& spec, float* dst,
                    int source);

// rbf_codec.cc
Status rbfEncode(const float* src, size_t n, const RbfSpec& spec, uint8_t* codes,
                 float* residual);
Status rbfDecode(const uint8_t* codes, size_t n, const RbfSpec& spec, float* dst,
                 bool accumulate, int source);
Status rbfEncodeSegments(const float* values, size_t segments, size_t perSegment,
                         size_t lastSegment, int bits, int mantissa, double fixedVmax,
                         uint8_t* out);
Status rbfDecodeSegments(const uint8_t* in, size_t segments, size_t perSegment,
                         size_t lastSegment, int bits, int mantissa, float* values, int source);
// One value, for tests and the algorithms' scalar paths.
uint32_t rbfEncodeOne(float x, const RbfSpec& spec);
float rbfDecodeOne(uint32_t word, const RbfSpec& spec);

// sign_counts.cc
Status signPack(const float* src, size_t n, uint8_t* bits);
Status signCountAdd(const uint8_t* countsIn, int inBits, int maxIn, const uint8_t* signBits,
                    size_t n, uint8_t* countsOut, int outBits, int source);
Status signMajority(const uint8_t* counts, int bits, size_t n, int nranks, const SignTies& ties,
                    uint64_t indexBase, uint8_t* decision);
Status signExpand(const uint8_t* bits, size_t n, float pos, float neg, float* dst, int source);
// Lanes of blockDot's fixed summation order (device/backend.h).
constexpr size_t kBlockDotLanes = 256;
Status blockDot(const float* x, const float* d, size_t n, size_t block, float* out);
Status expandBlocks(const float* d, size_t n, size_t block, const float* scales, float* dst,
                    bool subtractFrom);

// fft_fftw.cc (FFTW single precision)
Status fftForward(const float* src, size_t n, size_t chunk, float* spectrum);
Status fftInverse(const float* spectrum, size_t n, size_t chunk, float* dst);
Status fftSelectBins(const float* spectrum, size_t n, size_t chunk, double keep,
                     uint8_t* bitmap);
Status fftCheckBitmap(const uint8_t* bitmap, size_t n, size_t chunk, double keep, int source);
Status gatherBins(const float* spectrum, const uint8_t* bitmap, size_t bins, float* packed);
Status scatterAddBins(const float* packed, const uint8_t* bitmap, size_t bins, float* spectrum);

}  // namespace gradcomp::device::cpu
