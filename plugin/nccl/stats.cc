#include "plugin/nccl/stats.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>

#include "algorithms/auto/auto_algorithm.h"
#include "common/param.h"

namespace gradcomp::nccl {
namespace {

double ratio(uint64_t logical, uint64_t wire) { return wire ? double(logical) / double(wire) : 0; }

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out + "\"";
}

// "16 MiB" style size for class bounds.
std::string sizeText(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) bytes /= 1024, ++u;
  char buf[32];
  snprintf(buf, sizeof buf, "%g %s", bytes, units[u]);
  return buf;
}

std::string secondsJson(double s) {
  std::ostringstream os;
  os.precision(9);
  if (s < 0 || !std::isfinite(s)) return "null";
  os << s;
  return os.str();
}

// The reports of a communicator's auto runtimes (rule -1 first): live, or
// as they were when the communicator was unwired.
std::vector<std::pair<int, algo::autosel::TunerReport>> autoTuners(const CommState& st) {
  return st.runtimes.empty() ? st.autoFinal : autoReports(st);
}

std::string modelJson(const algo::autosel::TunerReport& r) {
  std::ostringstream os;
  os.precision(9);
  const algo::autosel::Model& m = r.model;
  os << "{\"nranks\": " << m.nranks << ", \"latency_s\": " << m.link.alphaS
     << ", \"seconds_per_byte\": " << m.link.betaSPerByte << ", \"candidates\": [";
  for (size_t c = 0; c < m.candidates.size(); ++c) {
    const algo::autosel::CandidateFit& f = m.candidates[c];
    os << (c ? ", " : "") << "{\"label\": " << jsonString(c < r.labels.size() ? r.labels[c] : "")
       << ", \"usable\": " << (f.usable ? "true" : "false")
       << ", \"latency_s\": " << f.latencyS << ", \"wire_bytes_fixed\": " << f.wire0
       << ", \"wire_bytes_per_element\": " << f.wirePerElement
       << ", \"compute_s_fixed\": " << f.compute0
       << ", \"compute_s_per_element\": " << f.computePerElement
       << ", \"element_size_scales\": " << (f.elementSizeScales ? "true" : "false") << "}";
  }
  os << "]}";
  return os.str();
}

std::string autoJson(int rule, const algo::autosel::TunerReport& r) {
  std::ostringstream os;
  os.precision(9);
  os << "{\"rule\": " << rule << ", \"state\": " << jsonString(r.state)
     << ", \"probe_seconds\": " << r.probeSeconds << ", \"candidates\": [";
  for (size_t c = 0; c < r.labels.size(); ++c) os << (c ? ", " : "") << jsonString(r.labels[c]);
  os << "], \"model\": " << (r.haveModel ? modelJson(r) : "null") << ", \"classes\": [";
  for (size_t i = 0; i < r.classes.size(); ++i) {
    const algo::autosel::ClassReport& k = r.classes[i];
    const double lo = std::ldexp(1.0, k.key.log2Bytes);
    const size_t cur = size_t(std::max(0, k.current));
    os << (i ? ", " : "") << "{\"dtype\": " << jsonString(dtypeName(k.key.dtype))
       << ", \"bytes_min\": " << std::fixed << std::setprecision(0) << lo
       << ", \"bytes_max\": " << 2 * lo << std::defaultfloat << std::setprecision(9)
       << ", \"algo\": " << jsonString(k.current >= 0 ? r.labels[cur] : "")
       << ", \"calls\": " << k.calls
       << ", \"predicted_s\": " << secondsJson(k.current >= 0 ? k.predictedS[cur] : -1)
       << ", \"model_s\": " << secondsJson(k.current >= 0 ? k.modelS[cur] : -1)
       << ", \"measured_s\": " << secondsJson(k.current >= 0 ? k.measuredS[cur] : -1)
       << ", \"by_candidate\": {";
    const char* sep = "";
    for (size_t c = 0; c < r.labels.size(); ++c) {
      if (k.callsBy[c] == 0) continue;
      os << sep << jsonString(r.labels[c]) << ": {\"calls\": " << k.callsBy[c]
         << ", \"predicted_s\": " << secondsJson(k.predictedS[c])
         << ", \"measured_s\": " << secondsJson(k.measuredS[c])
         << ", \"measured_calls\": " << k.measuredCalls[c]
         << ", \"agreed_calls\": " << k.agreedCalls[c] << ", \"factor\": " << k.factor[c]
         << "}";
      sep = ", ";
    }
    os << "}}";
  }
  os << "]}";
  return os.str();
}

}  // namespace

std::vector<std::string> autoStatsLines(const CommState& st) {
  std::vector<std::string> lines;
  for (const auto& [rule, r] : autoTuners(st)) {
    const std::string where = rule < 0 ? "" : " (rule " + std::to_string(rule + 1) + ")";
    if (r.state != "calibrated") {
      lines.push_back("auto comm #" + std::to_string(st.id.index) + where + ": " + r.state);
      continue;
    }
    for (const algo::autosel::ClassReport& k : r.classes) {
      const double lo = std::ldexp(1.0, k.key.log2Bytes);
      const size_t cur = size_t(std::max(0, k.current));
      std::string by;
      for (size_t c = 0; c < r.labels.size(); ++c)
        if (k.callsBy[c]) by += (by.empty() ? "" : ", ") + r.labels[c] + " " + std::to_string(k.callsBy[c]);
      char line[512];
      const double measured = k.current >= 0 ? k.measuredS[cur] : -1;
      snprintf(line, sizeof line,
               "auto comm #%llu%s %s [%s, %s): %s, %llu calls (%s), predicted %.6f s, measured %s",
               (unsigned long long)st.id.index, where.c_str(), dtypeName(k.key.dtype),
               sizeText(lo).c_str(), sizeText(2 * lo).c_str(),
               k.current >= 0 ? r.labels[cur].c_str() : "none", (unsigned long long)k.calls,
               by.c_str(), k.current >= 0 ? k.predictedS[cur] : 0.0,
               measured >= 0 ? (std::to_string(measured) + " s").c_str() : "n/a (asynchronous)");
      lines.push_back(line);
    }
  }
  return lines;
}

std::string statsLine(const CommState& st, const char* how) {
  const CommStats& s = st.stats;
  double life = std::chrono::duration<double>(std::chrono::steady_clock::now() - st.created).count();
  char rsPart[320] = "";
  if (s.reduceScatter.compressedCalls + s.reduceScatter.passedCalls > 0)
    snprintf(rsPart, sizeof rsPart,
             "; of these, reduce-scatter: %llu compressed (%.3f MiB -> %.3f MiB), %llu passed",
             (unsigned long long)s.reduceScatter.compressedCalls,
             s.reduceScatter.compressedLogicalBytes / 1048576.0,
             s.reduceScatter.wireBytes / 1048576.0,
             (unsigned long long)s.reduceScatter.passedCalls);
  if (s.allgather.compressedCalls + s.allgather.passedCalls > 0) {
    const size_t used = strlen(rsPart);
    snprintf(rsPart + used, sizeof rsPart - used,
             "; allgather: %llu compressed (%.3f MiB -> %.3f MiB), %llu passed",
             (unsigned long long)s.allgather.compressedCalls,
             s.allgather.compressedLogicalBytes / 1048576.0, s.allgather.wireBytes / 1048576.0,
             (unsigned long long)s.allgather.passedCalls);
  }
  char line[1024];
  snprintf(line, sizeof line,
           "stats comm #%llu%s%s rank %d/%d (%s): %llu calls compressed, %llu passed through; "
           "compressed %.3f MiB logical -> %.3f MiB wire (ratio %.2fx), %.3f s in compressed "
           "calls (%.3f s waiting on peers), %.3f s wiring; passed through %.3f MiB; "
           "lifetime %.1f s%s%s%s",
           (unsigned long long)st.id.index, st.id.name.empty() ? "" : " ", st.id.name.c_str(),
           st.rank, st.id.nranks, how, (unsigned long long)s.compressedCalls,
           (unsigned long long)s.passedCalls, s.compressedLogicalBytes / 1048576.0,
           s.wireBytes / 1048576.0, ratio(s.compressedLogicalBytes, s.wireBytes),
           s.compressedSeconds, s.compressedWaitSeconds, s.wiringSeconds, s.passedBytes / 1048576.0, life,
           rsPart, st.disabledWhy.empty() ? "" : "; compression disabled: ", st.disabledWhy.c_str());
  return line;
}

// Shadow mode's record (shadow.h): per bucket and summed; null when no call
// was shadowed.
static double medianOf(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static std::string shadowJson(const std::map<uint64_t, ShadowBucket>& buckets) {
  if (buckets.empty()) return "null";
  std::ostringstream os;
  os.precision(9);
  ShadowBucket total;
  std::string list;
  for (const auto& [key, b] : buckets) {
    total.calls += b.calls, total.failed += b.failed, total.logicalBytes += b.logicalBytes;
    total.wireBytes += b.wireBytes, total.denseWireBytes += b.denseWireBytes;
    total.agreeChecked += b.agreeChecked, total.agreed += b.agreed;
    total.compressedSeconds += b.compressedSeconds, total.ncclSeconds += b.ncclSeconds;
    total.relErrors.insert(total.relErrors.end(), b.relErrors.begin(), b.relErrors.end());
    if (!b.lastError.empty()) total.lastError = b.lastError;
  }
  auto fields = [](std::ostringstream& o, const ShadowBucket& b) {
    const double maxErr = b.relErrors.empty() ? 0 : *std::max_element(b.relErrors.begin(), b.relErrors.end());
    o << "\"calls\": " << b.calls << ", \"failed\": " << b.failed
      << ", \"logical_bytes\": " << b.logicalBytes << ", \"wire_bytes\": " << b.wireBytes
      << ", \"dense_wire_bytes\": " << b.denseWireBytes << ", \"wire_fraction\": "
      << (b.denseWireBytes ? double(b.wireBytes) / double(b.denseWireBytes) : 0)
      << ", \"rel_error_median\": " << medianOf(b.relErrors) << ", \"rel_error_max\": " << maxErr
      << ", \"agree_checked\": " << b.agreeChecked << ", \"agreed\": " << b.agreed
      << ", \"compressed_seconds\": " << b.compressedSeconds
      << ", \"nccl_seconds\": " << b.ncclSeconds;
  };
  os << "{";
  fields(os, total);
  os << ", \"last_error\": " << jsonString(total.lastError) << ", \"buckets\": [";
  const char* sep = "";
  for (const auto& [key, b] : buckets) {
    os << sep << "{\"key\": \"0x" << std::hex << key << std::dec << "\", \"collective\": \""
       << (b.reduceScatter ? "reducescatter" : "allreduce") << "\", \"count\": " << b.count << ", ";
    fields(os, b);
    os << "}";
    sep = ", ";
  }
  os << "]}";
  return os.str();
}

std::string statsJson(const CommState& st) {
  const CommStats& s = st.stats;
  std::ostringstream os;
  os.precision(9);
  os << "{\"index\": " << st.id.index << ", \"name\": " << jsonString(st.id.name)
     << ", \"rank\": " << st.rank << ", \"nranks\": " << st.id.nranks
     << ", \"compressing\": " << (st.wiring == Wiring::Ready ? "true" : "false")
     << ", \"disabled_kind\": " << jsonString(st.disabledKind)
     << ", \"disabled_reason\": " << jsonString(st.disabledWhy)
     << ", \"failed\": " << (st.failed ? jsonString(st.failedMessage) : "null")
     << ", \"failed_rank\": " << (st.failedRank >= 0 ? std::to_string(st.failedRank) : "null")
     << ", \"calls_compressed\": " << s.compressedCalls << ", \"calls_passed\": " << s.passedCalls
     << ", \"logical_bytes\": " << s.compressedLogicalBytes << ", \"wire_bytes\": " << s.wireBytes
     << ", \"ratio\": " << ratio(s.compressedLogicalBytes, s.wireBytes)
     << ", \"passed_bytes\": " << s.passedBytes << ", \"compressed_seconds\": " << s.compressedSeconds
     << ", \"compressed_comm_seconds\": " << s.compressedWaitSeconds
     << ", \"wiring_seconds\": " << s.wiringSeconds
     << ", \"selftest\": "
     << (st.selfTest.ran ? "{\"passed\": " + std::string(st.selfTest.passed ? "true" : "false") +
                               ", \"seconds\": " + std::to_string(st.selfTest.seconds) +
                               ", \"verdict\": " + jsonString(st.selfTest.verdict) + "}"
                         : std::string("null"))
     << ", \"reduce_scatter\": {\"calls_compressed\": " << s.reduceScatter.compressedCalls
     << ", \"calls_passed\": " << s.reduceScatter.passedCalls
     << ", \"logical_bytes\": " << s.reduceScatter.compressedLogicalBytes
     << ", \"wire_bytes\": " << s.reduceScatter.wireBytes
     << ", \"passed_bytes\": " << s.reduceScatter.passedBytes << "}"
     << ", \"allgather\": {\"calls_compressed\": " << s.allgather.compressedCalls
     << ", \"calls_passed\": " << s.allgather.passedCalls
     << ", \"logical_bytes\": " << s.allgather.compressedLogicalBytes
     << ", \"wire_bytes\": " << s.allgather.wireBytes
     << ", \"passed_bytes\": " << s.allgather.passedBytes << "}"
     << ", \"pass_reasons\": {";
  const char* sep = "";
  for (const auto& [reason, n] : s.passReasons) {
    os << sep << jsonString(reason) << ": " << n;
    sep = ", ";
  }
  os << "}, \"buckets\": [";
  sep = "";
  for (const auto& [key, b] : s.buckets) {
    // Wire bits this rank sent per logical element (dense f32 ring: ~2*32*(P-1)/P).
    double elements = double(b.count) * double(b.calls);
    double bits = elements > 0 ? 8.0 * double(b.bytesOut) / elements : 0;
    os << sep << "{\"key\": \"0x" << std::hex << key << std::dec << "\", \"collective\": \""
       << (b.reduceScatter ? "reducescatter" : b.allgather ? "allgather" : "allreduce")
       << "\", \"count\": " << b.count << ", \"calls\": " << b.calls << ", \"bytes_in\": " << b.bytesIn
       << ", \"bytes_out\": " << b.bytesOut
       << ", \"wire_fraction\": " << (b.bytesIn ? double(b.bytesOut) / double(b.bytesIn) : 0)
       << ", \"bits_per_element\": " << bits << ", \"seconds\": " << b.seconds;
    // Phase split of `seconds`: null where the executor is asynchronous.
    if (b.phaseTimed)
      os << ", \"comm_seconds\": " << b.waitSeconds
         << ", \"compute_seconds\": " << std::max(0.0, b.seconds - b.waitSeconds);
    else
      os << ", \"comm_seconds\": null, \"compute_seconds\": null";
    os << ", \"residual_norm\": ";
    if (b.residualNorm < 0) os << "null"; else os << b.residualNorm;
    os << "}";
    sep = ", ";
  }
  os << "], \"shadow\": " << shadowJson(s.shadow) << ", \"auto\": [";
  sep = "";
  for (const auto& [rule, report] : autoTuners(st)) {
    os << sep << autoJson(rule, report);
    sep = ", ";
  }
  os << "]}";
  return os.str();
}

Status writeStatsFile() {
  std::string prefix;
  GC_CHECK(param::getString(param::Id::STATS, &prefix));
  if (prefix.empty()) return Status::Ok();
  static std::mutex fileMu;
  std::lock_guard<std::mutex> fileLock(fileMu);
  auto comms = CommRegistry::instance().history();
  int rank = comms.empty() ? 0 : comms.front()->rank;
  std::ostringstream os;
  os << "{\"pid\": " << getpid() << ", \"rank\": " << rank << ", \"communicators\": [";
  const char* sep = "";
  for (const auto& st : comms) {
    std::lock_guard<std::mutex> lock(st->mu);
    os << sep << statsJson(*st);
    sep = ",\n ";
  }
  os << "]}\n";
  std::string path = prefix + ".rank" + std::to_string(rank) + ".json";
  std::string tmp = path + ".tmp" + std::to_string(getpid());
  FILE* f = fopen(tmp.c_str(), "w");
  GC_REQUIRE(f != nullptr, Err::SystemError, "GRADCOMP_STATS=%s: cannot write %s", prefix.c_str(),
             tmp.c_str());
  std::string text = os.str();
  bool ok = fwrite(text.data(), 1, text.size(), f) == text.size();
  ok = (fclose(f) == 0) && ok;
  GC_REQUIRE(ok && rename(tmp.c_str(), path.c_str()) == 0, Err::SystemError,
             "GRADCOMP_STATS=%s: writing %s failed", prefix.c_str(), path.c_str());
  return Status::Ok();
}

void registerStatsAtExit() {
  static std::once_flag once;
  std::call_once(once, [] { atexit([] { (void)writeStatsFile(); }); });
}

}  // namespace gradcomp::nccl
