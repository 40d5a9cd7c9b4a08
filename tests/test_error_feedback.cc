// Error-feedback residual store: accumulation, retirement on size change and
// disuse, the memory cap (LRU), bf16 residuals, and GRADCOMP_EF=off.
#include <catch2/catch.hpp>

#include <cmath>

#include "algorithms/error_feedback.h"

using namespace gradcomp;
using namespace gradcomp::algo;

namespace {

std::unique_ptr<ErrorFeedbackStore> makeStore(std::map<std::string, std::string> values) {
  param::Overrides o;
  for (const auto& [k, v] : values) REQUIRE(o.set(k, v, "test").ok());
  std::unique_ptr<ErrorFeedbackStore> s;
  REQUIRE(ErrorFeedbackStore::create(o, &s).ok());
  return s;
}

}  // namespace

TEST_CASE("residual = acc - contribution is added to the next call", "[ef]") {
  auto ef = makeStore({});
  std::vector<float> acc = {1, 2, 3};
  REQUIRE(ef->addResidual(7, 0, acc.data(), 3).ok());  // new key: zero residual
  CHECK(acc == std::vector<float>({1, 2, 3}));
  const std::vector<float> contrib = {1, 0, 2.5f};
  REQUIRE(ef->storeResidual(7, acc.data(), contrib.data(), 3).ok());
  CHECK(ef->residualNorm(7) == Approx(std::sqrt(4.0 + 0.25)));
  std::vector<float> g = {10, 10, 10};
  REQUIRE(ef->addResidual(7, 1, g.data(), 3).ok());
  CHECK(g == std::vector<float>({10, 12, 10.5f}));
  CHECK(ef->bytesUsed() == 12);
  CHECK(ef->keyCount() == 1);
  // store without a matching add in this store is an internal error
  CHECK(ef->storeResidual(8, g.data(), nullptr, 3).code() == Err::Internal);
}

TEST_CASE("a key that changes size restarts at zero; unused keys retire", "[ef]") {
  auto ef = makeStore({{"EF_RETIRE_CALLS", "5"}});
  std::vector<float> acc(4, 1.0f);
  REQUIRE(ef->addResidual(1, 0, acc.data(), 4).ok());
  REQUIRE(ef->storeResidual(1, acc.data(), nullptr, 4).ok());
  std::vector<float> bigger(6, 0.0f);
  REQUIRE(ef->addResidual(1, 1, bigger.data(), 6).ok());
  CHECK(bigger == std::vector<float>(6, 0.0f));
  CHECK(ef->bytesUsed() == 24);
  REQUIRE(ef->addResidual(2, 3, acc.data(), 4).ok());
  ef->retireStale(6);  // key 1 last used at 1: 5 calls ago is not more than 5
  CHECK(ef->keyCount() == 2);
  ef->retireStale(7);
  CHECK(ef->keyCount() == 1);
  CHECK(ef->residualNorm(1) == 0.0);
  CHECK(ef->bytesUsed() == 16);
}

TEST_CASE("the memory cap retires least-recently-used residuals", "[ef]") {
  auto ef = makeStore({{"EF_MAX_MB", "1"}});
  const size_t quarter = (1u << 20) / 4 / sizeof(float);  // 256 KiB each
  std::vector<float> acc(quarter, 1.0f);
  for (uint64_t key = 1; key <= 4; ++key) REQUIRE(ef->addResidual(key, key, acc.data(), quarter).ok());
  CHECK(ef->keyCount() == 4);
  REQUIRE(ef->addResidual(1, 5, acc.data(), quarter).ok());  // touch key 1
  REQUIRE(ef->addResidual(5, 6, acc.data(), quarter).ok());  // evicts key 2 (LRU)
  CHECK(ef->keyCount() == 4);
  CHECK(ef->bytesUsed() <= (1u << 20));
  std::vector<float> probe(quarter, 0.0f);
  REQUIRE(ef->storeResidual(1, acc.data(), nullptr, quarter).ok());  // key 1 survived
  CHECK(ef->storeResidual(2, acc.data(), nullptr, quarter).code() == Err::Internal);
  std::vector<float> huge((1u << 20) / sizeof(float) + 1);
  const Status s = ef->addResidual(9, 7, huge.data(), huge.size());
  CHECK(s.code() == Err::InvalidConfig);
  CHECK(s.message().find("GRADCOMP_EF_MAX_MB") != std::string::npos);
}

TEST_CASE("bf16 residuals halve memory and round once; EF=off does nothing", "[ef]") {
  auto ef = makeStore({{"EF_DTYPE", "bfloat16"}});
  std::vector<float> acc = {1.0f + 1.0f / 1024, -3.0f};
  REQUIRE(ef->addResidual(3, 0, acc.data(), 2).ok());
  REQUIRE(ef->storeResidual(3, acc.data(), nullptr, 2).ok());
  CHECK(ef->bytesUsed() == 4);
  std::vector<float> g = {0, 0};
  REQUIRE(ef->addResidual(3, 1, g.data(), 2).ok());
  CHECK(g[0] == 1.0f);  // 1 + 2^-10 rounds to 1 in bf16 (7 mantissa bits)
  CHECK(g[1] == -3.0f);

  auto off = makeStore({{"EF", "off"}});
  CHECK_FALSE(off->enabled());
  std::vector<float> x = {5};
  REQUIRE(off->addResidual(1, 0, x.data(), 1).ok());
  REQUIRE(off->storeResidual(1, x.data(), nullptr, 1).ok());
  CHECK(off->keyCount() == 0);
  CHECK(x[0] == 5);
}
