// Status -> gcResult_t, gcResultString and the per-thread last error.
#include <cstring>
#include <string>

#include "common/log.h"
#include "gradcomp/gradcomp.h"
#include "plugin/api/comm.h"

namespace gradcomp::api {
namespace {

thread_local std::string lastError;

gcResult_t resultOf(Err code) {
  switch (code) {
    case Err::Ok: return gcSuccess;
    case Err::InvalidArgument: return gcInvalidArgument;
    case Err::InvalidConfig: return gcInvalidConfig;
    case Err::SystemError: return gcSystemError;
    case Err::RemoteError: return gcRemoteError;
    case Err::Timeout: return gcTimeout;
    case Err::Unsupported: return gcUnsupported;
    case Err::Internal: return gcInternalError;
  }
  return gcInternalError;
}

}  // namespace

int toResult(const Status& s) {
  if (!s.ok()) {
    lastError = s.toString();
    GC_INFO(PLUGIN, "%s", lastError.c_str());  // the caller decides whether it is a problem
  }
  return resultOf(s.code());
}

}  // namespace gradcomp::api

extern "C" {

const char* gcResultString(gcResult_t result) {
  // A C caller may pass any int: read it as one, never as an out-of-range
  // enum value (undefined behaviour in C++).
  int value = 0;
  std::memcpy(&value, &result, sizeof value);
  switch (value) {
    case gcSuccess: return "success";
    case gcInvalidArgument: return "invalid argument";
    case gcInvalidConfig: return "invalid configuration";
    case gcSystemError: return "system error";
    case gcRemoteError: return "remote error";
    case gcTimeout: return "timeout";
    case gcUnsupported: return "unsupported";
    case gcInternalError: return "internal error";
  }
  return "unknown gcResult_t";
}

const char* gcLastError(void) { return gradcomp::api::lastError.c_str(); }

}  // extern "C"
