// The one internal error type. Every fallible internal function returns a
// Status; it is translated to an ncclResult_t / gcResult_t only at an extern "C"
// boundary. "The function that creates the error decides what it is": the
// message names the cause (variable, flag, peer, byte offset) once, where it is
// detected; callers add breadcrumbs through GC_CHECK, never a second message.
#pragma once

#include <string>
#include <utility>

namespace gradcomp {

enum class Err {
  Ok = 0,
  InvalidArgument,  // a caller's argument (count, pointer, dtype, flag value)
  InvalidConfig,    // a GRADCOMP_* variable, config file, or cross-rank mismatch
  SystemError,      // an OS or library call failed (errno, UCX, CUDA)
  RemoteError,      // a peer died, closed, or sent malformed data
  Timeout,          // a peer stayed silent past GRADCOMP_TIMEOUT_S
  Unsupported,      // valid but not handled here (caller may pass through)
  Internal,         // a broken invariant inside gradcomp
};

const char* errName(Err e);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Err code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == Err::Ok; }
  Err code() const { return code_; }
  const std::string& message() const { return message_; }
  // "<ErrName>: <message>", for one-line reports.
  std::string toString() const;

 private:
  Err code_ = Err::Ok;
  std::string message_;
};

// printf-style constructor: makeStatus(Err::InvalidArgument, "count %zu ...", n).
Status makeStatus(Err code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// Breadcrumb at INFO/ALL, like NCCL's "file:line -> error"; defined in log.cc.
void logBreadcrumb(const char* file, int line, const Status& s);

}  // namespace gradcomp

// Propagate an error, leaving a breadcrumb of where it passed.
#define GC_CHECK(expr)                                              \
  do {                                                              \
    ::gradcomp::Status gc_status_ = (expr);                         \
    if (!gc_status_.ok()) {                                         \
      ::gradcomp::logBreadcrumb(__FILE__, __LINE__, gc_status_);    \
      return gc_status_;                                            \
    }                                                               \
  } while (0)

// Return an error made here when a condition fails.
#define GC_REQUIRE(cond, code, ...)                                 \
  do {                                                              \
    if (!(cond)) return ::gradcomp::makeStatus((code), __VA_ARGS__); \
  } while (0)
