// Query interface of the test-double libnccl.so.2 (tests/nccl_double): a
// host-memory NCCL for tests without GPUs. Every interposable call is
// recorded with its arguments; collectives really run between the test's rank
// processes through files in $NCCL_DOUBLE_DIR (bounded waits: a missing rank
// fails the call with ncclSystemError after NCCL_DOUBLE_TIMEOUT_S, default 30).
#pragma once

#include <stdint.h>

#include "plugin/nccl/nccl_abi.h"

extern "C" {

typedef struct {
  const void* sendbuff;
  void* recvbuff;
  size_t count;
  int datatype;
  int op;
  ncclComm_t comm;
  cudaStream_t stream;
} ncclDoubleAllReduceRecord;

// Calls of `function` ("ncclAllReduce", "ncclCommDestroy", ...) so far.
typedef int (*ncclDoubleCountFn)(const char* function);
// The i-th recorded ncclAllReduce; 0 on success, -1 when out of range.
typedef int (*ncclDoubleAllReduceAtFn)(int i, ncclDoubleAllReduceRecord* out);

}
