#include "plugin/nccl/executor.h"

#include <cstring>
#include <vector>

#include "algorithms/call_check.h"
#include "device/backend.h"

namespace gradcomp::nccl {
namespace {

class HostSpace final : public PrivateSpace {
 public:
  HostSpace(size_t sendBytes, size_t recvBytes) : send_(sendBytes), recv_(recvBytes) {}
  void* send() override { return send_.data(); }
  void* recv() override { return recv_.data(); }
  cudaStream_t stream() override { return nullptr; }
  Status upload(const void* host, size_t bytes) override {
    GC_REQUIRE(bytes <= send_.size(), Err::InvalidArgument, "private space: upload of %zu bytes into %zu",
               bytes, send_.size());
    std::memcpy(send_.data(), host, bytes);
    return Status::Ok();
  }
  Status download(void* host, size_t bytes) override {
    GC_REQUIRE(bytes <= recv_.size(), Err::InvalidArgument,
               "private space: download of %zu bytes from %zu", bytes, recv_.size());
    std::memcpy(host, recv_.data(), bytes);
    return Status::Ok();
  }

 private:
  std::vector<char> send_, recv_;
};

class HostExecutor : public Executor {
 public:
  const char* name() const override { return "host"; }
  Status submit(const CompressedCall& call, cudaStream_t /*stream: host memory, synchronous*/) override {
    GC_REQUIRE(call.algorithm && call.net && call.config && call.budget, Err::Internal,
               "host executor: incomplete CompressedCall");
    algo::Context ctx{*call.net, device::cpuBackend(), *call.config, call.callSeq,
                      call.errorFeedback};
    if (call.algorithmName) call.net->setActivity(call.algorithmName);
    // The one call path (algorithms/call_budget.h): prepared, then run with
    // the call check, as the CUDA executor and the C API run theirs.
    const std::string name = call.algorithmName ? call.algorithmName : "compressed";
    algo::CallBudget::Reservation promise;
    GC_CHECK(call.budget->prepare(*call.algorithm, name, ctx, call.args, &promise));
    if (!call.asked) return call.budget->run(*call.algorithm, name, ctx, call.args, promise);
    const algo::CallSignature sig = algo::callSignature(
        *call.asked, call.askedConfig ? *call.askedConfig : *call.config, call.callSeq, call.args);
    return call.budget->run(*call.algorithm, name, ctx, call.args, promise, &sig);
  }
};

}  // namespace

Status Executor::makePrivateSpace(const void* /*like*/, size_t sendBytes, size_t recvBytes,
                                  std::unique_ptr<PrivateSpace>* out) {
  *out = std::make_unique<HostSpace>(sendBytes, recvBytes);
  return Status::Ok();
}

Executor& hostExecutor() {
  static HostExecutor executor;
  return executor;
}

std::string deviceExecutorAvailability(std::string* why) {
  std::string reason;
#if !GRADCOMP_HAVE_CUDA
  reason = "libgradcomp was built without CUDA";
#else
  if (!cudaDriverLoaded()) reason = "no CUDA driver is loaded in this process";
  else if (cudaExecutor() == nullptr)
    reason = "no usable CUDA device (the static CUDA 13 runtime needs driver >= 580)";
#endif
  if (why) *why = reason;
  return reason.empty() ? "cuda" : "none";
}

Executor* selectExecutor(MemoryKind send, MemoryKind recv) {
  if (send == MemoryKind::Host && recv == MemoryKind::Host) return &hostExecutor();
  if (send == MemoryKind::Device && recv == MemoryKind::Device) return cudaExecutor();
  return nullptr;  // mixed or unknown memory: NCCL decides
}

}  // namespace gradcomp::nccl
