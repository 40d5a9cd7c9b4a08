// The proxy contract's bookkeeping for one communicator (docs/design.md,
// "Who may call what, and when"). A call runs in two parts:
//
//   plan (calling thread): what the call reserves -- the most any earlier
//     call of its shape drew, or, for a shape not seen yet (and for
//     algorithms that choose per call), the first-call bound below -- and
//     whether the communicator's earlier calls must be done first
//     (needsIdle): when the shape is new (prepare may make plans: cuFFT's,
//     with lazily loaded kernels) or the reservation would grow memory
//     (cudaHostAlloc, pool growth). Either is a driver call that may wait for
//     a stream parked on an earlier call, a call of this shape or another
//     (a DDP step's buckets queue behind each other): the H200's deadlock.
//   prepare (calling thread, before the caller's stream is parked): the
//     algorithm's prepare() (FFT plans), then Backend::reserve of the plan's
//     reservation. This is the only place backend memory grows.
//
// A shape is (the algorithm object that runs, name, count, dtype, op,
// collective). Keyed by the object, not only the name: the interposer runs
// auto's calls under the name "auto" with the candidate the tuner chose as
// the algorithm, so a switch of candidate is a new shape (the wait and the
// first-call bound), not the last candidate's draw under the same name. An
// algorithm object lives as long as the communicator (and its budget).
//   run (the proxy, stream parked): the algorithm with its backend parked;
//     what the call drew is learned for later calls of its shape. With
//     GRADCOMP_PROXY_CHECK=error a call that would grow memory or make a plan
//     fails with the violation; with warn it is logged and the call goes on.
//
// First-call bound: device 4 x the tensor's fp32 bytes + 8 MiB, host 2 x its
// bytes + 8 MiB, plus Algorithm::extraFirstCall (fft's spectra, auto's
// probe); for algorithms that choose per call, at least what the largest call
// so far drew. Measured on cpu-device (test_proxy_contract's draws: at most
// 3.8 x device, 2.7 x host at 90001 values) and checked at 16 and 64 MiB with
// GRADCOMP_PROXY_CHECK=error gradcomp-bench --backend cpu-device (design.md).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>

#include "algorithms/algorithm.h"
#include "algorithms/call_check.h"

namespace gradcomp::algo {

// GRADCOMP_PROXY_CHECK: error (violations fail the call) or warn; "auto" is
// error on a checking backend (cpu-device) and warn elsewhere.
bool proxyCheckStrict(const device::Backend& dev);

class CallBudget {
 public:
  using Reservation = device::Backend::Reservation;

  // What the calling thread does for one call before its stream is parked.
  struct Plan {
    Reservation reservation;  // what prepare() reserves (pass it to run)
    bool newShape = false;    // no call of the shape was prepared: prepare may make plans
    bool wouldGrow = false;   // reserving it grows memory (Backend::reserveWouldGrow)
    // Earlier calls of the communicator must be done before prepare()
    // (ProxyEngine::waitIdle): newShape || wouldGrow. Steady-state calls of
    // a seen shape whose reservation fits the headroom never wait.
    bool needsIdle = false;
  };
  // Calling thread. A plan whose needsIdle is false stays valid while other
  // calls run (they only use up what was promised to them or give it back);
  // one that needed the wait is still right after it.
  Plan plan(const Algorithm& algorithm, const std::string& name, const device::Backend& dev,
            const AllreduceArgs& args);
  // Calling thread, after waiting as the plan says: the algorithm's
  // prepare(), then the reservation.
  Status prepare(Algorithm& algorithm, const std::string& name, Context& ctx,
                 const AllreduceArgs& args, const Plan& plan);
  // plan() then prepare(), for callers with no call of the communicator in
  // flight (the C API, the host executor, tests). *promise: pass to run.
  Status prepare(Algorithm& algorithm, const std::string& name, Context& ctx,
                 const AllreduceArgs& args, Reservation* promise);
  // The thread that runs the call, with the caller's stream parked on it.
  // With a signature the call runs checked (algorithms/call_check.h).
  Status run(Algorithm& algorithm, const std::string& name, Context& ctx,
             const AllreduceArgs& args, const Reservation& promise,
             const CallSignature* signature = nullptr);

  // The communicator's transport goes away: cancel the signatures still
  // posted (wait-avoiding calls). Also done by the destructor, which must
  // then run before the transport's.
  void release() { checker_.release(); }

  // First-call bound of a tensor of `bytes` (fp32 bytes of its elements).
  static Reservation firstCallBound(size_t fp32Bytes);

 private:
  // the algorithm that runs, name, count, dtype, op, collective
  using Shape = std::tuple<const Algorithm*, std::string, size_t, int, int, int>;
  static Shape shapeOf(const Algorithm& algorithm, const std::string& name,
                       const AllreduceArgs& a) {
    return Shape{&algorithm, name, a.count, int(a.dtype), int(a.op), int(a.coll)};
  }
  CallChecker checker_;  // the run's signatures (one thread at a time runs calls)
  std::mutex mu_;
  std::map<Shape, Reservation> drawn_;  // the most a call of the shape drew
  std::set<Shape> prepared_;             // shapes prepare() has seen
  Reservation largest_;                  // the most any call drew
};

}  // namespace gradcomp::algo
