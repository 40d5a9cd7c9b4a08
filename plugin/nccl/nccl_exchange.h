// transport::AddressExchange over the real NCCL communicator: blobs of any
// length are exchanged with two real ncclAllGather calls (lengths, then the
// blobs padded to the longest); fixed-size records with one (gatherBytes). On a CUDA process the buffers are staged in
// device memory from ncclMemAlloc; without the CUDA driver (the test double)
// they are host memory. Every call completes before it returns, bounded by
// GRADCOMP_TIMEOUT_S for nonblocking communicators.
#pragma once

#include "plugin/nccl/nccl_abi.h"
#include "transport/bootstrap.h"

namespace gradcomp::nccl {

class NcclExchange : public transport::AddressExchange {
 public:
  NcclExchange(ncclComm_t comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status allgather(const std::string& mine, std::vector<std::string>* all) override;
  // out (size_ * bytes) = every rank's `bytes` of in: one real ncclAllGather.
  Status gatherBytes(const void* in, size_t bytes, void* out);

 private:
  ncclComm_t comm_;
  int rank_, size_;
};

}  // namespace gradcomp::nccl
