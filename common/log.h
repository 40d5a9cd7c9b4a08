// Logging in NCCL's style: "host:pid:tid [rank] GRADCOMP WARN|INFO|TRACE msg".
// GRADCOMP_DEBUG picks the level (mirrors NCCL_DEBUG), GRADCOMP_DEBUG_SUBSYS the
// subsystems (comma list, "^" excludes, like NCCL_DEBUG_SUBSYS). When gradcomp
// runs inside NCCL (net plugin), an external logger installed by the plugin
// layer receives the lines instead of stderr.
#pragma once

#include <cstdint>

namespace gradcomp::log {

enum class Level : int { None = 0, Warn = 1, Info = 2, Trace = 3 };

enum Subsys : uint32_t {
  INIT = 1u << 0,
  BOOTSTRAP = 1u << 1,
  TRANSPORT = 1u << 2,
  ALGO = 1u << 3,
  DEVICE = 1u << 4,
  PLUGIN = 1u << 5,
  NET = 1u << 6,
  PARAM = 1u << 7,
  TOOL = 1u << 8,
  ALL = ~0u,
};

bool enabled(Level level, uint32_t subsys);
void write(Level level, uint32_t subsys, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 5, 6)));
// Rank shown in the prefix once known (-1: not shown).
void setRank(int rank);

using ExternalLogger = void (*)(Level level, uint32_t subsys, const char* file, int line,
                                const char* message);
void setExternalLogger(ExternalLogger logger);

}  // namespace gradcomp::log

#define GC_LOG_(level, subsys, ...)                                            \
  do {                                                                         \
    if (::gradcomp::log::enabled((level), (subsys)))                           \
      ::gradcomp::log::write((level), (subsys), __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define GC_WARN(...) GC_LOG_(::gradcomp::log::Level::Warn, ::gradcomp::log::ALL, __VA_ARGS__)
#define GC_INFO(subsys, ...) GC_LOG_(::gradcomp::log::Level::Info, ::gradcomp::log::subsys, __VA_ARGS__)
#define GC_TRACE(subsys, ...) GC_LOG_(::gradcomp::log::Level::Trace, ::gradcomp::log::subsys, __VA_ARGS__)
