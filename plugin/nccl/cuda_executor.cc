// The CUDA executor: eligible ncclAllReduce calls on device memory, run on
// the caller's buffers in device memory without the calling thread ever
// waiting for the GPU.
//
// Per communicator (keyed by its transport), created at its first call and
// kept for its life: a CudaBackend on the buffers' device (its own stream;
// the algorithm's residuals, accumulators and scratch live in that device's
// memory, payloads in its pinned pool), the slots of the stream protocol
// (device/cuda/stream_signals.h) and a ProxyEngine (the proxy thread,
// cuda_executor_proxy.h).
//
// submit() makes the device current (restoring the caller's after) and
// enqueues on the caller's stream: ready = seq + 1 (the inputs the caller's
// earlier work wrote are then complete), then wait done >= seq + 1 and
// released = seq + 1; it hands the call to the proxy and returns. The proxy
// sees ready, runs the algorithm on the caller's sendBuf/recvBuf with the
// communicator's backend (kernels on the backend's stream, payloads over UCX
// from pinned memory), ends with the backend's sync() -- the result is then
// complete in recvBuf and errors found in received data surface there -- and
// writes done with the status. Errors and timeouts write done too (the
// stream moves on) and mark the communicator failed through asyncError().
#include "plugin/nccl/executor.h"

#if GRADCOMP_HAVE_CUDA

#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "algorithms/call_budget.h"
#include "common/log.h"
#include "common/param.h"
#include "device/backend.h"
#include "device/cuda/cuda_backend.h"
#include "device/cuda/private_buffers.h"
#include "device/cuda/stream_signals.h"
#include "plugin/nccl/cuda_executor_proxy.h"
#include "plugin/nccl/cuda_probe.h"
#include "plugin/nccl/proxy_transport.h"
#include "transport/failure_monitor.h"
#include "transport/placement.h"

namespace gradcomp::nccl {
namespace {

// In-flight calls per communicator before submit applies backpressure.
constexpr int kDepth = 4;

class SignalAdapter final : public StreamSide {
 public:
  explicit SignalAdapter(std::unique_ptr<device::exec::CudaSignals> signals)
      : signals_(std::move(signals)) {}
  int depth() const override { return signals_->depth(); }
  device::exec::Slot* slot(int i) override { return signals_->slot(i); }
  Status enqueueReady(int i, uint64_t seq, void* stream) override {
    return signals_->enqueueReady(i, seq, static_cast<cudaStream_t>(stream));
  }
  Status enqueueWaitDone(int i, uint64_t seq, void* stream) override {
    return signals_->enqueueWaitDone(i, seq, static_cast<cudaStream_t>(stream));
  }

 private:
  std::unique_ptr<device::exec::CudaSignals> signals_;
};

class DeviceSpace final : public PrivateSpace {
 public:
  explicit DeviceSpace(std::unique_ptr<device::PrivateBuffers> b) : b_(std::move(b)) {}
  void* send() override { return b_->send(); }
  void* recv() override { return b_->recv(); }
  cudaStream_t stream() override { return b_->stream(); }
  Status upload(const void* host, size_t bytes) override { return b_->upload(host, bytes); }
  Status download(void* host, size_t bytes) override { return b_->download(host, bytes); }

 private:
  std::unique_ptr<device::PrivateBuffers> b_;
};

// Shared pieces are shared with the jobs (JobOwners).
struct CommProxy {
  int device = -1;
  // What each call reserves before its stream is parked.
  std::shared_ptr<algo::CallBudget> budget = std::make_shared<algo::CallBudget>();
  std::shared_ptr<device::CudaBackend> backend;
  // The communicator's transport as its jobs see it (refused once the
  // watchdog cancels): one for the communicator's life, at a stable address.
  std::shared_ptr<CancellableTransport> net;
  std::unique_ptr<SignalAdapter> side;
  // Stopped first (joins the proxy). Shared with a thread waiting in
  // waitIdle() (the self-test's), which a release() may overtake.
  std::shared_ptr<ProxyEngine> engine;
};

// Everything a job touches, owned by the job as well as by its communicator:
// a job that comes back after its communicator was destroyed (a proxy stuck
// past the watchdog and left behind) finds it all alive, and the last of it
// is freed when the job is gone. Members go bottom-up: the algorithm state
// and residuals (backend memory, references to the transport) first, the
// backend last.
struct JobOwners {
  std::shared_ptr<device::CudaBackend> backend;
  std::shared_ptr<algo::CallBudget> budget;
  std::shared_ptr<transport::Transport> communicatorNet;  // null: the caller owns it
  std::shared_ptr<CancellableTransport> net;
  std::shared_ptr<algo::ErrorFeedbackStore> residuals;
  std::shared_ptr<const void> runtime;  // algorithm, configurations, name
};

// What released communicators leave behind. The communicator's algorithm
// state (residuals, payload buffers) is destroyed after release() and gives
// its memory back through the backend, so a released backend stays alive
// (idle: it freed what it held itself and returns further blocks to the
// driver as they come back); the slots stay too, since the caller's streams
// may still have their last waits on them enqueued. A stream and a few
// kilobytes per destroyed communicator, for the rest of the process.
struct Retired {
  std::shared_ptr<device::CudaBackend> backend;
  std::unique_ptr<SignalAdapter> side;
};
std::vector<Retired>& retired() {
  static auto* list = new std::vector<Retired>();
  return *list;
}

class CudaExecutor final : public Executor {
 public:
  const char* name() const override { return "cuda"; }
  bool synchronous() const override { return false; }

  Status submit(const CompressedCall& call, cudaStream_t stream) override {
    GC_REQUIRE(call.algorithm && call.net && call.config, Err::Internal,
               "cuda executor: incomplete CompressedCall");
    const int ordinal = deviceOrdinal(call.args.recvBuf);
    GC_REQUIRE(ordinal >= 0, Err::InvalidArgument,
               "cuda executor: cannot tell the CUDA device of recvbuff %p", call.args.recvBuf);
    const int sendOrdinal = deviceOrdinal(call.args.sendBuf);
    GC_REQUIRE(sendOrdinal == ordinal, Err::InvalidArgument,
               "cuda executor: sendbuff %p is on CUDA device %d, recvbuff %p on device %d",
               call.args.sendBuf, sendOrdinal, call.args.recvBuf, ordinal);
    // The caller's stream belongs to the buffers' device: enqueue with it
    // current, and give the caller back its own current device after.
    device::CurrentDevice current(ordinal);
    GC_CHECK(current.status());
    CommProxy* comm = nullptr;
    GC_CHECK(commFor(call, ordinal, &comm));
    device::CudaBackend* dev = comm->backend.get();
    algo::CallBudget* budget = comm->budget.get();
    CompressedCall job = call;
    auto owners = std::make_shared<JobOwners>();
    owners->backend = comm->backend;
    owners->budget = comm->budget;
    owners->communicatorNet = std::move(job.ownsNet);
    owners->net = comm->net;
    owners->residuals = std::move(job.ownsResiduals);
    owners->runtime = std::move(job.ownsRuntime);
    const std::string name = call.algorithmName ? call.algorithmName : "compressed";
    // The proxy contract: plans and memory for the call are made here, on the
    // calling thread, before its stream is parked (algorithms/call_budget.h).
    // A call whose plans are new or whose reservation grows memory makes
    // driver calls that may wait for a stream parked on an earlier call
    // (cuFFT's lazily loaded kernels, cudaHostAlloc, pool growth: the H200's
    // deadlock), so the earlier calls of this communicator finish first
    // (bounded; the calling thread waits only for work enqueued already).
    // The plan is keyed by the algorithm that runs (auto's candidate), so a
    // switch of candidate counts as a new shape. Steady-state calls of a
    // seen shape that fit the headroom never wait.
    // A released call (the watchdog) failed the engine: no new call, and no
    // primitive of prepare() on this thread (the backend refuses them).
    GC_CHECK(comm->engine->asyncError());
    const algo::CallBudget::Plan plan = budget->plan(*call.algorithm, name, *dev, call.args);
    if (plan.needsIdle) GC_CHECK(comm->engine->waitIdle());
    const algo::CallBudget::Reservation promise = plan.reservation;
    try {
      algo::Context ctx{*call.net, *dev, *call.config, call.callSeq, call.errorFeedback};
      GC_CHECK(budget->prepare(*call.algorithm, name, ctx, call.args, plan));
    } catch (const device::BackendRefused& refused) {  // released meanwhile
      return refused.status();
    }
    char what[160];
    std::snprintf(what, sizeof what, "%s %s #%llu of %zu x %s", name.c_str(),
                  algo::collectiveName(call.args.coll), (unsigned long long)call.callSeq, call.args.count, dtypeName(call.args.dtype));
    // What the application asked for, exchanged and checked by every rank.
    std::shared_ptr<const algo::CallSignature> sig;
    if (call.asked)
      sig = std::make_shared<const algo::CallSignature>(algo::callSignature(
          *call.asked, call.askedConfig ? *call.askedConfig : *call.config, call.callSeq,
          call.args));
    std::shared_ptr<const CallCancel> cancel = comm->engine->cancellation();
    return comm->engine->submit(
        [job, owners, name, promise, sig, cancel]() -> Status {
          device::CudaBackend* dev = owners->backend.get();
          device::CurrentDevice proxyDevice(dev->deviceOrdinal());  // the proxy thread's
          GC_CHECK(proxyDevice.status());
          // The job runs on the cancellable transport: once the watchdog
          // gave up on the call, its further communication is refused.
          algo::Context ctx{*owners->net, *dev, *job.config, job.callSeq, job.errorFeedback};
          if (job.algorithmName) owners->net->setActivity(job.algorithmName);
          const Status ran =
              owners->budget->run(*job.algorithm, name, ctx, job.args, promise, sig.get());
          // Also after a failure half-way: no kernel of this call may still
          // write recvBuf once done lets the caller's stream go on.
          const Status synced = dev->sync();
          if (!ran.ok()) return ran;
          // Released by the watchdog meanwhile: the result is not this call's.
          GC_CHECK(cancel->check());
          return synced;
        },
        stream, what);
  }

  Status waitIdle(const transport::Transport* net) override {
    std::shared_ptr<ProxyEngine> engine;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = comms_.find(net);
      if (it == comms_.end()) return Status::Ok();
      engine = it->second->engine;
    }
    // A release() meanwhile shuts the engine down, which completes every
    // call: the wait ends, and the engine goes with the last reference.
    GC_CHECK(engine->waitIdle());
    return engine->asyncError();
  }

  Status makePrivateSpace(const void* like, size_t sendBytes, size_t recvBytes,
                          std::unique_ptr<PrivateSpace>* out) override {
    const int ordinal = deviceOrdinal(like);
    GC_REQUIRE(ordinal >= 0, Err::InvalidArgument,
               "cuda executor: cannot tell the CUDA device of %p for private buffers", like);
    std::unique_ptr<device::PrivateBuffers> buffers;
    GC_CHECK(device::PrivateBuffers::create(ordinal, sendBytes, recvBytes, &buffers));
    *out = std::make_unique<DeviceSpace>(std::move(buffers));
    return Status::Ok();
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
    // Every queued call gets its done flag before the proxy stops.
    gone->engine->shutdown(abortPending);
    if (gone->engine->abandoned()) {
      // A proxy stuck in the driver may still wake up: it then runs the
      // engine's code and writes the slots (left behind, a few kilobytes).
      // Its job owns everything else it uses (JobOwners, cancelled: its
      // transport refuses every later step) and frees it when it ends; the
      // backend is not retired, a primitive may still run on it.
      (void)new std::shared_ptr<ProxyEngine>(std::move(gone->engine));
      (void)gone->side.release();
      return;
    }
    gone->engine.reset();
    {
      device::CurrentDevice current(gone->device);
      gone->backend->retire();
    }
    std::lock_guard<std::mutex> lock(mu_);
    retired().push_back(Retired{std::move(gone->backend), std::move(gone->side)});
  }

 private:
  // GRADCOMP_PLACEMENT=auto: the proxy thread runs on the CPUs nearest its
  // GPU (the pinned buffers it allocates then land on that NUMA node by first
  // touch). A failed binding is logged; the proxy runs unbound.
  static std::function<void()> proxyBinding(int device) {
    std::string mode = "auto";
    (void)param::getString(param::Id::PLACEMENT, &mode);
    if (mode != "auto") return {};
    const std::string busId = pciBusId(device);
    const transport::Placement where = transport::discoverPlacementNear(busId);
    if (!where.error.empty() || where.gpu.empty() || where.cpuset.empty()) {
      GC_INFO(INIT, "CUDA executor proxy of device %d runs unbound: %s", device,
              !where.error.empty() ? where.error.c_str()
              : busId.empty()      ? "the driver gave no PCI bus id"
                                   : ("hwloc does not know PCI device " + busId).c_str());
      return {};
    }
    return [where, device] {
      Status s = transport::bindCurrentThread(where.cpuset);
      if (s.ok())
        GC_INFO(INIT, "CUDA executor proxy of device %d bound to %s", device,
                transport::describePlacement(where).c_str());
      else
        GC_INFO(INIT, "CUDA executor proxy of device %d runs unbound: %s", device,
                s.toString().c_str());
    };
  }

  Status commFor(const CompressedCall& call, int device, CommProxy** out) {
    transport::Transport* net = call.net;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = comms_.find(net);
    if (it == comms_.end()) {
      auto proxy = std::make_unique<CommProxy>();
      proxy->device = device;
      std::unique_ptr<device::CudaBackend> backend;
      GC_CHECK(device::CudaBackend::create(device, &backend));
      proxy->backend = std::move(backend);
      std::unique_ptr<device::exec::CudaSignals> signals;
      GC_CHECK(device::exec::CudaSignals::create(kDepth, &signals));
      proxy->side = std::make_unique<SignalAdapter>(std::move(signals));
      double timeoutS = 60;
      GC_CHECK(param::getDouble(param::Id::TIMEOUT_S, &timeoutS));
      ProxyWatch watch;
      if (std::shared_ptr<transport::FailureMonitor> m = net->failureMonitor()) {
        watch.agreedFailure = [m] { return m->verdict(); };
        watch.reportOwnFailure = [m](const Status& s) { m->reportSelf(s); };
      }
      device::CudaBackend* dev = proxy->backend.get();
      watch.step = [dev] {
        const char* p = dev->lastPrimitive();
        return std::string("primitive ") + (p ? p : "(none yet)") + " (enqueued last)";
      };
      // The transport's owner is the communicator's state (through the
      // call); without one the caller keeps it alive (tests).
      std::shared_ptr<transport::Transport> inner =
          call.ownsNet ? call.ownsNet : std::shared_ptr<transport::Transport>(std::shared_ptr<void>(), net);
      watch.cancel = std::make_shared<CallCancel>();
      proxy->net = std::make_shared<CancellableTransport>(std::move(inner), watch.cancel);
      // Once the watchdog released a call, the backend enqueues nothing more
      // of it (the job's primitives throw; the call runner returns the error).
      proxy->backend->setRefusal([cancel = watch.cancel] { return cancel->check(); });
      // Progress: the job's transport operations, and each change of the
      // primitive enqueued last (both lock-free: a stuck primitive holds the
      // backend's lock). Called on the watchdog thread only, which shutdown
      // joins before the communicator lets go of either.
      watch.progress = [guarded = std::weak_ptr<CancellableTransport>(proxy->net), dev,
                        last = static_cast<const char*>(nullptr),
                        changes = uint64_t(0)]() mutable -> uint64_t {
        const char* p = dev->lastPrimitive();
        if (p != last) last = p, ++changes;
        const std::shared_ptr<CancellableTransport> t = guarded.lock();
        return changes + (t ? t->operations() : 0);
      };
      proxy->engine = std::make_shared<ProxyEngine>(
          *proxy->side, "rank " + std::to_string(net->rank()) + " of " +
                            std::to_string(net->size()),
          timeoutS, std::move(watch), [bind = proxyBinding(device)] {
            device::CudaBackend::relaxStreamCaptureOnThisThread();
            if (bind) bind();
          });
      it = comms_.emplace(net, std::move(proxy)).first;
    }
    GC_REQUIRE(it->second->device == device, Err::InvalidArgument,
               "cuda executor: the communicator runs on CUDA device %d, this call's buffers are "
               "on device %d",
               it->second->device, device);
    *out = it->second.get();
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
