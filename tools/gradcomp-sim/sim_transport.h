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
// Scenarios: a fabric may be created with several cost models; every rank
// then keeps one clock (and NIC state) per model, and the same messages are
// timed under each, so one run of the schedule prices several link rates or
// device models (gradcomp-sim --gpu-model). Scenario 0 is what endCall()
// returns.
//
// Payload scaling: with payloadScale s != 1 a message of b bytes whose
// framing (headers, block lengths, control words; CostModel::framing) is f
// bytes is charged as f + (b - f) * s bytes: a run at count n / s prices the
// messages of count n (gradcomp-sim --gpu-model, payload_framing.h).
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

#include <cstddef>
#include <cstdint>
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
  // Two-level links (hierarchical jobs): ranks r and p share a host when
  // r / ranksPerHost == p / ranksPerHost (0: one level, every link as above).
  // Messages inside a host cost intraAlphaS + b * intraBetaSPerByte on send
  // and receive queues of their own (NVLink or shared memory beside the NIC)
  // and no host overhead; between hosts the model above. Every scenario of a
  // fabric must use the same ranksPerHost.
  int ranksPerHost = 0;
  double intraAlphaS = 0, intraBetaSPerByte = 0;
  // See "Payload scaling" above; framing nullptr: no framing (f = 0).
  double payloadScale = 1;
  size_t (*framing)(const uint8_t* data, size_t bytes) = nullptr;
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

  // ---- Scenarios (see above) ----
  virtual int scenarios() const = 0;
  // Scenario s's clock now (pending compute charged first).
  virtual double clockOf(int s) = 0;
  // Moves scenario s's clock to t if t is later: a device model charging
  // work this rank waited for.
  virtual void advanceTo(int s, double t) = 0;
  // endCall() for every scenario: the clocks in scenario order.
  virtual std::vector<double> endCallAll() = 0;
  // Thread CPU seconds the caller prices itself (a device model's reference
  // compute): left out of what computeScale charges.
  virtual void excludeCpu(double seconds) = 0;
  // Bytes this rank's sends were charged as since resetCounters() (payload
  // scaling applied; equal to the bytes sent without it).
  virtual double chargedBytesSent() const = 0;
};

// Creates `size` connected endpoints; endpoint r is rank r, used by one thread.
std::vector<std::unique_ptr<SimTransport>> createSimTransports(int size, const CostModel& model,
                                                               double timeoutS);
// The same with one scenario per model (1 to kMaxScenarios models; none
// created otherwise).
constexpr size_t kMaxScenarios = 16;
std::vector<std::unique_ptr<SimTransport>> createSimTransports(
    int size, const std::vector<CostModel>& models, double timeoutS);

}  // namespace gradcomp::sim
