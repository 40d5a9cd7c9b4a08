// The sparse reduce-scatter forms (docs/design.md, "Sparse reduce-scatter"):
// oktopk (the local top-k, each entry sent to the rank owning its range) and
// cltk (a shared index set, each owner getting only the values in its range).
// Properties: every shard equals its slice of the reduceScatterReference
// across calls with threshold reuse and error feedback, in place and not, sum
// and avg; the reference itself against independent formulas; residuals
// carried across calls (their mass drains into later shards); the stated wire
// bounds, exactly where the schedule fixes the bytes; NaN/Inf run the dense
// reduce-scatter; density 1.0 equals dense; a real-process run over UCX.
#include <catch2/catch.hpp>

#include <cstdio>

#include "device/cpu/cpu_device_backend.h"
#include "rs_harness.h"
#include "support/algo_runner.h"
#include "support/multiproc.h"
#include "transport/bootstrap.h"
#include "transport/ucx_transport.h"

using namespace gradcomp;
using namespace gradcomp::algo;
using namespace gradcomp::test::sparse;

namespace {

using Params = std::map<std::string, std::string>;
struct Form {
  std::string label, algo;
  Params params;
};
// Threshold reuse (tau' = 3) and repartition state for oktopk; one leader
// and every rank leading for cltk.
const std::vector<Form> kForms = {
    {"oktopk tau'=3", "oktopk", {{"DENSITY", "0.05"}, {"TOPK_TAU_PRIME", "3"}, {"TOPK_TAU", "4"}}},
    {"cltk, one leader", "cltk", {{"DENSITY", "0.05"}, {"CLTK_LEADERS", "1"}}},
    {"cltk, P leaders", "cltk", {{"DENSITY", "0.05"}}},
};

}  // namespace

TEST_CASE("sparse reduce-scatter: every shard is its slice of the reference", "[sparse][rs]") {
  for (const Form& f : kForms)
    for (int P : {2, 3, 4})
      for (RedOp op : {RedOp::Sum, RedOp::Avg}) {
        INFO(f.label << " P=" << P << " op " << int(op));
        std::mt19937_64 rng(uint64_t(P) * 7 + int(op));
        RsGroup g(f.algo, P, f.params);
        const size_t n = 331 * size_t(P);  // an odd recvcount
        for (int call = 0; call < 7; ++call) {
          INFO("call " << call);
          g.checkedCall(normalInputs(rng, P, n), op, /*inPlace=*/call % 2 == 1);
        }
      }
}

TEST_CASE("sparse reduce-scatter: the references against independent formulas",
          "[sparse][rs]") {
  std::mt19937_64 rng(3);
  for (int P : {2, 3, 4}) {
    INFO("P=" << P);
    const size_t n = 97 * size_t(P), k = 17;
    // oktopk with exact selection every call: shard j = (sum_i Topk_k(x_i)) on j's range.
    RsGroup ok("oktopk", P, {{"DENSITY", densityFor(k, n)}, {"TOPK_TAU_PRIME", "1"},
                             {"EF", "off"}});
    // cltk, one leader (rank c at call c < P^2): sum_i x_i at Topk_k(x_leader)'s indexes.
    RsGroup cl("cltk", P, {{"DENSITY", densityFor(k, n)}, {"CLTK_LEADERS", "1"}, {"EF", "off"}});
    for (int call = 0; call < P + 1; ++call) {
      const Inputs in = gridInputs(rng, P, n);  // 1/64 grid: every sum is exact
      std::vector<float> okWant(n, 0.0f), clWant(n, 0.0f);
      for (const auto& x : in)
        for (auto [i, v] : topk(x, k)) okWant[i] += v;
      for (auto [i, v] : topk(in[call % P], k))
        for (const auto& x : in) clWant[i] += x[i];
      const bool inPlace = call % 2 == 1;
      CHECK(joined(ok.checkedCall(in, RedOp::Sum, inPlace)) == okWant);
      CHECK(joined(cl.checkedCall(in, RedOp::Sum, inPlace)) == clWant);
    }
  }
}

TEST_CASE("sparse reduce-scatter: residuals carry across calls until every input is delivered",
          "[sparse][rs]") {
  // One call with data, then zero gradients: what a rank did not send stays
  // in its residual and must arrive in later shards. Grid values: every sum
  // is exact, so the shards of all calls add up to the dense sum exactly;
  // without error feedback the unsent mass would be lost and call 1 empty.
  for (const Form& f : kForms)
    for (int P : {2, 3, 4}) {
      INFO(f.label << " P=" << P);
      std::mt19937_64 rng(P);
      const size_t n = 40 * size_t(P);
      Params params = f.params;
      params["DENSITY"] = "0.1";
      RsGroup g(f.algo, P, params);
      const Inputs first = gridInputs(rng, P, n), zeros(P, std::vector<float>(n, 0.0f));
      std::vector<float> want(n, 0.0f), got(n, 0.0f);
      for (const auto& x : first)
        for (size_t i = 0; i < n; ++i) want[i] += x[i];
      const int calls = P * 12 + 2;  // k = 4P per call: every rank drains within its turns
      for (int call = 0; call < calls; ++call) {
        const std::vector<float> out = joined(g.checkedCall(call ? zeros : first));
        if (call == 1) CHECK(std::any_of(out.begin(), out.end(), [](float v) { return v != 0; }));
        for (size_t i = 0; i < n; ++i) got[i] += out[i];
        if (call == 0)  // a residual holds exactly what its rank did not contribute
          for (int r = 0; r < P; ++r) {
            const std::vector<float> res = g.residual(r, n);
            size_t kept = 0;
            for (size_t i = 0; i < n; ++i) {
              CHECK((res[i] == 0.0f || res[i] == first[r][i]));
              kept += res[i] != 0.0f;
            }
            CHECK(kept > 0);
          }
      }
      CHECK(got == want);
      for (int r = 0; r < P; ++r) {
        const std::vector<float> res = g.residual(r, n);
        CHECK(std::all_of(res.begin(), res.end(), [](float v) { return v == 0.0f; }));
      }
    }
}

TEST_CASE("sparse reduce-scatter: wire bytes within the stated bounds", "[sparse][rs]") {
  for (int P : {2, 3, 4}) {
    INFO("P=" << P);
    std::mt19937_64 rng(11 + P);
    const size_t rc = 4000, n = rc * size_t(P), k = kOf(0.01, n);
    const uint64_t hdrs = 40 * uint64_t(P - 1);
    // oktopk: <= 40(P-1) + min(8k, 4n(P-1)/P) bytes a rank (+ the flag words).
    RsGroup ok("oktopk", P, {{"DENSITY", "0.01"}});
    for (int call = 0; call < 3; ++call) {
      ok.resetCounters();
      ok.checkedCall(normalInputs(rng, P, n), RedOp::Sum, call % 2 == 1);
      for (int r = 0; r < P; ++r)
        CHECK(ok.bytesSent(r) <= hdrs + std::min<uint64_t>(8 * k, 4 * (n - rc)) + flagBytes(P));
    }
    // Dense ranges go as DenseStream: rank r's k largest form one run in rank
    // r+1's range, one block of 8 + 4k bytes instead of 8k of COO.
    Inputs in = gridInputs(rng, P, n);
    for (int r = 0; r < P; ++r)
      for (size_t i = 0; i < k; ++i) in[r][((r + 1) % P) * rc + 10 + i] = 100.0f;
    RsGroup ds("oktopk", P, {{"DENSITY", "0.01"}, {"EF", "off"}});
    ds.checkedCall(in);
    for (int r = 0; r < P; ++r) CHECK(ds.bytesSent(r) == hdrs + 8 + 4 * k + flagBytes(P));
    // cltk, one leader: the index broadcast reaches each other rank once
    // (16-byte header + k offsets, or the bitmap), and every rank sends
    // exactly 4 (m - m_own) bytes of values: 4m(P-1) in all, <= 4k a rank.
    RsGroup cl("cltk", P, {{"DENSITY", "0.01"}, {"CLTK_LEADERS", "1"}});
    for (int call = 0; call < 3; ++call) {
      cl.resetCounters();
      cl.checkedCall(normalInputs(rng, P, n), RedOp::Sum, call % 2 == 1);
      const uint64_t index = 16 + std::min<uint64_t>(4 * k, (n + 7) / 8);
      uint64_t total = 0;
      for (int r = 0; r < P; ++r) {
        total += cl.bytesSent(r);
        CHECK(cl.bytesSent(r) <= 4 * k + index * uint64_t(std::ceil(std::log2(P))) +
                                     flagBytes(P));
      }
      CHECK(total == uint64_t(P - 1) * (index + 4 * k) + uint64_t(P) * flagBytes(P));
    }
  }
}

TEST_CASE("sparse reduce-scatter: NaN/Inf input runs the dense reduce-scatter", "[sparse][rs]") {
  for (const Form& f : kForms) {
    const int P = 3;
    const size_t rc = 50, n = rc * P;
    INFO(f.label);
    std::mt19937_64 rng(5);
    RsGroup g(f.algo, P, f.params);
    g.checkedCall(normalInputs(rng, P, n));
    Inputs bad = normalInputs(rng, P, n);
    bad[0][5] = std::nanf("");
    bad[1][2 * rc + 7] = INFINITY;
    const Inputs out = g.checkedCall(bad, RedOp::Avg, /*inPlace=*/true);
    CHECK(std::isnan(out[0][5]));
    CHECK(std::isinf(out[2][7]));
    CHECK(std::isfinite(out[1][0]));
    for (int r = 0; r < P; ++r) {  // cleared: they held the non-finite sum
      const std::vector<float> res = g.residual(r, n);
      CHECK(std::all_of(res.begin(), res.end(), [](float v) { return v == 0.0f; }));
    }
    g.checkedCall(normalInputs(rng, P, n));  // and compresses again
  }
}

TEST_CASE("sparse reduce-scatter: density 1.0 equals dense", "[sparse][rs]") {
  for (int P : {2, 3, 4}) {
    INFO("P=" << P);
    std::mt19937_64 rng(9 + P);
    const size_t n = 123 * size_t(P);
    RsGroup dense("dense", P, {});
    RsGroup ok("oktopk", P, {{"DENSITY", "1"}});
    RsGroup cl("cltk", P, {{"DENSITY", "1"}, {"CLTK_LEADERS", "1"}});
    for (int call = 0; call < 3; ++call) {
      Inputs in = gridInputs(rng, P, n);  // exact sums: any order gives the same bits
      for (auto& x : in)
        for (auto& v : x) v = v == 0.0f ? 0.5f : v;  // no zeros: the leader selects all
      const bool inPlace = call % 2 == 1;
      const Inputs want = dense.call(in, RedOp::Avg, inPlace);
      CHECK(ok.checkedCall(in, RedOp::Avg, inPlace) == want);
      CHECK(cl.checkedCall(in, RedOp::Avg, inPlace) == want);
      for (int r = 0; r < P; ++r) {
        const std::vector<float> a = ok.residual(r, n), b = cl.residual(r, n);
        CHECK(std::all_of(a.begin(), a.end(), [](float v) { return v == 0.0f; }));
        CHECK(std::all_of(b.begin(), b.end(), [](float v) { return v == 0.0f; }));
      }
    }
  }
}

TEST_CASE("sparse reduce-scatter: device-resident (cpu-device), fp16/bf16, = the reference",
          "[sparse][rs][memory]") {
  // cpu-device faults when host code touches device memory and defers every
  // primitive to the next sync: the forms must keep the data path's contract
  // and return the CPU backend's bytes, which must be the reference's slice.
  // Through CallBudget, as the CUDA executor runs calls: on cpu-device a call
  // that grows memory beyond what was reserved fails (GRADCOMP_PROXY_CHECK).
  using Results = std::vector<std::vector<std::vector<uint8_t>>>;
  for (const Form& f : kForms)
    for (DataType t : {DataType::Float32, DataType::Float16, DataType::BFloat16})
      for (int P : {3, 4}) {
        INFO(f.label << " " << dtypeName(t) << " P=" << P);
        testing::AlgoRun run;
        run.algo = f.algo;
        run.ranks = P;
        run.dtype = t;
        run.count = 257 * size_t(P);
        run.calls = 5;
        run.nanCall = 3;
        run.coll = Collective::ReduceScatter;
        run.throughBudget = true;
        for (const auto& [k, v] : f.params) REQUIRE(run.config.set(k, v, "test").ok());
        Results cpu, dev;
        std::vector<Status> cpuSt, devSt;
        testing::runRanks(run, [](int) -> device::Backend& { return device::cpuBackend(); },
                          &cpu, &cpuSt);
        std::vector<std::unique_ptr<device::Backend>> backends;
        for (int r = 0; r < P; ++r) backends.push_back(device::makeCpuDeviceBackend());
        testing::runRanks(run, [&](int r) -> device::Backend& { return *backends[r]; }, &dev,
                          &devSt);
        auto ref = findAlgorithm(f.algo)->reduceScatterReference(P);
        REQUIRE(ref->configure(run.config).ok());
        const size_t n = run.count, rc = n / size_t(P), esz = dtypeSize(t);
        for (int r = 0; r < P; ++r) {
          INFO("rank " << r << ": " << cpuSt[r].toString() << " / " << devSt[r].toString());
          REQUIRE(cpuSt[r].ok());
          REQUIRE(devSt[r].ok());
          REQUIRE(cpu[r].size() == size_t(run.calls));
          CHECK(dev[r] == cpu[r]);
        }
        for (int c = 0; c < run.calls; ++c) {
          std::vector<std::vector<uint8_t>> in(P, std::vector<uint8_t>(n * esz));
          std::vector<const void*> ptrs;
          for (int r = 0; r < P; ++r) {
            std::vector<float> x(n);
            for (size_t i = 0; i < n; ++i) x[i] = testing::inputValue(r, c, i);
            if (c == run.nanCall && r == 0) x[1] = std::nanf("");
            REQUIRE(device::cpuBackend().convert(in[r].data(), t, x.data(), DataType::Float32, n)
                        .ok());
            ptrs.push_back(in[r].data());
          }
          AllreduceArgs a;
          a.count = n;
          a.dtype = t;
          a.bufferKey = 11 + n;  // runRanks' key
          a.coll = Collective::ReduceScatter;
          std::vector<double> expected, tol;
          REQUIRE(ref->expect(ptrs, a, &expected, &tol).ok());
          std::vector<double> got(rc);
          size_t wrong = 0;
          for (int r = 0; r < P; ++r) {
            REQUIRE(device::cpuBackend().convert(got.data(), DataType::Float64,
                                                 cpu[r][size_t(c)].data(), t, rc).ok());
            for (size_t i = 0; i < rc; ++i) {
              const double e = expected[size_t(r) * rc + i], tl = tol[size_t(r) * rc + i];
              wrong += !(got[i] == e || std::fabs(got[i] - e) <= tl ||
                         (std::isnan(got[i]) && std::isnan(e)));
            }
          }
          INFO("call " << c);
          CHECK(wrong == 0);
        }
      }
}

// ---- real processes over UCX ----

namespace {

float ucxInput(int rank, int call, size_t i) {
  uint64_t h = (uint64_t(rank) * 1000003u + uint64_t(call) * 7919u + i) * 0x9E3779B97F4A7C15ull;
  h ^= h >> 29;
  return float(int64_t(h % 2049) - 1024) / 64.0f;
}

// One rank: 5 reduce-scatters (odd ones in place) with error feedback, each
// shard compared bit for bit with its slice of the reference.
int ucxRank(int rank, const Form& f) {
  using namespace gradcomp::transport;
  LaunchInfo info;
  std::unique_ptr<AddressExchange> ex;
  std::unique_ptr<Transport> net;
  Status s = launchInfoFromEnvironment(&info);
  if (s.ok()) s = createUcxBootstrap(info, &ex);
  if (s.ok()) s = createUcxTransport(*ex, UcxOptions{}, &net);
  if (!s.ok()) return fprintf(stderr, "rank %d: %s\n", rank, s.toString().c_str()), 10;
  const int P = net->size();
  param::Overrides cfg;
  for (const auto& [k, v] : f.params) (void)cfg.set(k, v, "test");
  const AlgorithmInfo* alg = findAlgorithm(f.algo);
  auto ref = alg->reduceScatterReference(P);
  std::unique_ptr<Algorithm> a = alg->create();
  std::unique_ptr<ErrorFeedbackStore> ef;
  if (!ref->configure(cfg).ok() || !ErrorFeedbackStore::create(cfg, &ef).ok()) return 11;
  const size_t rc = 701, n = rc * size_t(P);
  for (int call = 0; call < 5; ++call) {
    std::vector<std::vector<float>> all(P, std::vector<float>(n));
    for (int r = 0; r < P; ++r)
      for (size_t i = 0; i < n; ++i) all[r][i] = ucxInput(r, call, i);
    std::vector<float> buf = all[rank], out(rc);
    const bool inPlace = call % 2 == 1;
    AllreduceArgs args;
    args.count = n;
    args.bufferKey = 77;
    args.coll = Collective::ReduceScatter;
    args.sendBuf = buf.data();
    args.recvBuf = inPlace ? buf.data() + size_t(rank) * rc : out.data();
    Context ctx{*net, device::cpuBackend(), cfg, uint64_t(call), ef.get()};
    s = runCollective(*a, ctx, args);
    if (!s.ok()) return fprintf(stderr, "rank %d: %s\n", rank, s.toString().c_str()), 12;
    const float* shard = static_cast<const float*>(args.recvBuf);
    std::vector<const void*> ptrs;
    for (auto& v : all) ptrs.push_back(v.data());
    std::vector<double> expected, tol;
    if (!ref->expect(ptrs, args, &expected, &tol).ok()) return 13;
    for (size_t i = 0; i < rc; ++i)
      if (shard[i] != float(expected[size_t(rank) * rc + i]))
        return fprintf(stderr, "rank %d call %d [%zu]: %g != %g\n", rank, call, i, shard[i],
                       expected[size_t(rank) * rc + i]), 14;
  }
  a.reset();
  return 0;
}

}  // namespace

TEST_CASE("sparse reduce-scatter over UCX between processes matches the reference",
          "[sparse][rs][mp]") {
  for (const Form& f : {kForms[0], kForms[1]}) {
    INFO(f.label);
    const auto exits = test::runRanks(3, [&](int rank) { return ucxRank(rank, f); }, {}, 120);
    REQUIRE(test::allSucceeded(exits));
  }
}
