// A Transport for thousands of simulated ranks in one process (one thread per
// rank) with a virtual clock per rank. Messages really move (the schedules run
// on real data, so data-dependent volumes are exact); time is modelled:
//
//   send of b bytes posted by rank s at virtual time t:
//     start  = max(t, sendNicFree[s]); sendNicFree[s] = start + b*beta
//     arrive = start + alpha + b*beta              (earliest arrival at d)
//   the sender's wait completes at start + b*beta (its NIC pushed the bytes);
//   the receiver's wait takes its completed receives in order of `arrive`:
//     done = max(arrive, recvNicFree[d] + b*beta); recvNicFree[d] = done
//   and every wait sets the waiter's clock to max(clock, completion times).
//
// So each NIC sends one message at a time and receives one at a time at link
// rate (LogGP-like, g = 0, G = beta); there is no switch contention (a full
// bisection network). Local compute between transport calls is charged as the
// thread's CPU time times `computeScale` (0: free). With hostSPerByte > 0 the
// sender's clock advances by b * o before its NIC starts, and receives are
// copied out one after another, each b * o after its NIC finished
// (o = hostSPerByte * max(1, computeScale)).
//
// test() on a delivered message completes it at its virtual completion time
// (a poll cannot observe virtual time it has not reached; wait-avoiding
// schedules therefore look as if they had waited).
//
// Same matching contract as every Transport (per (peer, tag) FIFO, capacity
// check, per-peer counters of payload bytes). A wait still pending after
// `timeoutS` of wall time fails with Timeout naming the peer (a deadlocked
// schedule). Unlike LocalTransport the mailboxes are per destination and
// emptied as they drain, so millions of distinct tags do not accumulate.
#pragma once

#include <memory>
#include <vector>

#include "transport/transport.h"

namespace gradcomp::sim {

struct CostModel {
  double alphaS = 0;        // per-message latency, seconds
  double betaSPerByte = 0;  // seconds per byte = 1 / link rate
  double computeScale = 0;  // virtual seconds per second of thread CPU time
  // Host CPU seconds per payload byte the rank's network stack spends to send
  // or to receive (copies through the kernel's TCP stack; LogGP's per-byte
  // overhead), charged times max(1, computeScale): 0 = free.
  double hostSPerByte = 0;
};

class SimTransport : public transport::Transport {
 public:
  // Marks the start of a collective: clock := 0, NICs idle, compute timer
  // restarted (every rank starts the call together, as after a barrier).
  virtual void beginCall() = 0;
  // Ends the collective (charges trailing compute) and returns the clock.
  virtual double endCall() = 0;
  // Fails every rank of the fabric with `why` (a rank's algorithm failed; the
  // others must not wait for it until the timeout).
  virtual void abortAll(const Status& why) = 0;
};

// Creates `size` connected endpoints; endpoint r is rank r, used by one thread.
std::vector<std::unique_ptr<SimTransport>> createSimTransports(int size, const CostModel& model,
                                                               double timeoutS);

}  // namespace gradcomp::sim
