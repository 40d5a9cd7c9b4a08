// gradcomp-kbench's results as data, without CUDA: the JSON it writes (-J)
// read back, each kernel's launch floor, rate and fraction of the copy, and
// the --check verdict. gradcomp-kbench prints these after a run or from a
// file (--from-json); gradcomp-sim --gpu-kbench prices primitives with them.
//
// Contract of the JSON (what gradcomp-kbench -J writes, one row per kernel
// and size): {"device": ..., "rows": [{"kernel", "elements", "moved_bytes",
// "seconds", "copy_gbps"?}, ...]}. moved_bytes is the kernel's own count of
// bytes read + written in device memory; copy_gbps is the device-to-device
// copy at the same size (8 bytes per element), else the copy_d2d row is used.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace gradcomp::kbench {

struct Row {
  std::string kernel;
  double elements = 0;
  double movedBytes = 0;
  double seconds = 0;
  double copyGbps = 0;  // 0: not in the row (taken from copy_d2d at the same size)
};

struct Table {
  std::string device;
  std::vector<Row> rows;
};

Status parseTable(const std::string& text, Table* out);
Status readTable(const std::string& path, Table* out);

// What --check holds a kernel to (issue 33): streaming kernels move O(n) data
// and should run near the copy; selection kernels (radix select, the
// multi-threshold count, FFT bin selection) read their input more than once
// by design; sparse kernels move O(nnz) scattered sectors and are not held to
// a fraction of the copy. The copy itself is the yardstick.
enum class KernelClass { Copy, Streaming, Selection, Sparse };
KernelClass classify(const std::string& kernel);
const char* className(KernelClass c);

// One kernel over the table's sizes.
struct KernelFit {
  std::string kernel;
  KernelClass cls = KernelClass::Streaming;
  double bytesPerElement = 0;  // kbench's own count: moved_bytes / elements
  double floorElements = 0;    // the smallest size (launch-bound: 1M elements)
  double floorS = 0;           // its time: the launch floor kbench reports
  double largestElements = 0;
  double largestS = 0;
  // Affine through the smallest and largest sizes: t(n) = interceptS +
  // n * secondsPerElement, reproducing both rows. Where that intercept
  // would be negative (the small size ran faster per element than the large
  // one, as moments_f64) or there is one size: interceptS = 0 and the line
  // through the largest row.
  double interceptS = 0;
  double secondsPerElement = 0;
  double gbps = 0;          // moved bytes / time at the largest size
  double ofCopyLargest = 0; // fraction of the copy at the largest size
  double minOfCopy = 0;     // lowest fraction of the copy over the checked sizes
  double minOfCopyElements = 0;
};

// The smallest size the check holds kernels to (issue 33: >= 16 M elements);
// a table without such a size is checked at its largest.
constexpr double kCheckFromElements = 16.0 * (1 << 20);

// Per kernel, in the table's order. Rows without a copy rate at their size
// count no fraction (minOfCopy stays 0 when none has one).
std::vector<KernelFit> fitTable(const Table& t);

struct CheckResult {
  std::vector<std::string> failures;  // one line per kernel below its fraction
  int checked = 0;
};
// Streaming kernels against `streaming`, selection kernels against `selection`
// (the copy and sparse kernels are not checked).
CheckResult check(const std::vector<KernelFit>& fits, double streaming, double selection);

// The per-kernel summary gradcomp-kbench prints (a markdown table).
std::string summaryMarkdown(const std::vector<KernelFit>& fits);

}  // namespace gradcomp::kbench
