// gradcomp-kbench: GB/s of input read for each CUDA kernel family at sizes
// from -b to -e elements (fp32), beside cudaMemcpyAsync device-to-device of
// the same input measured in the same run (its GB/s counts bytes read, so
// the two columns compare directly). Primitives that return a host value
// (threshold, count, size) include their stream synchronization: that is
// their cost to a caller.
//
//   gradcomp-kbench [-b 1M] [-e 256M] [-f 4] [-n 20] [-w 3] [-J out.json]
//
// Exit codes: 0 ok, 1 bad flag or CUDA error, 4 no CUDA device (nothing
// measured; the same "skipped" code the [gpu] tests use).
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "device/cuda/cuda_backend.h"

using namespace gradcomp;
using namespace gradcomp::device;

namespace {

bool parseCount(const char* s, size_t* out) {
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  if (end == s || v <= 0) return false;
  double m = 1;
  if (*end == 'K' || *end == 'k') m = 1 << 10, ++end;
  else if (*end == 'M' || *end == 'm') m = 1 << 20, ++end;
  else if (*end == 'G' || *end == 'g') m = double(1 << 30), ++end;
  if (*end) return false;
  *out = size_t(v * m);
  return true;
}

#define CK(expr)                                                                \
  do {                                                                          \
    cudaError_t e_ = (expr);                                                    \
    if (e_ != cudaSuccess) {                                                    \
      std::fprintf(stderr, "gradcomp-kbench: %s: %s\n", #expr, cudaGetErrorString(e_)); \
      std::exit(1);                                                             \
    }                                                                           \
  } while (0)

struct Row {
  std::string kernel;
  size_t n;
  double bytes, seconds, copySeconds;
};

}  // namespace

void usage(FILE* out) {
  std::fputs(
      "usage: gradcomp-kbench [-b 1M] [-e 256M] [-f 4] [-n 20] [-w 3] [-J file]\n"
      "Throughput of every CUDA kernel family of gradcomp beside a device-to-device\n"
      "copy measured in the same run, on CUDA device 0, per buffer size.\n"
      "  -b SIZE   smallest buffer (K/M/G suffixes; default 1M)\n"
      "  -e SIZE   largest buffer (default 256M)\n"
      "  -f N      multiply the size by N between rows (default 4)\n"
      "  -n N      timed iterations per size (default 20)\n"
      "  -w N      untimed warm-up iterations (default 3)\n"
      "  -J FILE   also write the rows as JSON\n"
      "Exit status: 0 measured; 1 a usage error; 4 no CUDA device (nothing measured).\n",
      out);
}

int main(int argc, char** argv) {
  size_t begin = size_t(1) << 20, end = size_t(256) << 20, factor = 4;
  int iters = 20, warmup = 3;
  std::string json;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    }
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    bool ok = v != nullptr;
    if (a == "-b" && ok) ok = parseCount(v, &begin);
    else if (a == "-e" && ok) ok = parseCount(v, &end);
    else if (a == "-f" && ok) ok = parseCount(v, &factor) && factor >= 2;
    else if (a == "-n" && ok) ok = (iters = std::atoi(v)) > 0;
    else if (a == "-w" && ok) ok = (warmup = std::atoi(v)) >= 0;
    else if (a == "-J" && ok) json = v;
    else ok = false;
    if (!ok) {
      usage(stderr);
      return 1;
    }
    ++i;
  }
  if (cudaDeviceCount() == 0) {
    std::printf("gradcomp-kbench: no CUDA device: nothing measured\n");
    return 4;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t stream;
  CK(cudaStreamCreate(&stream));
  CudaBackend be(stream);
  cudaEvent_t t0, t1;
  CK(cudaEventCreate(&t0));
  CK(cudaEventCreate(&t1));
  std::printf("# gradcomp-kbench on %s (sm_%d%d), %d iterations, %d warmup\n", prop.name, prop.major,
              prop.minor, iters, warmup);
  std::printf("%-22s %12s %12s %10s %12s %8s\n", "kernel", "elements", "time_us", "GB/s",
              "copy_GB/s", "of_copy");
  std::vector<Row> rows;

  for (size_t n = begin; n <= end; n *= factor) {
    std::vector<float> host(n);
    std::mt19937 rng(1);
    std::normal_distribution<float> normal;
    for (float& v : host) v = normal(rng);
    float *x, *y, *meta, *spectrum;
    uint8_t *codes, *bitmap;
    uint64_t* idx;
    const size_t sparse = n / 100 + 1;
    const size_t bins = fftBinCount(n, 16384);
    CK(cudaMalloc(reinterpret_cast<void**>(&x), n * 4));
    CK(cudaMalloc(reinterpret_cast<void**>(&y), n * 4));
    CK(cudaMalloc(reinterpret_cast<void**>(&meta), (n / 512 + 2) * 8));
    CK(cudaMalloc(reinterpret_cast<void**>(&codes), n * 2 + 16));
    CK(cudaMalloc(reinterpret_cast<void**>(&idx), sparse * 8));
    CK(cudaMalloc(reinterpret_cast<void**>(&spectrum), bins * 8));
    CK(cudaMalloc(reinterpret_cast<void**>(&bitmap), bins / 8 + 1));
    CK(cudaMemcpy(x, host.data(), n * 4, cudaMemcpyHostToDevice));
    if (!be.reserve(n).ok()) return 1;
    float threshold = 0;
    size_t count = 0;
    (void)be.kthLargestAbs(x, n, sparse, &threshold, nullptr);
    MaxMinSpec mm;
    mm.bits = 4;
    RbfSpec rbf;
    rbf.bits = 10;
    rbf.mantissa = 6;
    rbf.eps = rbfEpsForVmax(4.0, 10, 6);
    (void)be.quantizeMaxMin(x, n, mm, 0, meta, codes, nullptr);
    (void)be.fftForward(x, n, 16384, spectrum);
    CK(cudaStreamSynchronize(stream));

    auto time = [&](const std::function<Status()>& f) {
      for (int i = 0; i < warmup; ++i)
        if (!f().ok()) return -1.0;
      CK(cudaEventRecord(t0, stream));
      for (int i = 0; i < iters; ++i)
        if (!f().ok()) return -1.0;
      CK(cudaEventRecord(t1, stream));
      CK(cudaEventSynchronize(t1));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, t0, t1));
      return double(ms) / 1e3 / iters;
    };
    const double copyS = time([&] { return be.copy(y, x, n * 4); });
    struct K {
      const char* name;
      double bytes;
      std::function<Status()> run;
    };
    const std::vector<K> kernels = {
        {"copy_d2d", n * 4.0, [&] { return be.copy(y, x, n * 4); }},
        {"add_f32", n * 8.0, [&] { return be.add(y, x, x, n, DataType::Float32); }},
        {"convert_f32_bf16", n * 4.0, [&] { return be.convert(y, DataType::BFloat16, x, DataType::Float32, n); }},
        {"accumulate_bf16", n * 6.0, [&] { return be.accumulateGradient(y, x, DataType::BFloat16, n); }},
        {"kth_largest_abs", n * 4.0, [&] { return be.kthLargestAbs(x, n, sparse, &threshold, nullptr); }},
        {"count_above", n * 4.0, [&] { return be.countAbove(x, n, threshold, &count); }},
        {"compact_above_1pct", n * 4.0, [&] { return be.compactAbove(x, n, threshold, 0, 0, idx, y, sparse, &count, false); }},
        {"dense_stream_encode", sparse * 12.0, [&] { size_t b; return be.denseStreamEncode(idx, y, count, 0, 4, codes, n * 2, &b); }},
        {"abs_stats", n * 4.0, [&] { AbsStats s; return be.absStats(x, n, &s); }},
        {"quantize_maxmin_4b", n * 4.0, [&] { return be.quantizeMaxMin(x, n, mm, 0, meta, codes, nullptr); }},
        {"dequantize_maxmin_4b", n * 0.5, [&] { return be.dequantizeMaxMin(meta, codes, n, mm, y, true, -1); }},
        {"rbf_encode_10b", n * 4.0, [&] { return be.rbfEncode(x, n, rbf, codes, nullptr); }},
        {"rbf_decode_10b", n * 1.25, [&] { return be.rbfDecode(codes, n, rbf, y, false, -1); }},
        {"sign_pack", n * 4.0, [&] { return be.signPack(x, n, codes); }},
        {"sign_expand", n / 8.0, [&] { return be.signExpand(codes, n, 1.0f, -1.0f, y, -1); }},
        {"fft_forward_16k", n * 4.0, [&] { return be.fftForward(x, n, 16384, spectrum); }},
        {"fft_select_bins_15pct", bins * 8.0, [&] { return be.fftSelectBins(spectrum, n, 16384, 0.15, bitmap); }},
    };
    for (const K& k : kernels) {
      const double s = time(k.run);
      if (s < 0) {
        std::fprintf(stderr, "gradcomp-kbench: %s failed at n = %zu\n", k.name, n);
        return 1;
      }
      rows.push_back(Row{k.name, n, k.bytes, s, copyS});
      const double gbs = k.bytes / s / 1e9, copyGbs = n * 4.0 / copyS / 1e9;
      std::printf("%-22s %12zu %12.1f %10.1f %12.1f %7.2fx\n", k.name, n, s * 1e6, gbs, copyGbs,
                  gbs / copyGbs);
    }
    CK(cudaFree(x));
    CK(cudaFree(y));
    CK(cudaFree(meta));
    CK(cudaFree(codes));
    CK(cudaFree(idx));
    CK(cudaFree(spectrum));
    CK(cudaFree(bitmap));
    if (n > end / factor) break;
  }
  if (!json.empty()) {
    FILE* f = std::fopen(json.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "gradcomp-kbench: cannot write %s\n", json.c_str());
      return 1;
    }
    std::fprintf(f, "{\"device\": \"%s\", \"iterations\": %d, \"rows\": [\n", prop.name, iters);
    for (size_t i = 0; i < rows.size(); ++i)
      std::fprintf(f, "  {\"kernel\": \"%s\", \"elements\": %zu, \"input_bytes\": %.0f, \"seconds\": %.9g, "
                   "\"gbps\": %.3f, \"copy_gbps\": %.3f}%s\n", rows[i].kernel.c_str(), rows[i].n,
                   rows[i].bytes, rows[i].seconds, rows[i].bytes / rows[i].seconds / 1e9,
                   rows[i].n * 4.0 / rows[i].copySeconds / 1e9, i + 1 < rows.size() ? "," : "");
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  return 0;
}
