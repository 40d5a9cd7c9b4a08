#include "tools/gradcomp-bench/report.h"

#include <algorithm>
#include <cerrno>
#include <utility>
#include <vector>
#include <cmath>
#include <cstring>

#include "common/param.h"
#include "tools/gradcomp-bench/inputs.h"

namespace gradcomp::bench {
namespace {

std::string fmt(const char* format, double v) {
  char buf[64];
  snprintf(buf, sizeof buf, format, v);
  return buf;
}

// Like nccl-tests: one decimal while it fits the column.
std::string timeText(double us) { return fmt(us < 10 ? "%.2f" : us < 1e5 ? "%.1f" : "%.0f", us); }

std::string paramsText(const Options& o) {
  std::string text;
  for (const auto& [name, value] : o.params) text += " " + name + "=" + value;
  return text.empty() ? " (defaults)" : text;
}

// JSON has no Inf/NaN: those become null, like absent values.
std::string jsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  return fmt("%.10g", v);
}

// Wider for auto, whose rows name candidates such as "qsgd:BITS=4".
int algoWidth(const Options& o) { return o.algo == "auto" ? 16 : 8; }

// "oktopk*9,dense*1" (labels hold '=' and ':'): flat, so every row stays one
// level of JSON.
std::string choicesText(const Row& r) {
  std::string out;
  for (const auto& [label, n] : r.choices)
    out += (out.empty() ? "" : ",") + label + "*" + std::to_string(n);
  return out;
}

}  // namespace

std::string Row::algoText(const std::string& algo) const {
  if (choices.empty()) return algo;
  std::vector<std::pair<uint64_t, std::string>> byCount;
  for (const auto& [label, n] : choices) byCount.emplace_back(n, label);
  std::stable_sort(byCount.begin(), byCount.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string text;
  for (const auto& [n, label] : byCount) text += (text.empty() ? "" : "+") + label;
  return text;
}

double Row::algbwGBps() const { return timeUs > 0 ? double(sizeBytes) / timeUs / 1e3 : 0.0; }

double Row::busbwGBps() const {
  return ranks > 1 ? algbwGBps() * (reduceScatter ? 1.0 : 2.0) * (ranks - 1) / ranks : 0.0;
}

double ringWireBytes(uint64_t count, size_t elemSize, int nranks) {
  if (nranks <= 1) return 0.0;
  const uint64_t p = uint64_t(nranks), q = count / p, rem = count % p;
  auto chunk = [&](uint64_t j) { return q + (j < rem ? 1 : 0); };
  uint64_t skipped = UINT64_MAX;
  for (uint64_t j = 0; j < p; ++j) skipped = std::min(skipped, chunk(j) + chunk((j + 1) % p));
  return double(2 * count - skipped) * double(elemSize);
}

void printHeader(FILE* out, const Options& o, int nranks) {
  fprintf(out,
          "# gradcomp-bench: %s, algo %s, ranks %d, input %s, seed %llu, minBytes %llu maxBytes %llu "
          "step: %llu(factor) warmup iters: %d iters: %d validation: %d\n",
          algo::collectiveName(o.coll), o.algo.c_str(), nranks, inputName(o.input), static_cast<unsigned long long>(o.seed),
          static_cast<unsigned long long>(o.minBytes), static_cast<unsigned long long>(o.maxBytes),
          static_cast<unsigned long long>(o.stepFactor), o.warmupIters, o.iters, o.check ? 1 : 0);
  fprintf(out, "# algorithm parameters:%s\n", paramsText(o).c_str());
  fprintf(out, "#\n");
  const int aw = algoWidth(o);
  fprintf(out, "# %10s  %12s  %8s  %6s  %*s  %9s  %7s  %7s  %12s  %6s  %9s  %7s\n", "size", "count",
          "type", "redop", aw, "algo", "time", "algbw", "busbw", "wire", "ratio", "relerr",
          "#wrong");
  fprintf(out, "# %10s  %12s  %8s  %6s  %*s  %9s  %7s  %7s  %12s  %6s  %9s  %7s\n", "(B)",
          "(elements)", "", "", aw, "", "(us)", "(GB/s)", "(GB/s)", "(B)", "", "", "");
  fflush(out);
}

void printRow(FILE* out, const Options& o, const Row& r) {
  fprintf(out, "  %10llu  %12llu  %8s  %6s  %*s  %9s  %7.2f  %7.2f  %12.0f  %6s  %9s  %7s\n",
          static_cast<unsigned long long>(r.sizeBytes), static_cast<unsigned long long>(r.count),
          dtypeName(o.dtype), redOpName(o.op), algoWidth(o), r.algoText(o.algo).c_str(),
          timeText(r.timeUs).c_str(),
          r.algbwGBps(), r.busbwGBps(), r.wireMax,
          r.haveRatio() ? fmt("%.2f", r.ratio()).c_str() : (r.ranks > 1 ? "inf" : "-"),
          r.checked ? fmt("%.2e", r.relErr).c_str() : "N/A",
          r.haveWrong ? std::to_string(r.wrong).c_str() : "N/A");
  fflush(out);
}

void printFooter(FILE* out, const std::vector<Row>& rows) {
  uint64_t wrong = 0;
  bool checked = false;
  double busbw = 0;
  for (const Row& r : rows) {
    wrong += r.haveWrong ? r.wrong : 0;
    checked = checked || r.haveWrong;
    busbw += r.busbwGBps();
  }
  if (checked)
    fprintf(out, "# Wrong values         : %llu %s\n", static_cast<unsigned long long>(wrong),
            wrong ? "FAILED" : "OK");
  else
    fprintf(out, "# Wrong values         : not checked\n");
  fprintf(out, "# Avg bus bandwidth    : %g\n", rows.empty() ? 0.0 : busbw / rows.size());
  fprintf(out, "#\n");
  fflush(out);
}

Status writeJson(const std::string& path, const Options& o, const std::vector<Row>& rows) {
  FILE* f = fopen(path.c_str(), "w");
  GC_REQUIRE(f, Err::SystemError, "-J '%s': cannot open for writing: %s", path.c_str(),
             strerror(errno));
  std::string backend;
  GC_CHECK(param::getString(param::Id::API_BACKEND, &backend));
  fprintf(f, "[\n");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    fprintf(f,
            "  {\"coll\": \"%s\", \"size_bytes\": %llu, \"count\": %llu, \"dtype\": \"%s\", \"op\": \"%s\", "
            "\"algo\": \"%s\", \"ranks\": %d, \"time_us\": %s, \"algbw_gbps\": %s, "
            "\"busbw_gbps\": %s, \"wire_bytes_max\": %s, \"wire_bytes_mean\": %s, \"ratio\": %s, "
            "\"rel_err\": %s, \"wrong\": %s, \"backend\": \"%s\", \"d2h_bytes\": %s, "
            "\"h2d_bytes\": %s, \"host_syncs\": %s, \"choice\": \"%s\", \"choices\": \"%s\", "
            "\"hosts\": %d, \"hierarchy\": \"%s\", \"inter_host_bytes_max\": %s, "
            "\"inter_host_bytes_mean\": %s}%s\n",
            algo::collectiveName(o.coll), static_cast<unsigned long long>(r.sizeBytes),
            static_cast<unsigned long long>(r.count), dtypeName(o.dtype), redOpName(o.op),
            o.algo.c_str(), r.ranks,
            jsonNumber(r.timeUs).c_str(), jsonNumber(r.algbwGBps()).c_str(),
            jsonNumber(r.busbwGBps()).c_str(), jsonNumber(r.wireMax).c_str(),
            jsonNumber(r.wireMean).c_str(), r.haveRatio() ? jsonNumber(r.ratio()).c_str() : "null",
            r.checked ? jsonNumber(r.relErr).c_str() : "null",
            r.haveWrong ? std::to_string(r.wrong).c_str() : "null", backend.c_str(),
            jsonNumber(r.d2hMax).c_str(), jsonNumber(r.h2dMax).c_str(),
            jsonNumber(r.syncsMax).c_str(), r.algoText(o.algo).c_str(), choicesText(r).c_str(),
            r.hosts, r.hierarchical ? "host" : "flat", jsonNumber(r.interHostMax).c_str(),
            jsonNumber(r.interHostMean).c_str(), i + 1 < rows.size() ? "," : "");
  }
  fprintf(f, "]\n");
  const bool ok = fflush(f) == 0 && !ferror(f);
  const int err = errno;
  fclose(f);
  GC_REQUIRE(ok, Err::SystemError, "-J '%s': write failed: %s", path.c_str(), strerror(err));
  return Status::Ok();
}

}  // namespace gradcomp::bench
