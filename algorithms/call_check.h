// Runs one collective so that a failure anywhere is a failure everywhere, and
// calls that disagree across ranks are named as such (docs/reliability.md,
// "Calls that disagree").
//
// - Signature: before its first data message each rank sends a signature of
//   what it was asked to do (call number, collective, count, dtype, op, the
//   algorithm the caller named -- "auto" for auto, not the candidate it picks
//   -- and its effective parameters, as a hash and as "NAME=value" text) on
//   kSignatureTag to every other rank (P <= kSignatureAllToAllMax; beyond, to
//   its ring successor only), and receives theirs.
// - Every wait of the transport inside the call watches those receives
//   (transport::WaitWatch): a signature that differs ends the wait at once,
//   so a call whose ranks disagree fails within milliseconds whatever the
//   schedule does with the disagreement (waits for bytes that never come,
//   or completes). A call that completes compares what arrived at its end.
// - Algorithms that do not wait for every rank (WAGMA's wait-avoiding mode,
//   Algorithm::waitsForEveryRank) are not made to wait for the slowest one
//   by the check: the signatures that have not arrived when the call ends are
//   kept posted and compared at later calls, as they arrive.
// - When the call fails, the signatures that arrived (within 0.2 s) are
//   checked first: a disagreement replaces the symptom it caused deep in a
//   schedule, and is worded field by field with every rank heard from
//   ("GRADCOMP_DENSITY: 0.01 on ranks 0-1, 0.05 on ranks 2-3").
// - A failure this rank found itself (not a verdict of the failure monitor)
//   goes to the monitor (FailureMonitor::agreeOnOwnFailure): every rank fails
//   the call within kAgreementS with the same message, naming the rank whose
//   report reached rank 0 first. A verdict that is already there wins over
//   this rank's own error, and fails a call whose part here completed.
// - Exceptions out of the algorithm (a strict proxy-contract refusal is a
//   bad_alloc) become that call's error here, so the clean-up and the
//   agreement above run on every exit path; posted receives and sends are
//   owned by the checker and cancelled when it goes away.
// GRADCOMP_CALL_CHECK=0 leaves the signatures out (set it alike everywhere).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"

namespace gradcomp::algo {

constexpr int kSignatureAllToAllMax = 64;

struct CallSignature {
  uint64_t callSeq = 0;
  uint64_t count = 0;
  DataType dtype = DataType::Float32;
  RedOp op = RedOp::Sum;
  Collective coll = Collective::AllReduce;
  std::string algorithm;    // as the caller named it (at most 23 characters are sent)
  uint64_t paramsHash = 0;  // of the algorithm's effective parameters
  // The same parameters as text, "GRADCOMP_DENSITY=0.01 GRADCOMP_EF=1" in
  // registry order (what messages name; the hash decides).
  std::string params;
};

// What the caller asked for: `info` is the algorithm it named (auto for
// auto), `config` its overrides over the registry.
CallSignature callSignature(const AlgorithmInfo& info, const param::Overrides& config,
                            uint64_t callSeq, const AllreduceArgs& args);

// One communicator's call check: the signatures still posted (wait-avoiding
// algorithms) live here between calls. Owned next to the communicator's
// transport and destroyed before it (its destructor cancels what is
// posted); one thread at a time runs its calls.
class CallChecker {
 public:
  CallChecker();
  ~CallChecker();
  CallChecker(const CallChecker&) = delete;
  CallChecker& operator=(const CallChecker&) = delete;

  // runCollective(alg, ctx, args) with the signature exchange and the failure
  // agreement above. Every rank of ctx.net calls it for every collective.
  // Never throws.
  Status run(Algorithm& alg, Context& ctx, const AllreduceArgs& args, const CallSignature& sig);
  // Cancels every signature still posted (the transport is about to go).
  void release();

 private:
  struct Posted;
  // Compares the signatures of earlier calls that arrived since; waits for
  // the oldest beyond kMaxLate.
  Status pollLate(transport::Transport& net, int me);
  std::unique_ptr<Posted> late_;
};

// The wire form and its check (exposed for tests). A signature is a 64-byte
// header and the parameters' text, kSignatureMaxBytes at most (longer text is
// cut; the hash still compares all of it).
constexpr size_t kSignatureBytes = 64;
constexpr size_t kSignatureMaxBytes = 512;
using SignatureWire = std::array<unsigned char, kSignatureMaxBytes>;
// Returns the bytes written.
size_t encodeSignature(const CallSignature& sig, unsigned char out[kSignatureMaxBytes]);
// Ok when equal; else a RemoteError naming both sides ("rank 1 called
// allreduce #0 with count ... , rank 2 with count ...", parameters by name
// and value), or saying the bytes from `peer` are malformed.
Status compareSignature(const CallSignature& mine, int myRank, const unsigned char* wire,
                        size_t bytes, int peer);
// The fields where the signatures heard from differ, each with its values by
// rank: "count: 4096 on ranks 0-1,3, 8192 on rank 2; GRADCOMP_DENSITY: ...".
// `theirs` pairs a peer with its wire bytes (malformed ones are skipped).
std::string describeDisagreement(
    const CallSignature& mine, int myRank,
    const std::vector<std::pair<int, std::vector<unsigned char>>>& theirs);

}  // namespace gradcomp::algo
