// Issue 40, the device side of one call path (docs/design.md, "Who may call
// what, and when"), on the CPU:
// - the lock rule: no lock of ours is held across a wait for the device or a
//   driver call that may wait for a parked stream. A sync() running on the
//   proxy does not hold up reserve()/allocate() on the calling thread
//   (cpu-device runs its deferred primitives as a GPU runs kernels), and a
//   reserve() whose growth is stuck in the driver does not hold up the
//   proxy's allocate/release/unpark (SlabHeap's source).
// - the gate: the calling thread waits for earlier calls exactly when the
//   call's plans are new or its reservation would grow memory
//   (CallBudget::plan), shapes keyed by the algorithm that runs (auto's
//   candidates under the name "auto").
// Every wait here is bounded: a regression fails, it does not hang.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/call_budget.h"
#include "device/cpu/cpu_device_backend.h"
#include "device/slab_heap.h"
#include "transport/local_transport.h"

using namespace gradcomp;
using device::Backend;
using device::SlabHeap;
using Clock = std::chrono::steady_clock;

namespace {

// What "promptly" means: far beyond any scheduling delay, far below a hang.
constexpr auto kPrompt = std::chrono::seconds(3);

// A flag threads wait on. Declared before what its waiters use; an
// OpenOnExit declared after them opens it first when the test ends, failed
// or not, so every waiting thread finishes before anything it uses goes.
class Gate {
 public:
  void open() { open_.store(true); }
  void wait() const {
    while (!open_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

 private:
  std::atomic<bool> open_{false};
};
struct OpenOnExit {
  Gate& gate;
  ~OpenOnExit() { gate.open(); }
};

// Draws `bytes` of device memory per call (beyond the free blocks the first
// time) and declares `extra` beyond the first-call bound, as fft does.
class Drawing final : public algo::Algorithm {
 public:
  explicit Drawing(size_t bytes, size_t extra = 0) : bytes_(bytes), extra_(extra) {}
  Status allreduce(algo::Context& ctx, const algo::AllreduceArgs& args) override {
    (void)args;
    void* p = ctx.dev.allocate(bytes_);
    GC_REQUIRE(p != nullptr, Err::SystemError, "no device memory for %zu bytes", bytes_);
    GC_CHECK(ctx.dev.zero(p, bytes_));
    ctx.dev.deallocate(p, bytes_);
    return Status::Ok();
  }
  Backend::Reservation extraFirstCall(const algo::AllreduceArgs& args) const override {
    (void)args;
    return {extra_, 0};
  }

 private:
  const size_t bytes_, extra_;
};

algo::AllreduceArgs floats(size_t count) {
  algo::AllreduceArgs a;
  a.count = count;
  a.dtype = DataType::Float32;
  return a;
}

// The proxy's part of a call: run parked (strict on cpu-device), then sync.
Status runParked(algo::CallBudget& budget, algo::Algorithm& alg, const std::string& name,
                 algo::Context& ctx, const algo::AllreduceArgs& a,
                 const algo::CallBudget::Plan& plan) {
  GC_CHECK(budget.run(alg, name, ctx, a, plan.reservation));
  return ctx.dev.sync();
}

}  // namespace

TEST_CASE("call path: a sync running on the proxy holds up nothing on the calling thread",
          "[call-path][lock]") {
  Gate held;
  std::promise<void> started;
  std::unique_ptr<Backend> dev = device::makeCpuDeviceBackend();
  void* buf = dev->allocate(4096);
  REQUIRE(buf != nullptr);
  std::future<void> running = started.get_future();
  std::future<Status> syncing;
  std::future<Status> reserving;
  std::future<bool> others;
  OpenOnExit release{held};
  // The proxy's sync, inside a primitive that takes as long as the test says
  // (a GPU still running the call's kernels).
  REQUIRE(device::recordCpuDevicePrimitiveForTest(*dev, "held", [&]() -> Status {
    started.set_value();
    held.wait();
    return Status::Ok();
  }));
  syncing = std::async(std::launch::async, [&] { return dev->sync(); });
  REQUIRE(running.wait_for(kPrompt) == std::future_status::ready);

  // The calling thread prepares the next call: its reservation grows memory.
  const auto t0 = Clock::now();
  reserving = std::async(std::launch::async, [&] {
    return dev->reserve(Backend::Reservation{size_t(32) << 20, size_t(8) << 20});
  });
  const bool reservedPromptly = reserving.wait_for(kPrompt) == std::future_status::ready;
  {
    INFO("reserve() waited " << std::chrono::duration<double>(Clock::now() - t0).count()
                             << " s for a sync (bounded at " << kPrompt.count() << " s)");
    CHECK(reservedPromptly);
  }
  // Nor do allocation, a primitive recorded for the next sync, or traffic.
  others = std::async(std::launch::async, [&] {
    void* p = dev->allocate(size_t(2) << 20);
    const bool ok = p != nullptr && dev->zero(p, size_t(2) << 20).ok();
    (void)dev->traffic();
    if (p) dev->deallocate(p, size_t(2) << 20);
    return ok;
  });
  const bool othersPromptly = others.wait_for(kPrompt) == std::future_status::ready;
  CHECK(othersPromptly);

  held.open();
  REQUIRE(syncing.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  CHECK(syncing.get().ok());
  REQUIRE(reserving.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  CHECK(reserving.get().ok());
  REQUIRE(others.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  CHECK(others.get());
  dev->deallocate(buf, 4096);
  CHECK(dev->sync().ok());
}

TEST_CASE("call path: a reserve stuck growing in the driver holds up nothing on the proxy",
          "[call-path][lock]") {
  // The source blocks once armed, as cudaHostAlloc does while a stream is
  // parked on a call whose proxy is what it waits for.
  std::atomic<bool> armed{false};
  std::promise<void> entered;
  Gate driver;
  SlabHeap::Source source;
  source.grow = [&](size_t bytes) -> void* {
    if (armed.exchange(false)) {
      entered.set_value();
      driver.wait();
    }
    return ::operator new(bytes, std::align_val_t(64));
  };
  source.free = [](void* p, size_t) { ::operator delete(p, std::align_val_t(64)); };
  {
    SlabHeap heap("test heap", source, size_t(1) << 16);
    std::future<bool> reserving;
    std::future<bool> proxy;
    OpenOnExit release{driver};
    REQUIRE(heap.reserve(size_t(1) << 16));
    void* block = heap.allocate(1024);
    REQUIRE(block != nullptr);
    heap.park("call #1", /*strict=*/true);

    armed = true;
    std::future<void> inDriver = entered.get_future();
    reserving = std::async(std::launch::async, [&] { return heap.reserve(size_t(1) << 20); });
    REQUIRE(inDriver.wait_for(kPrompt) == std::future_status::ready);
    // The parked call goes on: blocks from the free list, then it ends.
    proxy = std::async(std::launch::async, [&] {
      heap.release(block, 1024);
      void* again = heap.allocate(1024);
      size_t carved = 0;
      const bool clean = heap.unpark(size_t(1) << 16, &carved).empty();
      heap.release(again, 1024);
      return again == block && clean;
    });
    const bool proxyPromptly = proxy.wait_for(kPrompt) == std::future_status::ready;
    CHECK(proxyPromptly);

    driver.open();
    REQUIRE(reserving.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
    CHECK(reserving.get());
    REQUIRE(proxy.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
    CHECK(proxy.get());
    CHECK(heap.slabBytes() >= (size_t(1) << 20) + (size_t(1) << 16));
    CHECK_FALSE(heap.wouldGrow(0));  // what the stuck reserve promised is there
  }
}

TEST_CASE("call path: a queued call of a seen shape waits exactly when it would grow memory",
          "[call-path][budget]") {
  std::unique_ptr<Backend> dev = device::makeCpuDeviceBackend();
  auto nets = transport::createLocalTransports(1, 30);
  const param::Overrides config;
  algo::Context ctx{*nets[0], *dev, config, 0, nullptr};
  algo::CallBudget budget;
  // A DDP step's buckets of one shape: each call draws 2 MiB (after the
  // first, from the free list), reserves what it drew, and up to four queue
  // behind each other before the proxy runs them.
  Drawing bucket(size_t(2) << 20);
  const algo::AllreduceArgs a = floats(1024);

  const algo::CallBudget::Plan first = budget.plan(bucket, "bucket", *dev, a);
  CHECK(first.newShape);
  CHECK(first.needsIdle);
  REQUIRE(budget.prepare(bucket, "bucket", ctx, a, first).ok());
  REQUIRE(runParked(budget, bucket, "bucket", ctx, a, first).ok());

  // The first call's slab (its first-call bound, about 9 MiB) leaves room
  // for three promises of 2 MiB; the fourth queued one would grow memory
  // while the calls before it park the stream.
  std::vector<algo::CallBudget::Plan> queued;
  for (int call = 1; call <= 4; ++call) {
    const algo::CallBudget::Plan p = budget.plan(bucket, "bucket", *dev, a);
    INFO("call " << call << " reserves " << p.reservation.deviceBytes << " device bytes");
    CHECK_FALSE(p.newShape);
    CHECK(p.reservation.deviceBytes == (size_t(2) << 20));
    CHECK(p.wouldGrow == (call == 4));
    CHECK(p.needsIdle == (call == 4));
    if (p.needsIdle) {
      // What the executor does: the earlier calls finish (the proxy runs
      // them), then the reservation grows with no stream parked.
      for (size_t i = 0; i < queued.size(); ++i)
        REQUIRE(runParked(budget, bucket, "bucket", ctx, a, queued[i]).ok());
      queued.clear();
    }
    REQUIRE(budget.prepare(bucket, "bucket", ctx, a, p).ok());
    queued.push_back(p);
  }
  for (const algo::CallBudget::Plan& p : queued)
    REQUIRE(runParked(budget, bucket, "bucket", ctx, a, p).ok());
  // Steady state: a seen shape that fits waits for nothing.
  const algo::CallBudget::Plan steady = budget.plan(bucket, "bucket", *dev, a);
  CHECK_FALSE(steady.needsIdle);

  // The heap's answer is what reserve() then does.
  int grown = 0;
  SlabHeap::Source counting;
  counting.grow = [&](size_t bytes) {
    ++grown;
    return ::operator new(bytes, std::align_val_t(64));
  };
  counting.free = [](void* p, size_t) { ::operator delete(p, std::align_val_t(64)); };
  SlabHeap heap("test heap", counting, size_t(1) << 16);
  for (size_t bytes : {size_t(40) << 10, size_t(20) << 10, size_t(8) << 10, size_t(1) << 16,
                       size_t(0), size_t(1) << 17}) {
    const bool predicted = heap.wouldGrow(bytes);
    const int before = grown;
    REQUIRE(heap.reserve(bytes));
    INFO("reserve(" << bytes << ")");
    CHECK(predicted == (grown > before));
  }
}

TEST_CASE("call path: auto's candidates under one name are shapes of their own",
          "[call-path][auto]") {
  std::unique_ptr<Backend> dev = device::makeCpuDeviceBackend();
  auto nets = transport::createLocalTransports(1, 30);
  const param::Overrides config;
  algo::Context ctx{*nets[0], *dev, config, 0, nullptr};
  algo::CallBudget budget;
  // The interposer runs auto's calls under the rule's name, "auto", with the
  // candidate the tuner chose as the algorithm (plugin/nccl/interposer.cc,
  // runAuto -> runCompressed(..., activity = "auto")).
  Drawing small(4096);
  Drawing large(size_t(12) << 20, size_t(16) << 20);  // declares what it draws, as fft does
  const algo::AllreduceArgs a = floats(1024);

  const algo::CallBudget::Plan first = budget.plan(small, "auto", *dev, a);
  REQUIRE(budget.prepare(small, "auto", ctx, a, first).ok());
  REQUIRE(runParked(budget, small, "auto", ctx, a, first).ok());
  const algo::CallBudget::Plan again = budget.plan(small, "auto", *dev, a);
  CHECK_FALSE(again.needsIdle);

  // The tuner switches candidate: the new one's plans and first-call bound,
  // after the earlier calls -- not the last candidate's draw under "auto".
  const algo::CallBudget::Plan next = budget.plan(large, "auto", *dev, a);
  CHECK(next.newShape);
  CHECK(next.needsIdle);
  CHECK(next.reservation.deviceBytes >= (size_t(12) << 20));
  REQUIRE(budget.prepare(large, "auto", ctx, a, next).ok());
  const Status ran = runParked(budget, large, "auto", ctx, a, next);
  INFO(ran.toString());
  CHECK(ran.ok());  // strict on cpu-device: growth while parked would fail it
}

namespace {

// One primitive per call: copies the input to the output on the backend.
class CopiesOnBackend final : public algo::Algorithm {
 protected:
  Status runAllreduce(algo::Context& ctx, const algo::AllreduceArgs& args) override {
    return ctx.dev.copy(args.recvBuf, args.sendBuf, args.count * dtypeSize(args.dtype));
  }
};

}  // namespace

TEST_CASE("call path: once the watchdog released a call, its backend enqueues nothing more and "
          "the call runner returns why", "[call-path][watchdog]") {
  // The CUDA executor sets the refusal to its engine's cancellation: a job
  // still running after the watchdog released the caller's stream must not
  // write recvbuff behind it. cpu-device keeps the same rule.
  std::unique_ptr<Backend> dev = device::makeCpuDeviceBackend();
  std::atomic<bool> released{false};
  dev->setRefusal([&] {
    return released.load() ? Status(Err::Timeout, "released by the watchdog (test)") : Status::Ok();
  });
  constexpr size_t n = 1024;
  void* in = dev->allocate(n * 4);
  void* out = dev->allocate(n * 4);
  REQUIRE((in && out));
  auto nets = transport::createLocalTransports(1, 5);
  param::Overrides config;
  algo::Context ctx{*nets[0], *dev, config, 0, nullptr};
  algo::AllreduceArgs args;
  args.sendBuf = in;
  args.recvBuf = out;
  args.count = n;
  CopiesOnBackend alg;
  algo::CallChecker checker;
  const algo::CallSignature sig = algo::CallSignature{};
  CHECK(checker.run(alg, ctx, args, sig).ok());
  REQUIRE(dev->sync().ok());
  const uint64_t before = dev->traffic().primitives;

  released = true;
  // Directly: the primitive throws before anything is recorded ...
  CHECK_THROWS_AS(dev->copy(out, in, n * 4), device::BackendRefused);
  CHECK(dev->traffic().primitives == before);
  // ... and through the call runner the call fails with the refusal, no throw.
  Status s;
  CHECK_NOTHROW(s = checker.run(alg, ctx, args, sig));
  CHECK(s.code() == Err::Timeout);
  CHECK_THAT(s.message(), Catch::Contains("released by the watchdog"));
  CHECK(dev->traffic().primitives == before);
  released = false;
  dev->deallocate(in, n * 4);
  dev->deallocate(out, n * 4);
  CHECK(dev->sync().ok());
}
