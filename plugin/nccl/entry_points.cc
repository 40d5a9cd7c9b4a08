// The NCCL entry points libgradcomp.so exports (plugin/export/gradcomp.map
// lists exactly these and ncclNetPlugin_v10/v11). Each catches everything:
// no C++ exception crosses into the application. Communicator creations run
// the real function first, then register the communicator (and, for selected
// ones, wire UCX collectively over it).
#include <exception>

#include "common/log.h"
#include "plugin/nccl/interposer.h"
#include "plugin/nccl/real_nccl.h"

#define GC_NCCL_API extern "C" __attribute__((visibility("default")))

using gradcomp::nccl::InsideScope;
using gradcomp::nccl::real;

namespace {

template <typename Fn>
ncclResult_t guarded(const char* name, Fn&& fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    GC_WARN("%s: internal error: %s", name, e.what());
  } catch (...) {
    GC_WARN("%s: internal error (unknown exception)", name);
  }
  return ncclInternalError;
}

ncclResult_t missing(const char* name) {
  GC_WARN("%s: the real NCCL function was not found in this process", name);
  return ncclSystemError;
}

}  // namespace

#define GC_REAL_OR_FAIL(field, name) \
  if (real().field == nullptr) return missing(name)

GC_NCCL_API ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                       ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                       cudaStream_t stream) {
  InsideScope inside;
  if (inside.reentered()) {
    GC_REAL_OR_FAIL(allReduce, "ncclAllReduce");
    return real().allReduce(sendbuff, recvbuff, count, datatype, op, comm, stream);
  }
  return guarded("ncclAllReduce", [&] {
    return gradcomp::nccl::allReduce(sendbuff, recvbuff, count, datatype, op, comm, stream);
  });
}

GC_NCCL_API ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                           ncclDataType_t datatype, ncclRedOp_t op,
                                           ncclComm_t comm, cudaStream_t stream) {
  InsideScope inside;
  if (inside.reentered()) {
    GC_REAL_OR_FAIL(reduceScatter, "ncclReduceScatter");
    return real().reduceScatter(sendbuff, recvbuff, recvcount, datatype, op, comm, stream);
  }
  return guarded("ncclReduceScatter", [&] {
    return gradcomp::nccl::reduceScatter(sendbuff, recvbuff, recvcount, datatype, op, comm,
                                         stream);
  });
}

GC_NCCL_API ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                       ncclDataType_t datatype, ncclComm_t comm,
                                       cudaStream_t stream) {
  InsideScope inside;
  if (inside.reentered()) {
    GC_REAL_OR_FAIL(allGather, "ncclAllGather");
    return real().allGather(sendbuff, recvbuff, sendcount, datatype, comm, stream);
  }
  return guarded("ncclAllGather", [&] {
    return gradcomp::nccl::allGather(sendbuff, recvbuff, sendcount, datatype, comm, stream);
  });
}

GC_NCCL_API ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                          int rank) {
  InsideScope inside;
  GC_REAL_OR_FAIL(commInitRank, "ncclCommInitRank");
  if (inside.reentered()) return real().commInitRank(comm, nranks, commId, rank);
  return guarded("ncclCommInitRank", [&] {
    ncclResult_t strict = gradcomp::nccl::strictConfigCheck();
    if (strict != ncclSuccess) return strict;
    ncclResult_t rc = real().commInitRank(comm, nranks, commId, rank);
    return gradcomp::nccl::onCommCreated(rc, comm ? *comm : nullptr, nranks, rank, nullptr, false);
  });
}

GC_NCCL_API ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                                int rank, ncclConfig_t* config) {
  InsideScope inside;
  GC_REAL_OR_FAIL(commInitRankConfig, "ncclCommInitRankConfig");
  if (inside.reentered()) return real().commInitRankConfig(comm, nranks, commId, rank, config);
  return guarded("ncclCommInitRankConfig", [&] {
    ncclResult_t strict = gradcomp::nccl::strictConfigCheck();
    if (strict != ncclSuccess) return strict;
    ncclResult_t rc = real().commInitRankConfig(comm, nranks, commId, rank, config);
    return gradcomp::nccl::onCommCreated(rc, comm ? *comm : nullptr, nranks, rank, config, false);
  });
}

GC_NCCL_API ncclResult_t ncclCommInitRankScalable(ncclComm_t* comm, int nranks, int rank, int nId,
                                                  ncclUniqueId* commIds, ncclConfig_t* config) {
  InsideScope inside;
  GC_REAL_OR_FAIL(commInitRankScalable, "ncclCommInitRankScalable");
  if (inside.reentered()) return real().commInitRankScalable(comm, nranks, rank, nId, commIds, config);
  return guarded("ncclCommInitRankScalable", [&] {
    ncclResult_t strict = gradcomp::nccl::strictConfigCheck();
    if (strict != ncclSuccess) return strict;
    ncclResult_t rc = real().commInitRankScalable(comm, nranks, rank, nId, commIds, config);
    return gradcomp::nccl::onCommCreated(rc, comm ? *comm : nullptr, nranks, rank, config, false);
  });
}

GC_NCCL_API ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  InsideScope inside;
  GC_REAL_OR_FAIL(commInitAll, "ncclCommInitAll");
  if (inside.reentered()) return real().commInitAll(comms, ndev, devlist);
  return guarded("ncclCommInitAll", [&] {
    ncclResult_t rc = real().commInitAll(comms, ndev, devlist);
    // Every rank lives in this process: never compressed (one thread cannot
    // take part in several ranks' blocking exchanges).
    for (int i = 0; rc == ncclSuccess && comms && i < ndev; ++i)
      gradcomp::nccl::onCommCreated(rc, comms[i], ndev, i, nullptr, true);
    return rc;
  });
}

GC_NCCL_API ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                       ncclConfig_t* config) {
  InsideScope inside;
  GC_REAL_OR_FAIL(commSplit, "ncclCommSplit");
  if (inside.reentered()) return real().commSplit(comm, color, key, newcomm, config);
  return guarded("ncclCommSplit", [&] {
    ncclResult_t rc = real().commSplit(comm, color, key, newcomm, config);
    // NCCL_SPLIT_NOCOLOR leaves *newcomm null: nothing to register.
    return gradcomp::nccl::onCommCreated(rc, newcomm ? *newcomm : nullptr, -1, -1, config, false);
  });
}

GC_NCCL_API ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList,
                                        int excludeRanksCount, ncclComm_t* newcomm,
                                        ncclConfig_t* config, int shrinkFlags) {
  InsideScope inside;
  GC_REAL_OR_FAIL(commShrink, "ncclCommShrink");
  if (inside.reentered())
    return real().commShrink(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags);
  return guarded("ncclCommShrink", [&] {
    ncclResult_t rc =
        real().commShrink(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags);
    return gradcomp::nccl::onCommCreated(rc, newcomm ? *newcomm : nullptr, -1, -1, config, false);
  });
}

GC_NCCL_API ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  InsideScope inside;
  GC_REAL_OR_FAIL(commFinalize, "ncclCommFinalize");
  return real().commFinalize(comm);
}

GC_NCCL_API ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  InsideScope inside;
  GC_REAL_OR_FAIL(commDestroy, "ncclCommDestroy");
  if (!inside.reentered()) {
    guarded("ncclCommDestroy", [&] {
      gradcomp::nccl::onCommGone(comm, "destroy");
      return ncclSuccess;
    });
  }
  return real().commDestroy(comm);
}

GC_NCCL_API ncclResult_t ncclCommAbort(ncclComm_t comm) {
  InsideScope inside;
  GC_REAL_OR_FAIL(commAbort, "ncclCommAbort");
  if (!inside.reentered()) {
    guarded("ncclCommAbort", [&] {
      gradcomp::nccl::onCommGone(comm, "abort");
      return ncclSuccess;
    });
  }
  return real().commAbort(comm);
}

GC_NCCL_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  InsideScope inside;
  GC_REAL_OR_FAIL(commGetAsyncError, "ncclCommGetAsyncError");
  if (inside.reentered()) return real().commGetAsyncError(comm, asyncError);
  return guarded("ncclCommGetAsyncError",
                 [&] { return gradcomp::nccl::getAsyncError(comm, asyncError); });
}

GC_NCCL_API const char* ncclGetLastError(ncclComm_t comm) {
  InsideScope inside;
  try {
    if (!inside.reentered()) return gradcomp::nccl::lastError(comm);
  } catch (...) {
  }
  return real().getLastError ? real().getLastError(comm) : "";
}

GC_NCCL_API ncclResult_t ncclGroupStart() {
  InsideScope inside;
  GC_REAL_OR_FAIL(groupStart, "ncclGroupStart");
  if (inside.reentered()) return real().groupStart();
  return gradcomp::nccl::groupStart();
}

GC_NCCL_API ncclResult_t ncclGroupEnd() {
  InsideScope inside;
  GC_REAL_OR_FAIL(groupEnd, "ncclGroupEnd");
  if (inside.reentered()) return real().groupEnd();
  return gradcomp::nccl::groupEnd();
}
