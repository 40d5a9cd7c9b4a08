// Dense allreduce: first over LocalTransport (threads, fast, traffic counted
// exactly), then as real processes over UCX through the public C API.
//
// Inputs are small integers in [-4, 4]: with P <= 8 every partial sum is an
// integer of magnitude <= 32, exact in every dtype (bf16 holds integers up to
// 256), so the result must equal the double sum rounded once to the dtype
// (avg: the double sum / P rounded once) bit for bit.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/algorithm.h"
#include "common/param.h"
#include "device/backend.h"
#include "gradcomp/gradcomp.h"
#include "support/multiproc.h"
#include "transport/local_transport.h"

using namespace gradcomp;

namespace {

const int kRanks[] = {1, 2, 3, 4, 5, 8};
const DataType kFloatTypes[] = {DataType::Float32, DataType::Float16, DataType::BFloat16,
                                DataType::Float64};

double inputValue(int rank, size_t i, uint64_t salt) {
  return double(int((i * 2654435761u + size_t(rank) * 40503u + salt * 977u) % 9) - 4);
}

// Buffer of `count` elements of t holding inputValue(rank, i, salt).
std::vector<char> makeInput(DataType t, int rank, size_t count, uint64_t salt) {
  std::vector<double> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = inputValue(rank, i, salt);
  std::vector<char> out(count * dtypeSize(t) + 1);  // +1: never empty
  REQUIRE(device::cpuBackend().convert(out.data(), t, v.data(), DataType::Float64, count).ok());
  return out;
}

// The exact result, rounded once to t.
std::vector<char> makeExpected(DataType t, int P, size_t count, RedOp op, uint64_t salt) {
  std::vector<double> v(count, 0.0);
  for (size_t i = 0; i < count; ++i) {
    for (int r = 0; r < P; ++r) v[i] += inputValue(r, i, salt);
    if (op == RedOp::Avg) v[i] /= P;
  }
  std::vector<char> out(count * dtypeSize(t) + 1);
  REQUIRE(device::cpuBackend().convert(out.data(), t, v.data(), DataType::Float64, count).ok());
  return out;
}

// Runs body(rank, transport) on P threads over one local fabric.
template <class Body>
void runLocal(int P, Body body) {
  auto nets = transport::createLocalTransports(P, 30.0);
  std::vector<Status> results(P);
  std::vector<std::thread> threads;
  for (int r = 0; r < P; ++r)
    threads.emplace_back([&, r] { results[r] = body(r, *nets[r]); });
  for (auto& t : threads) t.join();
  for (int r = 0; r < P; ++r) {
    INFO("rank " << r << ": " << results[r].toString());
    REQUIRE(results[r].ok());
  }
}

struct Case {
  size_t count;
  DataType dtype;
  RedOp op;
  bool inPlace;
};

// One allreduce on this rank; compares with the exact result bit for bit.
Status runCase(transport::Transport& net, algo::Algorithm& algo, const param::Overrides& cfg,
               uint64_t seq, const Case& c) {
  const int P = net.size(), r = net.rank();
  std::vector<char> in = makeInput(c.dtype, r, c.count, seq);
  std::vector<char> out(in.size(), 0x55);
  algo::Context ctx{net, device::cpuBackend(), cfg, seq};
  algo::AllreduceArgs a;
  a.sendBuf = in.data();
  a.recvBuf = c.inPlace ? in.data() : out.data();
  a.count = c.count;
  a.dtype = c.dtype;
  a.op = c.op;
  GC_CHECK(algo.allreduce(ctx, a));
  const std::vector<char> want = makeExpected(c.dtype, P, c.count, c.op, seq);
  const char* got = c.inPlace ? in.data() : out.data();
  const size_t bytes = c.count * dtypeSize(c.dtype);
  GC_REQUIRE(std::memcmp(got, want.data(), bytes) == 0, Err::Internal,
             "rank %d: wrong result for P=%d count=%zu %s %s %s", r, P, c.count,
             dtypeName(c.dtype), redOpName(c.op), c.inPlace ? "in-place" : "out-of-place");
  return Status::Ok();
}

param::Overrides configWith(const char* rdMax) {
  param::Overrides cfg;
  REQUIRE(cfg.set("DENSE_RD_MAX_BYTES", rdMax, "test").ok());
  return cfg;
}

}  // namespace

TEST_CASE("dense: registered with its parameter", "[dense]") {
  const algo::AlgorithmInfo* info = algo::findAlgorithm("dense");
  REQUIRE(info);
  REQUIRE(info->params.size() == 1);
  CHECK(info->params[0] == param::Id::DENSE_RD_MAX_BYTES);
  CHECK(info->create());
  CHECK(info->reference(3));
}

TEST_CASE("dense (local): ranks x counts x dtypes x ops x in/out-of-place, both schedules",
          "[dense]") {
  const size_t counts[] = {0, 1, 7, 1000, 30011};
  // "64K" is the registry default, spelled out: reading the default through the
  // registry here would freeze it in this process, and forked children of the
  // [mp] tests below would inherit the frozen value instead of their env.
  for (const char* rdMax : {"0", "1G", "64K"}) {
    const param::Overrides cfg = configWith(rdMax);
    for (int P : kRanks) {
      INFO("P=" << P << " DENSE_RD_MAX_BYTES=" << rdMax);
      runLocal(P, [&](int, transport::Transport& net) -> Status {
        auto algo = algo::findAlgorithm("dense")->create();
        uint64_t seq = 0;
        for (size_t count : counts)
          for (DataType t : kFloatTypes)
            for (RedOp op : {RedOp::Sum, RedOp::Avg})
              for (bool inPlace : {true, false})
                GC_CHECK(runCase(net, *algo, cfg, seq++, {count, t, op, inPlace}));
        return Status::Ok();
      });
    }
  }
}

TEST_CASE("dense (local): integer dtypes wrap and avg truncates", "[dense]") {
  runLocal(3, [&](int r, transport::Transport& net) -> Status {
    auto algo = algo::findAlgorithm("dense")->create();
    const param::Overrides cfg = configWith("64K");
    int32_t v[3] = {INT32_MAX, -7, 5};
    if (r != 0) v[0] = 1;
    algo::Context ctx{net, device::cpuBackend(), cfg, 0};
    algo::AllreduceArgs a;
    a.sendBuf = a.recvBuf = v;
    a.count = 3;
    a.dtype = DataType::Int32;
    a.op = RedOp::Avg;
    GC_CHECK(algo->allreduce(ctx, a));
    // sum: INT32_MAX + 2 wraps to INT32_MIN + 1; -21; 15. avg truncates toward 0.
    GC_REQUIRE(v[0] == (INT32_MIN + 1) / 3 && v[1] == -7 && v[2] == 5, Err::Internal,
               "rank %d: int32 avg gave %d %d %d", r, v[0], v[1], v[2]);
    return Status::Ok();
  });
}

TEST_CASE("dense (local): traffic is exactly the schedule's volume", "[dense]") {
  const size_t count = 10007, bytes = count * 4;
  for (int P : kRanks) {
    for (bool ring : {true, false}) {
      INFO("P=" << P << (ring ? " ring" : " recursive doubling"));
      std::vector<uint64_t> sent(P);
      const param::Overrides cfg = configWith(ring ? "0" : "1G");
      runLocal(P, [&](int r, transport::Transport& net) -> Status {
        auto algo = algo::findAlgorithm("dense")->create();
        GC_CHECK(runCase(net, *algo, cfg, 1, {count, DataType::Float32, RedOp::Sum, false}));
        sent[r] = net.totalCounters().bytesSent;
        return Status::Ok();
      });
      uint64_t total = 0;
      for (uint64_t s : sent) total += s;
      int p2 = 1, levels = 0;
      while (p2 * 2 <= P) p2 *= 2, ++levels;
      // Ring: every chunk crosses P-1 links twice. Recursive doubling: the P2
      // core ranks send the buffer once per level; each folded pair adds 2.
      const uint64_t want = ring ? 2 * uint64_t(P - 1) * bytes
                                 : (uint64_t(p2) * levels + 2 * uint64_t(P - p2)) * bytes;
      CHECK(total == want);
      if (ring && P > 1)  // balanced: each rank sends 2(P-1)/P of the buffer (+- one element per chunk)
        for (uint64_t s : sent) CHECK(std::llabs(int64_t(s) - int64_t(2 * (P - 1) * bytes / P)) <= 2 * P * 4);
    }
  }
}

TEST_CASE("dense (local): real-valued inputs agree across ranks within the reference bound",
          "[dense]") {
  for (int P : {3, 5, 8}) {
    for (const char* rdMax : {"0", "1G"}) {
      for (DataType t : kFloatTypes) {
        const size_t count = 5003;
        std::vector<std::vector<char>> inputs(P), outputs(P);
        for (int r = 0; r < P; ++r) {
          std::vector<double> v(count);
          for (size_t i = 0; i < count; ++i) v[i] = std::sin(double(i * 31 + r * 7)) * (1 + r);
          inputs[r].resize(count * dtypeSize(t));
          outputs[r].resize(count * dtypeSize(t));
          REQUIRE(device::cpuBackend().convert(inputs[r].data(), t, v.data(), DataType::Float64, count).ok());
        }
        const param::Overrides cfg = configWith(rdMax);
        runLocal(P, [&](int r, transport::Transport& net) -> Status {
          auto algo = algo::findAlgorithm("dense")->create();
          algo::Context ctx{net, device::cpuBackend(), cfg, 0};
          algo::AllreduceArgs a;
          a.sendBuf = inputs[r].data();
          a.recvBuf = outputs[r].data();
          a.count = count;
          a.dtype = t;
          a.op = RedOp::Avg;
          return algo->allreduce(ctx, a);
        });
        INFO("P=" << P << " " << dtypeName(t) << " RD_MAX=" << rdMax);
        for (int r = 1; r < P; ++r) REQUIRE(outputs[r] == outputs[0]);  // bit-identical
        std::vector<const void*> ins;
        for (auto& in : inputs) ins.push_back(in.data());
        algo::AllreduceArgs a;
        a.count = count;
        a.dtype = t;
        a.op = RedOp::Avg;
        std::vector<double> expected, tolerance, got(count);
        REQUIRE(algo::findAlgorithm("dense")->reference(P)->expect(ins, a, &expected, &tolerance).ok());
        REQUIRE(device::cpuBackend().convert(got.data(), DataType::Float64, outputs[0].data(), t, count).ok());
        size_t wrong = 0;
        for (size_t i = 0; i < count; ++i) wrong += std::fabs(got[i] - expected[i]) > tolerance[i];
        CHECK(wrong == 0);
      }
    }
  }
}

TEST_CASE("dense: bad arguments are rejected with a message", "[dense]") {
  auto nets = transport::createLocalTransports(1, 5.0);
  auto algo = algo::findAlgorithm("dense")->create();
  const param::Overrides cfg;
  algo::Context ctx{*nets[0], device::cpuBackend(), cfg, 0};
  algo::AllreduceArgs a;
  a.count = 4;
  Status s = algo->allreduce(ctx, a);
  CHECK(s.code() == Err::InvalidArgument);
  CHECK(s.message().find("sendBuf is null") != std::string::npos);
  float x[4] = {};
  a.sendBuf = a.recvBuf = x;
  a.dtype = DataType(5);
  s = algo->allreduce(ctx, a);
  CHECK(s.code() == Err::InvalidArgument);
  CHECK(s.message().find("dtype value 5") != std::string::npos);
  a.dtype = DataType::Float64;
  a.count = SIZE_MAX / 4;
  CHECK(algo->allreduce(ctx, a).code() == Err::InvalidArgument);
  a.count = 0;
  a.sendBuf = a.recvBuf = nullptr;
  CHECK(algo->allreduce(ctx, a).ok());  // count 0: nothing to touch
}

// ---- real processes over UCX, through the public C API ----

namespace {

gcDataType_t toGc(DataType t) { return gcDataType_t(int(t)); }

// One rank of the sweep: every count x float dtype x op x placement, checked
// bit for bit. Returns 0 on success; prints the first failure.
int sweepRank(int rank, const std::vector<size_t>& counts, int64_t wantRdMax) {
  int64_t rdMax = -1;
  if (!param::getInt(param::Id::DENSE_RD_MAX_BYTES, &rdMax).ok() || rdMax != wantRdMax) {
    fprintf(stderr, "rank %d: GRADCOMP_DENSE_RD_MAX_BYTES is %lld, expected %lld (read before fork?)\n",
            rank, (long long)rdMax, (long long)wantRdMax);
    return 9;
  }
  gcComm_t comm = nullptr;
  if (gcCommInitFromEnv(&comm) != gcSuccess) {
    fprintf(stderr, "rank %d: gcCommInitFromEnv: %s\n", rank, gcLastError());
    return 10;
  }
  gcAlgoConfig_t cfg = nullptr;
  if (gcAlgoConfigCreate("dense", &cfg) != gcSuccess) return 11;
  const int P = gcCommSize(comm);
  uint64_t salt = 0;
  int rc = 0;
  for (size_t count : counts)
    for (DataType t : kFloatTypes)
      for (RedOp op : {RedOp::Sum, RedOp::Avg})
        for (bool inPlace : {true, false}) {
          if (rc) continue;
          ++salt;
          std::vector<char> in = makeInput(t, rank, count, salt), out(in.size(), 0x55);
          void* recv = inPlace ? in.data() : out.data();
          if (gcAllreduce(in.data(), recv, count, toGc(t), gcRedOp_t(int(op)), cfg, 0, comm) !=
              gcSuccess) {
            fprintf(stderr, "rank %d: gcAllreduce: %s\n", rank, gcLastError());
            rc = 12;
            continue;
          }
          const std::vector<char> want = makeExpected(t, P, count, op, salt);
          if (std::memcmp(recv, want.data(), count * dtypeSize(t)) != 0) {
            fprintf(stderr, "rank %d: wrong result: P=%d count=%zu %s %s %s\n", rank, P, count,
                    dtypeName(t), redOpName(op), inPlace ? "in-place" : "out-of-place");
            rc = 13;
          }
        }
  gcAlgoConfigDestroy(cfg);
  if (gcCommDestroy(comm) != gcSuccess && rc == 0) rc = 14;
  return rc;
}

// The default run sweeps counts {0, 1, 7, 1000003} (recursive doubling for the
// small ones, the ring for the large one); the forced runs cover the other
// schedule on each count, with 100003 as the large count to keep CI time low
// (still odd, uneven chunks, several segments per ring chunk).
void sweepProcesses(const std::map<std::string, std::string>& env, int64_t rdMax,
                    size_t largeCount) {
  const std::vector<size_t> counts = {0, 1, 7, largeCount};
  for (int P : kRanks) {
    INFO("P=" << P);
    const auto exits =
        test::runRanks(P, [&](int rank) { return sweepRank(rank, counts, rdMax); }, env, 240);
    REQUIRE(test::allSucceeded(exits));
  }
}

}  // namespace

TEST_CASE("dense (UCX processes): sweep with the default schedule choice", "[dense][mp]") {
  sweepProcesses({}, 64 * 1024, 1000003);
}

TEST_CASE("dense (UCX processes): sweep with the ring forced", "[dense][mp]") {
  sweepProcesses({{"GRADCOMP_DENSE_RD_MAX_BYTES", "0"}}, 0, 100003);
}

TEST_CASE("dense (UCX processes): sweep with recursive doubling forced", "[dense][mp]") {
  sweepProcesses({{"GRADCOMP_DENSE_RD_MAX_BYTES", "1G"}}, int64_t(1) << 30, 100003);
}
