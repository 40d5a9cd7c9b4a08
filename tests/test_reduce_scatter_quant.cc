// Reduce-scatter forms of qsgd, rbf and sign (NCCL's layout: count = the
// whole tensor, rank r returns [r * recvcount, (r + 1) * recvcount)) over the
// local transport and, once, between real processes over UCX: every rank's
// shard equals its slice of the reduceScatterReference bit for bit (sum and
// avg, fp32/fp16/bf16, odd calls in place, recvcount not a multiple of the
// bucket), error feedback carried across calls, wire bytes as each form's
// header states, and the non-finite fallback.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <thread>

#include "algorithms/quant/quant_algorithms.h"
#include "device/cpu/cpu_device_backend.h"
#include "quant_harness.h"
#include "support/algo_runner.h"
#include "support/multiproc.h"
#include "transport/ucx_transport.h"

using namespace gradcomp;
using test::Buffers;
using algo::Collective;

namespace {

using RefFactory = Status (*)(int, const param::Overrides&, std::unique_ptr<algo::Reference>*);

struct Form {
  const char* algo;
  RefFactory reference;
  std::vector<std::pair<const char*, const char*>> params;
};

// qsgd's buckets (512, 64) never divide the recvcounts used below.
const std::vector<Form>& forms() {
  static const std::vector<Form> f = {
      {"qsgd", algo::quant::makeQsgdReference, {{"BITS", "8"}}},
      {"qsgd", algo::quant::makeQsgdReference, {{"BITS", "4"}}},
      {"qsgd", algo::quant::makeQsgdReference, {{"BITS", "1"}, {"BUCKET", "64"}}},
      {"rbf", algo::quant::makeRbfReference, {}},
      {"rbf", algo::quant::makeRbfReference, {{"BITS", "6"}, {"RBF_VMAX", "2"}}},
      {"sign", algo::quant::makeSignReference, {{"SIGN_BLOCK", "96"}}},
  };
  return f;
}

param::Overrides overrides(const std::vector<std::pair<const char*, const char*>>& kv) {
  param::Overrides o;
  for (const auto& [k, v] : kv) REQUIRE(o.set(k, v, "test").ok());
  return o;
}

// calls x P x n inputs: Gaussian with a per-rank offset, a few exact zeros.
std::vector<Buffers> gaussianInputs(int calls, int P, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0, 1);
  std::vector<Buffers> in(calls, Buffers(P, std::vector<float>(n)));
  for (auto& call : in)
    for (int r = 0; r < P; ++r)
      for (size_t i = 0; i < n; ++i) call[r][i] = i % 17 == 3 ? 0.0f : g(rng) + 0.1f * r;
  return in;
}

// Conversions through the CPU backend; no Catch2 here (rank threads use them).
Status convertTo(const std::vector<float>& v, DataType t, std::vector<uint8_t>* out) {
  out->resize(v.size() * dtypeSize(t));
  device::Backend& cpu = device::cpuBackend();
  GC_CHECK(cpu.convert(out->data(), t, v.data(), DataType::Float32, v.size()));
  return cpu.sync();
}

Status convertFrom(const uint8_t* p, size_t n, DataType t, std::vector<float>* out) {
  out->resize(n);
  device::Backend& cpu = device::cpuBackend();
  GC_CHECK(cpu.convert(out->data(), DataType::Float32, p, t, n));
  return cpu.sync();
}

std::vector<uint8_t> toDtype(const std::vector<float>& v, DataType t) {
  std::vector<uint8_t> out;
  REQUIRE(convertTo(v, t, &out).ok());
  return out;
}

std::vector<float> fromDtype(const uint8_t* p, size_t n, DataType t) {
  std::vector<float> out;
  REQUIRE(convertFrom(p, n, t, &out).ok());
  return out;
}

struct Run {
  std::vector<Buffers> out;                 // [call][rank][output element], widened to fp32
  std::vector<std::vector<uint64_t>> sent;  // [call][rank] bytes
  std::vector<Status> status;               // [rank]
  std::string firstError() const {
    for (const Status& s : status)
      if (!s.ok()) return s.toString();
    return "";
  }
};

// Runs `coll` of `algo` on P threads (one residual store and algorithm object
// per rank, as a communicator) through runCollective. Reduce-scatter: odd
// calls in NCCL's in-place layout (recvBuf = sendBuf + r * recvcount).
Run runColl(const char* name, const param::Overrides& cfg, const std::vector<Buffers>& in,
            RedOp op, DataType dtype, Collective coll, uint64_t key = 7) {
  const int P = int(in.at(0).size());
  Run run;
  run.out.assign(in.size(), Buffers(P));
  run.sent.assign(in.size(), std::vector<uint64_t>(P, 0));
  run.status.assign(P, Status::Ok());
  const algo::AlgorithmInfo* info = algo::findAlgorithm(name);
  REQUIRE(info);
  auto nets = transport::createLocalTransports(P, 30.0);
  std::vector<std::thread> threads;
  for (int r = 0; r < P; ++r)
    threads.emplace_back([&, r] {
      std::unique_ptr<algo::ErrorFeedbackStore> store;
      Status s = algo::ErrorFeedbackStore::create(cfg, &store);
      std::unique_ptr<algo::Algorithm> alg = info->create();
      const size_t esz = dtypeSize(dtype);
      for (size_t c = 0; c < in.size() && s.ok(); ++c) {
        const size_t n = in[c][r].size();
        const size_t outN = coll == Collective::ReduceScatter ? n / size_t(P) : n;
        std::vector<uint8_t> tensor, recv(outN * esz, 0x55);
        s = convertTo(in[c][r], dtype, &tensor);
        if (!s.ok()) break;
        algo::AllreduceArgs a;
        a.sendBuf = tensor.data();
        a.recvBuf = recv.data();
        if (c % 2 == 1)
          a.recvBuf = coll == Collective::ReduceScatter ? tensor.data() + size_t(r) * outN * esz
                                                        : tensor.data();
        a.count = n;
        a.dtype = dtype;
        a.op = op;
        a.coll = coll;
        a.bufferKey = key;
        algo::Context ctx{*nets[r], device::cpuBackend(), cfg, uint64_t(c), store.get()};
        const uint64_t before = nets[r]->totalCounters().bytesSent;
        s = algo::runCollective(*alg, ctx, a);
        run.sent[c][r] = nets[r]->totalCounters().bytesSent - before;
        const auto* got = static_cast<const uint8_t*>(a.recvBuf);
        if (s.ok()) s = convertFrom(got, outN, dtype, &run.out[c][r]);
      }
      run.status[r] = s;
    });
  for (auto& t : threads) t.join();
  return run;
}

// The reference's whole-tensor expectation of each call, rounded to dtype.
std::vector<std::vector<float>> expectAll(algo::Reference& ref, const std::vector<Buffers>& in,
                                          RedOp op, DataType dtype, Collective coll,
                                          uint64_t key = 7) {
  std::vector<std::vector<float>> all;
  for (const Buffers& call : in) {
    std::vector<std::vector<uint8_t>> bytes;
    std::vector<const void*> ptrs;
    for (const auto& b : call) bytes.push_back(toDtype(b, dtype));
    for (const auto& b : bytes) ptrs.push_back(b.data());
    algo::AllreduceArgs a;
    a.count = call[0].size();
    a.dtype = dtype;
    a.op = op;
    a.coll = coll;
    a.bufferKey = key;
    std::vector<double> e, tol;
    REQUIRE(ref.expect(ptrs, a, &e, &tol).ok());
    // The quantized references are bit-exact.
    REQUIRE(std::all_of(tol.begin(), tol.end(), [](double t) { return t == 0; }));
    std::vector<float> f(e.begin(), e.end());
    all.push_back(fromDtype(toDtype(f, dtype).data(), f.size(), dtype));
  }
  return all;
}

bool same(float a, float b) { return test::sameBits(a, b) || (std::isnan(a) && std::isnan(b)); }

// Elements of rank r's shard at call c that differ from the reference's slice.
size_t wrongInShard(const Run& run, const std::vector<std::vector<float>>& expected, size_t c,
                    int r) {
  const std::vector<float>& got = run.out[c][r];
  size_t wrong = 0;
  for (size_t i = 0; i < got.size(); ++i)
    wrong += same(got[i], expected[c][size_t(r) * got.size() + i]) ? 0 : 1;
  return wrong;
}

void requireShardsMatch(const Form& f, const std::vector<Buffers>& in, RedOp op, DataType t) {
  const int P = int(in[0].size());
  const param::Overrides cfg = overrides(f.params);
  const Run run = runColl(f.algo, cfg, in, op, t, Collective::ReduceScatter);
  REQUIRE(run.firstError() == "");
  std::unique_ptr<algo::Reference> ref;
  REQUIRE(f.reference(P, cfg, &ref).ok());
  const auto expected = expectAll(*ref, in, op, t, Collective::ReduceScatter);
  for (size_t c = 0; c < in.size(); ++c)
    for (int r = 0; r < P; ++r) {
      INFO("call " << c << " rank " << r);
      REQUIRE(wrongInShard(run, expected, c, r) == 0);
    }
}

std::string label(const Form& f) {
  std::string s = f.algo;
  for (const auto& [k, v] : f.params) s += std::string(" ") + k + "=" + v;
  return s;
}

}  // namespace

TEST_CASE("quantized reduce-scatter: every shard equals the reference's slice bit for bit",
          "[quant][rs]") {
  for (const Form& f : forms())
    for (int P : {2, 3, 4})
      for (size_t recvCount : {size_t(1), size_t(7), size_t(700)})
        for (RedOp op : {RedOp::Sum, RedOp::Avg})
          for (DataType t : {DataType::Float32, DataType::Float16, DataType::BFloat16}) {
            if (recvCount < 700 && t != DataType::Float32) continue;
            INFO(label(f) << " P=" << P << " recvcount=" << recvCount << " " << redOpName(op)
                          << " " << dtypeName(t));
            const auto in = gaussianInputs(4, P, recvCount * size_t(P), 11 + P);
            requireShardsMatch(f, in, op, t);
          }
}

TEST_CASE("quantized reduce-scatter: the registry's reduce-scatter references", "[quant][rs]") {
  for (const char* name : {"qsgd", "rbf", "sign"}) {
    const algo::AlgorithmInfo* info = algo::findAlgorithm(name);
    REQUIRE(info);
    REQUIRE(info->reduceScatterReference);
    REQUIRE(info->create()->hasReduceScatter());
  }
  const algo::AlgorithmInfo* fft = algo::findAlgorithm("fft");
  REQUIRE(fft);
  CHECK_FALSE(fft->reduceScatterReference);
  CHECK_FALSE(fft->create()->hasReduceScatter());

  // The cpu-device backend (device memory the host cannot touch outside a
  // primitive) through CallBudget, with a NaN at call 2: the registry's
  // reference with its defaults.
  for (const char* name : {"qsgd", "rbf", "sign"}) {
    testing::AlgoRun run;
    run.algo = name;
    run.ranks = 3;
    run.count = 3 * 1001;
    run.calls = 4;
    run.nanCall = 2;
    run.throughBudget = true;
    run.coll = Collective::ReduceScatter;
    std::vector<std::unique_ptr<device::Backend>> devs;
    for (int r = 0; r < run.ranks; ++r) devs.push_back(device::makeCpuDeviceBackend());
    std::vector<std::vector<std::vector<uint8_t>>> out;
    std::vector<Status> st;
    testing::runRanks(run, [&](int r) -> device::Backend& { return *devs[r]; }, &out, &st);
    auto ref = algo::findAlgorithm(name)->reduceScatterReference(run.ranks);
    REQUIRE(ref);
    const size_t rc = run.count / 3;
    for (int c = 0; c < run.calls; ++c) {
      std::vector<std::vector<float>> in(3, std::vector<float>(run.count));
      for (int r = 0; r < 3; ++r)
        for (size_t i = 0; i < run.count; ++i) in[r][i] = testing::inputValue(r, c, i);
      if (c == run.nanCall) in[0][1] = std::nanf("");
      std::vector<const void*> ptrs = {in[0].data(), in[1].data(), in[2].data()};
      algo::AllreduceArgs a;
      a.count = run.count;
      a.coll = Collective::ReduceScatter;
      a.bufferKey = 11 + run.count;
      std::vector<double> e, tol;
      REQUIRE(ref->expect(ptrs, a, &e, &tol).ok());
      for (int r = 0; r < 3; ++r) {
        INFO(name << " call " << c << " rank " << r << ": " << st[r].toString());
        REQUIRE(st[r].ok());
        size_t wrong = 0;
        for (size_t i = 0; i < rc; ++i) {
          float got;
          std::memcpy(&got, out[r][c].data() + 4 * i, 4);
          wrong += same(got, float(e[size_t(r) * rc + i])) ? 0 : 1;
        }
        CHECK(wrong == 0);
      }
    }
  }
}

namespace {

// ||sum_t out_t - sum_t exact_t|| / ||exact|| (L2 over the whole tensor,
// shards gathered) after T calls of the same inputs g (sum). With error
// feedback sum_t out_t = T exact - (the ranks' residuals after the last
// call); without, every call's encoding error adds up.
double driftOver(const char* name, const param::Overrides& cfg, const Buffers& g, int T) {
  const int P = int(g.size());
  const std::vector<Buffers> in(size_t(T), g);
  const Run run = runColl(name, cfg, in, RedOp::Sum, DataType::Float32, Collective::ReduceScatter);
  REQUIRE(run.firstError() == "");
  const size_t n = g[0].size(), rc = n / size_t(P);
  double e2 = 0, x2 = 0;
  for (size_t i = 0; i < n; ++i) {
    double exact = 0, got = 0;
    for (int r = 0; r < P; ++r) exact += g[r][i];
    for (int t = 0; t < T; ++t) got += run.out[t][int(i / rc)][i % rc];
    e2 += (got - T * exact) * (got - T * exact);
    x2 += exact * exact;
  }
  return std::sqrt(e2 / x2);
}

}  // namespace

TEST_CASE("quantized reduce-scatter: error feedback carries residuals across calls",
          "[quant][rs]") {
  const int P = 3;
  const Buffers g = gaussianInputs(1, P, size_t(P) * 500, 3)[0];
  // sign's majority can only send what the votes agree on: a coordinate whose
  // majority disagrees with its sum's sign is never sent, EF or not (each
  // rank's residual keeps its vote). Its check gives every rank the same
  // inputs, where EF-signSGD's residual is what one rank's would be.
  Buffers agreeing = g;
  agreeing[1] = agreeing[2] = g[0];
  struct Case {
    Form form;
    const Buffers* in;
  };
  const std::vector<Case> cases = {
      {{"qsgd", nullptr, {{"BITS", "2"}, {"BUCKET", "64"}}}, &g},
      {{"rbf", nullptr, {{"BITS", "4"}}}, &g},
      {{"sign", nullptr, {}}, &agreeing},
  };
  for (const Case& k : cases) {
    const Form& f = k.form;
    INFO(label(f));
    param::Overrides on = overrides(f.params), off = overrides(f.params);
    REQUIRE(off.set("EF", "0", "test").ok());
    const double on8 = driftOver(f.algo, on, *k.in, 8), on32 = driftOver(f.algo, on, *k.in, 32);
    const double off8 = driftOver(f.algo, off, *k.in, 8);
    const double off32 = driftOver(f.algo, off, *k.in, 32);
    INFO("drift: EF on " << on8 << " (8 calls), " << on32 << " (32 calls); off " << off8
                         << ", " << off32);
    // The first call has no residual yet: EF on and off agree there.
    CHECK(driftOver(f.algo, on, *k.in, 1) == driftOver(f.algo, off, *k.in, 1));
    // 4x the calls: with EF the drift grows at most as sqrt(4) = 2 (qsgd and
    // rbf: bounded residuals; sign: EF-signSGD's slowly growing ones), far
    // less than without.
    CHECK(on32 <= 2.2 * on8);
    CHECK(on32 * 3 < off32);
  }
}

TEST_CASE("quantized reduce-scatter: wire bytes of one call", "[quant][rs]") {
  const int P = 4;
  const size_t rc = 10000, n = rc * P;
  const auto in = gaussianInputs(2, P, n, 5);
  const uint64_t stats = 16 * (P - 1);  // the per-call stats exchange
  auto perRank = [&](const char* name, const param::Overrides& cfg, Collective coll) {
    const Run run = runColl(name, cfg, in, RedOp::Sum, DataType::Float32, coll);
    REQUIRE(run.firstError() == "");
    for (int r = 1; r < P; ++r) REQUIRE(run.sent[1][r] == run.sent[1][0]);
    return run.sent[1][0];
  };
  const uint64_t dense = perRank("dense", {}, Collective::ReduceScatter);
  CHECK(dense == 4 * n * (P - 1) / P);
  // qsgd b = 4, bucket 512: (P-1) payloads of 8 ceil(rc / 512) + ceil(rc b / 8).
  const uint64_t q = perRank("qsgd", overrides({{"BITS", "4"}}), Collective::ReduceScatter);
  CHECK(q == stats + (P - 1) * (8 * ((rc + 511) / 512) + (rc * 4 + 7) / 8));
  CHECK(q <= 1.05 * (n * (P - 1) / P) * 4 / 8);  // (P-1)/P of the tensor at 4 bits, +5%
  CHECK(q * 7 < dense);
  // rbf N = 10: (P-1) payloads of 4 + ceil(rc N / 8).
  const uint64_t b = perRank("rbf", {}, Collective::ReduceScatter);
  CHECK(b == stats + (P - 1) * (4 + (rc * 10 + 7) / 8));
  CHECK(b <= 1.01 * (n * (P - 1) / P) * 10 / 8);
  // sign: the allreduce's bytes (its header says why).
  const uint64_t s = perRank("sign", {}, Collective::ReduceScatter);
  CHECK(s == perRank("sign", {}, Collective::AllReduce));
  CHECK(s * 8 < dense);
}

// Shards of a few hundred thousand elements go out in several phase-1
// messages per peer (code_exchange.cc, kSliceElements = 2^18): bit for bit
// the reference's results, to the byte the unsliced formula, in both
// collectives. Bucket 7 makes the slice length lcm(7, 32) x 1170 = 262080.
TEST_CASE("quantized: payloads cut into slices keep results and wire bytes", "[quant][rs]") {
  const int P = 3;
  const size_t rc = 700003, n = rc * P;
  const auto in = gaussianInputs(2, P, n, 21);
  const Form forms[] = {
      {"qsgd", algo::quant::makeQsgdReference, {{"BITS", "4"}}},
      {"qsgd", algo::quant::makeQsgdReference, {{"BITS", "1"}, {"BUCKET", "7"}}},
  };
  for (const Form& f : forms) {
    INFO(label(f));
    const int bits = std::atoi(f.params[0].second);
    const size_t bucket = f.params.size() > 1 ? 7 : 512;
    const param::Overrides cfg = overrides(f.params);
    std::unique_ptr<algo::Reference> ref;
    REQUIRE(f.reference(P, cfg, &ref).ok());
    const Run rs = runColl(f.algo, cfg, in, RedOp::Sum, DataType::Float32,
                           Collective::ReduceScatter);
    REQUIRE(rs.firstError() == "");
    const auto expected = expectAll(*ref, in, RedOp::Sum, DataType::Float32,
                                    Collective::ReduceScatter);
    for (size_t c = 0; c < in.size(); ++c)
      for (int r = 0; r < P; ++r) {
        INFO("reduce-scatter call " << c << " rank " << r);
        REQUIRE(wrongInShard(rs, expected, c, r) == 0);
        const uint64_t payload = 8 * ((rc + bucket - 1) / bucket) + (rc * bits + 7) / 8;
        CHECK(rs.sent[c][r] == 16 * (P - 1) + (P - 1) * payload);
      }
    std::unique_ptr<algo::Reference> arRef;
    REQUIRE(f.reference(P, cfg, &arRef).ok());
    const Run ar = runColl(f.algo, cfg, in, RedOp::Avg, DataType::Float32,
                           Collective::AllReduce);
    REQUIRE(ar.firstError() == "");
    const auto arExpected = expectAll(*arRef, in, RedOp::Avg, DataType::Float32,
                                      Collective::AllReduce);
    for (size_t c = 0; c < in.size(); ++c)
      for (int r = 0; r < P; ++r) {
        INFO("allreduce call " << c << " rank " << r);
        size_t wrong = 0;
        for (size_t i = 0; i < n; ++i) wrong += same(ar.out[c][r][i], arExpected[c][i]) ? 0 : 1;
        REQUIRE(wrong == 0);
      }
  }
}

TEST_CASE("quantized reduce-scatter: a non-finite input falls back to the exact sum",
          "[quant][rs]") {
  const int P = 3;
  const size_t rc = 100, n = rc * P;
  auto in = gaussianInputs(3, P, n, 9);
  in[1][0][1] = std::nanf("");                             // rank 0's shard
  in[1][2][250] = std::numeric_limits<float>::infinity();  // rank 2's shard
  for (const Form& f : {forms()[1], forms()[3], forms()[5]})
    for (RedOp op : {RedOp::Sum, RedOp::Avg}) {
      INFO(label(f) << " " << redOpName(op));
      // Without error feedback acc is the input: call 1 is then the exact
      // fp32 sum of the inputs in rank order (avg: / P), NaN/Inf in place.
      param::Overrides noEf = overrides(f.params);
      REQUIRE(noEf.set("EF", "0", "test").ok());
      Run run = runColl(f.algo, noEf, in, op, DataType::Float32, Collective::ReduceScatter);
      REQUIRE(run.firstError() == "");
      CHECK(std::isnan(run.out[1][0][1]));
      CHECK(std::isinf(run.out[1][2][50]));
      size_t inexact = 0;
      for (size_t i = 0; i < n; ++i) {
        if (i == 1 || i == 250) continue;
        float sum = in[1][0][i];
        for (int r = 1; r < P; ++r) sum += in[1][r][i];
        if (op == RedOp::Avg) sum = float(double(sum) / P);
        inexact += test::sameBits(run.out[1][int(i / rc)][i % rc], sum) ? 0 : 1;
      }
      CHECK(inexact == 0);
      // With error feedback every rank clears its residual, as the reference
      // does: calls 1 and 2 match it bit for bit.
      const param::Overrides cfg = overrides(f.params);
      run = runColl(f.algo, cfg, in, op, DataType::Float32, Collective::ReduceScatter);
      REQUIRE(run.firstError() == "");
      CHECK(std::isnan(run.out[1][0][1]));
      std::unique_ptr<algo::Reference> ref;
      REQUIRE(f.reference(P, cfg, &ref).ok());
      const auto expected = expectAll(*ref, in, op, DataType::Float32, Collective::ReduceScatter);
      for (size_t c = 0; c < in.size(); ++c)
        for (int r = 0; r < P; ++r) CHECK(wrongInShard(run, expected, c, r) == 0);
    }
}

TEST_CASE("quantized reduce-scatter: bad arguments are named, fft has no form", "[quant][rs]") {
  const Buffers ten(3, std::vector<float>(10, 1.0f));  // 10 is not recvcount x 3
  Run run = runColl("qsgd", {}, {ten}, RedOp::Sum, DataType::Float32, Collective::ReduceScatter);
  for (const Status& s : run.status) {
    CHECK(s.code() == Err::InvalidArgument);
    CHECK(s.message().find("count 10") != std::string::npos);
  }
  const Buffers nine(3, std::vector<float>(9, 1.0f));
  run = runColl("fft", {}, {nine}, RedOp::Sum, DataType::Float32, Collective::ReduceScatter);
  for (const Status& s : run.status) CHECK(s.code() == Err::Unsupported);
  // An integer dtype has no compressed form (the caller passes it to dense).
  std::unique_ptr<algo::Algorithm> q = algo::findAlgorithm("qsgd")->create();
  auto nets = transport::createLocalTransports(1, 5.0);
  std::vector<int32_t> x(4, 1);
  algo::AllreduceArgs a;
  a.sendBuf = x.data();
  a.recvBuf = x.data();
  a.count = 4;
  a.dtype = DataType::Int32;
  a.coll = Collective::ReduceScatter;
  algo::Context ctx{*nets[0], device::cpuBackend(), param::Overrides{}, 0};
  CHECK(algo::runCollective(*q, ctx, a).code() == Err::Unsupported);
}

// ---- real processes over UCX ----

namespace {

// Each rank connects over UCX, regenerates every rank's inputs, runs three
// reduce-scatters per algorithm (the middle one in place) and checks its
// shard against the reference computed locally. No Catch2 in here (a child).
int ucxRank(int rank) {
  using namespace gradcomp::transport;
  LaunchInfo info;
  std::unique_ptr<AddressExchange> ex;
  std::unique_ptr<Transport> net;
  std::unique_ptr<algo::ErrorFeedbackStore> store;
  Status s = launchInfoFromEnvironment(&info);
  if (s.ok()) s = createUcxBootstrap(info, &ex);
  if (s.ok()) s = createUcxTransport(*ex, UcxOptions{}, &net);
  if (s.ok()) s = algo::ErrorFeedbackStore::create(param::Overrides{}, &store);
  if (!s.ok()) {
    fprintf(stderr, "rank %d: connect: %s\n", rank, s.toString().c_str());
    return 10;
  }
  const int P = net->size();
  const size_t rc = 1001, n = rc * size_t(P);
  uint64_t seq = 0, key = 40;
  for (const Form& f : forms()) {
    param::Overrides cfg;
    for (const auto& [k, v] : f.params)
      if (!cfg.set(k, v, "test").ok()) return 11;
    std::unique_ptr<algo::Reference> ref;
    if (!f.reference(P, cfg, &ref).ok()) return 12;
    std::unique_ptr<algo::Algorithm> alg = algo::findAlgorithm(f.algo)->create();
    const auto in = gaussianInputs(3, P, n, 21);
    ++key;  // one tensor per form
    for (size_t c = 0; c < in.size(); ++c) {
      std::vector<float> tensor = in[c][rank], recv(rc);
      algo::AllreduceArgs a;
      a.sendBuf = tensor.data();
      a.recvBuf = c == 1 ? tensor.data() + size_t(rank) * rc : recv.data();
      a.count = n;
      a.coll = Collective::ReduceScatter;
      a.bufferKey = key;
      algo::Context ctx{*net, device::cpuBackend(), cfg, seq++, store.get()};
      s = algo::runCollective(*alg, ctx, a);
      if (!s.ok()) {
        fprintf(stderr, "rank %d %s: %s\n", rank, label(f).c_str(), s.toString().c_str());
        return 13;
      }
      std::vector<const void*> ptrs;
      for (const auto& b : in[c]) ptrs.push_back(b.data());
      a.sendBuf = a.recvBuf = nullptr;
      std::vector<double> e, tol;
      if (!ref->expect(ptrs, a, &e, &tol).ok()) return 14;
      const float* got = static_cast<const float*>(c == 1 ? tensor.data() + size_t(rank) * rc
                                                          : recv.data());
      for (size_t i = 0; i < rc; ++i)
        if (!same(got[i], float(e[size_t(rank) * rc + i]))) {
          fprintf(stderr, "rank %d %s call %zu: element %zu is %g, reference %g\n", rank,
                  label(f).c_str(), c, i, double(got[i]), e[size_t(rank) * rc + i]);
          return 15;
        }
    }
  }
  return 0;
}

}  // namespace

TEST_CASE("quantized reduce-scatter (UCX processes): 3 ranks agree with the references",
          "[quant][rs][mp]") {
  const std::map<std::string, std::string> env = {{"GRADCOMP_TIMEOUT_S", "30"}};
  REQUIRE(test::allSucceeded(test::runRanks(3, ucxRank, env, 120)));
}
