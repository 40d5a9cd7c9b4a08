// What every NCCL plugin entry of libgradcomp.so (net, CollNet, tuner) does
// at the extern "C" boundary: install NCCL's logger so gradcomp's lines go
// through it (NCCL_DEBUG applies), and turn a Status into an ncclResult_t,
// logging the message once (WARN). call() also catches every exception: none
// may cross into NCCL.
#pragma once

#include <exception>

#include "common/status.h"
#include "plugin/net/net_common.h"

namespace gradcomp::net {

// Null keeps the current one.
void installLogger(ncclDebugLogger_t logger);

ncclResult_t toNccl(const Status& s);

template <typename Fn>
ncclResult_t call(Fn&& fn) {
  try {
    return toNccl(fn());
  } catch (const std::exception& e) {
    return toNccl(makeStatus(Err::Internal, "plugin: exception: %s", e.what()));
  } catch (...) {
    return toNccl(makeStatus(Err::Internal, "plugin: unknown exception"));
  }
}

}  // namespace gradcomp::net
