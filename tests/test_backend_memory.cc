// The device-resident data path, proven without a GPU on the cpu-device
// backend (device/cpu/cpu_device_backend.h): device memory that faults when
// host code touches it, deferred primitives (results only after sync), and
// primitives that refuse memory the backend did not allocate. Every
// registered algorithm runs its real schedule on it (ranks as threads over
// the in-process transport) and must return exactly what it returns on the
// CPU reference backend, which runs the same code synchronously on the heap.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "device/arrays.h"
#include "device/cpu/cpu_device_backend.h"
#include "support/algo_runner.h"

using namespace gradcomp;

namespace {

using Results = std::vector<std::vector<std::vector<uint8_t>>>;

// Runs `run` on the CPU reference and on cpu-device backends (one per rank)
// and requires identical bytes from every rank on every call.
void runOnDevice(const testing::AlgoRun& run, const std::string& label) {
  Results cpu, dev;
  std::vector<Status> cpuSt, devSt;
  testing::runRanks(run, [](int) -> device::Backend& { return device::cpuBackend(); }, &cpu,
                    &cpuSt);
  std::vector<std::unique_ptr<device::Backend>> backends;
  for (int r = 0; r < run.ranks; ++r) backends.push_back(device::makeCpuDeviceBackend());
  testing::runRanks(run, [&](int r) -> device::Backend& { return *backends[r]; }, &dev, &devSt);
  for (int r = 0; r < run.ranks; ++r) {
    INFO(run.algo << " [" << label << "] " << dtypeName(run.dtype) << " P=" << run.ranks
                  << " rank " << r << ": cpu " << cpuSt[r].toString() << ", cpu-device "
                  << devSt[r].toString());
    REQUIRE(cpuSt[r].ok());
    REQUIRE(devSt[r].ok());
    REQUIRE(dev[r].size() == cpu[r].size());
    for (size_t c = 0; c < cpu[r].size(); ++c) {
      INFO("call " << c);
      CHECK(dev[r][c] == cpu[r][c]);
    }
    const device::Traffic t = backends[r]->traffic();
    CHECK(t.syncs > 0);
    CHECK(t.primitives > 0);
    CHECK(t.d2hBytes + t.h2dBytes > 0);
  }
}

}  // namespace

TEST_CASE("cpu-device: every algorithm runs device-resident, bit-identical to the CPU",
          "[memory]") {
  for (const algo::AlgorithmInfo* info : algo::listAlgorithms())
    for (const testing::Variant& v : testing::variantsOf(info->name))
      for (int P : {3, 4})
        for (DataType t : {DataType::Float32, DataType::Float16, DataType::BFloat16}) {
          DYNAMIC_SECTION(info->name << " " << v.label << " P=" << P << " " << dtypeName(t)) {
            testing::AlgoRun run;
            run.algo = info->name;
            run.ranks = P;
            run.dtype = t;
            run.calls = 4;
            for (const auto& [name, value] : v.params)
              REQUIRE(run.config.set(name, value, "test").ok());
            runOnDevice(run, v.label);
          }
        }
}

TEST_CASE("cpu-device: non-finite fallbacks and bf16 residuals too", "[memory]") {
  for (const algo::AlgorithmInfo* info : algo::listAlgorithms()) {
    DYNAMIC_SECTION(info->name) {
      testing::AlgoRun run;
      run.algo = info->name;
      run.nanCall = 2;
      REQUIRE(run.config.set("EF_DTYPE", "bfloat16", "test").ok());
      if (info->name == "wagma") REQUIRE(run.config.set("WAGMA_WAIT", "1", "test").ok());
      runOnDevice(run, "NaN at call 2, bf16 residuals");
    }
  }
}

TEST_CASE("cpu-device: host code touching device memory faults", "[memory]") {
  // In a child: the fault must end it (SIGSEGV, or a sanitizer's report).
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (!std::freopen("/dev/null", "w", stdout)) _exit(4);  // Catch2 reports the signal there
    std::unique_ptr<device::Backend> dev = device::makeCpuDeviceBackend();
    float* p = static_cast<float*>(dev->allocate(4096));
    if (p == nullptr) _exit(3);
    volatile float* v = p;
    v[1] = 1.0f;  // host write outside a primitive
    _exit(0);     // not reached when the arena is protected
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  const bool faulted = (WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV) ||
                       (WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 3);
  CHECK(faulted);
}

TEST_CASE("cpu-device: primitives refuse memory the backend did not allocate", "[memory]") {
  std::unique_ptr<device::Backend> dev = device::makeCpuDeviceBackend();
  device::DeviceArray<float> d(*dev, 16);
  std::vector<float> heap(16, 1.0f);
  REQUIRE(dev->add(d.data(), d.data(), heap.data(), 16, DataType::Float32).ok());  // deferred
  const Status s = dev->sync();
  CHECK(s.code() == Err::InvalidArgument);
  CHECK(s.message().find("add") != std::string::npos);
  CHECK(s.message().find("'b'") != std::string::npos);
  // The backend recovers: the next sync has nothing failed left.
  CHECK(dev->sync().ok());
}

TEST_CASE("cpu-device: results and host memory change only at sync", "[memory]") {
  std::unique_ptr<device::Backend> dev = device::makeCpuDeviceBackend();
  device::HostArray<float> host(*dev, 8);
  for (size_t i = 0; i < 8; ++i) host[i] = float(i) - 3.5f;  // |x|: 3.5 2.5 1.5 .5 .5 1.5 2.5 3.5
  device::DeviceArray<float> x(*dev);
  REQUIRE(x.assign(host.data(), 8).ok());
  float th = 0;
  size_t above = 0;
  REQUIRE(dev->kthLargestAbs(x.data(), 8, 3, &th, &above).ok());
  CHECK(std::isnan(th));  // poisoned until sync
  device::HostArray<float> back(*dev, 8);
  for (size_t i = 0; i < 8; ++i) back[i] = 99.0f;
  REQUIRE(dev->copy(back.data(), x.data(), 32).ok());
  CHECK(back[0] == 99.0f);  // not copied yet
  REQUIRE(dev->sync().ok());
  CHECK(th == 2.5f);
  CHECK(above == 2);
  CHECK(back[0] == -3.5f);
  const device::Traffic t = dev->traffic();
  CHECK(t.h2dBytes == 32);                      // the assign
  CHECK(t.d2hBytes == 32 + sizeof th + sizeof above);  // the copy back, the scalars
  CHECK(t.syncs == 1);
}

TEST_CASE("backend arrays: growth keeps contents, bind drops them", "[memory]") {
  std::unique_ptr<device::Backend> dev = device::makeCpuDeviceBackend();
  device::HostArray<uint32_t> h(*dev, 4);
  for (uint32_t i = 0; i < 4; ++i) h[i] = i + 1;
  device::DeviceArray<uint32_t> d(*dev);
  REQUIRE(d.assign(h.data(), 4).ok());
  d.resize(1000);  // regrows through a device copy
  device::HostArray<uint32_t> back(*dev, 4);
  REQUIRE(dev->copy(back.data(), d.data(), 16).ok());
  REQUIRE(dev->sync().ok());
  CHECK(back[3] == 4u);
  h.resize(2000);
  CHECK(h[2] == 3u);  // host growth keeps the old elements (new ones are undefined)
  d.bind(device::cpuBackend());
  CHECK(d.size() == 0);
  CHECK(d.backend() == &device::cpuBackend());
}
