// The call path into the algorithms: which collective a call may run (the
// registry's reduce-scatter capability is the one source of truth, and
// allreduce() never runs a reduce-scatter), and the shared request set every
// algorithm posts its transfers through (algorithms/shared/requests.h).
#include <catch2/catch.hpp>

#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/hierarchy/hierarchical.h"
#include "algorithms/shared/requests.h"
#include "device/backend.h"
#include "transport/local_transport.h"

using namespace gradcomp;
using algo::AllreduceArgs;
using algo::Collective;

namespace {

// Every registered algorithm, the selectors included.
std::vector<const algo::AlgorithmInfo*> everyAlgorithm() {
  std::vector<const algo::AlgorithmInfo*> all = algo::listAlgorithms();
  for (const char* selector : {"auto"})
    if (const algo::AlgorithmInfo* info = algo::findAlgorithm(selector)) all.push_back(info);
  return all;
}

// One reduce-scatter of `algorithms[r]` per rank (threads over local
// transports), through runCollective; each rank's status.
std::vector<Status> reduceScatterEverywhere(std::vector<std::unique_ptr<algo::Algorithm>>& algs,
                                            size_t recvCount) {
  const int P = int(algs.size());
  auto nets = transport::createLocalTransports(P, 10.0);
  const param::Overrides cfg;
  std::vector<std::vector<float>> in(static_cast<size_t>(P)), out(static_cast<size_t>(P));
  for (int r = 0; r < P; ++r) {
    in[size_t(r)].assign(recvCount * size_t(P), float(r + 1));
    out[size_t(r)].assign(recvCount, -1.0f);
  }
  std::vector<Status> st(static_cast<size_t>(P));
  std::vector<std::thread> threads;
  for (int r = 0; r < P; ++r)
    threads.emplace_back([&, r] {
      algo::Context ctx{*nets[size_t(r)], device::cpuBackend(), cfg, 0};
      AllreduceArgs a;
      a.sendBuf = in[size_t(r)].data();
      a.recvBuf = out[size_t(r)].data();
      a.count = recvCount * size_t(P);
      a.bufferKey = 7;
      a.coll = Collective::ReduceScatter;
      st[size_t(r)] = algo::runCollective(*algs[size_t(r)], ctx, a);
    });
  for (auto& t : threads) t.join();
  return st;
}

}  // namespace

TEST_CASE("call path: allreduce() refuses a reduce-scatter call of every algorithm",
          "[call-path]") {
  // One rank: a refusal must come before any communication, and a schedule
  // that ran the call anyway finishes at once (and is caught here).
  auto nets = transport::createLocalTransports(1, 5.0);
  const param::Overrides cfg;
  std::vector<float> in(8, 1.0f), out(8, -1.0f);
  auto refuses = [&](algo::Algorithm& alg, const std::string& what) {
    INFO(what);
    algo::Context ctx{*nets[0], device::cpuBackend(), cfg, 0};
    AllreduceArgs a;
    a.sendBuf = in.data();
    a.recvBuf = out.data();
    a.count = in.size();
    a.bufferKey = 3;
    a.coll = Collective::ReduceScatter;
    const Status s = alg.allreduce(ctx, a);
    INFO(s.toString());
    CHECK_FALSE(s.ok());
    CHECK((s.code() == Err::InvalidArgument || s.code() == Err::Internal));
    CHECK(s.message().find("reduce") != std::string::npos);
    CHECK(out == std::vector<float>(8, -1.0f));  // nothing written
  };
  for (const algo::AlgorithmInfo* info : everyAlgorithm()) {
    auto alg = info->create();
    refuses(*alg, info->name);
    if (algo::hierarchy::supportsHierarchy(*info)) {
      auto wrapped = algo::hierarchy::makeHierarchical(info->create(), {{0}});
      refuses(*wrapped, info->name + " (hierarchical)");
    }
  }
}

TEST_CASE("call path: the registry's reduce-scatter capability is what runCollective accepts",
          "[call-path]") {
  constexpr int P = 2;
  for (const algo::AlgorithmInfo* info : everyAlgorithm()) {
    const bool form = bool(info->reduceScatterReference);
    std::vector<std::unique_ptr<algo::Algorithm>> algs;
    for (int r = 0; r < P; ++r) algs.push_back(info->create());
    INFO(info->name << (form ? " has" : " has no") << " a reduce-scatter form");
    CHECK(algs[0]->hasReduceScatter() == form);
    const std::vector<Status> st = reduceScatterEverywhere(algs, 64);
    for (int r = 0; r < P; ++r) {
      INFO("rank " << r << ": " << st[size_t(r)].toString());
      if (form) {
        CHECK(st[size_t(r)].ok());
      } else {
        CHECK(st[size_t(r)].code() == Err::Unsupported);
        CHECK(st[size_t(r)].message().find("'" + info->name + "'") != std::string::npos);
      }
    }
    if (!algo::hierarchy::supportsHierarchy(*info)) continue;
    // The hierarchical form has the capability of the algorithm it wraps.
    auto wrapped = algo::hierarchy::makeHierarchical(info->create(), {{0}, {1}});
    CHECK(wrapped->hasReduceScatter() == form);
  }
}

TEST_CASE("call path: a reduce-scatter's arguments are checked in one place", "[call-path]") {
  std::vector<float> buf(8, 1.0f);
  AllreduceArgs a;
  a.sendBuf = buf.data();
  a.recvBuf = buf.data() + 1;  // neither in place nor disjoint
  a.count = 4;
  a.coll = Collective::ReduceScatter;
  CHECK(algo::checkCallArgs(a, 2, 0).code() == Err::InvalidArgument);  // partial overlap
  a.recvBuf = buf.data() + 2;  // rank 1's in-place slot
  CHECK(algo::checkCallArgs(a, 2, 1).ok());
  a.count = 5;
  const Status odd = algo::checkCallArgs(a, 2, 1);
  CHECK(odd.code() == Err::InvalidArgument);
  CHECK(odd.message().find("count 5") != std::string::npos);
  a.count = 4;
  a.coll = Collective::AllReduce;
  CHECK(algo::checkCallArgs(a, 2, 1).code() == Err::InvalidArgument);  // allreduce: overlap
  a.recvBuf = buf.data();  // in place
  CHECK(algo::checkCallArgs(a, 2, 1).ok());
  a.coll = Collective(7);
  CHECK(algo::checkCallArgs(a, 2, 1).code() == Err::InvalidArgument);
}

TEST_CASE("call path: the request set cancels what is still posted when an exception leaves",
          "[call-path]") {
  auto nets = transport::createLocalTransports(2, 2.0);
  const uint64_t tag = transport::makeTag(5, 1);
  uint32_t stale = 0xDEADBEEF, fresh = 0;
  try {
    algo::shared::RequestSet req(*nets[0], "test");
    REQUIRE(req.irecv(1, tag, &stale, sizeof stale).ok());
    CHECK(req.anyPending());
    throw std::runtime_error("a schedule threw with a receive posted");
  } catch (const std::runtime_error&) {
  }
  // The message sent afterwards on the same tag must reach the receive
  // posted afterwards, not the abandoned one (nor its buffer).
  const uint32_t value = 42;
  {
    algo::shared::RequestSet send(*nets[1], "test");
    REQUIRE(send.isend(0, tag, &value, sizeof value).ok());
    REQUIRE(send.waitAll().ok());
  }
  algo::shared::RequestSet req(*nets[0], "test");
  size_t slot = 0;
  REQUIRE(req.irecv(1, tag, &fresh, sizeof fresh, &slot).ok());
  REQUIRE(req.waitAll().ok());
  CHECK(fresh == value);
  CHECK(stale == 0xDEADBEEFu);
  CHECK(req.bytes(slot) == sizeof fresh);
  CHECK_FALSE(req.pending(slot));
}

TEST_CASE("call path: the request set tests without blocking, checks lengths and releases",
          "[call-path]") {
  auto nets = transport::createLocalTransports(2, 2.0);
  const uint64_t tag = transport::makeTag(6, 1);
  uint64_t word = 0;
  algo::shared::RequestSet rx(*nets[0], "length test");
  size_t slot = 0;
  REQUIRE(rx.irecv(1, tag, &word, sizeof word, &slot).ok());
  bool done = true;
  REQUIRE(rx.test(slot, &done).ok());
  CHECK_FALSE(done);  // nothing sent yet
  REQUIRE(rx.testAll(&done).ok());
  CHECK_FALSE(done);
  const uint32_t shortMsg = 1;  // 4 bytes where 8 are expected
  algo::shared::RequestSet tx(*nets[1], "length test");
  REQUIRE(tx.isend(0, tag, &shortMsg, sizeof shortMsg).ok());
  REQUIRE(tx.waitAll().ok());
  const Status s = rx.wait(slot);
  CHECK(s.code() == Err::RemoteError);
  CHECK(s.message().find("length test: rank 1 sent 4 bytes where 8 were expected") !=
        std::string::npos);

  // irecvUpTo: any length up to the capacity, reported; release() hands a
  // handle over (the set neither waits for nor cancels it).
  auto pair = transport::createLocalTransports(2, 2.0);
  uint64_t big[2] = {0, 0};
  size_t length = 0, upTo = 0, released = 0;
  algo::shared::RequestSet a(*pair[0], "up to");
  REQUIRE(a.irecvUpTo(1, tag, big, sizeof big, &length, &upTo).ok());
  uint32_t other = 0;
  REQUIRE(a.irecv(1, tag + 1, &other, sizeof other, &released).ok());
  const transport::Handle h = a.release(released);
  CHECK(h != 0);
  CHECK_FALSE(a.pending(released));
  algo::shared::RequestSet b(*pair[1], "up to");
  const uint32_t four = 4;
  REQUIRE(b.isend(0, tag, &four, sizeof four).ok());
  REQUIRE(b.isend(0, tag + 1, &four, sizeof four).ok());
  REQUIRE(b.waitAll().ok());
  REQUIRE(a.testAll(&done).ok());
  CHECK(done);
  CHECK(length == sizeof four);
  CHECK(a.bytes(upTo) == sizeof four);
  size_t got = 0;
  REQUIRE(pair[0]->wait(h, &got).ok());  // the caller completes what it took
  CHECK(got == sizeof four);
  CHECK(other == 4u);
}
