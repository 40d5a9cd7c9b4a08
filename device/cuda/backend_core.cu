// CudaBackend's frame: creation and destruction, the two memory spaces,
// sync() (bounded event polling, scalar delivery, the data error of the
// epoch), traffic, and Prim, the per-primitive enqueue helper.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <thread>
#include <utility>

#include "common/log.h"
#include "common/param.h"
#include "device/cuda/cuda_backend.h"
#include "device/cuda/kernel_common.cuh"
#include "device/cuda/kernel_registry.h"

namespace gradcomp::device {

using namespace cuda;

namespace cuda {
namespace {

__global__ void initControl(ControlBlock* cb) {
  unsigned char* p = reinterpret_cast<unsigned char*>(cb);
  for (size_t i = threadIdx.x; i < sizeof(ControlBlock); i += blockDim.x) p[i] = 0;
  __syncthreads();
  if (threadIdx.x == 0) cb->failure.key = ~0ull;
}

// After sync() reported a failure: later launches run again.
__global__ void resetFailure(ControlBlock* cb) {
  cb->failure.key = ~0ull;
  cb->failure.a = cb->failure.b = 0;
  cb->failure.op = 0;
  cb->failure.lock = 0;
  cb->failedLaunch = 0;
}

Status cudaOk(cudaError_t e, int device, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  (void)cudaGetLastError();
  return makeStatus(Err::SystemError, "cuda backend (device %d): %s failed: %s", device, what,
                    cudaGetErrorString(e));
}

// The device's pool for backend allocations, created once per process and
// device: it keeps what it reserved (release threshold unlimited), so calls
// after the first reuse it without the driver. A pool of our own rather than
// the device's default pool: raising the default pool's threshold would
// change the memory behaviour of the application's own cudaMallocAsync use.
Status devicePool(int device, cudaMemPool_t* out) {
  static std::mutex mu;
  static std::map<int, cudaMemPool_t> pools;
  std::lock_guard<std::mutex> lock(mu);
  auto it = pools.find(device);
  if (it != pools.end()) {
    *out = it->second;
    return Status::Ok();
  }
  int supported = 0;
  GC_CHECK(cudaOk(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device),
                  device, "cudaDeviceGetAttribute(MemoryPoolsSupported)"));
  GC_REQUIRE(supported, Err::Unsupported,
             "cuda backend: device %d has no stream-ordered memory pools (cudaMallocAsync), "
             "which the device-resident path needs",
             device);
  cudaMemPoolProps props;
  std::memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t pool = nullptr;
  GC_CHECK(cudaOk(cudaMemPoolCreate(&pool, &props), device, "cudaMemPoolCreate"));
  uint64_t threshold = ~uint64_t(0);
  GC_CHECK(cudaOk(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
                  device, "cudaMemPoolSetAttribute(ReleaseThreshold)"));
  // Backends (communicators) on one device share the pool; never let the
  // driver make one backend's stream wait for another's to reuse memory.
  int no = 0;
  GC_CHECK(cudaOk(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &no),
                  device, "cudaMemPoolSetAttribute(ReuseAllowInternalDependencies)"));
  pools.emplace(device, pool);
  *out = pool;
  return Status::Ok();
}

// Waits for s.event: spins briefly, then yields, then sleeps in growing
// steps up to 200 us (a short wait costs little, a long one no busy core),
// at most GRADCOMP_TIMEOUT_S. Called without s.mu (reads no guarded state:
// `ops` is the epoch's count, taken under it).
Status waitEvent(BackendState& s, const char* what, unsigned ops) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  auto nap = std::chrono::microseconds(2);
  for (int i = 0;; ++i) {
    const cudaError_t e = cudaEventQuery(s.event);
    if (e == cudaSuccess) return Status::Ok();
    if (e != cudaErrorNotReady) {
      (void)cudaGetLastError();
      return makeStatus(Err::SystemError,
                        "cuda backend (device %d): the device failed while running %s: %s", s.device,
                        what, cudaGetErrorString(e));
    }
    const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
    if (waited > s.timeoutS)
      return makeStatus(Err::Timeout,
                        "cuda backend (device %d): %s did not complete within GRADCOMP_TIMEOUT_S = "
                        "%g s (%u primitives pending; is the device blocked or overloaded?)",
                        s.device, what, s.timeoutS, ops);
    if (i < 256) continue;
    if (i < 1024) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(nap);
    if (nap < std::chrono::microseconds(200)) nap *= 2;
  }
}

// Records s.event and waits for it. `lock` (s.mu, held on entry and on
// return; null where no other thread can use the backend: destruction) is
// released for the wait: the lock rule (backend_impl.h).
Status recordAndWait(BackendState& s, std::unique_lock<std::mutex>* lock, const char* what) {
  GC_CHECK(cudaOk(cudaEventRecord(s.event, s.stream), s.device, "cudaEventRecord"));
  const unsigned ops = s.ops;
  if (lock) lock->unlock();
  const Status waited = waitEvent(s, what, ops);
  if (lock) lock->lock();
  return waited;
}

// Marks a sync() waiting for the device (BackendState::syncing) for its
// scope; `lock` is held when it ends.
class SyncingScope {
 public:
  explicit SyncingScope(BackendState& s) : s_(s) { s_.syncing = true; }
  ~SyncingScope() {
    s_.syncing = false;
    s_.synced.notify_all();
  }
  SyncingScope(const SyncingScope&) = delete;
  SyncingScope& operator=(const SyncingScope&) = delete;

 private:
  BackendState& s_;
};

// The data error of the epoch, if a kernel found one: read back, worded by
// the failing primitive's formatter, and cleared on the device. Inside
// sync() (`lock` held, released for the wait).
Status takeFailure(BackendState& s, std::unique_lock<std::mutex>& lock, unsigned* failedOp) {
  if (*reinterpret_cast<volatile unsigned int*>(s.hostFailed) == 0) return Status::Ok();
  GC_CHECK(cudaOk(cudaMemcpyAsync(s.mirror, &s.control->failure, sizeof(FailureWords),
                                  cudaMemcpyDefault, s.stream),
                  s.device, "failure record copy"));
  GC_CHECK(recordAndWait(s, &lock, "the failure record copy"));
  const FailureRecord f{s.mirror->key, s.mirror->a, s.mirror->b, s.mirror->op};
  *failedOp = f.op;
  resetFailure<<<1, 1, 0, s.stream>>>(s.control);
  // Cleared only once the reset is enqueued: a lost reset would leave every
  // later kernel skipping while later syncs answered Ok; this way the next
  // sync finds the failure again (and retries the reset).
  if (cudaGetLastError() == cudaSuccess)
    *reinterpret_cast<volatile unsigned int*>(s.hostFailed) = 0;
  for (const OpInfo& op : s.validating)
    if (op.op == f.op) return op.format(op, f);
  return makeStatus(Err::Internal,
                    "cuda backend: primitive #%u of the batch failed but did not say how", f.op);
}

}  // namespace

std::string fromRank(int source) {
  if (source < 0) return std::string();
  char buf[32];
  std::snprintf(buf, sizeof buf, " from rank %d", source);
  return buf;
}

// ---- DeviceScope / Prim ------------------------------------------------------

DeviceScope::DeviceScope(int device) {
  int current = -1;
  error_ = cudaGetDevice(&current);
  if (error_ == cudaSuccess && current != device) {
    error_ = cudaSetDevice(device);
    if (error_ == cudaSuccess) previous_ = current;
  }
  if (error_ != cudaSuccess) (void)cudaGetLastError();
}

DeviceScope::~DeviceScope() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

std::unique_lock<std::mutex> Prim::enqueueLock(BackendState& s) {
  std::unique_lock<std::mutex> lock(s.mu);
  s.synced.wait(lock, [&s] { return !s.syncing; });
  return lock;
}

Prim::Prim(BackendState& s, const char* name)
    : s_(s), lock_(enqueueLock(s)), device_(s.device), name_(name), op_(s.ops++) {
  // Refused (setRefusal): nothing of this primitive is enqueued.
  if (s.refusal) {
    Status why = s.refusal();
    if (!why.ok()) throw BackendRefused(std::move(why));
  }
  s.lastPrimitive.store(name);
  s.pending = true;
  ++s.traffic.primitives;
}

Prim::~Prim() {
  if (!failedAtCall_) return;
  auto& v = s_.scalars;
  v.erase(std::remove_if(v.begin(), v.end(), [&](const ScalarCopy& c) { return c.op == op_; }),
          v.end());
}

Ctl Prim::ctl() { return Ctl{s_.control, s_.hostFailed, ++s_.launches, op_}; }

void Prim::reads(const void* p, size_t bytes, size_t touched) {
  if (bytes && isHost(p, bytes)) s_.traffic.h2dBytes += touched < bytes ? touched : bytes;
}

void Prim::writes(const void* p, size_t bytes, size_t touched) {
  if (bytes && isHost(p, bytes)) s_.traffic.d2hBytes += touched < bytes ? touched : bytes;
}

Status Prim::slotFor(size_t bytes, void** out) {
  size_t at = (s_.slotUsed + 7) / 8 * 8;
  if (at / kSlotChunk != (at + bytes - 1) / kSlotChunk) at = (at / kSlotChunk + 1) * kSlotChunk;
  const size_t chunk = at / kSlotChunk;
  while (s_.slotChunks.size() <= chunk) {
    void* p = s_.pinned.allocate(kSlotChunk);
    if (p == nullptr) failedAtCall_ = true;
    GC_REQUIRE(p != nullptr, Err::SystemError,
               "cuda %s: no pinned memory for a scalar result (cudaHostAlloc failed)", name_);
    s_.slotChunks.push_back(static_cast<char*>(p));
  }
  s_.slotUsed = at + bytes;
  *out = s_.slotChunks[chunk] + at % kSlotChunk;
  return Status::Ok();
}

void Prim::onFailure(int source, Formatter format, unsigned long long p0, unsigned long long p1,
                     unsigned long long p2, unsigned long long p3) {
  s_.validating.push_back(OpInfo{op_, name_, source, format, {p0, p1, p2, p3}});
}

Status Prim::scratch(size_t bytes, void** out) {
  if (bytes > s_.scratchBytes || s_.scratch == nullptr) {
    // From the device heap, in stream order: the old area is reused only by
    // kernels enqueued after every kernel that used it.
    if (s_.scratch) s_.deviceHeap->release(s_.scratch, s_.scratchBytes);
    s_.scratch = nullptr;
    s_.scratchBytes = 0;
    const size_t want = std::max(bytes + bytes / 4, size_t(1) << 20);
    s_.scratch = s_.deviceHeap->allocate(want);
    if (s_.scratch == nullptr) failedAtCall_ = true;
    GC_REQUIRE(s_.scratch != nullptr, Err::SystemError,
               "cuda %s: no device memory for %zu bytes of scratch%s", name_, want,
               s_.parked ? " (the proxy contract forbids growing it mid-call)" : "");
    s_.scratchBytes = want;
    GC_TRACE(DEVICE, "cuda backend (device %d): scratch grew to %zu bytes", s_.device, want);
  }
  *out = s_.scratch;
  return Status::Ok();
}

size_t Prim::stageBytes(const void* p, size_t bytes) const {
  return bytes && isHost(p, bytes) ? Carve::bytes<uint8_t>(bytes) : 0;
}

Status Prim::stageRaw(const void* p, size_t bytes, Carve& carve, const void** out) {
  *out = p;
  if (bytes == 0 || !isHost(p, bytes)) return Status::Ok();
  void* copy = carve.take<uint8_t>(bytes);
  GC_CHECK(check(cudaMemcpyAsync(copy, p, bytes, cudaMemcpyDefault, s_.stream),
                 "cudaMemcpyAsync (staging a host input)"));
  *out = copy;
  return Status::Ok();
}

Status Prim::land(void* out, const void* landing, size_t bytes) {
  if (out == landing || bytes == 0) return Status::Ok();
  return check(cudaMemcpyAsync(out, landing, bytes, cudaMemcpyDefault, s_.stream),
               "cudaMemcpyAsync (an output to host memory)");
}

Status Prim::check(cudaError_t e, const char* what) {
  if (device_.error() != cudaSuccess || e != cudaSuccess) failedAtCall_ = true;
  if (device_.error() != cudaSuccess)
    return makeStatus(Err::SystemError, "cuda %s: device %d cannot be made current: %s", name_,
                      s_.device, cudaGetErrorString(device_.error()));
  if (e == cudaSuccess) return Status::Ok();
  (void)cudaGetLastError();
  return makeStatus(Err::SystemError, "cuda %s: %s failed: %s", name_, what, cudaGetErrorString(e));
}

Status Prim::launched() {
  cudaError_t e = cudaGetLastError();
  if (e == cudaErrorNotReady) e = cudaSuccess;  // a poll's answer, not an error
  return check(e, "kernel launch");
}

}  // namespace cuda

// ---- CudaBackend -------------------------------------------------------------

CudaBackend::CudaBackend(std::unique_ptr<BackendState> state) : state_(std::move(state)) {}

Status CudaBackend::create(int device, std::unique_ptr<CudaBackend>* out) {
  auto st = std::make_unique<BackendState>();
  st->device = device;
  GC_CHECK(param::getDouble(param::Id::TIMEOUT_S, &st->timeoutS));
  std::unique_ptr<CudaBackend> be(new CudaBackend(std::move(st)));
  BackendState& s = *be->state_;
  DeviceScope scope(device);
  GC_CHECK(cudaOk(scope.error(), device, "cudaSetDevice"));
  // Before any caller's stream can be parked on this backend's work.
  GC_CHECK(preloadKernels(device));
  GC_CHECK(devicePool(device, &s.pool));
  GC_CHECK(cudaOk(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking), device,
                  "cudaStreamCreateWithFlags"));
  GC_CHECK(cudaOk(cudaEventCreateWithFlags(&s.event, cudaEventDisableTiming), device,
                  "cudaEventCreateWithFlags"));
  // Device slabs: stream-ordered allocations on the backend's stream (made by
  // reserve() on the calling thread, before any stream is parked on a call).
  SlabHeap::Source source;
  BackendState* state = &s;
  source.grow = [state](size_t bytes) -> void* {
    void* p = nullptr;
    const cudaError_t e = cudaMallocFromPoolAsync(&p, bytes, state->pool, state->stream);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      GC_WARN("cuda backend (device %d): device slab of %zu bytes failed: %s", state->device,
              bytes, cudaGetErrorString(e));
      return nullptr;
    }
    return p;
  };
  source.free = [state](void* p, size_t) { (void)cudaFreeAsync(p, state->stream); };
  s.deviceHeap = std::make_unique<SlabHeap>("cuda device memory", std::move(source),
                                            size_t(4) << 20);
  void* control = nullptr;
  GC_CHECK(cudaOk(cudaMallocFromPoolAsync(&control, sizeof(ControlBlock), s.pool, s.stream),
                  device, "control block allocation"));
  s.control = static_cast<ControlBlock*>(control);
  initControl<<<1, 256, 0, s.stream>>>(s.control);
  GC_CHECK(cudaOk(cudaGetLastError(), device, "control block initialization"));
  s.hostFailed = static_cast<unsigned int*>(s.pinned.allocate(sizeof(unsigned int)));
  s.mirror = static_cast<FailureWords*>(s.pinned.allocate(sizeof(FailureWords)));
  GC_REQUIRE(s.hostFailed && s.mirror, Err::SystemError,
             "cuda backend (device %d): no pinned memory for the control words", device);
  *s.hostFailed = 0;
  // No wait here: a communicator's backend is created by its first call, on
  // a thread that must not wait for the GPU (errors surface at the first sync).
  GC_INFO(DEVICE, "cuda backend on device %d: own stream, stream-ordered device memory",
          device);
  *out = std::move(be);
  return Status::Ok();
}

CudaBackend::~CudaBackend() {
  BackendState& s = *state_;
  if (s.stream == nullptr) return;
  // A data error nobody synced for is dropped; a device that does not finish
  // (timeout, device error) leaves the pinned blocks allocated.
  const Status synced = sync();
  const bool deviceDone = synced.code() != Err::Timeout && synced.code() != Err::SystemError;
  DeviceScope scope(s.device);
  if (s.fftPlans) destroyFftPlans(s.fftPlans);
  if (s.deviceHeap) {
    if (deviceDone) s.deviceHeap->releaseSlabs();  // cudaFreeAsync, stream-ordered
    else s.deviceHeap->abandon();
  }
  if (s.control) (void)cudaFreeAsync(s.control, s.stream);
  const Status last = !deviceDone ? synced
                      : s.event   ? recordAndWait(s, nullptr, "the backend's last work")
                                  : Status::Ok();
  if (!last.ok()) {
    GC_WARN("%s", last.toString().c_str());
    s.pinned.abandon();
  }
  if (s.event) (void)cudaEventDestroy(s.event);
  (void)cudaStreamDestroy(s.stream);  // returns at once; released when idle
  (void)cudaGetLastError();
}

void CudaBackend::retire() {
  BackendState& s = *state_;
  const Status synced = sync();
  const bool deviceDone = synced.code() != Err::Timeout && synced.code() != Err::SystemError;
  if (!synced.ok()) GC_WARN("cuda backend (device %d) retiring: %s", s.device, synced.toString().c_str());
  std::lock_guard<std::mutex> lock(s.mu);
  DeviceScope scope(s.device);
  s.retired = true;
  if (s.scratch) s.deviceHeap->release(s.scratch, s.scratchBytes);
  s.scratch = nullptr;
  s.scratchBytes = 0;
  if (!deviceDone) return;  // the device may still use the rest
  if (s.deviceHeap->live() == 0) s.deviceHeap->releaseSlabs();
  if (s.fftPlans) destroyFftPlans(s.fftPlans);
  s.fftPlans = nullptr;
  s.pinned.retire();
}

int CudaBackend::deviceOrdinal() const { return state_->device; }
CUstream_st* CudaBackend::stream() const { return state_->stream; }

void* CudaBackend::allocate(size_t bytes) {
  BackendState& s = *state_;
  // The heap has its own lock and grows (against the contract, if parked)
  // without it; s.mu is not needed (the lock rule, backend_impl.h).
  DeviceScope scope(s.device);
  // Slabs are 256-byte aligned and classes multiples of 64: blocks keep the
  // contract's 64-byte alignment.
  return s.deviceHeap->allocate(bytes ? bytes : 1);
}

void CudaBackend::deallocate(void* p, size_t bytes) {
  (void)bytes;
  if (p == nullptr) return;
  BackendState& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  // Reused only by work enqueued later on the stream: ordered after its users.
  s.deviceHeap->release(p, bytes ? bytes : 1);
  if (s.retired && s.deviceHeap->live() == 0) {
    DeviceScope scope(s.device);
    s.deviceHeap->releaseSlabs();
  }
  s.pending = true;
}

// The calling thread, while the proxy may sync or enqueue: no lock of ours
// is held while the heaps grow (cudaMallocFromPoolAsync, cudaHostAlloc may
// wait for a parked stream), so neither side waits for the other here.
Status CudaBackend::reserve(const Reservation& r) {
  BackendState& s = *state_;
  DeviceScope scope(s.device);
  GC_CHECK(cudaOk(scope.error(), s.device, "cudaSetDevice"));
  GC_REQUIRE(s.deviceHeap->reserve(r.deviceBytes), Err::SystemError,
             "cuda backend (device %d): cannot reserve %zu bytes of device memory for a call",
             s.device, r.deviceBytes);
  GC_REQUIRE(s.pinned.heap().reserve(r.hostBytes), Err::SystemError,
             "cuda backend (device %d): cannot reserve %zu bytes of pinned host memory for a call",
             s.device, r.hostBytes);
  return Status::Ok();
}

bool CudaBackend::reserveWouldGrow(const Reservation& r) const {
  BackendState& s = *state_;
  return s.deviceHeap->wouldGrow(r.deviceBytes) || s.pinned.heap().wouldGrow(r.hostBytes);
}

void CudaBackend::setRefusal(std::function<Status()> refused) {
  state_->refusal = std::move(refused);  // before the first call: no primitive reads it yet
}

void CudaBackend::park(const std::string& what, bool strict) {
  BackendState& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  s.parked = true;
  s.strict = strict;
  s.parkedWhat = what;
  s.deviceHeap->park(what, strict);
  s.pinned.heap().park(what, strict);
}

Status CudaBackend::unpark(const Reservation& promised, Reservation* drawn) {
  BackendState& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  s.parked = false;
  Reservation used;
  std::vector<std::string> bad = s.deviceHeap->unpark(promised.deviceBytes, &used.deviceBytes);
  for (std::string& v : s.pinned.heap().unpark(promised.hostBytes, &used.hostBytes))
    bad.push_back(std::move(v));
  for (std::string& v : s.violations) bad.push_back(std::move(v));
  s.violations.clear();
  if (drawn) *drawn = used;
  if (bad.empty()) return Status::Ok();
  std::string all;
  for (const std::string& v : bad) all += (all.empty() ? "" : "; ") + v;
  return makeStatus(Err::Internal, "proxy contract broken on device %d: %s", s.device,
                    all.c_str());
}

const char* CudaBackend::lastPrimitive() const { return state_->lastPrimitive.load(); }

void* CudaBackend::allocateHost(size_t bytes) {
  BackendState& s = *state_;
  DeviceScope scope(s.device);
  return s.pinned.allocate(bytes ? bytes : 1);
}

void CudaBackend::deallocateHost(void* p, size_t bytes) {
  if (p == nullptr) return;
  BackendState& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.retired) {  // no kernel runs any more: straight back to the driver
    DeviceScope scope(s.device);
    s.pinned.release(p, bytes ? bytes : 1);
    return;
  }
  s.hostFrees.emplace_back(p, bytes ? bytes : 1);  // to the pool at the next sync
  s.pending = true;
}

void CudaBackend::relaxStreamCaptureOnThisThread() {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
}

// Records under s.mu, waits without it, finishes under it (the lock rule,
// backend_impl.h). While it waits no primitive is enqueued and no other sync
// runs (both wait for `syncing` to clear), so the epoch's scalars, failure
// records and host frees are still exactly the recorded event's; the calling
// thread's reserve()/allocate()/park() go on meanwhile.
Status CudaBackend::sync() {
  BackendState& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  s.synced.wait(lock, [&s] { return !s.syncing; });
  if (!s.pending) return Status::Ok();
  DeviceScope scope(s.device);
  GC_CHECK(cudaOk(scope.error(), s.device, "cudaSetDevice"));
  ++s.traffic.syncs;
  SyncingScope syncing(s);  // ends with `lock` held
  // A timeout or a device error keeps the epoch: nothing it owns is released
  // while the device may still use it; the next sync waits again.
  GC_CHECK(recordAndWait(s, &lock, "the enqueued primitives"));
  unsigned failedOp = UINT_MAX;
  const Status err = takeFailure(s, lock, &failedOp);
  GC_CHECK(cudaOk(cudaGetLastError(), s.device, "failure reset"));
  // Results of the primitives before the failing one (later ones did not run).
  for (const ScalarCopy& c : s.scalars)
    if (c.op < failedOp) std::memcpy(c.dst, c.slot, c.bytes);
  for (auto& f : s.hostFrees) s.pinned.release(f.first, f.second);
  s.hostFrees.clear();
  s.scalars.clear();
  s.validating.clear();
  s.slotUsed = 0;
  s.ops = 0;
  s.pending = false;  // later work is ordered after the reset kernel anyway
  return err;
}

Traffic CudaBackend::traffic() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->traffic;
}

void CudaBackend::resetTraffic() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->traffic = Traffic{};
}

// ---- Process-wide helpers ----------------------------------------------------

int cudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

CurrentDevice::CurrentDevice(int device) : device_(device) {
  int current = -1;
  cudaError_t e = cudaGetDevice(&current);
  if (e == cudaSuccess && current != device) {
    e = cudaSetDevice(device);
    if (e == cudaSuccess) previous_ = current;
  }
  if (e != cudaSuccess) (void)cudaGetLastError();
  error_ = int(e);
}

CurrentDevice::~CurrentDevice() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

Status CurrentDevice::status() const {
  GC_REQUIRE(error_ == int(cudaSuccess), Err::SystemError,
             "cannot make CUDA device %d current: %s", device_,
             cudaGetErrorString(cudaError_t(error_)));
  return Status::Ok();
}

}  // namespace gradcomp::device
