// The algorithm registry: static registration, lookup, listing, names.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "algorithms/algorithm.h"

using namespace gradcomp;

namespace {

class NoopAlgorithm final : public algo::Algorithm {
 public:
  Status runAllreduce(algo::Context&, const algo::AllreduceArgs&) override {
    return Status::Ok();
  }
};

}  // namespace

// Registered from this test binary at static init, like an algorithm file.
GC_REGISTER_ALGORITHM(zz_test_noop, {"zz-test-noop", "does nothing (registry test)",
                                     {},
                                     [] { return std::unique_ptr<algo::Algorithm>(new NoopAlgorithm()); },
                                     nullptr});

TEST_CASE("registry: static registrars are found by name", "[registry]") {
  const algo::AlgorithmInfo* dense = algo::findAlgorithm("dense");
  REQUIRE(dense);
  CHECK(dense->name == "dense");
  CHECK_FALSE(dense->summary.empty());
  REQUIRE(dense->create);
  CHECK(dense->create() != nullptr);
  const algo::AlgorithmInfo* noop = algo::findAlgorithm("zz-test-noop");
  REQUIRE(noop);
  CHECK(noop->create() != nullptr);
  CHECK(algo::findAlgorithm("no-such-algorithm") == nullptr);
  CHECK(algo::findAlgorithm("") == nullptr);
  CHECK(algo::findAlgorithm("Dense") == nullptr);  // names are case-sensitive
}

TEST_CASE("registry: listing is sorted and matches the names string", "[registry]") {
  const auto all = algo::listAlgorithms();
  REQUIRE(all.size() >= 2);
  std::string joined;
  for (size_t i = 0; i < all.size(); ++i) {
    if (i) {
      CHECK(all[i - 1]->name < all[i]->name);
      joined += ", ";
    }
    joined += all[i]->name;
    CHECK(algo::findAlgorithm(all[i]->name) == all[i]);
  }
  CHECK(algo::algorithmNames() == joined);
  CHECK(std::find_if(all.begin(), all.end(), [](auto* a) { return a->name == "zz-test-noop"; }) !=
        all.end());
}

TEST_CASE("registry: a duplicate name keeps the first registration", "[registry]") {
  const algo::AlgorithmInfo* before = algo::findAlgorithm("dense");
  const size_t n = algo::listAlgorithms().size();
  algo::registerAlgorithm({"dense", "impostor", {}, nullptr, nullptr});
  CHECK(algo::listAlgorithms().size() == n);
  CHECK(algo::findAlgorithm("dense") == before);
  CHECK(algo::findAlgorithm("dense")->summary != "impostor");
}
