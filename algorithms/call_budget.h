// The proxy contract's bookkeeping for one communicator (docs/design.md,
// "Who may call what, and when"). A call runs in two parts:
//
//   prepare (calling thread, before the caller's stream is parked): the
//     algorithm's prepare() (FFT plans), then Backend::reserve of what the
//     call may draw: the most any earlier call of its shape drew, or, for a
//     shape not seen yet (and for algorithms that choose per call), the
//     first-call bound below. This is the only place backend memory grows.
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

  // Calling thread: whether a call of this shape was prepared before.
  // prepare() of a new shape makes plans and grows memory (driver calls that
  // may wait for a parked stream): the CUDA executor first lets earlier calls
  // finish. Later calls of a shape find its plans made and do not wait.
  bool seen(const std::string& name, const AllreduceArgs& args);
  // Calling thread. *promise: what was reserved for this call (pass to run).
  Status prepare(Algorithm& algorithm, const std::string& name, Context& ctx,
                 const AllreduceArgs& args, Reservation* promise);
  // The thread that runs the call, with the caller's stream parked on it.
  // With a signature the call runs checked (algorithms/call_check.h).
  Status run(Algorithm& algorithm, const std::string& name, Context& ctx,
             const AllreduceArgs& args, const Reservation& promise,
             const CallSignature* signature = nullptr);

  // First-call bound of a tensor of `bytes` (fp32 bytes of its elements).
  static Reservation firstCallBound(size_t fp32Bytes);

 private:
  // name, count, dtype, op, collective
  using Shape = std::tuple<std::string, size_t, int, int, int>;
  static Shape shapeOf(const std::string& name, const AllreduceArgs& a) {
    return Shape{name, a.count, int(a.dtype), int(a.op), int(a.coll)};
  }
  std::mutex mu_;
  std::map<Shape, Reservation> drawn_;  // the most a call of the shape drew
  std::set<Shape> prepared_;             // shapes prepare() has seen
  Reservation largest_;                  // the most any call drew
};

}  // namespace gradcomp::algo
