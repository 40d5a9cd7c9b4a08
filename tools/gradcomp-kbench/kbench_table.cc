#include "tools/gradcomp-kbench/kbench_table.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace gradcomp::kbench {
namespace {

// The value after "key": in one flat JSON object (no nesting inside rows).
bool field(const std::string& obj, const char* key, std::string* value) {
  const std::string k = std::string("\"") + key + "\"";
  size_t p = obj.find(k);
  if (p == std::string::npos) return false;
  p = obj.find(':', p + k.size());
  if (p == std::string::npos) return false;
  p = obj.find_first_not_of(" \t\r\n", p + 1);
  if (p == std::string::npos) return false;
  if (obj[p] == '"') {
    const size_t e = obj.find('"', p + 1);
    if (e == std::string::npos) return false;
    *value = obj.substr(p + 1, e - p - 1);
    return true;
  }
  const size_t e = obj.find_first_of(",}\r\n", p);
  *value = obj.substr(p, e == std::string::npos ? std::string::npos : e - p);
  return true;
}

bool number(const std::string& obj, const char* key, double* v) {
  std::string s;
  if (!field(obj, key, &s)) return false;
  char* end = nullptr;
  *v = std::strtod(s.c_str(), &end);
  return end != s.c_str();
}

double ofCopy(const Row& r, double copyGbps) {
  if (copyGbps <= 0 || r.seconds <= 0) return 0;
  return r.movedBytes / r.seconds / 1e9 / copyGbps;
}

}  // namespace

Status parseTable(const std::string& text, Table* out) {
  *out = Table{};
  size_t p = text.find("\"rows\"");
  GC_REQUIRE(p != std::string::npos, Err::InvalidArgument, "kbench JSON: no \"rows\"");
  (void)field(text.substr(0, p), "device", &out->device);
  p = text.find('[', p);
  const size_t stop = text.find(']', p == std::string::npos ? 0 : p);
  GC_REQUIRE(p != std::string::npos && stop != std::string::npos, Err::InvalidArgument,
             "kbench JSON: \"rows\" is not a list");
  while ((p = text.find('{', p)) != std::string::npos && p < stop) {
    const size_t e = text.find('}', p);
    GC_REQUIRE(e != std::string::npos, Err::InvalidArgument, "kbench JSON: unterminated row");
    const std::string obj = text.substr(p, e - p + 1);
    Row r;
    const bool ok = field(obj, "kernel", &r.kernel) && number(obj, "elements", &r.elements) &&
                    number(obj, "moved_bytes", &r.movedBytes) &&
                    number(obj, "seconds", &r.seconds);
    GC_REQUIRE(ok && r.elements > 0 && r.seconds > 0, Err::InvalidArgument,
               "kbench JSON: row %zu lacks kernel, elements > 0, moved_bytes or seconds > 0",
               out->rows.size());
    (void)number(obj, "copy_gbps", &r.copyGbps);
    out->rows.push_back(r);
    p = e + 1;
  }
  GC_REQUIRE(!out->rows.empty(), Err::InvalidArgument, "kbench JSON: no rows");
  return Status::Ok();
}

Status readTable(const std::string& path, Table* out) {
  std::ifstream in(path);
  GC_REQUIRE(in.good(), Err::InvalidArgument, "cannot read kbench JSON '%s'", path.c_str());
  std::stringstream ss;
  ss << in.rdbuf();
  const Status s = parseTable(ss.str(), out);
  GC_REQUIRE(s.ok(), s.code(), "%s: %s", path.c_str(), s.message().c_str());
  return Status::Ok();
}

KernelClass classify(const std::string& k) {
  if (k == "copy_d2d") return KernelClass::Copy;
  static const std::set<std::string> selection{"kth_largest_abs_4pass",
                                               "count_above_64_thresholds",
                                               "fft_select_bins_15pct"};
  if (selection.count(k)) return KernelClass::Selection;
  if (k == "gather_values_1pct") return KernelClass::Sparse;
  return KernelClass::Streaming;
}

const char* className(KernelClass c) {
  switch (c) {
    case KernelClass::Copy: return "copy";
    case KernelClass::Streaming: return "streaming";
    case KernelClass::Selection: return "selection";
    case KernelClass::Sparse: return "sparse";
  }
  return "?";
}

std::vector<KernelFit> fitTable(const Table& t) {
  std::map<double, double> copyAt;  // elements -> copy GB/s (8 bytes per element)
  for (const Row& r : t.rows)
    if (r.kernel == "copy_d2d") copyAt[r.elements] = 8.0 * r.elements / r.seconds / 1e9;
  std::vector<KernelFit> fits;
  std::map<std::string, size_t> index;
  double largestSize = 0;
  for (const Row& r : t.rows) largestSize = std::max(largestSize, r.elements);
  const double checkFrom = std::min(kCheckFromElements, largestSize);
  for (const Row& r : t.rows) {
    auto [it, fresh] = index.emplace(r.kernel, fits.size());
    if (fresh) {
      KernelFit f;
      f.kernel = r.kernel;
      f.cls = classify(r.kernel);
      f.floorElements = f.largestElements = r.elements;
      f.floorS = f.largestS = r.seconds;
      f.bytesPerElement = r.movedBytes / r.elements;
      fits.push_back(f);
    }
    KernelFit& f = fits[it->second];
    if (r.elements < f.floorElements) f.floorElements = r.elements, f.floorS = r.seconds;
    if (r.elements >= f.largestElements) {
      f.largestElements = r.elements, f.largestS = r.seconds;
      f.bytesPerElement = r.movedBytes / r.elements;
    }
    const auto c = copyAt.find(r.elements);
    const double frac = ofCopy(r, r.copyGbps > 0 ? r.copyGbps : c == copyAt.end() ? 0 : c->second);
    if (r.elements >= checkFrom && frac > 0 && (f.minOfCopy == 0 || frac < f.minOfCopy))
      f.minOfCopy = frac, f.minOfCopyElements = r.elements;
  }
  for (KernelFit& f : fits) {
    const double dn = f.largestElements - f.floorElements, dt = f.largestS - f.floorS;
    if (dn > 0 && dt > 0 && f.floorS * f.largestElements > f.largestS * f.floorElements) {
      f.secondsPerElement = dt / dn;
      f.interceptS = f.floorS - f.floorElements * f.secondsPerElement;
    } else {
      f.secondsPerElement = f.largestS / f.largestElements;
      f.interceptS = 0;
    }
    f.gbps = f.bytesPerElement * f.largestElements / f.largestS / 1e9;
    for (const Row& r : t.rows)
      if (r.kernel == f.kernel && r.elements == f.largestElements) {
        const auto c = copyAt.find(r.elements);
        f.ofCopyLargest =
            ofCopy(r, r.copyGbps > 0 ? r.copyGbps : c == copyAt.end() ? 0 : c->second);
      }
  }
  return fits;
}

CheckResult check(const std::vector<KernelFit>& fits, double streaming, double selection) {
  CheckResult res;
  for (const KernelFit& f : fits) {
    double want = 0;
    if (f.cls == KernelClass::Streaming) want = streaming;
    else if (f.cls == KernelClass::Selection) want = selection;
    else continue;
    ++res.checked;
    if (f.minOfCopy >= want) continue;
    char line[256];
    std::snprintf(line, sizeof line, "%s (%s): %.2f of the copy at %.0f elements, below %.2f",
                  f.kernel.c_str(), className(f.cls), f.minOfCopy, f.minOfCopyElements, want);
    res.failures.push_back(line);
  }
  return res;
}

std::string summaryMarkdown(const std::vector<KernelFit>& fits) {
  std::string out =
      "| kernel | class | bytes/element | floor us (at elements) | GB/s (largest) | "
      "of copy (largest) | lowest of copy (>= 16M) |\n|---|---|--:|--:|--:|--:|--:|\n";
  char line[320];
  for (const KernelFit& f : fits) {
    std::snprintf(line, sizeof line, "| %s | %s | %.4g | %.1f (%.0f) | %.1f | %.2f | %.2f |\n",
                  f.kernel.c_str(), className(f.cls), f.bytesPerElement, f.floorS * 1e6,
                  f.floorElements, f.gbps, f.ofCopyLargest, f.minOfCopy);
    out += line;
  }
  return out;
}

}  // namespace gradcomp::kbench
