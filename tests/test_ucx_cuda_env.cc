// gradcomp's defaults for a UCX with CUDA modules (transport/ucx_cuda_env.h):
// the decision from the runtime and the environment, the probe of UCX's
// module directories, and that the override reaches a real ucp_config.
#include <catch2/catch.hpp>

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <ucp/api/ucp.h>
#include <ucs/config/global_opts.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <string>

#include "transport/ucx_cuda_env.h"

using namespace gradcomp::transport::ucx;

namespace {

UcxRuntime cudaUcx(unsigned minor, unsigned release) {
  UcxRuntime u;
  u.major = 1;
  u.minor = minor;
  u.release = release;
  u.moduleDirs = {"/lib/x86_64-linux-gnu/ucx"};
  u.cudaModules = {"/lib/x86_64-linux-gnu/ucx/libuct_cuda.so.0"};
  return u;
}

struct FakeEnv {
  std::map<std::string, std::string> vars;
  const char* operator()(const char* name) const {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  }
};

bool mentions(const std::vector<std::string>& lines, const std::string& text) {
  for (const auto& l : lines)
    if (l.find(text) != std::string::npos) return true;
  return false;
}

// UCX's process-wide value of MEMTYPE_CACHE (a global option of libucs).
std::string memtypeCache() {
  char value[64] = "?";
  if (ucs_global_opts_get_value("MEMTYPE_CACHE", value, sizeof value) != UCS_OK) return "?";
  return value;
}

}  // namespace

TEST_CASE("ucx cuda: no CUDA modules, nothing set or said", "[ucx_cuda]") {
  UcxRuntime plain = cudaUcx(13, 1);
  plain.cudaModules.clear();
  const UcxCudaDecision d = decideUcxCuda(plain, FakeEnv{}, "safe");
  CHECK(d.overrides.empty());
  CHECK(d.info.empty());
  CHECK(d.warnings.empty());
}

TEST_CASE("ucx cuda: safe sets MEMTYPE_CACHE=n only where the user did not", "[ucx_cuda]") {
  const UcxCudaDecision d = decideUcxCuda(cudaUcx(16, 0), FakeEnv{}, "safe");
  REQUIRE(d.overrides.size() == 1);
  CHECK(d.overrides[0].first == "MEMTYPE_CACHE");
  CHECK(d.overrides[0].second == "n");
  CHECK(mentions(d.info, "UCX 1.16.0 has CUDA modules"));
  CHECK(mentions(d.info, "UCX_MEMTYPE_CACHE=n"));
  CHECK(d.warnings.empty());  // the cache is off: nothing asks UCX to patch libcuda

  FakeEnv own{{{"UCX_MEMTYPE_CACHE", "n"}}};
  const UcxCudaDecision kept = decideUcxCuda(cudaUcx(16, 0), own, "safe");
  CHECK(kept.overrides.empty());
  CHECK(mentions(kept.info, "UCX_MEMTYPE_CACHE=n as set"));
}

TEST_CASE("ucx cuda: a cache forced on with bistro hooks before 1.18.1 warns", "[ucx_cuda]") {
  FakeEnv on{{{"UCX_MEMTYPE_CACHE", "y"}}};
  const UcxCudaDecision old = decideUcxCuda(cudaUcx(16, 0), on, "safe");
  CHECK(old.overrides.empty());
  REQUIRE(old.warnings.size() == 1);
  CHECK(mentions(old.warnings, "UCX_MEM_CUDA_HOOK_MODE=reloc"));
  CHECK(decideUcxCuda(cudaUcx(18, 0), on, "safe").warnings.size() == 1);
  CHECK(decideUcxCuda(cudaUcx(18, 1), on, "safe").warnings.empty());
  CHECK(decideUcxCuda(cudaUcx(19, 0), on, "safe").warnings.empty());
  FakeEnv reloc{{{"UCX_MEMTYPE_CACHE", "y"}, {"UCX_MEM_CUDA_HOOK_MODE", "reloc"}}};
  const UcxCudaDecision set = decideUcxCuda(cudaUcx(16, 0), reloc, "safe");
  CHECK(set.warnings.empty());
  CHECK(mentions(set.info, "UCX_MEM_CUDA_HOOK_MODE=reloc as set"));
}

TEST_CASE("ucx cuda: asis leaves UCX's defaults", "[ucx_cuda]") {
  const UcxCudaDecision d = decideUcxCuda(cudaUcx(16, 0), FakeEnv{}, "asis");
  CHECK(d.overrides.empty());
  CHECK(d.warnings.empty());
  CHECK(mentions(d.info, "GRADCOMP_UCX_CUDA=asis"));
}

TEST_CASE("ucx cuda: the probe finds CUDA modules in UCX_MODULE_DIR", "[ucx_cuda]") {
  char dir[] = "/tmp/gc_ucx_modulesXXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string mod = std::string(dir) + "/libuct_cuda.so.0";
  FILE* f = fopen(mod.c_str(), "w");
  REQUIRE(f != nullptr);
  fclose(f);
  const char* before = getenv("UCX_MODULE_DIR");
  const std::string saved = before ? before : "";
  setenv("UCX_MODULE_DIR", dir, 1);
  const UcxRuntime u = probeUcxRuntime();
  CHECK(u.cuda());
  CHECK(u.cudaModules.back() == mod);
  CHECK(u.moduleDirs.back() == dir);
  CHECK(u.major == 1);  // the UCX this test is linked against

  // The override reaches UCX before ucp_init; the environment is untouched.
  unsetenv("UCX_MEMTYPE_CACHE");
  ucp_config_t* config = nullptr;
  REQUIRE(ucp_config_read(nullptr, nullptr, &config) == UCS_OK);
  const std::string initial = memtypeCache();
  CHECK(initial == "try");  // UCX's default
  REQUIRE(applyUcxCudaDefaults(config, "test").ok());
  CHECK(memtypeCache() == "n");
  CHECK(getenv("UCX_MEMTYPE_CACHE") == nullptr);
  ucp_context_h ctx = nullptr;  // a context still starts with it
  {
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG;
    CHECK(ucp_init(&params, config, &ctx) == UCS_OK);
  }
  if (ctx) ucp_cleanup(ctx);
  ucp_config_release(config);
  ucp_config_t* restore = nullptr;
  REQUIRE(ucp_config_read(nullptr, nullptr, &restore) == UCS_OK);
  CHECK(ucp_config_modify(restore, "MEMTYPE_CACHE", initial.c_str()) == UCS_OK);
  ucp_config_release(restore);

  if (before) setenv("UCX_MODULE_DIR", saved.c_str(), 1); else unsetenv("UCX_MODULE_DIR");
  unlink(mod.c_str());
  rmdir(dir);
}
