// Shadow mode (plugin/nccl/shadow.h) through libgradcomp.so over the
// test-double NCCL in real rank processes: every call returns NCCL's result
// bit for bit and reaches NCCL; the shadow statistics equal what a separate
// compressed run of the same calls gives (wire bytes, relative error).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "support/multiproc.h"
#include "support/nccl_api.h"

namespace {

using Api = gradcomp::test::NcclApi;
using Job = gradcomp::test::NcclJob;

constexpr int P = 3;
constexpr size_t kCount = (1 << 18) + 3;
constexpr int kCalls = 3;

float inputOf(int rank, int call, size_t i) {
  return float(int((i * 13 + size_t(rank) * 5 + size_t(call) * 7) % 211) - 105) / 8.0f;
}

struct RankResult {
  std::string json;   // the stats file
  double maxRelError = 0;  // of what this rank's calls returned, against the exact sums
};

// Every rank makes kCalls allreduces of one bucket (out of place) with
// GRADCOMP_ALGO=algo; with `shadow` they must return the exact sums and all
// reach NCCL, without it they run compressed.
std::vector<RankResult> runJob(const std::string& algo, bool shadow) {
  Job job;
  const std::string stats = job.dir + "/stats";
  const auto exits = gradcomp::test::runRanks(P, [&](int rank) {
    Api a = gradcomp::test::loadNcclApi();
    ncclComm_t comm = nullptr;
    CHILD_CHECK(a.initRank(&comm, P, job.id, rank) == ncclSuccess);
    std::vector<float> send(kCount), recv(kCount);
    const int before = a.count("ncclAllReduce");
    double maxErr = 0;
    for (int c = 0; c < kCalls; ++c) {
      for (size_t i = 0; i < kCount; ++i) send[i] = inputOf(rank, c, i);
      CHILD_CHECK(a.allReduce(send.data(), recv.data(), kCount, ncclFloat32, ncclSum, comm,
                              nullptr) == ncclSuccess);
      double diff = 0, norm = 0;
      for (size_t i = 0; i < kCount; ++i) {
        float want = 0;
        for (int r = 0; r < P; ++r) want += inputOf(r, c, i);
        if (shadow) CHILD_CHECK(recv[i] == want);  // NCCL's result, bit for bit
        diff += (double(recv[i]) - want) * (double(recv[i]) - want);
        norm += double(want) * want;
      }
      maxErr = std::max(maxErr, std::sqrt(diff / norm));
    }
    CHILD_CHECK(a.count("ncclAllReduce") - before == (shadow ? kCalls : 0));
    CHILD_CHECK(a.destroy(comm) == ncclSuccess);
    std::ofstream f(job.dir + "/err" + std::to_string(rank));
    f.precision(17);
    f << maxErr;
    return 0;
  }, job.env({{"GRADCOMP_ALGO", algo}, {"GRADCOMP_SHADOW", shadow ? "1" : "0"},
              {"GRADCOMP_STATS", stats}}), 120);
  REQUIRE(gradcomp::test::allSucceeded(exits));
  std::vector<RankResult> out(P);
  for (int r = 0; r < P; ++r) {
    out[size_t(r)].json = gradcomp::test::readWholeFile(stats + ".rank" + std::to_string(r) + ".json");
    std::ifstream(job.dir + "/err" + std::to_string(r)) >> out[size_t(r)].maxRelError;
  }
  return out;
}

// The number after the first "key": at or after `from` in json.
double numberAfter(const std::string& json, const std::string& key, size_t from = 0) {
  const size_t at = json.find("\"" + key + "\": ", from);
  if (at == std::string::npos) return NAN;
  return strtod(json.c_str() + at + key.size() + 4, nullptr);
}

}  // namespace

TEST_CASE("shadow mode: NCCL's results, and the statistics of a separate compressed run",
          "[shadow][mp][nccl]") {
  for (const char* algo : {"qsgd", "oktopk"}) {
    INFO(algo);
    const auto shadowed = runJob(algo, true);
    const auto compressed = runJob(algo, false);
    for (int r = 0; r < P; ++r) {
      INFO("rank " << r);
      const std::string& js = shadowed[size_t(r)].json;
      const std::string& jc = compressed[size_t(r)].json;
      const size_t sh = js.find("\"shadow\": {");
      REQUIRE(sh != std::string::npos);
      CHECK(numberAfter(js, "calls", sh) == kCalls);
      CHECK(numberAfter(js, "failed", sh) == 0);
      CHECK(numberAfter(js, "calls_compressed") == 0);
      CHECK(numberAfter(jc, "calls_compressed") == kCalls);
      // The same bytes on the wire as the compressed run's calls ...
      CHECK(numberAfter(js, "wire_bytes", sh) == numberAfter(jc, "wire_bytes"));
      CHECK(numberAfter(js, "logical_bytes", sh) == numberAfter(jc, "logical_bytes"));
      // ... against a ring's 2(P-1)/P of the input.
      CHECK(numberAfter(js, "dense_wire_bytes", sh) ==
            double(uint64_t(double(kCount * 4) * 2.0 * (P - 1) / P)) * kCalls);
      // The same error as the compressed run's results had.
      const double maxErr = numberAfter(js, "rel_error_max", sh);
      CHECK(maxErr == Approx(compressed[size_t(r)].maxRelError).epsilon(1e-6).margin(1e-12));
      CHECK(maxErr > 0);  // lossy: the shadow did compress
      // Every rank's compressed result was the same, on every call.
      CHECK(numberAfter(js, "agree_checked", sh) == kCalls);
      CHECK(numberAfter(js, "agreed", sh) == kCalls);
      CHECK(numberAfter(js, "compressed_seconds", sh) > 0);
      CHECK(numberAfter(js, "nccl_seconds", sh) >= 0);
    }
  }
}
