// The NCCL entry points of libgradcomp.so over the test-double libnccl.so.2
// (tests/nccl_double), for rank processes of interposer tests: each child
// dlopens the double (RTLD_GLOBAL, as an application linked to NCCL would have
// it) and then libgradcomp.so, and calls what libgradcomp.so exports.
#pragma once

#include <map>
#include <string>

#include "nccl_double/nccl_double.h"

namespace gradcomp::test {

struct NcclApi {
  ncclResult_t (*allReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*reduceScatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t,
                                ncclComm_t, cudaStream_t);
  ncclResult_t (*allGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*initRank)(ncclComm_t*, int, ncclUniqueId, int);
  ncclResult_t (*initRankConfig)(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*);
  ncclResult_t (*split)(ncclComm_t, int, int, ncclComm_t*, ncclConfig_t*);
  ncclResult_t (*destroy)(ncclComm_t);
  ncclResult_t (*abort)(ncclComm_t);
  ncclResult_t (*asyncError)(ncclComm_t, ncclResult_t*);
  const char* (*lastError)(ncclComm_t);
  ncclResult_t (*groupStart)();
  ncclResult_t (*groupEnd)();
  ncclDoubleCountFn count;
  ncclDoubleAllReduceAtFn allReduceAt;
};

// In a child: loads the double, then libgradcomp.so; exits the child on failure.
NcclApi loadNcclApi();

// A fresh exchange directory for the double (removed at the end) and a
// shared unique id.
struct NcclJob {
  std::string dir;
  ncclUniqueId id{};
  NcclJob();
  ~NcclJob();
  // The double's variables plus `extra`; GRADCOMP_TIMEOUT_S 20 unless given.
  std::map<std::string, std::string> env(std::map<std::string, std::string> extra) const;
};

std::string readWholeFile(const std::string& path);

}  // namespace gradcomp::test
