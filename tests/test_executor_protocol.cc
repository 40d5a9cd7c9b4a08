// The CUDA executor's host protocol (plugin/nccl/cuda_executor_proxy.h) with a
// host thread standing in for the caller's CUDA stream: it runs the caller's
// "kernels" and the ready / wait-done operations in FIFO order and writes the
// ready and released flags exactly where the GPU would. No GPU needed.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "device/cpu/cpu_device_backend.h"
#include "plugin/nccl/cuda_executor_proxy.h"
#include "plugin/nccl/proxy_transport.h"
#include "transport/local_transport.h"

using namespace gradcomp;
using namespace gradcomp::nccl;
using device::exec::loadAcquire;
using device::exec::Slot;
using device::exec::storeRelease;
using Clock = std::chrono::steady_clock;

namespace {

double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// A FIFO "stream" executed by one host thread. pause() holds it before its
// next operation, like a GPU still busy with earlier work. Work items stand
// for the caller's kernels before and after a call.
class HostStream final : public StreamSide {
 public:
  explicit HostStream(int depth) : slots_(size_t(depth)) {
    std::memset(static_cast<void*>(slots_.data()), 0, slots_.size() * sizeof(Slot));
    thread_ = std::thread([this] { run(); });
  }
  ~HostStream() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      paused_ = false;
    }
    cv_.notify_all();
    thread_.join();
  }

  int depth() const override { return int(slots_.size()); }
  Slot* slot(int i) override { return &slots_[size_t(i)]; }
  Status enqueueReady(int i, uint64_t seq, void*) override {
    push(Op{Op::Ready, i, seq, nullptr});
    return Status::Ok();
  }
  Status enqueueWaitDone(int i, uint64_t seq, void*) override {
    push(Op{Op::WaitDone, i, seq, nullptr});
    return Status::Ok();
  }
  // A kernel of the caller's, in stream order.
  void enqueueWork(std::function<void()> work) { push(Op{Op::Work, 0, 0, std::move(work)}); }

  void pause(bool on) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      paused_ = on;
    }
    cv_.notify_all();
  }
  // Waits (bounded) until the stream has released `calls` calls.
  bool waitReleased(uint64_t calls, double seconds = 20) {
    const auto t0 = Clock::now();
    while (released_.load() < calls)
      if (secondsSince(t0) > seconds) return false; else std::this_thread::yield();
    return true;
  }
  // Waits (bounded) until every operation enqueued so far has run.
  bool drain(double seconds = 20) {
    const auto t0 = Clock::now();
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (ops_.empty() && !busy_) return true;
      }
      if (secondsSince(t0) > seconds) return false;
      std::this_thread::yield();
    }
  }

  std::atomic<uint64_t> released_{0};
  std::atomic<int> hangs_{0};               // waits whose done never came
  std::atomic<int64_t> skipReadyOf_{-1};    // this seq never signals ready

 private:
  struct Op {
    enum Kind { Ready, WaitDone, Work } kind;
    int slot;
    uint64_t seq;
    std::function<void()> work;
  };
  void push(Op op) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ops_.push_back(std::move(op));
    }
    cv_.notify_all();
  }
  void run() {
    for (;;) {
      Op op;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || (!paused_ && !ops_.empty()); });
        if (stop_) return;
        op = std::move(ops_.front());
        ops_.pop_front();
        busy_ = true;
      }
      Slot* s = &slots_[size_t(op.slot)];
      if (op.kind == Op::Work) {
        op.work();
      } else if (op.kind == Op::Ready) {
        if (int64_t(op.seq) != skipReadyOf_.load()) storeRelease(&s->ready, op.seq + 1);
      } else {
        // The GPU's wait on done: bounded here so a protocol bug fails the test.
        const auto t0 = Clock::now();
        while (loadAcquire(&s->done) < op.seq + 1) {
          if (secondsSince(t0) > 20) {
            ++hangs_;
            break;
          }
          std::this_thread::yield();
        }
        storeRelease(&s->released, op.seq + 1);
        ++released_;
      }
      std::lock_guard<std::mutex> lock(mu_);
      busy_ = false;
    }
  }

  std::vector<Slot> slots_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> ops_;
  bool paused_ = false, stop_ = false, busy_ = false;
  std::thread thread_;
};

// One call's buffers, as the caller's device memory: a kernel before the
// call writes `in` (words i*7 + seq), the algorithm (the proxy's job) writes
// out = in + 1, a kernel after the call copies `out` into `seen`.
struct Call {
  std::vector<uint32_t> in, out, seen;
};
constexpr uint32_t kUntouched = 0xDEADBEEF;

Call makeCall(size_t words) {
  Call c;
  c.in.assign(words, 0);
  c.out.assign(words, kUntouched);
  c.seen.assign(words, 0);
  return c;
}
uint32_t inputWord(uint64_t seq, size_t i) { return uint32_t(i * 7 + seq); }

// The job the proxy runs; appends its seq to `order` (proxy thread only).
// It must find the input the stream's earlier work wrote: ready came after it.
ProxyEngine::Job incrementJob(uint64_t seq, std::vector<uint64_t>* order, Call* call,
                              int failAt = -1) {
  return [=]() -> Status {
    order->push_back(seq);
    GC_REQUIRE(int64_t(seq) != failAt, Err::RemoteError, "peer 1 went away (injected)");
    for (size_t i = 0; i < call->in.size(); ++i)
      GC_REQUIRE(call->in[i] == inputWord(seq, i), Err::Internal,
                 "call %llu: input word %zu not written before ready",
                 (unsigned long long)seq, i);
    for (size_t i = 0; i < call->in.size(); ++i) call->out[i] = call->in[i] + 1;
    return Status::Ok();
  };
}

// What a caller does per call: producer kernel, the collective, consumer kernel.
Status submitCall(HostStream& stream, ProxyEngine& e, uint64_t seq, Call& c,
                  std::vector<uint64_t>* order, int failAt = -1, int producerDelayMs = 0) {
  stream.enqueueWork([&c, seq, producerDelayMs] {
    if (producerDelayMs) std::this_thread::sleep_for(std::chrono::milliseconds(producerDelayMs));
    for (size_t i = 0; i < c.in.size(); ++i) c.in[i] = inputWord(seq, i);
  });
  const Status s = e.submit(incrementJob(seq, order, &c, failAt), nullptr);
  if (s.ok()) stream.enqueueWork([&c] { c.seen = c.out; });
  return s;
}

// The consumer kernel after call `seq` saw its complete result.
bool resultSeen(const Call& c, uint64_t seq) {
  for (size_t i = 0; i < c.in.size(); ++i)
    if (c.seen[i] != inputWord(seq, i) + 1) return false;
  return true;
}
bool outputUntouched(const Call& c) {
  for (uint32_t v : c.out)
    if (v != kUntouched) return false;
  return true;
}

}  // namespace

TEST_CASE("executor protocol: many calls in order through a wrapping slot ring", "[executor]") {
  HostStream stream(3);
  std::vector<uint64_t> order;
  std::mt19937 rng(11);
  constexpr uint64_t kCalls = 200;
  std::deque<Call> calls;  // stable addresses
  {
    ProxyEngine engine(stream, "test", 20.0);
    for (uint64_t seq = 0; seq < kCalls; ++seq) {
      // Sizes vary (0 included); now and then the producer kernel is slow, so
      // a proxy that ran before ready would find a stale input.
      calls.push_back(makeCall(seq % 17 == 0 ? 0 : rng() % 3000));
      REQUIRE(submitCall(stream, engine, seq, calls.back(), &order, -1,
                         seq % 50 == 7 ? 30 : 0).ok());
    }
    REQUIRE(stream.waitReleased(kCalls));
    REQUIRE(stream.drain());
    CHECK(engine.completed() == kCalls);
    CHECK(engine.asyncError().ok());
  }
  CHECK(stream.hangs_ == 0);
  REQUIRE(order.size() == kCalls);
  for (uint64_t i = 0; i < kCalls; ++i) CHECK(order[i] == i);
  for (uint64_t i = 0; i < kCalls; ++i) CHECK(resultSeen(calls[i], i));
  for (int s = 0; s < stream.depth(); ++s) {
    CHECK(stream.slot(s)->done == stream.slot(s)->released);
    CHECK(stream.slot(s)->status == 0);
  }
}

TEST_CASE("executor protocol: the thread hook runs first, on the proxy thread that runs the jobs",
          "[executor]") {
  // The CUDA executor binds the proxy to its GPU's CPUs here (placement.h).
  HostStream stream(2);
  std::vector<uint64_t> order;
  std::deque<Call> calls;
  std::atomic<int> hookRuns{0};
  std::thread::id hookThread, jobThread;
  {
    ProxyEngine engine(stream, "test", 20.0, {}, [&] {
      hookThread = std::this_thread::get_id();
      hookRuns.fetch_add(1);
    });
    calls.push_back(makeCall(10));
    REQUIRE(submitCall(stream, engine, 0, calls.back(), &order).ok());
    REQUIRE(stream.waitReleased(1));
    REQUIRE(engine.submit([&] {
      jobThread = std::this_thread::get_id();
      return Status::Ok();
    }, nullptr).ok());
    REQUIRE(stream.waitReleased(2));
    REQUIRE(stream.drain());
  }
  CHECK(hookRuns.load() == 1);
  CHECK(hookThread == jobThread);
  CHECK(hookThread != std::this_thread::get_id());
}

TEST_CASE("executor protocol: the caller does not wait for a busy stream", "[executor]") {
  HostStream stream(4);
  std::vector<uint64_t> order;
  std::deque<Call> calls;
  ProxyEngine engine(stream, "test", 20.0);
  stream.pause(true);
  const auto t0 = Clock::now();
  for (uint64_t seq = 0; seq < 4; ++seq) {
    calls.push_back(makeCall(1000));
    REQUIRE(submitCall(stream, engine, seq, calls.back(), &order).ok());
  }
  // All four enqueued while the "GPU" is held: nothing ran, nobody blocked.
  CHECK(secondsSince(t0) < 5.0);
  CHECK(engine.completed() == 0);
  CHECK(stream.released_ == 0);
  stream.pause(false);
  REQUIRE(stream.waitReleased(4));
  REQUIRE(stream.drain());
  for (uint64_t i = 0; i < 4; ++i) CHECK(resultSeen(calls[i], i));
}

TEST_CASE("executor protocol: a full ring is backpressure bounded by the timeout", "[executor]") {
  HostStream stream(2);
  std::vector<uint64_t> order;
  std::deque<Call> calls;
  ProxyEngine engine(stream, "test", 0.3);
  stream.pause(true);
  for (uint64_t seq = 0; seq < 2; ++seq) {
    calls.push_back(makeCall(10));
    REQUIRE(submitCall(stream, engine, seq, calls.back(), &order).ok());
  }
  calls.push_back(makeCall(10));
  const auto t0 = Clock::now();
  const Status s = engine.submit(incrementJob(2, &order, &calls.back()), nullptr);
  const double waited = secondsSince(t0);
  CHECK(s.code() == Err::Timeout);
  CHECK(s.message().find("slots still in flight") != std::string::npos);
  CHECK(waited >= 0.29);
  CHECK(waited < 5.0);
  CHECK(engine.submitted() == 2);  // the refused call was not enqueued
  // The proxy's own wait for ready times out too (the stream is held).
  stream.pause(false);
  REQUIRE(stream.waitReleased(2));
  REQUIRE(stream.drain());  // the calls' buffers go before the stream
  CHECK(stream.hangs_ == 0);
}

TEST_CASE("executor protocol: a failing call releases the stream and fails the rest",
          "[executor]") {
  HostStream stream(16);
  std::vector<uint64_t> order;
  std::deque<Call> calls;
  ProxyEngine engine(stream, "test", 20.0);
  stream.pause(true);  // enqueue all ten before any runs
  for (uint64_t seq = 0; seq < 10; ++seq) {
    calls.push_back(makeCall(64));
    REQUIRE(submitCall(stream, engine, seq, calls.back(), &order, /*failAt=*/5).ok());
  }
  stream.pause(false);
  REQUIRE(stream.waitReleased(10));
  REQUIRE(stream.drain());
  CHECK(stream.hangs_ == 0);
  CHECK(engine.asyncError().code() == Err::RemoteError);
  CHECK(engine.asyncError().message().find("peer 1") != std::string::npos);
  // 0..5 ran (5 failed); 6..9 completed with the error without running.
  CHECK(order == std::vector<uint64_t>{0, 1, 2, 3, 4, 5});
  for (uint64_t i = 0; i < 5; ++i) CHECK(resultSeen(calls[i], i));
  for (uint64_t i = 5; i < 10; ++i) CHECK(outputUntouched(calls[i]));
  CHECK(stream.slot(5)->status == uint64_t(Err::RemoteError));
  CHECK(stream.slot(9)->status == uint64_t(Err::RemoteError));
  // New calls are refused with the first error.
  Call late = makeCall(4);
  CHECK(engine.submit(incrementJob(10, &order, &late), nullptr).code() == Err::RemoteError);
}

TEST_CASE("executor protocol: a stream that never gets ready times out, never hangs",
          "[executor]") {
  HostStream stream(4);
  std::vector<uint64_t> order;
  std::deque<Call> calls;
  stream.skipReadyOf_ = 0;  // call 0's ready flag never comes
  ProxyEngine engine(stream, "test", 0.25);
  const auto t0 = Clock::now();
  for (uint64_t seq = 0; seq < 3; ++seq) {
    calls.push_back(makeCall(32));
    REQUIRE(submitCall(stream, engine, seq, calls.back(), &order).ok());
  }
  REQUIRE(stream.waitReleased(3));
  REQUIRE(stream.drain());
  const double elapsed = secondsSince(t0);
  CHECK(elapsed >= 0.24);
  CHECK(elapsed < 10.0);
  CHECK(stream.hangs_ == 0);
  CHECK(engine.asyncError().code() == Err::Timeout);
  CHECK(engine.asyncError().message().find("GRADCOMP_TIMEOUT_S") != std::string::npos);
  CHECK(order.empty());  // nothing ran after the timeout
  CHECK(stream.slot(0)->done == 1);
  CHECK(stream.slot(0)->status == uint64_t(Err::Timeout));
  for (const Call& c : calls) CHECK(outputUntouched(c));
}

TEST_CASE("executor protocol: a stuck stream is reported as this rank's own failure",
          "[executor]") {
  HostStream stream(4);
  std::vector<uint64_t> order;
  std::deque<Call> calls;
  stream.skipReadyOf_ = 0;
  std::mutex mu;
  std::vector<Status> reported;
  ProxyWatch watch;
  watch.reportOwnFailure = [&](const Status& s) {
    std::lock_guard<std::mutex> lock(mu);
    reported.push_back(s);
  };
  ProxyEngine engine(stream, "test", 0.25, watch);
  calls.push_back(makeCall(32));
  REQUIRE(submitCall(stream, engine, 0, calls.back(), &order).ok());
  REQUIRE(stream.waitReleased(1));
  REQUIRE(stream.drain());  // the stream's thread is done with the call's buffers
  std::lock_guard<std::mutex> lock(mu);
  REQUIRE(reported.size() == 1);  // once, not once per later call
  CHECK(reported[0].code() == Err::Timeout);
  CHECK(reported[0].message() == engine.asyncError().message());
}

TEST_CASE("executor protocol: a failure the ranks agreed on ends the wait for the stream at once",
          "[executor]") {
  HostStream stream(2);
  std::vector<uint64_t> order;
  std::deque<Call> calls;
  stream.skipReadyOf_ = 0;  // the stream never reaches call 0 ...
  std::atomic<bool> agreed{false};
  ProxyWatch watch;
  watch.agreedFailure = [&] {
    return agreed ? Status(Err::RemoteError, "rank 3 (host, pid 7) failed: connection closed")
                  : Status::Ok();
  };
  bool reportedOwn = false;
  watch.reportOwnFailure = [&](const Status&) { reportedOwn = true; };
  ProxyEngine engine(stream, "test", 20.0, watch);  // ... and the timeout is far away
  for (uint64_t seq = 0; seq < 3; ++seq) {
    calls.push_back(makeCall(16));
    // Call 2 waits for a free slot: the verdict ends that wait too.
    if (seq == 2) std::thread([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        agreed = true;
      }).detach();
    const auto t0 = Clock::now();
    const Status s = submitCall(stream, engine, seq, calls.back(), &order);
    if (seq < 2) {
      REQUIRE(s.ok());
    } else {
      // Refused with the verdict, or enqueued once the verdict freed the slot
      // (whichever thread saw it first): either way long before the timeout.
      CHECK((s.ok() || s.code() == Err::RemoteError));
      CHECK(secondsSince(t0) < 5.0);
    }
  }
  REQUIRE(stream.waitReleased(2));
  REQUIRE(stream.drain());  // the stream's thread is done with the calls' buffers
  CHECK(engine.asyncError().message() == "rank 3 (host, pid 7) failed: connection closed");
  CHECK_FALSE(reportedOwn);  // a peer's failure is not this rank's own
  CHECK(order.empty());
  CHECK(stream.hangs_ == 0);
}

TEST_CASE("executor protocol: the caller's later work sees the whole result", "[executor]") {
  // The proxy takes its time writing the result; the stream's next kernel
  // must still find all of it (it runs only after done).
  HostStream stream(2);
  ProxyEngine engine(stream, "test", 20.0);
  Call c = makeCall(4096);
  stream.enqueueWork([&c] {
    for (size_t i = 0; i < c.in.size(); ++i) c.in[i] = inputWord(0, i);
  });
  REQUIRE(engine.submit([&c]() -> Status {
    for (size_t i = 0; i < c.in.size(); ++i) {
      c.out[i] = c.in[i] + 1;
      if (i % 1024 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return Status::Ok();
  }, nullptr).ok());
  stream.enqueueWork([&c] { c.seen = c.out; });
  REQUIRE(stream.waitReleased(1));
  REQUIRE(stream.drain());
  CHECK(resultSeen(c, 0));
}

TEST_CASE("executor protocol: shutdown with calls in flight", "[executor]") {
  std::vector<uint64_t> order;
  SECTION("drain runs them") {
    HostStream stream(4);
    std::deque<Call> calls;
    auto engine = std::make_unique<ProxyEngine>(stream, "test", 20.0);
    stream.pause(true);
    for (uint64_t seq = 0; seq < 3; ++seq) {
      calls.push_back(makeCall(100));
      REQUIRE(submitCall(stream, *engine, seq, calls.back(), &order).ok());
    }
    std::thread closer([&] { engine->shutdown(false); });
    stream.pause(false);
    closer.join();
    CHECK(engine->completed() == 3);
    CHECK(engine->asyncError().ok());
    REQUIRE(stream.waitReleased(3));
    REQUIRE(stream.drain());
    for (uint64_t i = 0; i < 3; ++i) CHECK(resultSeen(calls[i], i));
    Call late = makeCall(4);
    CHECK_FALSE(engine->submit(incrementJob(3, &order, &late), nullptr).ok());
  }
  SECTION("abort completes them with an error at once") {
    HostStream stream(4);
    std::deque<Call> calls;
    ProxyEngine engine(stream, "test", 20.0);
    stream.pause(true);
    for (uint64_t seq = 0; seq < 3; ++seq) {
      calls.push_back(makeCall(100));
      REQUIRE(submitCall(stream, engine, seq, calls.back(), &order).ok());
    }
    const auto t0 = Clock::now();
    engine.shutdown(true);
    CHECK(secondsSince(t0) < 5.0);  // did not wait for the 20 s timeout
    CHECK(engine.completed() == 3);
    CHECK(order.empty());
    for (int s = 0; s < 3; ++s) {
      CHECK(stream.slot(s)->done == uint64_t(s) + 1);
      CHECK(stream.slot(s)->status != 0);
    }
    stream.pause(false);  // the held stream now finds every done flag set
    REQUIRE(stream.waitReleased(3));
    REQUIRE(stream.drain());
    CHECK(stream.hangs_ == 0);
    for (const Call& c : calls) CHECK(outputUntouched(c));
  }
}

// Before a call of a new shape the CUDA executor waits until no earlier call
// parks a stream (its plans and memory are driver calls): waitIdle returns
// when every submitted call is done, and is bounded when the stream never
// gets there.
TEST_CASE("executor protocol: waitIdle waits for the calls in flight, bounded", "[executor]") {
  HostStream stream(4);
  ProxyEngine engine(stream, "test", 0.5);
  CHECK(engine.waitIdle().ok());  // nothing submitted
  stream.pause(true);
  std::atomic<int> ran{0};
  for (int i = 0; i < 2; ++i)
    REQUIRE(engine.submit([&] { return ++ran, Status::Ok(); }, nullptr).ok());
  std::thread go([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    stream.pause(false);
  });
  auto t0 = Clock::now();
  CHECK(engine.waitIdle().ok());
  CHECK(secondsSince(t0) >= 0.15);
  go.join();
  CHECK(ran == 2);
  CHECK(engine.completed() == 2);
  // A stream that never reaches the call: an error within the timeout's reach.
  stream.pause(true);
  REQUIRE(engine.submit([] { return Status::Ok(); }, nullptr).ok());
  t0 = Clock::now();
  const Status s = engine.waitIdle();
  INFO(s.toString());
  CHECK(s.code() == Err::Timeout);
  CHECK(secondsSince(t0) < 5.0);
  stream.pause(false);
  REQUIRE(stream.waitReleased(3));
  REQUIRE(stream.drain());
}

// The watchdog: a job stuck in a primitive (on a GPU: the proxy inside a
// driver call) is released after the window with no help from the
// proxy, so the caller's stream moves on; the error names the call, the
// primitive enqueued last and the thread; shutdown does not wait for the
// stuck proxy forever.
TEST_CASE("executor protocol: the watchdog releases a call stuck in a primitive",
          "[executor][watchdog]") {
  HostStream stream(4);
  std::unique_ptr<device::Backend> dev = device::makeCpuDeviceBackend();
  std::atomic<bool> unstick{false};
  std::mutex mu;
  std::vector<Status> reported;
  ProxyWatch watch;
  watch.step = [&] {
    const char* p = dev->lastPrimitive();
    return std::string("primitive ") + (p ? p : "(none)");
  };
  watch.reportOwnFailure = [&](const Status& s) {
    std::lock_guard<std::mutex> lock(mu);
    reported.push_back(s);
  };
  watch.stallS = 0.3;  // no progress callback: the window counts from the call's start
  auto engine = std::make_unique<ProxyEngine>(stream, "rank 0 of 2", 0.3, watch);
  void* buf = dev->allocate(4096);
  const auto t0 = Clock::now();
  // The injected stall: the job enqueues a primitive, then never returns on
  // its own (as a proxy blocked in the driver would not).
  REQUIRE(engine
              ->submit(
                  [&]() -> Status {
                    GC_CHECK(dev->zero(buf, 4096));
                    while (!unstick.load())
                      std::this_thread::sleep_for(std::chrono::milliseconds(5));
                    return Status::Ok();
                  },
                  nullptr, "oktopk allreduce #0 of 1048576 x float")
              .ok());
  // Two more buckets queued behind the stuck call (DDP submits without
  // waiting): the stuck proxy never reaches them, the watchdog releases them
  // too, or their stream would park forever.
  std::atomic<int> ranLater{0};
  for (int i = 0; i < 2; ++i)
    REQUIRE(engine->submit([&] { return ++ranLater, Status::Ok(); }, nullptr).ok());
  REQUIRE(stream.waitReleased(3, 10));
  const double released = secondsSince(t0);
  CHECK(released >= 0.29);
  CHECK(released < 5.0);
  CHECK(ranLater == 0);
  CHECK(stream.hangs_ == 0);
  for (int i = 0; i < 3; ++i) {
    CHECK(stream.slot(i)->done == uint64_t(i) + 1);
    CHECK(stream.slot(i)->status == uint64_t(Err::Timeout));
  }
  const Status err = engine->asyncError();
  INFO(err.toString());
  CHECK(err.code() == Err::Timeout);
  CHECK(err.message().find("call 0, oktopk allreduce #0 of 1048576 x float") != std::string::npos);
  CHECK(err.message().find("primitive zero") != std::string::npos);
  CHECK(err.message().find("proxy thread") != std::string::npos);
  CHECK(err.message().find("GRADCOMP_TIMEOUT_S = 0.3 s") != std::string::npos);
  CHECK(err.message().find("no progress for") != std::string::npos);
  {
    std::lock_guard<std::mutex> lock(mu);
    REQUIRE(reported.size() == 1);  // the peers hear it through the failure monitor
    CHECK(reported[0].message() == err.message());
  }
  // Later calls complete with the error; a new submit is refused.
  CHECK(engine->submit([] { return Status::Ok(); }, nullptr).code() == Err::Timeout);

  // Shutdown waits a bounded time for the stuck proxy, then leaves it.
  const auto t1 = Clock::now();
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    unstick = true;
  });
  engine->shutdown(true);
  release.join();
  CHECK(secondsSince(t1) < 5.0);
  if (engine->abandoned()) (void)engine.release();  // the thread may still use it
  dev->deallocate(buf, 4096);
  CHECK(dev->sync().ok());
}

// Shutdown (ncclCommAbort) while a call is stuck and the watchdog has not
// fired yet: bounded (the window, then a grace period), the stuck proxy is
// left behind and the calls queued behind it get their done flags.
TEST_CASE("executor protocol: shutdown during a stuck call is bounded and releases the queue",
          "[executor][watchdog]") {
  // The stuck proxy outlives this test: what it touches does too (the
  // stream, its flag, the engine, kept reachable for LeakSanitizer).
  static HostStream stream(4);
  static std::atomic<bool> unstick{false};
  static ProxyEngine* leftBehind = nullptr;
  ProxyWatch watch;
  watch.stallS = 0.3;
  auto engine = std::make_unique<ProxyEngine>(stream, "rank 0 of 2", 0.3, watch);
  REQUIRE(engine
              ->submit(
                  []() -> Status {
                    while (!unstick.load())
                      std::this_thread::sleep_for(std::chrono::milliseconds(5));
                    return Status::Ok();
                  },
                  nullptr)
              .ok());
  for (int i = 0; i < 2; ++i) REQUIRE(engine->submit([] { return Status::Ok(); }, nullptr).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the proxy is in the job
  const auto t0 = Clock::now();
  engine->shutdown(true);
  const double took = secondsSince(t0);
  CHECK(took < 5.0);
  CHECK(engine->abandoned());
  REQUIRE(stream.waitReleased(3, 10));
  CHECK(stream.hangs_ == 0);
  for (int i = 0; i < 3; ++i) CHECK(stream.slot(i)->done == uint64_t(i) + 1);
  CHECK(engine->asyncError().code() == Err::Timeout);
  leftBehind = engine.release();  // its thread may still use it
  CHECK(leftBehind->abandoned());
  unstick = true;
}

// Issue 40, item 3: the watchdog times progress, not the whole call, with a
// window of at least twice GRADCOMP_TIMEOUT_S, so the inner waits' clearer
// errors come first and a long call that keeps moving is never stopped.
TEST_CASE("executor protocol: a call that keeps making progress outlives GRADCOMP_TIMEOUT_S",
          "[executor][watchdog][call-path]") {
  // The default window leaves room for a transport wait (T), the monitor's
  // agreements (2 x 1.5 s) and the closing sync (T).
  CHECK(ProxyEngine::stallWindow(60) >= 2 * 60 + 3);
  CHECK(ProxyEngine::stallWindow(0.2) >= 2 * 0.2 + 3);
  HostStream stream(4);
  std::atomic<uint64_t> moves{0};
  ProxyWatch watch;
  watch.progress = [&] { return moves.load(); };
  watch.stallS = 0.4;
  ProxyEngine engine(stream, "rank 0 of 2", 0.2, watch);
  CHECK(engine.stallS() == 0.4);
  Call c = makeCall(64);
  stream.enqueueWork([&c] {
    for (size_t i = 0; i < c.in.size(); ++i) c.in[i] = inputWord(0, i);
  });
  std::atomic<bool> finished{false};
  const auto t0 = Clock::now();
  // 1.2 s: six times the timeout, three times the window, moving every 40 ms.
  REQUIRE(engine.submit([&]() -> Status {
    for (int step = 0; step < 30; ++step) {
      moves.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::milliseconds(40));
    }
    for (size_t i = 0; i < c.in.size(); ++i) c.out[i] = c.in[i] + 1;
    finished = true;
    return Status::Ok();
  }, nullptr, "oktopk allreduce #0 of 64 x float").ok());
  stream.enqueueWork([&c] { c.seen = c.out; });
  REQUIRE(stream.waitReleased(1, 10));
  REQUIRE(stream.drain());
  INFO(engine.asyncError().toString());
  CHECK(secondsSince(t0) >= 1.1);
  CHECK(finished);
  CHECK(engine.asyncError().ok());
  CHECK(stream.slot(0)->status == 0);
  CHECK(resultSeen(c, 0));
  CHECK_FALSE(engine.cancellation()->cancelled());
}

// A call that stops moving is released one window after its last progress
// (not GRADCOMP_TIMEOUT_S after its start); the communicator is destroyed
// while its proxy is stuck (shutdown leaves the proxy behind, the
// communicator drops its own references, as onCommGone does); the job that
// comes back late finds what it owns alive and the call cancelled, and what
// it owned is freed once it is gone.
TEST_CASE("executor protocol: a call without progress is released after the window; a late job "
          "finds its state alive and cancelled",
          "[executor][watchdog][call-path]") {
  // The stuck proxy outlives the test: what it touches does too.
  static HostStream stream(4);
  static std::atomic<bool> unstick{false};
  static std::atomic<uint64_t> moves{0};
  static std::atomic<int> lateSaw{-1};  // 1: cancelled, with its state alive
  static ProxyEngine* leftBehind = nullptr;
  ProxyWatch watch;
  watch.progress = [] { return moves.load(); };
  watch.stallS = 0.5;
  auto engine = std::make_unique<ProxyEngine>(stream, "rank 0 of 2", 0.2, watch);
  // What the call uses (the communicator's transport, algorithm, residuals):
  // shared with the job, as the CUDA executor's job shares them.
  struct Residuals {
    std::vector<float> values = std::vector<float>(1024, 1.0f);
  };
  auto owned = std::make_shared<Residuals>();
  std::weak_ptr<Residuals> observed = owned;
  const std::shared_ptr<const CallCancel> cancel = engine->cancellation();
  const auto t0 = Clock::now();
  REQUIRE(engine
              ->submit(
                  [owned, cancel]() -> Status {
                    for (int step = 0; step < 8; ++step) {  // 0.4 s of progress
                      moves.fetch_add(1);
                      std::this_thread::sleep_for(std::chrono::milliseconds(50));
                    }
                    while (!unstick.load())  // then stuck (a driver call)
                      std::this_thread::sleep_for(std::chrono::milliseconds(5));
                    owned->values[0] += 1;  // alive: the job owns it
                    lateSaw = cancel->cancelled() ? 1 : 0;
                    return cancel->check();  // refuses its next step
                  },
                  nullptr, "qsgd allreduce #0 of 1024 x float")
              .ok());
  REQUIRE(stream.waitReleased(1, 10));
  const double released = secondsSince(t0);
  CHECK(released >= 0.4 + 0.5 - 0.05);  // the window counts from the last progress
  CHECK(released < 5.0);
  CHECK(stream.hangs_ == 0);
  CHECK(stream.slot(0)->status == uint64_t(Err::Timeout));
  const Status err = engine->asyncError();
  INFO(err.toString());
  CHECK(err.code() == Err::Timeout);
  CHECK(err.message().find("no progress") != std::string::npos);
  CHECK(err.message().find("qsgd allreduce #0 of 1024 x float") != std::string::npos);
  CHECK(cancel->cancelled());  // before the stream moved on
  CHECK(cancel->check().message() == err.message());
  // The communicator goes away with the proxy still stuck.
  engine->shutdown(true);
  CHECK(engine->abandoned());
  leftBehind = engine.release();  // its thread may still use it
  owned.reset();                  // the communicator's own reference
  CHECK_FALSE(observed.expired());  // the stuck job still owns it
  unstick = true;
  const auto t1 = Clock::now();
  while ((lateSaw.load() < 0 || !observed.expired()) && secondsSince(t1) < 10)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  CHECK(lateSaw.load() == 1);
  CHECK(observed.expired());  // freed once the job is gone
  CHECK(leftBehind->abandoned());
}

// After the watchdog fires, what the stuck job still tries on its transport
// (the CUDA executor's job runs on a CancellableTransport) is refused with
// the watchdog's error: posts, waits for what it posted before, tests.
TEST_CASE("executor protocol: after the watchdog fires the job's further transport work is "
          "refused",
          "[executor][watchdog][call-path]") {
  HostStream stream(2);
  std::atomic<bool> unstick{false};
  ProxyWatch watch;
  watch.stallS = 0.4;
  ProxyEngine engine(stream, "rank 0 of 2", 0.2, watch);
  // Rank 0's transport (the inner waits far longer than the window, like a
  // proxy stuck where no inner bound applies).
  std::vector<std::unique_ptr<transport::Transport>> nets = transport::createLocalTransports(2, 30);
  std::shared_ptr<transport::Transport> inner(std::move(nets[0]));
  auto net = std::make_shared<CancellableTransport>(inner, engine.cancellation());
  const std::shared_ptr<const CallCancel> cancel = engine.cancellation();
  struct Late {
    Status posted, send, recv, wait, test, next;
    std::atomic<bool> done{false};
  };
  auto late = std::make_shared<Late>();
  float in = 0, out = 0;
  REQUIRE(engine.submit([&, late, net, cancel]() -> Status {
    transport::Handle h = 0, h2 = 0;
    late->posted = net->irecv(1, 7, &in, sizeof in, &h);  // before: fine
    while (!unstick.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    late->send = net->isend(1, 8, &out, sizeof out, &h2);
    late->recv = net->irecv(1, 9, &in, sizeof in, &h2);
    bool done = false;
    late->test = net->test(h, &done, nullptr);
    late->wait = net->wait(h);
    late->next = cancel->check();  // the job's own check before its next step
    late->done = true;
    return late->next;
  }, nullptr).ok());
  REQUIRE(stream.waitReleased(1, 10));
  CHECK(engine.asyncError().code() == Err::Timeout);
  unstick = true;
  const auto t0 = Clock::now();
  while (!late->done.load() && secondsSince(t0) < 10)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  REQUIRE(late->done.load());
  CHECK(late->posted.ok());
  const std::string why = engine.asyncError().message();
  for (const Status* s : {&late->send, &late->recv, &late->test, &late->wait, &late->next}) {
    INFO(s->toString());
    CHECK(s->code() == Err::Timeout);
    CHECK(s->message() == why);
  }
  CHECK(net->operations() == 1);  // only the post before the watchdog went through
  engine.shutdown(false);
  REQUIRE(stream.drain());
}
