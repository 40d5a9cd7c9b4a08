// Every registered algorithm hands its backend's primitives only memory that
// backend allocated (device::Buffer) or the call's own buffers. Under the
// CUDA executor that is what makes the kernels' pointers valid: allocate()
// returns mapped pinned memory there, and a host heap pointer given to a
// kernel is an illegal address. The CheckedBackend records every other
// pointer; all ranks run real schedules over the in-process transport.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "device/buffer.h"
#include "support/algo_runner.h"
#include "support/checked_backend.h"

using namespace gradcomp;

namespace {

void runChecked(testing::AlgoRun run, const std::string& label) {
  std::vector<std::unique_ptr<testing::CheckedBackend>> devs;
  for (int r = 0; r < run.ranks; ++r) devs.push_back(std::make_unique<testing::CheckedBackend>());
  std::vector<std::vector<std::vector<uint8_t>>> results;
  std::vector<Status> st;
  testing::runRanks(run, [&](int r) -> device::Backend& { return *devs[r]; }, &results, &st);
  for (int r = 0; r < run.ranks; ++r) {
    INFO(run.algo << " [" << label << "] P=" << run.ranks << " rank " << r << ": "
                  << st[r].toString());
    REQUIRE(st[r].ok());
    const auto bad = devs[r]->violations();
    std::string list;
    for (const auto& line : bad) list += "\n  " + line;
    INFO("violations:" << list);
    CHECK(bad.empty());
    CHECK(devs[r]->checkedPointers() > 0);
    // Buffers bound to this rank's backend all went back to it.
    CHECK(devs[r]->liveAllocations() == 0);
  }
}

}  // namespace

TEST_CASE("backend memory: algorithms give primitives only backend memory", "[memory]") {
  for (const algo::AlgorithmInfo* info : algo::listAlgorithms())
    for (const testing::Variant& v : testing::variantsOf(info->name))
      for (int P : {3, 4}) {
        DYNAMIC_SECTION(info->name << " " << v.label << " P=" << P) {
          testing::AlgoRun run;
          run.algo = info->name;
          run.ranks = P;
          for (const auto& [name, value] : v.params)
            REQUIRE(run.config.set(name, value, "test").ok());
          runChecked(run, v.label);
        }
      }
}

TEST_CASE("backend memory: non-finite fallbacks too", "[memory]") {
  for (const algo::AlgorithmInfo* info : algo::listAlgorithms()) {
    DYNAMIC_SECTION(info->name) {
      testing::AlgoRun run;
      run.algo = info->name;
      run.nanCall = 2;
      if (info->name == "wagma") REQUIRE(run.config.set("WAGMA_WAIT", "1", "test").ok());
      runChecked(run, "NaN at call 2");
    }
  }
}

TEST_CASE("backend memory: dense on 16-bit floats", "[memory]") {
  testing::AlgoRun run;
  run.algo = "dense";
  run.count = 1 << 15;
  run.dtype = DataType::BFloat16;
  runChecked(run, "bf16");
}

TEST_CASE("backend memory: Buffer keeps its memory space", "[memory]") {
  testing::CheckedBackend dev;
  {
    auto a = device::makeBuffer<float>(dev, 100);
    device::Buffer<float> heap(50, 1.5f);
    REQUIRE(dev.liveAllocations() == 1);
    a = heap;  // copies elements into a's space
    CHECK(a.get_allocator().backend() == &dev);
    CHECK(a.size() == 50);
    CHECK(a[49] == 1.5f);
    auto b = std::move(a);  // move construction takes the allocation along
    CHECK(b.get_allocator().backend() == &dev);
    b.resize(10000);
    CHECK(dev.liveAllocations() == 1);
    device::Buffer<float> unbound(3, 2.0f);
    device::bound(unbound, dev);  // moves into dev's memory, contents kept
    CHECK(unbound.get_allocator().backend() == &dev);
    CHECK(unbound[2] == 2.0f);
    CHECK(dev.liveAllocations() == 2);
  }
  CHECK(dev.liveAllocations() == 0);
  CHECK(dev.violations().empty());
}
