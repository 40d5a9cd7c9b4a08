// Algorithms: collective schedules written against transport::Transport and
// device::Backend only, so the same code runs on the CPU reference, under the
// CUDA executor, and in the simulator.
//
// Registration: each algorithm file defines a static registrar
// (GC_REGISTER_ALGORITHM) with its name, summary, parameters, factory and
// reference. Tools list and look algorithms up by name; nothing else needs
// to know them.
//
// Determinism: every decision that changes what is sent must be computed from
// data all ranks share (arguments, call sequence, config) or agreed through the
// transport; a rank-local choice deadlocks the job.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/param.h"
#include "common/status.h"
#include "device/backend.h"
#include "transport/transport.h"

namespace gradcomp::algo {

// Which collective a call runs. ReduceScatter follows NCCL's layout: count is
// the whole tensor (recvcount * P elements in sendBuf), recvBuf holds
// recvcount = count / P elements, and rank r receives elements
// [r * recvcount, (r + 1) * recvcount) of the reduction. In place means
// recvBuf == sendBuf + r * recvcount elements (NCCL's in-place layout).
// AllGather is sized by the whole output too: count = sendcount * P
// elements in recvBuf, sendBuf holds sendcount = count / P, and rank r's
// shard lands at [r * sendcount, (r + 1) * sendcount) on every rank; op is
// ignored. In place means sendBuf == recvBuf + r * sendcount elements. Its
// algorithms are a set of their own (algorithms/allgather/allgather.h).
enum class Collective { AllReduce = 0, ReduceScatter = 1, AllGather = 2 };
// "allreduce", "reducescatter", "allgather"
const char* collectiveName(Collective c);

struct AllreduceArgs {
  const void* sendBuf = nullptr;
  void* recvBuf = nullptr;  // may equal sendBuf (in place)
  size_t count = 0;         // elements of the whole tensor (reduce-scatter: of sendBuf)
  DataType dtype = DataType::Float32;
  RedOp op = RedOp::Sum;
  // Identity of the logical tensor across calls, the same on every rank (the C
  // API's bufferKey). 0 = none agreed: the NCCL interposer knows only buffer
  // addresses, which differ between ranks and which allocators reuse
  // differently on each rank.
  uint64_t bufferKey = 0;
  // This rank's own identity of the tensor (0 = recvBuf's address): keys only
  // state that never steers communication (see residualKey).
  uint64_t localKey = 0;
  Collective coll = Collective::AllReduce;
};

// Reduce-scatter: the elements each rank receives (count / P).
inline size_t recvCountOf(const AllreduceArgs& a, int nranks) {
  return nranks > 0 ? a.count / size_t(nranks) : 0;
}

// Key of per-tensor state that steers the schedule: call counts (warm-up,
// threshold re-evaluation, repartitioning, leaders), thresholds, regions,
// seeds. Every rank must decide alike, so it is bufferKey when the caller
// gives one, else the call's shape (count, dtype, op), which every rank sees
// in the same order: tensors of one shape then share this state.
uint64_t scheduleKey(const AllreduceArgs& a);
// Key of per-tensor state that only shapes this rank's data (error-feedback
// residuals, WAGMA's per-tensor stream): bufferKey, else localKey, else the
// output buffer's address. Rank-local by design.
uint64_t residualKey(const AllreduceArgs& a);

class ErrorFeedbackStore;  // algorithms/error_feedback.h
struct CentralResiduals;   // algorithms/error_feedback.h

// Everything a call may use; owned by the communicator.
struct Context {
  transport::Transport& net;
  device::Backend& dev;
  const param::Overrides& config;  // algorithm parameters (registry + overrides)
  uint64_t callSeq;                // 0, 1, 2, ... per communicator, equal on all ranks
  // The communicator's residual store; nullptr when the caller has none (then
  // compressing algorithms run without error feedback).
  ErrorFeedbackStore* errorFeedback = nullptr;
};

struct AlgorithmInfo;

class Algorithm {
 public:
  virtual ~Algorithm() = default;
  // The entry points: every algorithm gets the same checks here and
  // implements runAllreduce / runReduceScatter below. allreduce() runs only
  // an allreduce: handed args.coll == ReduceScatter it refuses
  // (InvalidArgument) before touching anything. reduceScatter() (layout
  // above) runs only a reduce-scatter, and only where hasReduceScatter()
  // (else Unsupported naming the algorithm). Both check the call's
  // arguments with checkCallArgs first. Collective; all ranks call with the
  // same count/dtype/op/bufferKey. Callers holding a call of either kind use
  // runCollective.
  // allreduce() is still virtual only so that a test double written before
  // runAllreduce existed keeps compiling (tests/test_call_path_device.cc);
  // an override skips the checks, so no algorithm overrides it, and it
  // becomes non-virtual once that double overrides runAllreduce.
  virtual Status allreduce(Context& ctx, const AllreduceArgs& args);
  Status reduceScatter(Context& ctx, const AllreduceArgs& args);
  // Allgather (layout at Collective), only where hasAllgather() (else
  // Unsupported naming the algorithm); checked like the others.
  Status allgather(Context& ctx, const AllreduceArgs& args);
  bool hasAllgather() const;
  // Whether it has a reduce-scatter form: what its registry entry says
  // (AlgorithmInfo::hasReduceScatter, the one source). An algorithm made
  // outside the registry (a test's, FlushDense) has none.
  bool hasReduceScatter() const;
  // Its registry entry (set by the registry's factory; a wrapper such as the
  // hierarchical form takes the wrapped algorithm's); nullptr outside it.
  const AlgorithmInfo* info() const { return info_; }
  void setInfo(const AlgorithmInfo* info) { info_ = info; }
  // Its registry name, for messages ("an unregistered algorithm" without one).
  std::string name() const;
  // The proxy contract (docs/design.md): runs on the calling thread before the
  // caller's stream is parked on allreduce(ctx, args), which may then run on
  // another thread while this one prepares the next call. Makes what a
  // backend cannot make mid-call (FFT plans: Backend::prepareFft); must not
  // touch state allreduce() changes. Memory is reserved by CallBudget.
  virtual Status prepare(Context& ctx, const AllreduceArgs& args) {
    (void)ctx, (void)args;
    return Status::Ok();
  }
  // False when a call may return before every rank entered it (WAGMA's
  // wait-avoiding mode): the call check (call_check.h) then does not wait
  // for the slowest rank's signature, it compares it when it arrives.
  virtual bool waitsForEveryRank(const Context& ctx, const AllreduceArgs& args) const {
    (void)ctx, (void)args;
    return true;
  }
  // True when calls of one shape may run different schedules (auto): what
  // one call drew then says little about the next (CallBudget).
  virtual bool choosesPerCall() const { return false; }
  // Memory a call of a new shape may draw beyond CallBudget's first-call
  // bound for its size (fft: complex spectra; auto: its calibration probe
  // runs inside its first call); CallBudget adds it.
  virtual device::Backend::Reservation extraFirstCall(const AllreduceArgs& args) const {
    (void)args;
    return {};
  }

 protected:
  // The schedules, called by the entry points above with checked arguments
  // (args.coll says which). error feedback of a reduce-scatter keeps
  // residuals of the whole sendBuf tensor (residualKey). runReduceScatter
  // runs only where the registry entry has a reduceScatterReference; the
  // default says the two disagree (Internal). Every algorithm implements
  // runAllreduce (its default, Internal, exists only for the transition
  // noted at allreduce()).
  virtual Status runAllreduce(Context& ctx, const AllreduceArgs& args);
  virtual Status runReduceScatter(Context& ctx, const AllreduceArgs& args);
  virtual Status runAllgather(Context& ctx, const AllreduceArgs& args);

 private:
  const AlgorithmInfo* info_ = nullptr;
};

// The algorithm's exact semantics, computed centrally from every rank's input,
// for checking (gradcomp-bench #wrong, tests). Stateful algorithms keep their
// central state (residuals, thresholds) in the object, one object per run,
// called once per collective in the same order as the distributed algorithm.
class Reference {
 public:
  virtual ~Reference() = default;
  // The run's algorithm parameters (the same Overrides the algorithm sees in
  // Context::config); called once before the first expect(). Without it a
  // reference reads the registry (environment, then defaults).
  virtual Status configure(const param::Overrides& config) {
    (void)config;
    return Status::Ok();
  }
  // inputs[r]: rank r's input (host memory, args.dtype). Fills expected[i] with
  // the value every rank must return and tolerance[i] with the allowed
  // |out - expected| (0 = bit-exact after rounding expected to the dtype).
  virtual Status expect(const std::vector<const void*>& inputs, const AllreduceArgs& args,
                        std::vector<double>* expected, std::vector<double>* tolerance) = 0;
  // From now on keep every rank's error-feedback residuals in `residuals`,
  // shared with other references (a selector's candidates share the
  // communicator's store). Called after configure(). A reference that keeps
  // no residuals (dense) accepts and ignores it; the default refuses
  // (Unsupported), so no selector replays a compressor whose residuals would
  // silently diverge from the run's.
  virtual Status shareResiduals(const std::shared_ptr<CentralResiduals>& residuals);
  // Selectors (auto): the choice the next call ran, as the algorithm reported
  // it (gcCommLastAlgorithm); called before that call's expect(). Other
  // references ignore it.
  virtual Status recordChoice(const std::string& label) {
    (void)label;
    return Status::Ok();
  }
};

// Runs args.coll on `alg`: allreduce(), reduceScatter() or allgather(); the one entry the
// executors, CallBudget and tools use.
Status runCollective(Algorithm& alg, Context& ctx, const AllreduceArgs& args);
// The one check of a call's arguments, made by Algorithm::allreduce and
// reduceScatter and by the C API and the NCCL interposer before them (which
// name the arguments their own way or pass such a call through to NCCL):
// args.coll, dtype and op values; count * element size within size_t; a
// reduce-scatter's count a multiple of nranks; non-null buffers when count
// > 0; buffers disjoint or in place (allreduce: recvBuf == sendBuf;
// reduce-scatter: NCCL's layout, recvBuf == sendBuf + rank * recvcount
// elements; allgather: sendBuf == recvBuf + rank * sendcount elements, op
// not checked). InvalidArgument naming the argument; messages begin with
// "allreduce: ", "reduce-scatter: " or "allgather: ".
Status checkCallArgs(const AllreduceArgs& args, int nranks, int rank);

struct AlgorithmInfo {
  std::string name;
  std::string summary;
  std::vector<param::Id> params;  // registry parameters it reads (tools expose them as flags)
  std::function<std::unique_ptr<Algorithm>()> create;
  std::function<std::unique_ptr<Reference>(int nranks)> reference;
  // A selector (auto) chooses one of the schedules per call: it has no
  // schedule of its own, findAlgorithm finds it, listAlgorithms does not.
  bool selector = false;
  // The reduce-scatter form's reference (null: no reduce-scatter form). Its
  // expect() gets args.coll == ReduceScatter and fills the whole tensor's
  // count values: rank r must return elements [r * recvcount, ...) of them.
  // Its presence is the one statement that the algorithm has a
  // reduce-scatter form (hasReduceScatter below; Algorithm::hasReduceScatter
  // reads it; the plugin, the C API and the tools ask it).
  std::function<std::unique_ptr<Reference>(int nranks)> reduceScatterReference = nullptr;

  // The allgather form's reference (null: none). Its expect() gets
  // args.coll == AllGather and fills the whole output's count values, the
  // same on every rank. Allgather schedules live in their own registry
  // (algorithms/allgather/allgather.h), so listAlgorithms() never lists one.
  std::function<std::unique_ptr<Reference>(int nranks)> allgatherReference = nullptr;

  bool hasReduceScatter() const { return bool(reduceScatterReference); }
  bool hasAllgather() const { return bool(allgatherReference); }
};

void registerAlgorithm(AlgorithmInfo info);
const AlgorithmInfo* findAlgorithm(const std::string& name);
// The schedules (selectors left out), sorted by name.
std::vector<const AlgorithmInfo*> listAlgorithms();
// "dense, oktopk, ..." (the schedules) for error messages.
std::string algorithmNames();
// "auto" (the selectors), for messages listing everything GRADCOMP_ALGO accepts.
std::string selectorNames();
// "cltk, dense, ..." (the schedules with a reduce-scatter form), for messages.
std::string reduceScatterNames();

// The allgather schedules (GRADCOMP_AG_ALGO): a registry of their own, so
// that nothing that sweeps listAlgorithms() runs an allreduce on one. Each
// entry has allgatherReference set; a static AllgatherRegistrar registers one.
void registerAllgatherAlgorithm(AlgorithmInfo info);
const AlgorithmInfo* findAllgatherAlgorithm(const std::string& name);
std::vector<const AlgorithmInfo*> listAllgatherAlgorithms();
// "blockq, cast, dense", for messages.
std::string allgatherNames();

struct Registrar {
  explicit Registrar(AlgorithmInfo info) { registerAlgorithm(std::move(info)); }
};
struct AllgatherRegistrar {
  explicit AllgatherRegistrar(AlgorithmInfo info) { registerAllgatherAlgorithm(std::move(info)); }
};

}  // namespace gradcomp::algo

// Use at namespace scope in the algorithm's .cc; the static library is linked
// whole-archive into every binary so registrars are never dropped.
#define GC_REGISTER_ALGORITHM(id, ...) \
  static ::gradcomp::algo::Registrar gc_registrar_##id(::gradcomp::algo::AlgorithmInfo __VA_ARGS__)

