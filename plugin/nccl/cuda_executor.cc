// The CUDA executor: eligible ncclAllReduce calls on device memory, run
// without the calling thread ever waiting for the GPU.
//
// Per communicator (keyed by its transport): a CudaStage (mapped pinned slots
// and staging buffers, device/cuda/stream_stage.h) and a ProxyEngine (the
// proxy thread, cuda_executor_proxy.h). submit() enqueues on the caller's
// stream: stage-in (device -> pinned) + ready flag, then wait-for-done +
// stage-out (pinned -> device) + released flag, and returns. The proxy thread
// sees ready, runs the algorithm over UCX on the pinned staging buffer (in
// place; Debian's UCX has no CUDA transport, so payloads travel from pinned
// host memory anyway) and writes done with the status. Errors and timeouts
// write done too (the stream skips the copy-out and moves on) and mark the
// communicator failed through asyncError().
//
// The algorithm runs on the HostOrderedCudaBackend of the buffer's device:
// every primitive (selection, compaction, quantization, sign counts, FFT, the
// dense adds) is a kernel on a private non-blocking stream, over the staging
// buffer and the algorithm's scratch, which is mapped pinned memory from that
// backend (device/buffer.h), so kernels write payloads straight into memory
// UCX sends from. The proxy thread waits for its own stream only; the caller's
// stream waits on the slot's done flag. tests/test_backend_memory.cc checks in
// CI that every algorithm hands its primitives only such memory.
#include "plugin/nccl/executor.h"

#if GRADCOMP_HAVE_CUDA

#include <map>
#include <memory>
#include <mutex>

#include "common/log.h"
#include "common/param.h"
#include "device/backend.h"
#include "device/cuda/cuda_backend.h"
#include "device/cuda/host_ordered_backend.h"
#include "device/cuda/stream_stage.h"
#include "plugin/nccl/cuda_executor_proxy.h"
#include "transport/failure_monitor.h"

namespace gradcomp::nccl {
namespace {

// In-flight calls per communicator before submit applies backpressure. Each
// slot holds a staging buffer as large as the largest call it has carried.
constexpr int kDepth = 4;

class StageAdapter final : public StreamSide {
 public:
  explicit StageAdapter(std::unique_ptr<device::exec::CudaStage> stage)
      : stage_(std::move(stage)) {}
  int depth() const override { return stage_->depth(); }
  device::exec::Slot* slot(int i) override { return stage_->slot(i); }
  void* staging(int i) override { return stage_->staging(i); }
  Status reserve(int i, size_t bytes) override { return stage_->reserve(i, bytes); }
  Status enqueueStageIn(int i, uint64_t seq, const void* src, size_t bytes, void* stream) override {
    return stage_->enqueueStageIn(i, seq, src, bytes, static_cast<cudaStream_t>(stream));
  }
  Status enqueueStageOut(int i, uint64_t seq, void* dst, void* stream) override {
    return stage_->enqueueStageOut(i, seq, dst, static_cast<cudaStream_t>(stream));
  }

 private:
  std::unique_ptr<device::exec::CudaStage> stage_;
};

struct CommProxy {
  std::unique_ptr<StageAdapter> side;
  std::unique_ptr<ProxyEngine> engine;  // destroyed first (joins the proxy)
  ~CommProxy() { engine.reset(); }
};

class CudaExecutor final : public Executor {
 public:
  const char* name() const override { return "cuda"; }
  bool synchronous() const override { return false; }

  Status submit(const CompressedCall& call, cudaStream_t stream) override {
    GC_REQUIRE(call.algorithm && call.net && call.config, Err::Internal,
               "cuda executor: incomplete CompressedCall");
    ProxyEngine* engine = nullptr;
    GC_CHECK(engineFor(call.net, &engine));
    const int ordinal = deviceOrdinal(call.args.recvBuf);
    GC_REQUIRE(ordinal >= 0, Err::InvalidArgument,
               "cuda executor: cannot tell the CUDA device of recvbuff %p", call.args.recvBuf);
    device::HostOrderedCudaBackend* dev = nullptr;
    GC_CHECK(device::HostOrderedCudaBackend::shared(ordinal, &dev));
    const size_t bytes = call.args.count * dtypeSize(call.args.dtype);
    CompressedCall job = call;
    // Residuals and thresholds are keyed by the user's buffer, not the slot.
    if (job.args.bufferKey == 0) job.args.bufferKey = uint64_t(uintptr_t(call.args.recvBuf));
    return engine->submit(
        call.args.sendBuf, bytes, call.args.recvBuf, bytes,
        [job, dev](void* staging, size_t stagedBytes, size_t* outBytes) -> Status {
          algo::AllreduceArgs args = job.args;
          args.sendBuf = staging;
          args.recvBuf = staging;
          algo::Context ctx{*job.net, *dev, *job.config, job.callSeq, job.errorFeedback};
          if (job.algorithmName) job.net->setActivity(job.algorithmName);
          GC_CHECK(job.algorithm->allreduce(ctx, args));
          *outBytes = stagedBytes;
          return Status::Ok();
        },
        stream);
  }

  Status asyncError(const transport::Transport* net) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = comms_.find(net);
    return it == comms_.end() ? Status::Ok() : it->second->engine->asyncError();
  }

  void release(const transport::Transport* net, bool abortPending) override {
    std::unique_ptr<CommProxy> gone;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = comms_.find(net);
      if (it == comms_.end()) return;
      gone = std::move(it->second);
      comms_.erase(it);
    }
    gone->engine->shutdown(abortPending);
    // The stage (pinned memory) may still be read by stage-out kernels of the
    // calls just completed; freeing it with cudaFreeHost waits for them.
  }

 private:
  Status engineFor(transport::Transport* net, ProxyEngine** out) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = comms_.find(net);
    if (it == comms_.end()) {
      std::unique_ptr<device::exec::CudaStage> stage;
      GC_CHECK(device::exec::CudaStage::create(kDepth, &stage));
      double timeoutS = 60;
      GC_CHECK(param::getDouble(param::Id::TIMEOUT_S, &timeoutS));
      auto proxy = std::make_unique<CommProxy>();
      proxy->side = std::make_unique<StageAdapter>(std::move(stage));
      ProxyWatch watch;
      if (std::shared_ptr<transport::FailureMonitor> m = net->failureMonitor()) {
        watch.agreedFailure = [m] { return m->verdict(); };
        watch.reportOwnFailure = [m](const Status& s) { m->reportSelf(s); };
      }
      proxy->engine = std::make_unique<ProxyEngine>(
          *proxy->side, "rank " + std::to_string(net->rank()) + " of " +
                            std::to_string(net->size()),
          timeoutS, std::move(watch));
      it = comms_.emplace(net, std::move(proxy)).first;
    }
    *out = it->second->engine.get();
    return Status::Ok();
  }

  std::mutex mu_;
  std::map<const transport::Transport*, std::unique_ptr<CommProxy>> comms_;
};

}  // namespace

Executor* cudaExecutor() {
  // No driver in the process means no device memory can exist: never touch
  // the CUDA runtime then (host-memory runs, the test double).
  if (!cudaDriverLoaded()) return nullptr;
  static Executor* executor = device::cudaDeviceCount() > 0 ? new CudaExecutor() : nullptr;
  return executor;
}

}  // namespace gradcomp::nccl

#else  // !GRADCOMP_HAVE_CUDA

namespace gradcomp::nccl {
Executor* cudaExecutor() { return nullptr; }
}  // namespace gradcomp::nccl

#endif
