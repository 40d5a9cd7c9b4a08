// Host topology (transport/host_topology.h) and group views
// (transport/group_view.h): the pure derivation from every rank's record,
// the exchange over LocalTransport threads (every rank must derive the same
// map and decision), and rank remapping with counters through views.
#include <catch2/catch.hpp>

#include <thread>

#include "transport/group_view.h"
#include "transport/host_topology.h"
#include "transport/local_transport.h"
#include "transport/placement.h"

using namespace gradcomp;
using namespace gradcomp::transport;

namespace {

std::vector<std::string> records(const std::vector<std::string>& ids, HierarchyMode mode,
                                 const char* kind = "env") {
  std::vector<std::string> out;
  for (const auto& id : ids) out.push_back(encodeTopologyRecord({kind, id}, mode));
  return out;
}

}  // namespace

TEST_CASE("topology: hosts, local ranks and rails from interleaved records", "[topology]") {
  const auto recs = records({"a", "b", "a", "b", "a", "b"}, HierarchyMode::Auto);
  for (int r = 0; r < 6; ++r) {
    const HostTopology t = buildTopology(r, recs);
    CHECK(t.problem.empty());
    CHECK(t.hierarchical);
    CHECK(t.hosts() == 2);
    CHECK(t.host == r % 2);
    CHECK(t.localSize == 3);
    CHECK(t.localRank == r / 2);
    CHECK(t.hostOf == std::vector<int>{0, 1, 0, 1, 0, 1});
  }
  const HostTopology t = buildTopology(0, recs);
  CHECK(t.hostRanks[1] == std::vector<int>{1, 3, 5});
  CHECK(t.rail(2) == std::vector<int>{4, 5});
  CHECK(t.describe().find("local rank 0 of 3, schedule host") != std::string::npos);
}

TEST_CASE("topology: auto needs more than one host and more than one rank per host",
          "[topology]") {
  CHECK_FALSE(buildTopology(0, records({"a", "a", "a"}, HierarchyMode::Auto)).hierarchical);
  CHECK_FALSE(buildTopology(0, records({"a", "b", "c"}, HierarchyMode::Auto)).hierarchical);
  CHECK(buildTopology(0, records({"a", "a", "a"}, HierarchyMode::Host)).hierarchical);
  const HostTopology flat = buildTopology(1, records({"a", "a", "b", "b"}, HierarchyMode::Flat));
  CHECK_FALSE(flat.hierarchical);
  CHECK(flat.problem.empty());
  CHECK(flat.hosts() == 2);  // the map is still known (inter-host traffic)
}

TEST_CASE("topology: bad maps run flat on every rank with the problem named", "[topology]") {
  SECTION("uneven ranks per host") {
    const auto recs = records({"a", "a", "b"}, HierarchyMode::Host);
    for (int r = 0; r < 3; ++r) {
      const HostTopology t = buildTopology(r, recs);
      CHECK_FALSE(t.hierarchical);
      CHECK(t.problem == "uneven ranks per host: host 0 ('a') has 2 ranks, host 1 ('b') has 1");
    }
  }
  SECTION("GRADCOMP_HOSTID on some ranks only") {
    auto recs = records({"a", "a", "b", "b"}, HierarchyMode::Auto);
    recs[3] = encodeTopologyRecord({"auto", "node7/1234"}, HierarchyMode::Auto);
    const HostTopology t = buildTopology(2, recs);
    CHECK_FALSE(t.hierarchical);
    CHECK(t.problem.find("GRADCOMP_HOSTID differs in format across ranks: set on rank 0 ('a') "
                         "but not on rank 3") == 0);
  }
  SECTION("ranks asking for different modes") {
    auto recs = records({"a", "a", "b", "b"}, HierarchyMode::Host);
    recs[1] = encodeTopologyRecord({"env", "a"}, HierarchyMode::Flat);
    const HostTopology t = buildTopology(0, recs);
    CHECK_FALSE(t.hierarchical);
    CHECK(t.problem == "ranks disagree on GRADCOMP_HIERARCHY: rank 0 has host, rank 1 has flat");
  }
  SECTION("a malformed GRADCOMP_HOSTID and a malformed record") {
    CHECK(hostIdProblem("") != "");
    CHECK(hostIdProblem("has space") != "");
    CHECK(hostIdProblem(std::string(129, 'x')) != "");
    CHECK(hostIdProblem("node-1.example") == "");
    auto recs = records({"a", "a", "b", "b"}, HierarchyMode::Auto);
    recs[2] = encodeTopologyRecord({"bad", hostIdProblem("has space")}, HierarchyMode::Auto);
    HostTopology t = buildTopology(0, recs);
    CHECK_FALSE(t.hierarchical);
    CHECK(t.problem.find("rank 2: GRADCOMP_HOSTID='has_space' is invalid") == 0);
    recs[2] = "garbage";
    t = buildTopology(3, recs);
    CHECK_FALSE(t.hierarchical);
    CHECK(t.problem == "rank 2 sent a malformed topology record");
  }
}

TEST_CASE("topology: the exchange gives every rank the same map and decision", "[topology]") {
  for (int P : {1, 2, 5, 8}) {
    auto nets = createLocalTransports(P, 20.0);
    std::vector<HostTopology> got(static_cast<size_t>(P));
    std::vector<Status> st(static_cast<size_t>(P));
    std::vector<std::thread> threads;
    for (int r = 0; r < P; ++r)
      threads.emplace_back([&, r] {
        // Hosts of two consecutive ranks; with odd P the last host is short.
        st[size_t(r)] = agreeTopology(*nets[size_t(r)], {"env", "h" + std::to_string(r / 2)},
                                      HierarchyMode::Auto, &got[size_t(r)]);
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < P; ++r) {
      INFO("P=" << P << " rank " << r);
      REQUIRE(st[size_t(r)].ok());
      CHECK(got[size_t(r)].hostOf == got[0].hostOf);
      CHECK(got[size_t(r)].hierarchical == got[0].hierarchical);
      CHECK(got[size_t(r)].problem == got[0].problem);
      CHECK(got[size_t(r)].host == r / 2);
    }
    CHECK(got[0].hierarchical == (P % 2 == 0 && P > 2));
    CHECK(got[0].problem.empty() == (P % 2 == 0 || P == 1));
  }
}

TEST_CASE("topology: placement from hwloc never fails", "[topology]") {
  const Placement p = discoverPlacement();
  if (p.error.empty()) CHECK_FALSE(p.cpuset.empty());
  CHECK(describePlacement(p).find(p.error.empty() ? "cpuset " : "placement unknown") == 0);
}

TEST_CASE("group view: ranks are remapped, counters are the parent's", "[topology]") {
  auto nets = createLocalTransports(4, 20.0);
  std::unique_ptr<Transport> view;
  CHECK(makeGroupView(*nets[0], {1, 2}, &view).code() == Err::InvalidArgument);  // 0 not a member
  CHECK(makeGroupView(*nets[0], {0, 0}, &view).code() == Err::InvalidArgument);
  CHECK(makeGroupView(*nets[0], {0, 4}, &view).code() == Err::InvalidArgument);
  // Group {3, 1}: view rank 0 is parent rank 3, view rank 1 parent rank 1.
  std::vector<std::unique_ptr<Transport>> views(4);
  REQUIRE(makeGroupView(*nets[3], {3, 1}, &views[3]).ok());
  REQUIRE(makeGroupView(*nets[1], {3, 1}, &views[1]).ok());
  CHECK(views[3]->rank() == 0);
  CHECK(views[1]->rank() == 1);
  CHECK(views[1]->size() == 2);
  Handle h = 0;
  CHECK(views[1]->isend(2, 5, nullptr, 0, &h).code() == Err::InvalidArgument);
  std::vector<int> got(3, 0), sent{7, 8, 9};
  std::thread peer([&] {
    Handle r = 0;
    size_t len = 0;
    REQUIRE(views[3]->irecv(1, 42, got.data(), 12, &r).ok());
    REQUIRE(views[3]->wait(r, &len).ok());
    CHECK(len == 12);
  });
  REQUIRE(views[1]->isend(0, 42, sent.data(), 12, &h).ok());
  REQUIRE(views[1]->wait(h).ok());
  peer.join();
  CHECK(got == sent);
  CHECK(views[1]->counters(0).bytesSent == 12);
  CHECK(nets[1]->counters(3).bytesSent == 12);
  CHECK(nets[1]->counters(0).bytesSent == 0);
}
