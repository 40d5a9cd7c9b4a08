#include "common/status.h"

#include <cstdarg>
#include <cstdio>

namespace gradcomp {

const char* errName(Err e) {
  switch (e) {
    case Err::Ok: return "Ok";
    case Err::InvalidArgument: return "InvalidArgument";
    case Err::InvalidConfig: return "InvalidConfig";
    case Err::SystemError: return "SystemError";
    case Err::RemoteError: return "RemoteError";
    case Err::Timeout: return "Timeout";
    case Err::Unsupported: return "Unsupported";
    case Err::Internal: return "Internal";
  }
  return "Unknown";
}

std::string Status::toString() const {
  if (ok()) return "Ok";
  return std::string(errName(code_)) + ": " + message_;
}

Status makeStatus(Err code, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return Status(code, buf);
}

}  // namespace gradcomp
