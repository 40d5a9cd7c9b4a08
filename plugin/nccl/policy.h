// Which ncclAllReduce calls gradcomp compresses. Every input of a decision is
// data all ranks of a communicator share (the frozen configuration, the
// communicator's creation index, size and name, and the call's arguments), so
// ranks always agree; the effective configuration is additionally compared
// across ranks at communicator init (effectiveConfigText / firstDifference).
//
// Sources, lowest precedence first: defaults, the admin file (config_file.h:
// GRADCOMP_CONFIG, else /etc/gradcomp.conf when it exists), GRADCOMP_* variables. A bad value anywhere is rejected with
// a message naming it; the job then runs uncompressed (GRADCOMP_STRICT=1: the
// communicator init fails instead).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "algorithms/algorithm.h"
#include "common/dtype.h"
#include "common/param.h"
#include "common/status.h"

namespace gradcomp::nccl {

// Rank-invariant identity of a communicator.
struct CommIdentity {
  uint64_t index = 0;  // creation order among this process's communicators
  int nranks = 0;
  std::string name;    // ncclConfig_t::commName, empty when NCCL/app gave none
  bool singleProcess = false;  // ncclCommInitAll: every rank in this process
};

// One term of GRADCOMP_COMMS: all | none | index:N | size:N | name:GLOB.
struct CommSelector {
  enum class Kind { All, None, Index, Size, Name } kind = Kind::All;
  uint64_t number = 0;
  std::string pattern;
};
Status parseCommSelectors(const std::string& text, const std::string& origin,
                          std::vector<CommSelector>* out);
bool selectorsMatch(const std::vector<CommSelector>& selectors, const CommIdentity& comm);

// A per-communicator / per-size rule from the config file. The first rule
// whose communicator selector and byte range [minBytes, maxBytes) match a call
// decides its algorithm ("off": pass through); no match: the defaults.
struct Rule {
  std::vector<CommSelector> comms;  // empty: every communicator
  std::string commsText;
  uint64_t minBytes = 0;
  uint64_t maxBytes = UINT64_MAX;
  std::string algo;                           // empty: the default algorithm
  std::map<std::string, std::string> params;  // registry names without prefix
  std::string origin;                         // "FILE: rule 2", for messages
};

struct Policy {
  std::string algo = "off";  // "off": pure pass-through
  // ncclReduceScatter: "" = each call's algorithm where it has a
  // reduce-scatter form, "off" = pass-through, else that algorithm.
  std::string rsAlgo;
  // ncclAllGather: "off" = pass-through (default: an allgather may carry
  // activations), else an allgather algorithm (dense, cast, blockq). Rules
  // do not apply to it: the defaults' communicators, sizes and [params].
  std::string agAlgo = "off";
  std::vector<CommSelector> comms;
  std::string commsText = "all";
  uint64_t minBytes = 1 << 20;
  std::map<std::string, std::string> params;  // file-level algorithm parameters
  std::vector<Rule> rules;
  std::string configPath;              // "" when no file was read
  bool configIsSystemDefault = false;  // configPath is the default file (GRADCOMP_CONFIG unset)
  bool strict = false;
  // The self-test before a communicator's first compressed call
  // (plugin/nccl/selftest.h): auto, on or off; its time limit; a drill.
  std::string selftest = "auto";
  double selftestTimeoutS = 30;
  std::string selftestInject;
  // Shadow mode (plugin/nccl/shadow.h): NCCL's results, compression measured beside.
  bool shadow = false;
  // Anything to compress: allreduce (algo) or reduce-scatter (rsAlgo).
  bool enabled() const {
    return algo != "off" || (!rsAlgo.empty() && rsAlgo != "off") || agAlgo != "off";
  }
};

// Registry + file, validated; env overrides file. On error *out is the
// pass-through policy and the Status names the variable or file key.
Status loadPolicy(Policy* out);
// Same, with `systemConfig` in place of the registry's default file (tests).
Status loadPolicyWithSystemConfig(const std::string& systemConfig, Policy* out);

// Why a call passed through (or Compress).
enum class Verdict {
  Compress,
  Off,             // GRADCOMP_ALGO=off or a rule with algo "off"
  CommNotSelected, // GRADCOMP_COMMS / rule selectors exclude the communicator
  CommDisabled,    // config mismatch, wiring failed, single-process comm
  CommFailed,      // never reached: failed comms return their error
  InGroup,         // inside ncclGroupStart/End
  Capturing,       // CUDA graph capture
  SmallBuffer,     // below GRADCOMP_MIN_BYTES
  Dtype,           // not f32/f16/bf16
  Op,              // not sum/avg (PreMulSum and user ops included)
  InPlaceMismatch, // reserved
  NoExecutor,      // device memory and no CUDA executor yet
  AutoDense,       // GRADCOMP_ALGO=auto chose dense: NCCL's own allreduce
  NoRsForm,        // reduce-scatter: the algorithm has no reduce-scatter form
  RsLayout,        // reduce-scatter: buffers overlap other than in place
  AgLayout,        // allgather: buffers overlap other than in place
};
const char* verdictName(Verdict v);

struct CallShape {
  size_t count = 0;  // reduce-scatter, allgather: the whole tensor (x nranks)
  int ncclDtype = 0;
  int ncclOp = 0;
  algo::Collective coll = algo::Collective::AllReduce;
};

// Static part of the decision (everything except group/capture/memory, which
// the interposer checks). *rule is -1 for the defaults, else the rule index.
Verdict decide(const Policy& policy, const CommIdentity& comm, const CallShape& call, int* rule);

// ncclReduceScatter: the algorithm a call that decide() compresses under
// `rule` runs (GRADCOMP_RS_ALGO, else the rule's or default algorithm), or
// "" when it passes through (*why: Off or NoRsForm).
std::string reduceScatterAlgo(const Policy& policy, int rule, Verdict* why);

// Algorithm parameters of `rule` (-1: the defaults): the file's [params],
// then the rule's, each only where the environment does not set the
// variable (the environment wins; the registry supplies the rest).
Status algorithmOverrides(const Policy& policy, int rule, param::Overrides* out);

// NCCL dtype/op -> gradcomp types; false when not eligible.
bool eligibleDtype(int ncclDtype, DataType* out);
bool eligibleOp(int ncclOp, RedOp* out);

// "key=value" lines of everything that changes what a communicator sends:
// version, algorithm(s), selectors, sizes, rules, algorithm parameters, and
// whether this communicator is selected. Equal on every rank or the
// communicator must not compress.
// deviceExecutor: deviceExecutorAvailability() of this process ("cuda", "none").
std::string effectiveConfigText(const Policy& policy, const CommIdentity& comm, bool selected,
                                const std::string& deviceExecutor = "none");
// "" when all texts are equal; else "key 'K' is 'a' on rank i but 'b' on rank j".
std::string firstDifference(const std::vector<std::string>& texts);

}  // namespace gradcomp::nccl
