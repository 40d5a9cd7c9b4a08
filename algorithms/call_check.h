// Runs one collective so that a failure anywhere is a failure everywhere, and
// calls that disagree across ranks are named as such (docs/reliability.md,
// "Calls that disagree").
//
// - Signature: before its first data message each rank sends a 64-byte
//   signature of what it was asked to do (call number, count, dtype, op, the
//   algorithm the caller named, "auto" for auto and not the candidate it
//   picks, and a hash of that algorithm's effective parameters) on
//   kSignatureTag to every other rank (P <= kSignatureAllToAllMax; beyond, to
//   its ring successor only), and receives theirs. They are compared when the
//   call ends: by then every peer has entered the call, so the wait costs
//   nothing measurable. With all-to-all every rank sees every signature and
//   makes the same decision; on a ring the ranks whose predecessor disagrees
//   decide and the failure monitor tells the rest.
// - When the call fails, the signatures that arrived (within 0.2 s) are
//   checked first: a disagreement replaces the symptom it caused deep in a
//   schedule ("rank 1 called allreduce #0 with count 1048576 float sum, rank 2
//   with count 2097152").
// - A failure this rank found itself (not a verdict of the failure monitor)
//   goes to the monitor (FailureMonitor::agreeOnOwnFailure): every rank fails
//   the call within kAgreementS with the same message, naming the rank whose
//   report reached rank 0 first. A verdict that is already there wins over
//   this rank's own error, and fails a call whose part here completed.
// GRADCOMP_CALL_CHECK=0 leaves the signatures out (set it alike everywhere).
#pragma once

#include <cstdint>
#include <string>

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
};

// What the caller asked for: `info` is the algorithm it named (auto for
// auto), `config` its overrides over the registry.
CallSignature callSignature(const AlgorithmInfo& info, const param::Overrides& config,
                            uint64_t callSeq, const AllreduceArgs& args);

// alg.allreduce(ctx, args) with the signature exchange and the failure
// agreement above. Every rank of ctx.net calls it for every collective.
Status runCheckedAllreduce(Algorithm& alg, Context& ctx, const AllreduceArgs& args,
                           const CallSignature& sig);

// The wire form and its check (exposed for tests).
constexpr size_t kSignatureBytes = 64;
void encodeSignature(const CallSignature& sig, unsigned char out[kSignatureBytes]);
// Ok when equal; else a RemoteError naming both sides ("rank 1 called
// allreduce #0 with count ... , rank 2 with count ..."), or saying the bytes
// from `peer` are malformed.
Status compareSignature(const CallSignature& mine, int myRank, const unsigned char* wire,
                        size_t bytes, int peer);

}  // namespace gradcomp::algo
