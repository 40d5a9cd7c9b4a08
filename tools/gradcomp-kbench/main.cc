// gradcomp-kbench: throughput of each CUDA backend primitive at sizes from
// -b to -e elements (fp32), as a fraction of a device-to-device copy measured
// in the same run. Bandwidth counts the bytes a primitive moves through
// device memory (reads + writes, nominal per element: the copy moves 8 bytes
// per element), so "of_copy" is the fraction of the device's streaming
// bandwidth the kernel reaches (issue 19's goal: >= 0.7 for the streaming
// kernels). Every primitive is asynchronous on the backend's stream; a run of
// -n calls is timed with events, then the backend syncs once (scalar results
// and data errors are checked). After the rows, a per-kernel summary
// (kbench_table.h): launch floor (the smallest size), bytes per element by
// kbench's own count, rate and fraction of the copy; --check holds streaming
// kernels to a fraction of the copy from 16 M elements on, selection kernels
// to --select-check; --from-json evaluates a saved run without a GPU.
//
//   gradcomp-kbench [-b 1M] [-e 256M] [-f 4] [-n 20] [-w 3] [-J out.json]
//                   [--check 0.7] [--select-check 0.4] [--from-json FILE]
//
// Exit codes: 0 ok, 1 bad flag or CUDA error, 3 --check: a kernel below its
// fraction, 4 no CUDA device (nothing measured; the same "skipped" code the
// [gpu] tests use).
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "device/arrays.h"
#include "device/cuda/cuda_backend.h"
#include "tools/gradcomp-kbench/kbench_table.h"

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

#define CK(expr)                                                                          \
  do {                                                                                    \
    cudaError_t e_ = (expr);                                                              \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "gradcomp-kbench: %s: %s\n", #expr, cudaGetErrorString(e_)); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

struct Row {
  std::string kernel;
  size_t n;
  double bytes, seconds, copySeconds;
};

struct Kernel {
  const char* name;
  double bytesPerElement;  // moved through device memory
  std::function<Status()> run;
};

}  // namespace

void usage(FILE* out) {
  std::fputs(
      "NAME\n"
      "  gradcomp-kbench - throughput of gradcomp's CUDA kernels\n"
      "\n"
      "SYNOPSIS\n"
      "  gradcomp-kbench [-b 1M] [-e 256M] [-f 4] [-n 20] [-w 3] [-J file]\n"
      "                  [--check F] [--select-check F] [--from-json file]\n"
      "\n"
      "DESCRIPTION\n"
      "  Throughput of every CUDA kernel family of gradcomp beside a device-to-device\n"
      "  copy measured in the same run, on CUDA device 0, per buffer size, then per\n"
      "  kernel: launch floor (smallest size), bytes per element (kbench's count), rate\n"
      "  and fraction of the copy at the largest size, lowest fraction from 16M on.\n"
      "\n"
      "OPTIONS\n"
      "  -b SIZE   smallest buffer (K/M/G suffixes; default 1M)\n"
      "  -e SIZE   largest buffer (default 256M)\n"
      "  -f N      multiply the size by N between rows (default 4)\n"
      "  -n N      timed iterations per size (default 20)\n"
      "  -w N      untimed warm-up iterations (default 3)\n"
      "  -J FILE   also write the rows as JSON\n"
      "  --check F          exit 3 when a streaming kernel runs below F of the copy\n"
      "                     at 16M elements or more (the largest size if smaller)\n"
      "  --select-check F   the same for selection kernels (default 0.4 with --check)\n"
      "  --from-json FILE   no measurement: summarize and check a saved -J file\n"
      "  -h        this help\n"
      "\n"
      "EXIT STATUS\n"
      "  0 measured; 1 a usage error; 3 --check failed; 4 no CUDA device (nothing\n"
      "  measured).\n",
      out);
}

// The per-kernel summary and, with a fraction, the check: 0 or 3.
static int report(const kbench::Table& t, double streaming, double selection) {
  const std::vector<kbench::KernelFit> fits = kbench::fitTable(t);
  std::printf("\n# per kernel on %s\n%s", t.device.c_str(),
              kbench::summaryMarkdown(fits).c_str());
  if (streaming < 0) return 0;
  const kbench::CheckResult r = kbench::check(fits, streaming, selection);
  for (const std::string& line : r.failures) std::printf("check: %s\n", line.c_str());
  std::printf("check: %zu of %d kernels below their fraction (streaming %.2f, selection "
              "%.2f): %s\n", r.failures.size(), r.checked, streaming, selection,
              r.failures.empty() ? "PASS" : "FAIL");
  return r.failures.empty() ? 0 : 3;
}

static bool parseFraction(const char* s, double* out) {
  char* end = nullptr;
  *out = std::strtod(s, &end);
  return end != s && !*end && *out >= 0 && *out <= 2;
}

int main(int argc, char** argv) {
  size_t begin = size_t(1) << 20, end = size_t(256) << 20, factor = 4;
  int iters = 20, warmup = 3;
  double checkStreaming = -1, checkSelection = 0.4;
  std::string json, fromJson;
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
    else if (a == "--check" && ok) ok = parseFraction(v, &checkStreaming);
    else if (a == "--select-check" && ok) ok = parseFraction(v, &checkSelection);
    else if (a == "--from-json" && ok) fromJson = v;
    else ok = false;
    if (!ok) {
      usage(stderr);
      return 1;
    }
    ++i;
  }
  if (!fromJson.empty()) {
    kbench::Table t;
    if (Status s = kbench::readTable(fromJson, &t); !s.ok()) {
      std::fprintf(stderr, "gradcomp-kbench: %s\n", s.message().c_str());
      return 1;
    }
    return report(t, checkStreaming, checkSelection);
  }
  if (cudaDeviceCount() == 0) {
    std::printf("gradcomp-kbench: no CUDA device: nothing measured\n");
    return 4;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::unique_ptr<CudaBackend> owned;
  if (Status s = CudaBackend::create(0, &owned); !s.ok()) {
    std::fprintf(stderr, "gradcomp-kbench: %s\n", s.toString().c_str());
    return 1;
  }
  CudaBackend& be = *owned;
  cudaStream_t stream = be.stream();
  cudaEvent_t t0, t1;
  CK(cudaEventCreate(&t0));
  CK(cudaEventCreate(&t1));
  std::printf("# gradcomp-kbench on %s (sm_%d%d), %d iterations, %d warmup\n", prop.name,
              prop.major, prop.minor, iters, warmup);
  std::printf("%-28s %12s %12s %10s %12s %8s\n", "kernel", "elements", "time_us", "GB/s",
              "copy_GB/s", "of_copy");
  std::vector<Row> rows;

  for (size_t n = begin; n <= end; n *= factor) {
    const size_t sparse = n / 100 + 1, block = 1024;
    const size_t bins = fftBinCount(n, 16384), blocks = (n + block - 1) / block;
    DeviceArray<float> x(be, n), y(be, n), acc(be, n), residual(be, n), meta(be, n / 256 + 2);
    DeviceArray<float> val(be, sparse), spectrum(be, 2 * bins);
    DeviceArray<uint16_t> half(be, n);
    DeviceArray<uint8_t> codes(be, 2 * n + 16), bitmap(be, bins / 8 + 1);
    DeviceArray<uint64_t> idx(be, sparse), idx2(be, sparse);
    DeviceArray<float> val2(be, sparse), z(be, n);  // the zeroing compaction's own buffers
    HostArray<float> host(be, n), shares(be, blocks), scales(be, blocks);
    std::mt19937 rng(1);
    std::normal_distribution<float> normal;
    for (float& v : host) v = normal(rng);
    for (float& v : scales) v = 0.5f;
    float threshold = 0;
    size_t count = 0, dsBytes = 0, dsBlocks = 0;
    HostArray<float> candidates(be, 64);  // Gaussiank's threshold candidates
    for (size_t j = 0; j < candidates.size(); ++j) candidates[j] = 3.0f * std::pow(0.95f, float(j));
    std::vector<size_t> manyCounts(candidates.size());
    double sum = 0, sumSquares = 0;
    AccumulateStats acst;
    AbsStats abst;
    MaxMinSpec mm;
    mm.bits = 4;
    RbfSpec rbf;
    rbf.bits = 10;
    rbf.mantissa = 6;
    rbf.eps = rbfEpsForVmax(4.0, 10, 6);
    bool ok = be.copy(x.data(), host.data(), n * 4).ok() &&
              be.convert(half.data(), DataType::BFloat16, x.data(), DataType::Float32, n).ok() &&
              be.copy(z.data(), x.data(), n * 4).ok() &&
              be.kthLargestAbs(x.data(), n, sparse, &threshold, nullptr).ok() && be.sync().ok();
    ok = ok && be.compactAbove(x.data(), n, threshold, 0, 0, idx.data(), val.data(), sparse,
                               &count, false).ok() &&
         be.sync().ok();
    ok = ok && be.denseStreamSize(idx.data(), count, 4, &dsBytes, &dsBlocks).ok() &&
         be.quantizeMaxMin(x.data(), n, mm, 0, meta.data(), codes.data(), nullptr).ok() &&
         be.fftForward(x.data(), n, 16384, spectrum.data()).ok() && be.sync().ok();
    if (!ok) {
      std::fprintf(stderr, "gradcomp-kbench: setup failed at n = %zu\n", n);
      return 1;
    }
    DeviceArray<uint8_t> ds(be, dsBytes + 1);

    auto time = [&](const std::function<Status()>& f) {
      for (int i = 0; i < warmup; ++i)
        if (!f().ok()) return -1.0;
      CK(cudaEventRecord(t0, stream));
      for (int i = 0; i < iters; ++i)
        if (!f().ok()) return -1.0;
      CK(cudaEventRecord(t1, stream));
      if (!be.sync().ok()) return -1.0;  // also waits for t1
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, t0, t1));
      return double(ms) / 1e3 / iters;
    };
    const double copyS = time([&] { return be.copy(y.data(), x.data(), n * 4); });
    const std::vector<Kernel> kernels = {
        {"copy_d2d", 8, [&] { return be.copy(y.data(), x.data(), n * 4); }},
        {"add_f32", 12, [&] { return be.add(y.data(), x.data(), y.data(), n, DataType::Float32); }},
        {"subtract_f32", 12, [&] { return be.subtract(y.data(), acc.data(), x.data(), n); }},
        {"convert_f32_bf16", 6,
         [&] { return be.convert(half.data(), DataType::BFloat16, x.data(), DataType::Float32, n); }},
        {"accumulate_f32_stats", 12,
         [&] { return be.accumulate(acc.data(), x.data(), DataType::Float32, n, true, threshold, &acst); }},
        {"accumulate_bf16_stats", 10,
         [&] { return be.accumulate(acc.data(), half.data(), DataType::BFloat16, n, true, threshold, &acst); }},
        {"abs_stats", 4, [&] { return be.absStats(x.data(), n, &abst); }},
        {"kth_largest_abs_4pass", 16,
         [&] { return be.kthLargestAbs(x.data(), n, sparse, &threshold, nullptr); }},
        {"count_above", 4, [&] { return be.countAbove(x.data(), n, threshold, &count); }},
        {"count_above_64_thresholds", 4,
         [&] { return be.countAboveMany(x.data(), n, candidates.data(), candidates.size(), manyCounts.data()); }},
        {"moments_f64", 4, [&] { return be.moments(x.data(), n, &sum, &sumSquares); }},
        {"gather_values_1pct", 0.01 * 16,
         [&] { return be.gatherValues(val2.data(), x.data(), n, idx.data(), count); }},
        {"compact_above_1pct", 8.12,
         [&] { return be.compactAbove(x.data(), n, threshold, 0, 0, idx.data(), val.data(), sparse, &count, false); }},
        {"compact_above_zero_1pct", 8.16,
         [&] { return be.compactAbove(z.data(), n, threshold, 0, 0, idx2.data(), val2.data(), sparse, nullptr, true); }},
        {"dense_stream_encode_1pct", 0.12 + 0.01 * 8,
         [&] { return be.denseStreamEncode(idx.data(), val.data(), count, 0, 4, ds.data(), dsBytes); }},
        {"quantize_maxmin_4b_residual", 8.5 + 8.0 / 512,
         [&] { return be.quantizeMaxMin(x.data(), n, mm, 0, meta.data(), codes.data(), residual.data()); }},
        {"dequantize_maxmin_4b_add", 8.5 + 8.0 / 512,
         [&] { return be.dequantizeMaxMin(meta.data(), codes.data(), n, mm, y.data(), true, -1); }},
        {"rbf_encode_10b_residual", 9.25,
         [&] { return be.rbfEncode(x.data(), n, rbf, codes.data(), residual.data()); }},
        {"rbf_decode_10b", 5.25,
         [&] { return be.rbfDecode(codes.data(), n, rbf, y.data(), false, -1); }},
        {"sign_pack", 4.125, [&] { return be.signPack(x.data(), n, codes.data()); }},
        {"sign_expand", 4.125, [&] { return be.signExpand(codes.data(), n, 1.0f, -1.0f, y.data(), -1); }},
        {"block_dot_1024", 8,
         [&] { return be.blockDot(acc.data(), y.data(), n, block, shares.data()); }},
        {"expand_blocks_subtract", 12,
         [&] { return be.expandBlocks(y.data(), n, block, scales.data(), residual.data(), true); }},
        {"fft_forward_16k", 8, [&] { return be.fftForward(x.data(), n, 16384, spectrum.data()); }},
        {"fft_select_bins_15pct", 8.0 * bins / double(n) + 0.125 * bins / double(n),
         [&] { return be.fftSelectBins(spectrum.data(), n, 16384, 0.15, bitmap.data()); }},
    };
    for (const Kernel& k : kernels) {
      const double s = time(k.run);
      if (s < 0) {
        std::fprintf(stderr, "gradcomp-kbench: %s failed at n = %zu\n", k.name, n);
        return 1;
      }
      const double bytes = k.bytesPerElement * double(n);
      rows.push_back(Row{k.name, n, bytes, s, copyS});
      const double gbs = bytes / s / 1e9, copyGbs = 8.0 * n / copyS / 1e9;
      std::printf("%-28s %12zu %12.1f %10.1f %12.1f %7.2fx\n", k.name, n, s * 1e6, gbs, copyGbs,
                  gbs / copyGbs);
    }
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
      std::fprintf(f,
                   "  {\"kernel\": \"%s\", \"elements\": %zu, \"moved_bytes\": %.0f, \"seconds\": "
                   "%.9g, \"gbps\": %.3f, \"copy_gbps\": %.3f, \"of_copy\": %.3f, "
                   "\"bytes_per_element\": %.6g}%s\n",
                   rows[i].kernel.c_str(), rows[i].n, rows[i].bytes, rows[i].seconds,
                   rows[i].bytes / rows[i].seconds / 1e9, 8.0 * rows[i].n / rows[i].copySeconds / 1e9,
                   (rows[i].bytes / rows[i].seconds) / (8.0 * rows[i].n / rows[i].copySeconds),
                   rows[i].bytes / double(rows[i].n), i + 1 < rows.size() ? "," : "");
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  kbench::Table t;
  t.device = prop.name;
  for (const Row& r : rows)
    t.rows.push_back(kbench::Row{r.kernel, double(r.n), r.bytes, r.seconds,
                                 8.0 * double(r.n) / r.copySeconds / 1e9});
  return report(t, checkStreaming, checkSelection);
}
