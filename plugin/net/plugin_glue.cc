#include "plugin/net/plugin_glue.h"

#include "common/log.h"

namespace gradcomp::net {
namespace {

ncclDebugLogger_t gLogger = nullptr;

void toNcclLogger(log::Level level, uint32_t subsys, const char* file, int line, const char* msg) {
  ncclDebugLogger_t logger = gLogger;
  if (logger == nullptr) return;
  ncclDebugLogLevel l = level == log::Level::Warn   ? NCCL_LOG_WARN
                        : level == log::Level::Info ? NCCL_LOG_INFO
                                                    : NCCL_LOG_TRACE;
  unsigned long flags = (subsys & log::INIT) ? NCCL_LOGFLAG_INIT : NCCL_LOGFLAG_NET;
  logger(l, flags, file, line, "GRADCOMP %s", msg);
}

}  // namespace

void installLogger(ncclDebugLogger_t logger) {
  if (logger == nullptr) return;
  gLogger = logger;
  log::setExternalLogger(toNcclLogger);
}

ncclResult_t toNccl(const Status& s) {
  if (s.ok()) return ncclSuccess;
  GC_WARN("%s", s.message().c_str());
  switch (s.code()) {
    case Err::InvalidArgument: return ncclInvalidArgument;
    case Err::InvalidConfig: return ncclInvalidUsage;
    case Err::RemoteError: case Err::Timeout: return ncclRemoteError;
    case Err::SystemError: return ncclSystemError;
    default: return ncclInternalError;
  }
}

}  // namespace gradcomp::net
