// The real NCCL functions behind the interposer, resolved once, lazily, at the
// first interposed call: dlopen("libnccl.so.2", RTLD_NOLOAD) then the pnccl*
// profiling aliases (which the interposer never exports), falling back to
// RTLD_NEXT and RTLD_DEFAULT. A symbol that resolves into libgradcomp.so itself
// is rejected, so a missing NCCL can never turn into infinite recursion.
// libgradcomp.so never has a DT_NEEDED on libnccl: it must bind to the copy
// of NCCL the application loaded (PyTorch's wheel, a conda one, the shim).
#pragma once

#include "plugin/nccl/nccl_abi.h"

namespace gradcomp::nccl {

struct RealNccl {
  ncclResult_t (*allReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                            cudaStream_t) = nullptr;
  ncclResult_t (*reduceScatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t,
                                ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*allGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t,
                            cudaStream_t) = nullptr;
  ncclResult_t (*commInitRank)(ncclComm_t*, int, ncclUniqueId, int) = nullptr;
  ncclResult_t (*commInitRankConfig)(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*) = nullptr;
  ncclResult_t (*commInitRankScalable)(ncclComm_t*, int, int, int, ncclUniqueId*,
                                       ncclConfig_t*) = nullptr;
  ncclResult_t (*commInitAll)(ncclComm_t*, int, const int*) = nullptr;
  ncclResult_t (*commSplit)(ncclComm_t, int, int, ncclComm_t*, ncclConfig_t*) = nullptr;
  ncclResult_t (*commShrink)(ncclComm_t, int*, int, ncclComm_t*, ncclConfig_t*, int) = nullptr;
  ncclResult_t (*commFinalize)(ncclComm_t) = nullptr;
  ncclResult_t (*commDestroy)(ncclComm_t) = nullptr;
  ncclResult_t (*commAbort)(ncclComm_t) = nullptr;
  ncclResult_t (*commGetAsyncError)(ncclComm_t, ncclResult_t*) = nullptr;
  const char* (*getLastError)(ncclComm_t) = nullptr;
  ncclResult_t (*groupStart)() = nullptr;
  ncclResult_t (*groupEnd)() = nullptr;
  // Not interposed; used by gradcomp itself.
  ncclResult_t (*commCount)(ncclComm_t, int*) = nullptr;
  ncclResult_t (*commUserRank)(ncclComm_t, int*) = nullptr;
  ncclResult_t (*memAlloc)(void**, size_t) = nullptr;
  ncclResult_t (*memFree)(void*) = nullptr;
  const char* (*getErrorString)(ncclResult_t) = nullptr;
  // Where the functions came from, for the INIT log line and errors.
  const char* origin = "not found";
};

// Thread-safe; resolves on first use. Entries stay null when NCCL lacks them
// (older versions have no ncclCommShrink); callers check.
const RealNccl& real();

}  // namespace gradcomp::nccl
