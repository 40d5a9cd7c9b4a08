// Wait-avoiding group allreduce for one logical tensor (seed 002, section 3.1):
// each stream has a private transport channel and executes the stream's
// collectives (versions 0, 1, 2, ... = the stream's calls) in order, whether
// or not this rank's caller has arrived. Whoever holds the channel drives it:
// the caller during its call (no thread hand-off on the common path), and a
// progress thread between calls, so that a late rank still takes part.
//
// - Arrival: the caller copies its fresh buffer into a library-owned slot,
//   then executes its version (or takes the result if it already ran).
//   Three slots: the one a running collective reads, the latest submitted
//   one, and the one being written, so the caller never waits for a buffer.
// - Activation: the first rank to start version v sends an activation (v) to
//   each butterfly partner of its group at v (and its fold partner); a rank
//   that starts v, by its own arrival or by an activation, sends to every such
//   partner it has not heard from for v. The messages travel the binomial tree
//   rooted at the first activator (depth log2 S) plus at most one message per
//   butterfly edge for concurrent activators; every activation carries its
//   version on one persistent receive per partner (FIFO per peer), so a
//   duplicate or late activation for an executed version is simply ignored
//   and each version runs exactly once. An activation for w also runs every
//   pending version below w, in order.
// - Passive participation: a rank whose caller has not arrived at v
//   contributes its latest slot (its previous buffer). On arrival the caller
//   takes W_sum / c when its fresh buffer was in W_sum, else
//   (W_sum + fresh) / (c + 1) (seed 002, Algorithm 2, lines 10-13), with c the
//   number of buffers in W_sum (S, plus folded extras).
// - Every period-th version (t + 1 = 0 mod period) is a global allreduce that
//   waits for every rank's fresh buffer (Algorithm 2, line 16); it bounds the
//   staleness, so at most period - 1 unconsumed results are ever kept.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/wagma/topology.h"
#include "algorithms/dense/dense.h"
#include "device/arrays.h"

namespace gradcomp::algo::wagma {

// What one call did (for the caller's bookkeeping and for tests).
struct CallReport {
  uint64_t call = 0;         // the stream's call index t
  bool global = false;       // a global allreduce (every period-th call)
  bool fresh = true;         // this rank's fresh buffer was in W_sum (else the stale path)
  int64_t contributed = -1;  // the call whose buffer this rank put into W_sum
  int contributors = 0;      // c: buffers in W_sum
};

struct StreamConfig {
  Topology topo;
  size_t count = 0;
  DataType dtype = DataType::Float32;
  int period = 8;
  param::Overrides denseConfig;  // for the global allreduce ("dense")
};

class WaitAvoidingStream {
 public:
  // Takes `channel`, which the progress thread owns from the first call() on
  // (no other thread may use it). The thread starts inside call 0, after the
  // caller's buffer is in place, so there is always a buffer to contribute.
  static Status create(std::unique_ptr<transport::Transport> channel, const StreamConfig& config,
                       device::Backend& dev, std::unique_ptr<WaitAvoidingStream>* out);
  ~WaitAvoidingStream();  // stops and joins the progress thread
  WaitAvoidingStream(const WaitAvoidingStream&) = delete;
  WaitAvoidingStream& operator=(const WaitAvoidingStream&) = delete;

  // The caller's next call: contributes `fresh` (count elements) and writes
  // this rank's new average into `out` (may alias fresh).
  Status call(const void* fresh, void* out, CallReport* report);

  // Versions the progress thread executed, in order (tests: each exactly once).
  std::vector<uint64_t> executed() const;

 private:
  WaitAvoidingStream(std::unique_ptr<transport::Transport> channel, const StreamConfig& config,
                     device::Backend& dev);
  struct Result {
    device::DeviceArray<char> sum;
    CallReport report;
  };
  struct PendingSend {
    transport::Handle handle = 0;
    uint64_t payload = 0;
  };
  bool isGlobal(uint64_t v) const { return (v + 1) % uint64_t(cfg_.period) == 0; }
  void run();
  void fail(const Status& s);
  Status progress(bool* worked);  // chan_ held; records an error in error_
  Status progressOnce(bool* worked);
  Status pollActivations();
  Status farewell();
  Status sendActivations(uint64_t v);
  Status execute(uint64_t v, int slot, Result* result);

  const StreamConfig cfg_;
  device::Backend& dev_;
  std::unique_ptr<transport::Transport> net_;  // used with chan_ held
  const size_t bytes_;
  uint64_t nextCall_ = 0;  // caller thread only

  // Channel state, guarded by chan_: whoever holds it drives the channel (the
  // caller during its call, the progress thread between calls).
  std::mutex chan_;
  std::vector<int> actPeers_;               // partners that may activate us
  std::vector<uint64_t> actIn_;             // their receive buffers
  std::vector<transport::Handle> actRecv_;  // persistent receives
  std::map<uint64_t, std::vector<int>> heardFrom_;  // version -> partners that activated it
  int64_t activatedUpTo_ = -1;
  std::list<PendingSend> sends_;
  dense::Staging stage_;  // groupSum's host staging
  std::unique_ptr<Algorithm> dense_;

  // Shared state, guarded by mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  struct Slot {
    device::DeviceArray<char> data;
    int64_t call = -1;
  };
  Slot slots_[3];
  int latest_ = -1, inUse_ = -1;
  int64_t arrived_ = -1;
  uint64_t next_ = 0;  // versions < next_ are executed
  std::map<uint64_t, Result> results_;
  std::vector<device::DeviceArray<char>> spare_;  // recycled result buffers
  std::vector<uint64_t> executed_;
  Status error_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace gradcomp::algo::wagma
