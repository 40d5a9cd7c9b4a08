// gradcomp-parkprobe STEP [SECONDS=6]: parks a stream as the CUDA executor
// parks a caller's stream (device/cuda/stream_signals.h: cuStreamWaitValue64
// on a mapped flag, or its polling kernel), then makes one host-side CUDA
// call and reports whether it returned, whether a kernel on another stream
// still ran while the stream was parked, and whether the parked stream moved
// on once released. One step per process: a call that never returns is ended
// by the probe's own timer (the process exits), so the next step starts
// clean. It measures the proxy contract's "never" column (docs/design.md,
// "Who may call what") on a real driver instead of assuming it.
//
// Steps:
//   lazy-kernel     first launch of a kernel no backend preloaded (the H200
//                   hang: module loading while a stream is parked)
//   host-alloc      cudaHostAlloc of 64 MiB, mapped (pinned slab growth)
//   malloc          cudaMalloc of 64 MiB (cuFFT's work areas)
//   event-create    cudaEventCreateWithFlags
//   reserve-device  CudaBackend::reserve of 256 MiB of device memory (pool growth)
//   fft-plan        CudaBackend::prepareFft(1699, 1699): a cuFFT plan made and
//                   run once (cuFFT's kernels load)
//   free            cudaFree of a block allocated before parking
//   free-host       cudaFreeHost of a block allocated before parking
// Prints one RESULT line; exit 0 when the probe ran (whatever it found), 2 on
// a bad step, 4 without a CUDA device.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <unistd.h>

#include "device/cuda/cuda_backend.h"
#include "device/cuda/exec_slots.h"
#include "device/cuda/stream_signals.h"

namespace {

using Clock = std::chrono::steady_clock;

__global__ void touch(int* p) { atomicAdd(p, 1); }
__global__ void lazyOnly(int* p) { atomicAdd(p, 2); }  // launched only by lazy-kernel

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

bool eventDone(cudaEvent_t e, double seconds) {
  const auto t0 = Clock::now();
  for (;;) {
    const cudaError_t q = cudaEventQuery(e);
    if (q == cudaSuccess) return true;
    if (q != cudaErrorNotReady || since(t0) > seconds) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

[[noreturn]] void finish(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  _exit(0);  // no destructors: a stream may still be parked
}

}  // namespace

int main(int argc, char** argv) {
  const std::string step = argc > 1 ? argv[1] : "";
  const double limit = argc > 2 ? std::atof(argv[2]) : 6.0;
  const char* steps[] = {"lazy-kernel", "host-alloc", "malloc", "event-create",
                         "reserve-device", "fft-plan", "free", "free-host"};
  bool known = false;
  for (const char* s : steps) known = known || step == s;
  if (!known || !(limit > 0)) {
    std::fprintf(stderr, "usage: gradcomp-parkprobe STEP [SECONDS]; steps:");
    for (const char* s : steps) std::fprintf(stderr, " %s", s);
    std::fprintf(stderr, "\n");
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: skipping\n");
    return 4;
  }
  const char* loading = std::getenv("CUDA_MODULE_LOADING");
  std::printf("step %s, CUDA_MODULE_LOADING=%s, limit %.1f s\n", step.c_str(),
              loading ? loading : "(unset: lazy)", limit);
  if (cudaSetDevice(0) != cudaSuccess) finish("RESULT " + step + ": cudaSetDevice(0) failed");
  // The backend preloads every kernel of this binary, as at communicator
  // creation; lazy-kernel has none, so its kernel loads at first launch.
  std::unique_ptr<gradcomp::device::CudaBackend> backend;
  if (step != "lazy-kernel") {
    const gradcomp::Status s = gradcomp::device::CudaBackend::create(0, &backend);
    if (!s.ok()) finish("RESULT " + step + ": backend: " + s.toString());
  }
  int* counter = nullptr;
  void *before = nullptr, *beforeHost = nullptr;
  cudaStream_t caller = nullptr, other = nullptr;
  cudaEvent_t callerDone = nullptr, otherDone = nullptr;
  if (cudaMalloc(&counter, 4) != cudaSuccess || cudaMalloc(&before, 1 << 20) != cudaSuccess ||
      cudaHostAlloc(&beforeHost, 1 << 20, cudaHostAllocMapped) != cudaSuccess ||
      cudaStreamCreateWithFlags(&caller, cudaStreamNonBlocking) != cudaSuccess ||
      cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking) != cudaSuccess ||
      cudaEventCreateWithFlags(&callerDone, cudaEventDisableTiming) != cudaSuccess ||
      cudaEventCreateWithFlags(&otherDone, cudaEventDisableTiming) != cudaSuccess)
    finish("RESULT " + step + ": setup failed: " + cudaGetErrorString(cudaGetLastError()));
  if (step != "lazy-kernel") {
    touch<<<1, 1, 0, other>>>(counter);  // loaded already; launched once before parking
    cudaStreamSynchronize(other);
  }
  std::unique_ptr<gradcomp::device::exec::CudaSignals> signals;
  const gradcomp::Status made = gradcomp::device::exec::CudaSignals::create(1, &signals);
  // Parked until done >= 1.
  const gradcomp::Status s = made.ok() ? signals->enqueueWaitDone(0, 0, caller) : made;
  if (!s.ok()) finish("RESULT " + step + ": parking: " + s.toString());
  cudaEventRecord(callerDone, caller);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the wait is running
  const char* how = signals->usesStreamMemOps() ? "cuStreamWaitValue64" : "a polling kernel";

  std::thread([step, limit, how] {
    std::this_thread::sleep_for(std::chrono::duration<double>(limit));
    finish("RESULT " + step + ": BLOCKED: did not return within " + std::to_string(limit) +
           " s while a stream was parked (" + how + ")");
  }).detach();
  const auto t0 = Clock::now();
  std::string outcome = "ok";
  cudaError_t e = cudaSuccess;
  if (step == "lazy-kernel") {
    lazyOnly<<<1, 1, 0, other>>>(counter);
    e = cudaGetLastError();
  } else if (step == "host-alloc") {
    void* p = nullptr;
    e = cudaHostAlloc(&p, size_t(64) << 20, cudaHostAllocMapped | cudaHostAllocPortable);
  } else if (step == "malloc") {
    void* p = nullptr;
    e = cudaMalloc(&p, size_t(64) << 20);
  } else if (step == "event-create") {
    cudaEvent_t ev = nullptr;
    e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  } else if (step == "reserve-device") {
    const gradcomp::Status r = backend->reserve({size_t(256) << 20, 0});
    if (!r.ok()) outcome = r.toString();
  } else if (step == "fft-plan") {
    const gradcomp::Status r = backend->prepareFft(1699, 1699);
    if (!r.ok()) outcome = r.toString();
  } else if (step == "free") {
    e = cudaFree(before);
  } else if (step == "free-host") {
    e = cudaFreeHost(beforeHost);
  }
  if (e != cudaSuccess) outcome = cudaGetErrorString(e);
  const double took = since(t0);
  touch<<<1, 1, 0, other>>>(counter);
  cudaEventRecord(otherDone, other);
  const bool otherRan = eventDone(otherDone, 3.0);
  const bool stillParked = cudaEventQuery(callerDone) == cudaErrorNotReady;
  gradcomp::device::exec::storeRelease(&signals->slot(0)->done, uint64_t(1));
  const bool released = eventDone(callerDone, 3.0);
  char line[512];
  std::snprintf(line, sizeof line,
                "RESULT %s: returned in %.3f s (%s); parked by %s%s; a kernel on another stream "
                "%s; the parked stream %s once released",
                step.c_str(), took, outcome.c_str(), how,
                stillParked ? "" : " (NOT parked: the wait ended early)",
                otherRan ? "ran" : "STALLED", released ? "moved on" : "STALLED");
  finish(line);
}
