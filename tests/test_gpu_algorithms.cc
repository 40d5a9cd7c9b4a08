// [gpu] Every registered algorithm on the CUDA backend (kernels on the
// backend's stream, O(n) state in device memory, payloads in mapped pinned
// memory, syncs at communication rounds) against the same schedule on the
// CPU reference backend:
// P ranks as threads over the in-process transport, several calls (threshold
// evaluation and reuse, error feedback), results compared element by
// element. The kernels implement the CPU semantics (test_gpu_backend,
// test_gpu_kernels), so results agree to float rounding (1e-5 relative);
// fft uses cuFFT against FFTW, whose roundings differ, so its results are
// compared to 1e-3 of the largest |value|. A kernel handed a host pointer
// would fail with an illegal address instead.
//
// main: tests/support/gpu_main.cc (exits 4, skipped, without a CUDA device).
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "device/cuda/cuda_backend.h"
#include "support/algo_runner.h"

using namespace gradcomp;

namespace {

// `run` on the CPU reference and on one CUDA backend per rank: every rank's
// every call bit for bit the same (testing::checkMatchesCpu).
void requireCudaMatchesCpu(const testing::AlgoRun& run) {
  std::vector<std::vector<std::vector<uint8_t>>> cpu, gpu;
  std::vector<Status> cpuSt, gpuSt;
  testing::runRanks(run, [](int) -> device::Backend& { return device::cpuBackend(); }, &cpu,
                    &cpuSt);
  std::vector<std::unique_ptr<device::CudaBackend>> devs(run.ranks);
  for (auto& d : devs) REQUIRE(device::CudaBackend::create(0, &d).ok());
  testing::runRanks(run, [&](int r) -> device::Backend& { return *devs[r]; }, &gpu, &gpuSt);
  testing::checkMatchesCpu(run, cpu, cpuSt, gpu, gpuSt);
}

}  // namespace

TEST_CASE("gpu algorithms: CUDA backend matches the CPU reference", "[gpu]") {
  for (const algo::AlgorithmInfo* info : algo::listAlgorithms())
    for (const testing::Variant& v : testing::variantsOf(info->name)) {
      DYNAMIC_SECTION(info->name << " " << v.label) {
        testing::AlgoRun run;
        run.algo = info->name;
        run.ranks = 3;
        run.count = (size_t(1) << 16) + 3;
        run.calls = 4;
        for (const auto& [name, value] : v.params)
          REQUIRE(run.config.set(name, value, "test").ok());

        requireCudaMatchesCpu(run);
      }
    }
}

// The reduce-scatter forms (NCCL's layout, odd calls in place): each rank's
// shard on the CUDA backend equals the CPU backend's, through CallBudget as
// the CUDA executor runs them (memory reserved before the backend is parked).
TEST_CASE("gpu algorithms: reduce-scatter forms on CUDA match the CPU reference", "[gpu]") {
  for (const algo::AlgorithmInfo* info : algo::listAlgorithms()) {
    if (!info->reduceScatterReference) continue;
    for (const testing::Variant& v : testing::variantsOf(info->name)) {
      DYNAMIC_SECTION(info->name << " " << v.label) {
        testing::AlgoRun run;
        run.algo = info->name;
        run.coll = algo::Collective::ReduceScatter;
        run.ranks = 3;
        run.count = 3 * ((size_t(1) << 15) + 5);  // shards not a multiple of any bucket
        run.calls = 4;
        run.throughBudget = true;
        for (const auto& [name, value] : v.params)
          REQUIRE(run.config.set(name, value, "test").ok());
        requireCudaMatchesCpu(run);
      }
    }
  }
}

// Session 11's reduce-scatter paths on CUDA: the hierarchical schedule (two
// faked hosts, interleaved ranks) and qsgd shards of several phase-1 slices
// (2^18 elements each: the CPU reference sends slice by slice, the CUDA
// backend in groups of peers, the same messages), bit for bit the CPU's.
TEST_CASE("gpu algorithms: hierarchical and sliced reduce-scatters match the CPU", "[gpu]") {
  struct Case {
    const char* algo;
    std::vector<std::pair<const char*, const char*>> params;
    int ranks;
    size_t recvCount;
    std::vector<std::vector<int>> hosts;
  };
  const std::vector<Case> cases = {
      {"qsgd", {{"BITS", "4"}}, 4, (size_t(1) << 14) + 3, {{0, 2}, {1, 3}}},
      {"oktopk", {{"DENSITY", "0.01"}}, 4, (size_t(1) << 14) + 3, {{0, 2}, {1, 3}}},
      {"dense", {}, 4, (size_t(1) << 14) + 3, {{0, 2}, {1, 3}}},
      {"qsgd", {{"BITS", "4"}}, 3, 600001, {}},
  };
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.algo << " P=" << c.ranks << (c.hosts.empty() ? " flat" : " 2 hosts")) {
      testing::AlgoRun run;
      run.algo = c.algo;
      run.coll = algo::Collective::ReduceScatter;
      run.ranks = c.ranks;
      run.count = size_t(c.ranks) * c.recvCount;
      run.calls = 3;
      run.hosts = c.hosts;
      run.throughBudget = true;
      for (const auto& [name, value] : c.params) REQUIRE(run.config.set(name, value, "test").ok());
      requireCudaMatchesCpu(run);
    }
  }
}
