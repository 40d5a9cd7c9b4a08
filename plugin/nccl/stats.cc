#include "plugin/nccl/stats.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>

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

}  // namespace

std::string statsLine(const CommState& st, const char* how) {
  const CommStats& s = st.stats;
  double life = std::chrono::duration<double>(std::chrono::steady_clock::now() - st.created).count();
  char line[768];
  snprintf(line, sizeof line,
           "stats comm #%llu%s%s rank %d/%d (%s): %llu calls compressed, %llu passed through; "
           "compressed %.3f MiB logical -> %.3f MiB wire (ratio %.2fx), %.3f s in compressed "
           "calls (%.3f s waiting on peers), %.3f s wiring; passed through %.3f MiB; "
           "lifetime %.1f s%s%s",
           (unsigned long long)st.id.index, st.id.name.empty() ? "" : " ", st.id.name.c_str(),
           st.rank, st.id.nranks, how, (unsigned long long)s.compressedCalls,
           (unsigned long long)s.passedCalls, s.compressedLogicalBytes / 1048576.0,
           s.wireBytes / 1048576.0, ratio(s.compressedLogicalBytes, s.wireBytes),
           s.compressedSeconds, s.compressedWaitSeconds, s.wiringSeconds, s.passedBytes / 1048576.0, life,
           st.disabledWhy.empty() ? "" : "; compression disabled: ", st.disabledWhy.c_str());
  return line;
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
     << ", \"wiring_seconds\": " << s.wiringSeconds << ", \"pass_reasons\": {";
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
    os << sep << "{\"key\": \"0x" << std::hex << key << std::dec << "\", \"count\": " << b.count
       << ", \"calls\": " << b.calls << ", \"bytes_in\": " << b.bytesIn
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
