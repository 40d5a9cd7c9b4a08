#include "plugin/nccl/nccl_exchange.h"

#include <chrono>
#include <cstring>
#include <thread>

#include "common/param.h"
#include "plugin/nccl/cuda_probe.h"
#include "plugin/nccl/real_nccl.h"

namespace gradcomp::nccl {
namespace {

// Waits for a nonblocking communicator to finish the last operation.
Status settle(ncclComm_t comm, ncclResult_t rc, const char* what) {
  const RealNccl& nccl = real();
  double timeoutS = 60;
  (void)param::getDouble(param::Id::TIMEOUT_S, &timeoutS);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeoutS);
  while (rc == ncclInProgress && nccl.commGetAsyncError != nullptr) {
    if (std::chrono::steady_clock::now() > deadline)
      return makeStatus(Err::Timeout, "%s still in progress after GRADCOMP_TIMEOUT_S=%g s", what,
                        timeoutS);
    std::this_thread::yield();
    if (nccl.commGetAsyncError(comm, &rc) != ncclSuccess) break;
  }
  GC_REQUIRE(rc == ncclSuccess, Err::SystemError, "%s failed: NCCL error %d (%s)", what, int(rc),
             nccl.getErrorString ? nccl.getErrorString(rc) : "?");
  return Status::Ok();
}

}  // namespace

Status NcclExchange::gatherBytes(const void* in, size_t bytes, void* out) {
  const RealNccl& nccl = real();
  GC_REQUIRE(nccl.allGather != nullptr, Err::SystemError,
             "address exchange: the real ncclAllGather was not found");
  constexpr int kUint8 = 1;  // ncclUint8
  if (!cudaDriverLoaded()) {
    ncclResult_t rc = nccl.allGather(in, out, bytes, ncclDataType_t(kUint8), comm_, nullptr);
    return settle(comm_, rc, "address exchange ncclAllGather");
  }
  GC_REQUIRE(nccl.memAlloc && nccl.memFree, Err::SystemError,
             "address exchange: ncclMemAlloc/ncclMemFree not found in the real NCCL");
  void* dev = nullptr;
  size_t total = bytes * size_t(size_ + 1);
  GC_REQUIRE(nccl.memAlloc(&dev, total) == ncclSuccess, Err::SystemError,
             "address exchange: ncclMemAlloc(%zu) failed", total);
  char* devIn = static_cast<char*>(dev) + bytes * size_t(size_);
  Status s;
  if (!copyToDevice(devIn, in, bytes)) {
    s = makeStatus(Err::SystemError, "address exchange: cuMemcpyHtoD failed");
  } else {
    ncclResult_t rc = nccl.allGather(devIn, dev, bytes, ncclDataType_t(kUint8), comm_, nullptr);
    s = settle(comm_, rc, "address exchange ncclAllGather");
    // A synchronous copy on the legacy stream waits for the allgather.
    if (s.ok() && !copyToHost(out, dev, bytes * size_t(size_)))
      s = makeStatus(Err::SystemError, "address exchange: cuMemcpyDtoH failed");
  }
  nccl.memFree(dev);
  return s;
}

Status NcclExchange::allgather(const std::string& mine, std::vector<std::string>* all) {
  std::vector<uint64_t> lengths(size_t(size_), 0);
  uint64_t myLength = mine.size();
  GC_CHECK(gatherBytes(&myLength, sizeof myLength, lengths.data()));
  uint64_t longest = 0;
  for (uint64_t l : lengths) longest = std::max(longest, l);
  GC_REQUIRE(longest <= (64u << 20), Err::RemoteError,
             "address exchange: a rank announced a %llu-byte blob (corrupt exchange)",
             (unsigned long long)longest);
  size_t slot = std::max<size_t>(1, size_t(longest));
  std::vector<char> in(slot, 0), out(slot * size_t(size_), 0);
  memcpy(in.data(), mine.data(), mine.size());
  GC_CHECK(gatherBytes(in.data(), slot, out.data()));
  all->assign(size_t(size_), std::string());
  for (int r = 0; r < size_; ++r) (*all)[r].assign(&out[size_t(r) * slot], size_t(lengths[r]));
  return Status::Ok();
}

}  // namespace gradcomp::nccl
