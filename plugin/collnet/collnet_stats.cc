#include "plugin/collnet/collnet_stats.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>

#include "common/param.h"

namespace gradcomp::collnet {
namespace {

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out + "\"";
}

double ratio(uint64_t logical, uint64_t wire) { return wire ? double(logical) / double(wire) : 0; }

struct Record {
  std::mutex mu;
  std::map<uint64_t, GroupStats> groups;
};

Record& record() {
  static Record* r = [] {
    auto* rec = new Record();  // outlives static destructors: written at exit
    atexit([] { (void)write(); });
    return rec;
  }();
  return *r;
}

}  // namespace

std::string statsLine(const GroupStats& s) {
  char line[640];
  snprintf(line, sizeof line,
           "CollNet stats group #%llu rank %d/%d (%s): %llu chunks, %.3f MiB logical -> %.3f MiB "
           "wire (ratio %.2fx), %.3f s in the algorithm (%.3f s waiting on peers), %.3f s wiring; "
           "error feedback: %llu chunks reused a residual, %llu restarts%s%s",
           (unsigned long long)s.id, s.rank, s.nranks, s.algo.c_str(), (unsigned long long)s.calls,
           s.logicalBytes / 1048576.0, s.wireBytes / 1048576.0, ratio(s.logicalBytes, s.wireBytes),
           s.seconds, s.waitSeconds, s.wiringSeconds, (unsigned long long)s.efReused,
           (unsigned long long)s.efRestarts, s.failed.empty() ? "" : "; failed: ", s.failed.c_str());
  return line;
}

std::string statsJson(const GroupStats& s) {
  std::ostringstream os;
  os.precision(9);
  os << "{\"group\": " << s.id << ", \"rank\": " << s.rank << ", \"nranks\": " << s.nranks
     << ", \"algo\": " << jsonString(s.algo) << ", \"calls\": " << s.calls
     << ", \"logical_bytes\": " << s.logicalBytes << ", \"wire_bytes\": " << s.wireBytes
     << ", \"ratio\": " << ratio(s.logicalBytes, s.wireBytes) << ", \"seconds\": " << s.seconds
     << ", \"comm_seconds\": " << s.waitSeconds << ", \"wiring_seconds\": " << s.wiringSeconds
     << ", \"ef_reused\": " << s.efReused << ", \"ef_restarts\": " << s.efRestarts
     << ", \"closed\": " << (s.closed ? "true" : "false")
     << ", \"failed\": " << (s.failed.empty() ? "null" : jsonString(s.failed)) << "}";
  return os.str();
}

void update(const GroupStats& s) {
  Record& r = record();
  std::lock_guard<std::mutex> lock(r.mu);
  r.groups[s.id] = s;
}

Status write() {
  std::string prefix;
  GC_CHECK(param::getString(param::Id::STATS, &prefix));
  if (prefix.empty()) return Status::Ok();
  Record& r = record();
  std::lock_guard<std::mutex> lock(r.mu);
  char host[256] = "host";
  gethostname(host, sizeof host - 1);
  std::ostringstream os;
  os << "{\"pid\": " << getpid() << ", \"host\": " << jsonString(host) << ", \"collnet\": [";
  const char* sep = "";
  for (const auto& [id, g] : r.groups) {
    os << sep << statsJson(g);
    sep = ",\n ";
  }
  os << "]}\n";
  std::string path = prefix + ".collnet." + host + "." + std::to_string(getpid()) + ".json";
  std::string tmp = path + ".tmp";
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

}  // namespace gradcomp::collnet
