#include "plugin/nccl/executor.h"

#include "algorithms/call_check.h"
#include "device/backend.h"

namespace gradcomp::nccl {
namespace {

class HostExecutor : public Executor {
 public:
  const char* name() const override { return "host"; }
  Status submit(const CompressedCall& call, cudaStream_t /*stream: host memory, synchronous*/) override {
    GC_REQUIRE(call.algorithm && call.net && call.config, Err::Internal,
               "host executor: incomplete CompressedCall");
    algo::Context ctx{*call.net, device::cpuBackend(), *call.config, call.callSeq,
                      call.errorFeedback};
    if (call.algorithmName) call.net->setActivity(call.algorithmName);
    if (!call.asked) return algo::runCollective(*call.algorithm, ctx, call.args);
    return algo::runCheckedAllreduce(
        *call.algorithm, ctx, call.args,
        algo::callSignature(*call.asked, call.askedConfig ? *call.askedConfig : *call.config,
                            call.callSeq, call.args));
  }
};

}  // namespace

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
