// The kernel registry (device/cuda/kernel_registry.h) is complete: every
// __global__ function the built library contains was announced to it at
// static initialization, so preloadKernels() loads all of them before any
// caller's stream is parked and no kernel can load lazily mid-call. Checked
// against the library files themselves: nvcc gives each kernel a host stub
// whose symbol carries the kernel's mangled name (nm lists it, no GPU needed).
#include <catch2/catch.hpp>

#include <cstdio>
#include <set>
#include <string>

#include "device/cuda/kernel_registry.h"

using namespace gradcomp;

namespace {

// Kernel names from the host stubs `nm` lists in `file`: a stub is
// _Z[L]<len>__device_stub_<kernel's mangled name><the stub's parameters>.
std::set<std::string> kernelsIn(const std::string& file, bool* wrapped) {
  std::set<std::string> out;
  *wrapped = false;
  FILE* p = popen(("nm --defined-only '" + file + "' 2>/dev/null").c_str(), "r");
  REQUIRE(p != nullptr);
  char line[8192];
  const std::string marker = "__device_stub_";
  while (fgets(line, sizeof line, p)) {
    std::string s(line);
    if (s.find("__wrap___cudaRegisterFunction") != std::string::npos) *wrapped = true;
    const size_t at = s.find(marker);
    if (at == std::string::npos) continue;
    // The decimal length right before the identifier.
    size_t digits = at;
    while (digits > 0 && isdigit(static_cast<unsigned char>(s[digits - 1]))) --digits;
    if (digits == at) continue;
    const size_t len = std::stoul(s.substr(digits, at - digits));
    if (digits < 2 || s.compare(digits - 2, 2, "_Z") != 0) {
      if (digits < 3 || s.compare(digits - 3, 3, "_ZL") != 0) continue;  // not a stub's own name
    }
    const std::string ident = s.substr(at, len);
    std::string name = ident.substr(marker.size());  // "_Z..." for C++ kernels
    if (name.compare(0, 2, "_Z") != 0 && !name.empty() && name[0] == '_') name.erase(0, 1);
    out.insert(name);
  }
  pclose(p);
  return out;
}

}  // namespace

TEST_CASE("kernel registry: every kernel in the library is registered for preloading",
          "[kernel-registry]") {
  std::set<std::string> registered;
  for (const device::cuda::KernelEntry& k : device::cuda::registeredKernels()) {
    CHECK(k.hostFunction != nullptr);
    registered.insert(k.deviceName);
  }
  INFO("registered: " << registered.size());
  REQUIRE(registered.size() >= 40);

  bool wrapped = false;
  const std::set<std::string> inArchive = kernelsIn(GC_DEVICE_CUDA_ARCHIVE, &wrapped);
  REQUIRE(inArchive.size() >= 40);
  CHECK(wrapped);  // kernel_registry.cc defines the wrapper
  for (const std::string& k : inArchive) {
    INFO("kernel in " << GC_DEVICE_CUDA_ARCHIVE << " never registered: " << k);
    CHECK(registered.count(k) == 1);
  }
  // And nothing registered that the library does not contain (a stale or
  // foreign name would hide a missing one).
  for (const std::string& k : registered) {
    INFO("registered but not a kernel of the library: " << k);
    CHECK(inArchive.count(k) == 1);
  }

  // The interposer users LD_PRELOAD: linked with the wrapper, every kernel in it.
  const std::set<std::string> inInterposer = kernelsIn(GC_INTERPOSER_LIBRARY, &wrapped);
  CHECK(wrapped);
  CHECK(inInterposer == inArchive);
}
