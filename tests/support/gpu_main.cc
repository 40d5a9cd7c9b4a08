// main() of every tests/test_gpu_*.cc: without a CUDA device it prints
// "no CUDA device: skipping" and exits 4 (CTest's SKIP_RETURN_CODE), but
// still answers Catch2's listing options so test discovery works on machines
// without a GPU. Linked instead of catch_main (tests/CMakeLists.txt).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include "device/cuda/cuda_backend.h"

int main(int argc, char** argv) {
  Catch::Session session;
  if (int rc = session.applyCommandLine(argc, argv)) return rc;
  const Catch::ConfigData& cfg = session.configData();
  const bool onlyListing = cfg.listTests || cfg.listTestNamesOnly || cfg.listTags ||
                           cfg.listReporters || cfg.showHelp;
  if (!onlyListing && gradcomp::device::cudaDeviceCount() == 0) {
    std::printf("no CUDA device: skipping\n");
    return 4;
  }
  const int rc = session.run();
  return rc == 4 ? 5 : rc;  // 4 failed cases must not read as "skipped"
}
