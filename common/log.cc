#include "common/log.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>

#include "common/param.h"
#include "common/status.h"

namespace gradcomp::log {
namespace {

struct Settings {
  Level level = Level::Warn;
  uint32_t mask = ALL;
};

std::atomic<int> gRank{-1};
std::atomic<ExternalLogger> gExternal{nullptr};

uint32_t subsysBit(const std::string& name) {
  static const struct { const char* name; uint32_t bit; } kTable[] = {
      {"INIT", INIT}, {"BOOTSTRAP", BOOTSTRAP}, {"TRANSPORT", TRANSPORT}, {"ALGO", ALGO},
      {"DEVICE", DEVICE}, {"PLUGIN", PLUGIN}, {"NET", NET}, {"PARAM", PARAM},
      {"TOOL", TOOL}, {"ALL", ALL}};
  for (const auto& e : kTable)
    if (strcasecmp(e.name, name.c_str()) == 0) return e.bit;
  return 0;
}

// Read once; the registry validates the level, the subsystem list is parsed here.
const Settings& settings() {
  static Settings s = [] {
    Settings out;
    param::QuietScope quiet;
    std::string level;
    if (param::getString(param::Id::DEBUG, &level).ok()) {
      if (level == "NONE") out.level = Level::None;
      else if (level == "INFO") out.level = Level::Info;
      else if (level == "TRACE") out.level = Level::Trace;
      else out.level = Level::Warn;
    }
    std::string subsys;
    if (param::getString(param::Id::DEBUG_SUBSYS, &subsys).ok() && !subsys.empty()) {
      bool exclude = subsys[0] == '^';
      uint32_t mask = 0;
      std::stringstream ss(exclude ? subsys.substr(1) : subsys);
      for (std::string item; std::getline(ss, item, ',');) mask |= subsysBit(item);
      out.mask = exclude ? ~mask : mask;
    }
    return out;
  }();
  return s;
}

}  // namespace

bool enabled(Level level, uint32_t subsys) {
  const Settings& s = settings();
  if (level > s.level) return false;
  return level == Level::Warn || (s.mask & subsys) != 0;
}

void setRank(int rank) { gRank.store(rank); }
void setExternalLogger(ExternalLogger logger) { gExternal.store(logger); }

void write(Level level, uint32_t subsys, const char* file, int line, const char* fmt, ...) {
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (ExternalLogger ext = gExternal.load()) {
    ext(level, subsys, file, line, msg);
    return;
  }
  static const std::string host = [] {
    char h[256] = {0};
    gethostname(h, sizeof(h) - 1);
    char* dot = strchr(h, '.');
    if (dot) *dot = 0;
    return std::string(h);
  }();
  const char* levelName = level == Level::Warn ? "WARN" : level == Level::Info ? "INFO" : "TRACE";
  char rank[32] = "";
  if (gRank.load() >= 0) snprintf(rank, sizeof(rank), " [%d]", gRank.load());
  const char* base = strrchr(file, '/');
  char where[160] = "";
  if (level == Level::Trace) snprintf(where, sizeof(where), "%s:%d ", base ? base + 1 : file, line);
  // One fprintf per line so lines of concurrent threads do not interleave.
  fprintf(stderr, "%s:%d:%ld%s GRADCOMP %s %s%s\n", host.c_str(), (int)getpid(),
          (long)syscall(SYS_gettid), rank, levelName, where, msg);
}

}  // namespace gradcomp::log

namespace gradcomp {
void logBreadcrumb(const char* file, int line, const Status& s) {
  if (!log::enabled(log::Level::Info, log::ALL)) return;
  const char* base = strrchr(file, '/');
  log::write(log::Level::Info, log::ALL, file, line, "%s:%d -> %s", base ? base + 1 : file, line,
             errName(s.code()));
}
}  // namespace gradcomp
