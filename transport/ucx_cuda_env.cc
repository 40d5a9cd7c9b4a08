#include "transport/ucx_cuda_env.h"

#include <dirent.h>
#include <dlfcn.h>
#include <ucs/type/status.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "common/log.h"
#include "common/param.h"

namespace gradcomp::transport::ucx {
namespace {

bool isCudaModule(const std::string& name) {
  return (name.rfind("libuct_cuda", 0) == 0 || name.rfind("libucm_cuda", 0) == 0) &&
         name.find(".so") != std::string::npos;
}

// UCX's CUDA hook fix for the drivers of CUDA 12.9+ came with 1.18.1.
bool beforeHookFix(const UcxRuntime& u) {
  if (u.major != 1) return u.major < 1;
  return u.minor < 18 || (u.minor == 18 && u.release < 1);
}

}  // namespace

std::string UcxRuntime::version() const {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

UcxRuntime probeUcxRuntime() {
  UcxRuntime u;
  ucp_get_version(&u.major, &u.minor, &u.release);
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&ucs_status_string), &info) != 0 && info.dli_fname) {
    std::string lib = info.dli_fname;
    const size_t slash = lib.rfind('/');
    u.moduleDirs.push_back((slash == std::string::npos ? std::string(".") : lib.substr(0, slash)) +
                           "/ucx");
  }
  if (const char* dir = getenv("UCX_MODULE_DIR"); dir && *dir) u.moduleDirs.push_back(dir);
  for (const std::string& d : u.moduleDirs) {
    DIR* dir = opendir(d.c_str());
    if (dir == nullptr) continue;
    while (dirent* e = readdir(dir))
      if (isCudaModule(e->d_name)) u.cudaModules.push_back(d + "/" + e->d_name);
    closedir(dir);
  }
  return u;
}

UcxCudaDecision decideUcxCuda(const UcxRuntime& ucx,
                              const std::function<const char*(const char*)>& lookup,
                              const std::string& mode) {
  UcxCudaDecision d;
  if (!ucx.cuda()) return d;
  const std::string what = "UCX " + ucx.version() + " has CUDA modules (" + ucx.cudaModules.front() +
                           (ucx.cudaModules.size() > 1 ? ", ..." : "") + ")";
  if (mode == "asis") {
    d.info.push_back(what + "; GRADCOMP_UCX_CUDA=asis: UCX's own defaults");
    return d;
  }
  const char* cache = lookup("UCX_MEMTYPE_CACHE");
  const char* hooks = lookup("UCX_MEM_CUDA_HOOK_MODE");
  if (cache == nullptr) {
    d.overrides.push_back({"MEMTYPE_CACHE", "n"});
    d.info.push_back(what + ": UCX_MEMTYPE_CACHE=n for gradcomp's UCX contexts (gradcomp hands "
                     "UCX host memory only; the cache would have UCX patch libcuda); set "
                     "UCX_MEMTYPE_CACHE or GRADCOMP_UCX_CUDA=asis to choose otherwise");
  } else {
    d.info.push_back(what + ": UCX_MEMTYPE_CACHE=" + cache + " as set");
  }
  const bool cacheOn = cache != nullptr && std::string(cache) != "n" && std::string(cache) != "no" &&
                       std::string(cache) != "0" && std::string(cache) != "off";
  if (hooks == nullptr && cacheOn && beforeHookFix(ucx)) {
    d.warnings.push_back(what + " and UCX_MEMTYPE_CACHE=" + cache +
                         ": UCX older than 1.18.1 patches the code of CUDA 12.9+ drivers wrongly "
                         "(openucx/ucx#10624; a rank died of SIGSEGV so); set "
                         "UCX_MEM_CUDA_HOOK_MODE=reloc in the job's environment (UCX reads it "
                         "when it loads, before gradcomp can)");
  } else if (hooks != nullptr) {
    d.info.push_back(std::string("UCX_MEM_CUDA_HOOK_MODE=") + hooks + " as set");
  }
  return d;
}

Status applyUcxCudaDefaults(ucp_config_t* config, const char* what) {
  std::string mode = "safe";
  GC_CHECK(param::getString(param::Id::UCX_CUDA, &mode));
  const UcxCudaDecision d = decideUcxCuda(probeUcxRuntime(), [](const char* n) { return getenv(n); },
                                          mode);
  for (const auto& [name, value] : d.overrides) {
    const ucs_status_t st = ucp_config_modify(config, name.c_str(), value.c_str());
    if (st != UCS_OK)
      return makeStatus(Err::SystemError, "%s: cannot set UCX %s=%s (GRADCOMP_UCX_CUDA=safe): %s",
                        what, name.c_str(), value.c_str(), ucs_status_string(st));
  }
  static std::once_flag once;
  std::call_once(once, [&] {
    for (const std::string& line : d.info) GC_INFO(TRANSPORT, "%s", line.c_str());
    for (const std::string& line : d.warnings) GC_WARN("%s", line.c_str());
  });
  return Status::Ok();
}

}  // namespace gradcomp::transport::ucx
