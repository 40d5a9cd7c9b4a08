// The interposer's logic behind the extern "C" NCCL entry points
// (entry_points.cc). Each function is called with the real NCCL's result or
// calls the real function itself, and returns what the application sees.
//
// Reentrancy: a thread inside one of these functions that re-enters an
// interposed entry point (NCCL calling its own API, a callback) goes straight
// to the real function. Group depth is tracked per thread, like NCCL's.
#pragma once

#include "plugin/nccl/nccl_abi.h"

namespace gradcomp::nccl {

// Bad configuration with GRADCOMP_STRICT=1: communicator creation fails with
// this result (ncclSuccess otherwise) before the real init runs.
ncclResult_t strictConfigCheck();

// After a real communicator creation returned `rc` for `comm` (null comms are
// ignored). `config` may be null. `nranks`/`rank` < 0: query NCCL.
ncclResult_t onCommCreated(ncclResult_t rc, ncclComm_t comm, int nranks, int rank,
                           const ncclConfig_t* config, bool singleProcess);
// Before the real destroy/abort: stats line, stats file, UCX teardown.
void onCommGone(ncclComm_t comm, const char* how);

ncclResult_t allReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t dtype,
                       ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
// recvcount elements per rank, NCCL's layout (algorithms/algorithm.h).
ncclResult_t allGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                       ncclDataType_t dtype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t reduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                           ncclDataType_t dtype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
// Folds a gradcomp failure of `comm` into NCCL's async error.
ncclResult_t getAsyncError(ncclComm_t comm, ncclResult_t* asyncError);
const char* lastError(ncclComm_t comm);
ncclResult_t groupStart();
ncclResult_t groupEnd();

// RAII marker of "this thread is inside gradcomp".
class InsideScope {
 public:
  InsideScope();
  ~InsideScope();
  bool reentered() const { return reentered_; }

 private:
  bool reentered_;
};

}  // namespace gradcomp::nccl
