// The integer allreduce behind Ok-Topk's repartition (collectives.h): exact
// sums on every rank for any P (powers of two and the folded remainder), a
// volume of about 2 x 8 x size bytes per rank (not P x size like an
// allgather), and boundaries equal to the central combineBoundaries.
#include <catch2/catch.hpp>

#include <thread>
#include <vector>

#include "algorithms/sparse/collectives.h"
#include "algorithms/sparse/oktopk.h"
#include "device/arrays.h"
#include "device/backend.h"
#include "transport/local_transport.h"

using namespace gradcomp;

namespace {

uint64_t wordOf(int rank, size_t i) {
  return uint64_t(rank + 1) * 1000003u + i * 7u + uint64_t(rank) * uint64_t(rank);
}

}  // namespace

TEST_CASE("allreduceSumWords: exact sums on every rank, ~2 x size words sent", "[sparse]") {
  const param::Overrides config;
  for (int P : {1, 2, 3, 4, 5, 6, 7, 8, 12, 13}) {
    for (size_t m : {size_t(1), size_t(P > 1 ? P - 1 : 1), size_t(37)}) {
      auto nets = transport::createLocalTransports(P, 30.0);
      std::vector<std::vector<uint64_t>> words(P);
      std::vector<Status> st(P);
      std::vector<std::thread> threads;
      for (int r = 0; r < P; ++r)
        threads.emplace_back([&, r] {
          for (size_t i = 0; i < m; ++i) words[r].push_back(wordOf(r, i));
          algo::Context ctx{*nets[r], device::cpuBackend(), config, 3};
          st[r] = algo::sparse::allreduceSumWords(ctx, 0x30000, &words[r]);
        });
      for (auto& t : threads) t.join();
      int log2P = 0;
      while ((2 << log2P) <= P) ++log2P;
      for (int r = 0; r < P; ++r) {
        INFO("P " << P << " m " << m << " rank " << r << ": " << st[r].toString());
        REQUIRE(st[r].ok());
        REQUIRE(words[r].size() == m);
        for (size_t i = 0; i < m; ++i) {
          uint64_t sum = 0;
          for (int s = 0; s < P; ++s) sum += wordOf(s, i);
          REQUIRE(words[r][i] == sum);
        }
        // Halving/doubling: < 2m words plus one word of rounding per round;
        // a rank receiving a fold also returns the m-word result.
        const uint64_t sent = nets[r]->totalCounters().bytesSent;
        CHECK(sent <= 8 * (3 * m + 2 * size_t(log2P)));
        if ((P & (P - 1)) == 0 && P > 1) CHECK(sent <= 8 * (2 * m + 2 * size_t(log2P)));
      }
    }
  }
}

TEST_CASE("oktopk boundaries from summed proposals equal combineBoundaries", "[sparse]") {
  for (int P : {1, 2, 3, 7, 16}) {
    const size_t n = 1000;
    std::vector<uint64_t> all, sums(P > 1 ? P - 1 : 0, 0);
    for (int r = 0; r < P; ++r) {
      device::Backend& cpu = device::cpuBackend();
      std::vector<uint64_t> idx;
      for (size_t i = size_t(r); i < n; i += size_t(3 + r)) idx.push_back(i);
      const std::vector<float> ones(idx.size(), 1.0f);
      algo::sparse::Coo sel(cpu);
      REQUIRE(sel.idx.assign(idx.data(), idx.size()).ok());
      REQUIRE(sel.val.assign(ones.data(), ones.size()).ok());
      std::vector<uint64_t> b;
      REQUIRE(algo::sparse::oktopk::proposeBoundaries(cpu, sel, n, P, &b).ok());
      all.insert(all.end(), b.begin(), b.end());
      for (size_t j = 0; j < b.size(); ++j) sums[j] += b[j];
    }
    INFO("P " << P);
    const auto central = algo::sparse::oktopk::combineBoundaries(all, n, P);
    REQUIRE(algo::sparse::oktopk::boundariesFromSums(sums, n, P) == central);
    REQUIRE(central.front() == 0);
    REQUIRE(central.back() == n);
    for (size_t j = 1; j < central.size(); ++j) REQUIRE(central[j - 1] <= central[j]);
  }
}

TEST_CASE("broadcastBlock delivers the root's block to every rank, any root", "[sparse]") {
  for (int P : {1, 2, 3, 5, 8, 13}) {
    for (int root : {0, P / 2, P - 1}) {
      INFO("P " << P << " root " << root);
      auto nets = transport::createLocalTransports(P, 20.0);
      std::vector<Status> st(P);
      std::vector<std::vector<uint8_t>> got(P);
      std::vector<std::thread> threads;
      for (int r = 0; r < P; ++r)
        threads.emplace_back([&, r] {
          param::Overrides cfg;
          algo::Context ctx{*nets[r], device::cpuBackend(), cfg, 3};
          device::HostArray<uint8_t> block(device::cpuBackend());
          if (r == root)
            for (int i = 0; i < 1000 + root; ++i) block.push_back(uint8_t(i * 7 + root));
          st[r] = algo::sparse::broadcastBlock(ctx, 0x100, root, 4096, &block);
          got[r].assign(block.begin(), block.end());
        });
      for (auto& t : threads) t.join();
      for (int r = 0; r < P; ++r) {
        INFO("rank " << r << ": " << st[r].toString());
        REQUIRE(st[r].ok());
        CHECK(got[r] == got[root]);
        CHECK(got[r].size() == size_t(1000 + root));
      }
    }
  }
}
