// The CUDA executor's host protocol (plugin/nccl/cuda_executor_proxy.h) with a
// host thread standing in for the caller's CUDA stream: it executes the
// stage-in / stage-out operations in FIFO order and writes the ready and
// released flags exactly where the GPU would. No GPU needed.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "plugin/nccl/cuda_executor_proxy.h"

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
// next operation, like a GPU still busy with earlier work.
class HostStream final : public StreamSide {
 public:
  explicit HostStream(int depth) : slots_(size_t(depth)), staging_(size_t(depth)) {
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
  void* staging(int i) override { return staging_[size_t(i)].data(); }
  Status reserve(int i, size_t bytes) override {
    if (staging_[size_t(i)].size() < bytes) staging_[size_t(i)].resize(bytes);
    return Status::Ok();
  }
  Status enqueueStageIn(int i, uint64_t seq, const void* src, size_t bytes, void*) override {
    push(Op{true, i, seq, const_cast<void*>(src), bytes});
    return Status::Ok();
  }
  Status enqueueStageOut(int i, uint64_t seq, void* dst, void*) override {
    push(Op{false, i, seq, dst, 0});
    return Status::Ok();
  }

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

  std::atomic<uint64_t> released_{0};
  std::atomic<uint64_t> copiedOut_{0};
  std::atomic<int> hangs_{0};                 // stage-outs whose done never came
  std::atomic<int64_t> skipStageInOf_{-1};    // this seq never signals ready
  std::atomic<int64_t> stagedBytesDelta_{0};  // lie about the staged size

 private:
  struct Op {
    bool stageIn;
    int slot;
    uint64_t seq;
    void* ptr;
    size_t bytes;
  };
  void push(Op op) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ops_.push_back(op);
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
        op = ops_.front();
        ops_.pop_front();
      }
      Slot* s = &slots_[size_t(op.slot)];
      if (op.stageIn) {
        if (int64_t(op.seq) == skipStageInOf_.load()) continue;
        if (op.bytes) std::memcpy(staging_[size_t(op.slot)].data(), op.ptr, op.bytes);
        s->deviceWords[device::exec::kStagedBytes] = uint64_t(int64_t(op.bytes) + stagedBytesDelta_.load());
        storeRelease(&s->ready, op.seq + 1);
        continue;
      }
      // The GPU's wait on done: bounded here so a protocol bug fails the test.
      const auto t0 = Clock::now();
      while (loadAcquire(&s->done) < op.seq + 1) {
        if (secondsSince(t0) > 20) {
          ++hangs_;
          break;
        }
        std::this_thread::yield();
      }
      if (loadAcquire(&s->status) == 0) {
        const size_t out = size_t(s->proxyWords[device::exec::kOutBytes]);
        if (out) std::memcpy(op.ptr, staging_[size_t(op.slot)].data(), out);
        ++copiedOut_;
      }
      storeRelease(&s->released, op.seq + 1);
      ++released_;
    }
  }

  std::vector<Slot> slots_;
  std::vector<std::vector<uint8_t>> staging_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> ops_;
  bool paused_ = false, stop_ = false;
  std::thread thread_;
};

// One call's buffers: input words i*7 + seq; the job adds 1 to each word and
// returns a data-dependent length (drops seq % 3 trailing words).
struct Call {
  std::vector<uint32_t> in, out;
  size_t bytes() const { return in.size() * 4; }
};
Call makeCall(uint64_t seq, size_t words) {
  Call c;
  for (size_t i = 0; i < words; ++i) c.in.push_back(uint32_t(i * 7 + seq));
  c.out.assign(words, 0xDEADBEEF);
  return c;
}
size_t expectedWords(uint64_t seq, size_t words) {
  const size_t drop = size_t(seq % 3);
  return words > drop ? words - drop : 0;
}

// The job the proxy runs; appends its seq to `order` (proxy thread only).
ProxyEngine::Job incrementJob(uint64_t seq, std::vector<uint64_t>* order, const Call* call,
                              int failAt = -1) {
  return [=](void* staging, size_t bytes, size_t* outBytes) -> Status {
    order->push_back(seq);
    GC_REQUIRE(int64_t(seq) != failAt, Err::RemoteError, "peer 1 went away (injected)");
    auto* w = static_cast<uint32_t*>(staging);
    // The stage-in must be complete when the proxy runs: compare with the source.
    GC_REQUIRE(bytes == call->bytes() && (bytes == 0 || std::memcmp(w, call->in.data(), bytes) == 0),
               Err::Internal, "call %llu: staging does not hold the input",
               (unsigned long long)seq);
    for (size_t i = 0; i < bytes / 4; ++i) w[i] += 1;
    *outBytes = 4 * expectedWords(seq, bytes / 4);
    return Status::Ok();
  };
}

bool outputRight(const Call& c, uint64_t seq) {
  const size_t keep = expectedWords(seq, c.in.size());
  for (size_t i = 0; i < c.in.size(); ++i) {
    const uint32_t want = i < keep ? c.in[i] + 1 : 0xDEADBEEF;
    if (c.out[i] != want) return false;
  }
  return true;
}
bool outputUntouched(const Call& c) {
  for (uint32_t v : c.out)
    if (v != 0xDEADBEEF) return false;
  return true;
}

Status submitCall(ProxyEngine& e, uint64_t seq, Call& c, std::vector<uint64_t>* order,
                  int failAt = -1) {
  return e.submit(c.in.data(), c.bytes(), c.out.data(), c.bytes(),
                  incrementJob(seq, order, &c, failAt), nullptr);
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
      // Sizes vary (0 included) so staging buffers grow while slots are reused.
      calls.push_back(makeCall(seq, seq % 17 == 0 ? 0 : rng() % 3000));
      REQUIRE(submitCall(engine, seq, calls.back(), &order).ok());
    }
    REQUIRE(stream.waitReleased(kCalls));
    CHECK(engine.completed() == kCalls);
    CHECK(engine.asyncError().ok());
  }
  CHECK(stream.hangs_ == 0);
  CHECK(stream.copiedOut_ == kCalls);
  REQUIRE(order.size() == kCalls);
  for (uint64_t i = 0; i < kCalls; ++i) CHECK(order[i] == i);
  for (uint64_t i = 0; i < kCalls; ++i) CHECK(outputRight(calls[i], i));
  for (int s = 0; s < stream.depth(); ++s) {
    CHECK(stream.slot(s)->done == stream.slot(s)->released);
    CHECK(stream.slot(s)->status == 0);
  }
}

TEST_CASE("executor protocol: the caller does not wait for a busy stream", "[executor]") {
  HostStream stream(4);
  std::vector<uint64_t> order;
  std::deque<Call> calls;
  ProxyEngine engine(stream, "test", 20.0);
  stream.pause(true);
  const auto t0 = Clock::now();
  for (uint64_t seq = 0; seq < 4; ++seq) {
    calls.push_back(makeCall(seq, 1000));
    REQUIRE(submitCall(engine, seq, calls.back(), &order).ok());
  }
  // All four enqueued while the "GPU" is held: nothing ran, nobody blocked.
  CHECK(secondsSince(t0) < 5.0);
  CHECK(engine.completed() == 0);
  CHECK(stream.released_ == 0);
  stream.pause(false);
  REQUIRE(stream.waitReleased(4));
  for (uint64_t i = 0; i < 4; ++i) CHECK(outputRight(calls[i], i));
}

TEST_CASE("executor protocol: a full ring is backpressure bounded by the timeout", "[executor]") {
  HostStream stream(2);
  std::vector<uint64_t> order;
  std::deque<Call> calls;
  ProxyEngine engine(stream, "test", 0.3);
  stream.pause(true);
  for (uint64_t seq = 0; seq < 2; ++seq) {
    calls.push_back(makeCall(seq, 10));
    REQUIRE(submitCall(engine, seq, calls.back(), &order).ok());
  }
  calls.push_back(makeCall(2, 10));
  const auto t0 = Clock::now();
  const Status s = submitCall(engine, 2, calls.back(), &order);
  const double waited = secondsSince(t0);
  CHECK(s.code() == Err::Timeout);
  CHECK(s.message().find("slots still in flight") != std::string::npos);
  CHECK(waited >= 0.29);
  CHECK(waited < 5.0);
  CHECK(engine.submitted() == 2);  // the refused call was not enqueued
  // The proxy's own wait for ready times out too (the stream is held).
  stream.pause(false);
  REQUIRE(stream.waitReleased(2));
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
    calls.push_back(makeCall(seq, 64));
    REQUIRE(submitCall(engine, seq, calls.back(), &order, /*failAt=*/5).ok());
  }
  stream.pause(false);
  REQUIRE(stream.waitReleased(10));
  CHECK(stream.hangs_ == 0);
  CHECK(engine.asyncError().code() == Err::RemoteError);
  CHECK(engine.asyncError().message().find("peer 1") != std::string::npos);
  // 0..5 ran (5 failed); 6..9 completed with the error without running.
  CHECK(order == std::vector<uint64_t>{0, 1, 2, 3, 4, 5});
  for (uint64_t i = 0; i < 5; ++i) CHECK(outputRight(calls[i], i));
  for (uint64_t i = 5; i < 10; ++i) CHECK(outputUntouched(calls[i]));
  CHECK(stream.slot(5)->status == uint64_t(Err::RemoteError));
  CHECK(stream.slot(9)->status == uint64_t(Err::RemoteError));
  CHECK(stream.copiedOut_ == 5);
  // New calls are refused with the first error.
  Call late = makeCall(10, 4);
  CHECK(submitCall(engine, 10, late, &order).code() == Err::RemoteError);
}

TEST_CASE("executor protocol: a stream that never gets ready times out, never hangs",
          "[executor]") {
  HostStream stream(4);
  std::vector<uint64_t> order;
  std::deque<Call> calls;
  stream.skipStageInOf_ = 0;  // call 0's ready flag never comes
  ProxyEngine engine(stream, "test", 0.25);
  const auto t0 = Clock::now();
  for (uint64_t seq = 0; seq < 3; ++seq) {
    calls.push_back(makeCall(seq, 32));
    REQUIRE(submitCall(engine, seq, calls.back(), &order).ok());
  }
  REQUIRE(stream.waitReleased(3));
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
  stream.skipStageInOf_ = 0;
  std::mutex mu;
  std::vector<Status> reported;
  ProxyWatch watch;
  watch.reportOwnFailure = [&](const Status& s) {
    std::lock_guard<std::mutex> lock(mu);
    reported.push_back(s);
  };
  ProxyEngine engine(stream, "test", 0.25, watch);
  calls.push_back(makeCall(0, 32));
  REQUIRE(submitCall(engine, 0, calls.back(), &order).ok());
  REQUIRE(stream.waitReleased(1));
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
  stream.skipStageInOf_ = 0;  // the stream never reaches call 0 ...
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
    calls.push_back(makeCall(seq, 16));
    // Call 2 waits for a free slot: the verdict ends that wait too.
    if (seq == 2) std::thread([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        agreed = true;
      }).detach();
    const auto t0 = Clock::now();
    const Status s = submitCall(engine, seq, calls.back(), &order);
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
  CHECK(engine.asyncError().message() == "rank 3 (host, pid 7) failed: connection closed");
  CHECK_FALSE(reportedOwn);  // a peer's failure is not this rank's own
  CHECK(order.empty());
  CHECK(stream.hangs_ == 0);
}

TEST_CASE("executor protocol: a wrong staged size is caught", "[executor]") {
  HostStream stream(2);
  std::vector<uint64_t> order;
  stream.stagedBytesDelta_ = 4;
  ProxyEngine engine(stream, "test", 20.0);
  Call c = makeCall(0, 8);
  REQUIRE(submitCall(engine, 0, c, &order).ok());
  REQUIRE(stream.waitReleased(1));
  CHECK(engine.asyncError().code() == Err::Internal);
  CHECK(order.empty());
  CHECK(outputUntouched(c));
}

TEST_CASE("executor protocol: shutdown with calls in flight", "[executor]") {
  std::vector<uint64_t> order;
  SECTION("drain runs them") {
    HostStream stream(4);
    std::deque<Call> calls;
    auto engine = std::make_unique<ProxyEngine>(stream, "test", 20.0);
    stream.pause(true);
    for (uint64_t seq = 0; seq < 3; ++seq) {
      calls.push_back(makeCall(seq, 100));
      REQUIRE(submitCall(*engine, seq, calls.back(), &order).ok());
    }
    std::thread closer([&] { engine->shutdown(false); });
    stream.pause(false);
    closer.join();
    CHECK(engine->completed() == 3);
    CHECK(engine->asyncError().ok());
    REQUIRE(stream.waitReleased(3));
    for (uint64_t i = 0; i < 3; ++i) CHECK(outputRight(calls[i], i));
    Call late = makeCall(3, 4);
    CHECK_FALSE(submitCall(*engine, 3, late, &order).ok());
  }
  SECTION("abort completes them with an error at once") {
    HostStream stream(4);
    std::deque<Call> calls;
    ProxyEngine engine(stream, "test", 20.0);
    stream.pause(true);
    for (uint64_t seq = 0; seq < 3; ++seq) {
      calls.push_back(makeCall(seq, 100));
      REQUIRE(submitCall(engine, seq, calls.back(), &order).ok());
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
    CHECK(stream.hangs_ == 0);
    for (const Call& c : calls) CHECK(outputUntouched(c));
  }
}
