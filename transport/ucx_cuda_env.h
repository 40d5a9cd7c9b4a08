// What gradcomp sets in a UCX built with CUDA support (issue 31, part f).
//
// gradcomp hands UCX host memory only, and says so (UCP_OP_ATTR_FIELD_MEMORY_TYPE
// = host on every transfer of its own transport; the net plugin advertises CUDA
// memory only where UCX reports it). It therefore needs none of UCX's CUDA
// memory machinery. That machinery is not harmless: UCX's memory-type cache
// subscribes to CUDA allocation events, and with UCX_MEM_CUDA_HOOK_MODE at its
// default (bistro) UCX then rewrites the first instructions of libcuda's
// allocation functions; UCX before 1.18.1 relocates the prologue of the
// drivers of CUDA 12.9 and later wrongly (openucx/ucx#10624). A rank of the
// GPU batch died of SIGSEGV in a UCX-patched thread with UCX 1.16.0 and driver
// 580 (docs/results/gpu/2026-11-28-h200/call4/b2_info.txt).
//
// Contract of GRADCOMP_UCX_CUDA=safe (the default), applied to every ucp_config
// gradcomp reads (its transport and bootstrap contexts, the net plugin's),
// between ucp_config_read and ucp_init, and only where UCX has CUDA modules:
//  - UCX_MEMTYPE_CACHE unset: MEMTYPE_CACHE=n through ucp_config_modify
//    before ucp_init. UCX keeps this option process-wide (ucp_config_modify
//    falls through to UCX's global options, 1.13 and later), so UCX contexts
//    created afterwards in the process see it too; the environment is
//    untouched. Logged once per process at INFO.
//  - UCX_MEMTYPE_CACHE set by the user: left as set.
//  - UCX_MEM_CUDA_HOOK_MODE: UCX reads it when libucs loads, before any
//    gradcomp code runs, so gradcomp cannot default it; where it is unset,
//    the memory-type cache is on and UCX is older than 1.18.1, a warning says
//    to set UCX_MEM_CUDA_HOOK_MODE=reloc in the job's environment.
// GRADCOMP_UCX_CUDA=asis: UCX's own defaults, nothing set or said beyond one
// INFO line.
#pragma once

#include <ucp/api/ucp.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace gradcomp::transport::ucx {

// The UCX this process loaded.
struct UcxRuntime {
  unsigned major = 0, minor = 0, release = 0;  // ucp_get_version
  std::vector<std::string> moduleDirs;         // searched, existing or not
  std::vector<std::string> cudaModules;        // lib{uct,ucm}_cuda*.so* found in them
  bool cuda() const { return !cudaModules.empty(); }
  std::string version() const;  // "1.16.0"
};

// UCX's module directories, as UCX searches them: the folder of the loaded
// libucs.so plus "/ucx", then $UCX_MODULE_DIR when set; and the CUDA modules
// in them.
UcxRuntime probeUcxRuntime();

// The decision, a pure function of the runtime, the environment (lookup:
// getenv-like, nullptr when unset) and GRADCOMP_UCX_CUDA's value.
struct UcxCudaDecision {
  std::vector<std::pair<std::string, std::string>> overrides;  // ucp_config_modify(NAME, VALUE)
  std::vector<std::string> info;      // INFO lines (once per process)
  std::vector<std::string> warnings;  // WARN lines (once per process)
};
UcxCudaDecision decideUcxCuda(const UcxRuntime& ucx,
                              const std::function<const char*(const char*)>& lookup,
                              const std::string& mode);

// probeUcxRuntime + decideUcxCuda (GRADCOMP_UCX_CUDA from the registry) on
// `config`: applies the overrides, logs the lines once per process. An
// override UCX rejects is an error naming it (`what`: whose context).
Status applyUcxCudaDefaults(ucp_config_t* config, const char* what);

}  // namespace gradcomp::transport::ucx
