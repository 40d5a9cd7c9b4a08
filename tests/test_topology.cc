// Host topology (transport/host_topology.h) and group views
// (transport/group_view.h): the pure derivation from every rank's record,
// the exchange over LocalTransport threads (every rank must derive the same
// map and decision), and rank remapping with counters through views.
#include <catch2/catch.hpp>

#include <sched.h>
#include <stdlib.h>

#include <cstdio>
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

TEST_CASE("topology: a PCI bus id hwloc does not know falls back to the process's placement",
          "[topology]") {
  const Placement mine = discoverPlacement();
  for (const char* id : {"", "0000:ff:1f.7", "not-a-bus-id"}) {
    INFO(id);
    const Placement p = discoverPlacementNear(id);
    CHECK(p.gpu.empty());
    CHECK(p.cpuset == mine.cpuset);
    CHECK(p.nic == mine.nic);
  }
}

TEST_CASE("topology: UCX_NET_DEVICES is the nearest RDMA NIC's first ACTIVE port, else unset",
          "[topology]") {
  char tmpl[] = "/tmp/gc-sysfs-XXXXXX";
  REQUIRE(mkdtemp(tmpl));
  const std::string root = tmpl;
  auto port = [&](const std::string& nic, int n, const char* state) {
    const std::string dir = root + "/class/infiniband/" + nic + "/ports/" + std::to_string(n);
    REQUIRE(system(("mkdir -p " + dir).c_str()) == 0);
    FILE* f = fopen((dir + "/state").c_str(), "w");
    REQUIRE(f);
    fprintf(f, "%s\n", state);
    fclose(f);
  };
  CHECK_FALSE(rdmaDevicesPresent(root));  // no class/infiniband: hwloc is not asked
  port("mlx5_0", 1, "1: DOWN");
  CHECK(rdmaDevicesPresent(root));
  port("mlx5_0", 2, "4: ACTIVE");
  port("mlx5_1", 1, "2: INIT");
  Placement p;
  p.nic = "mlx5_0";
  p.nicKind = "OpenFabrics";
  CHECK(ucxNetDevicesFor(p, root) == "mlx5_0:2");
  p.nic = "mlx5_1";  // no active port: UCX's own choice stands
  CHECK(ucxNetDevicesFor(p, root) == "");
  p.nic = "mlx5_9";  // not in sysfs
  CHECK(ucxNetDevicesFor(p, root) == "");
  p.nic = "../mlx5_0";  // never a path
  CHECK(ucxNetDevicesFor(p, root) == "");
  p.nic = "eth0";
  p.nicKind = "Network";  // TCP devices are left to UCX
  CHECK(ucxNetDevicesFor(p, root) == "");
  REQUIRE(system(("rm -rf " + root).c_str()) == 0);
}

TEST_CASE("topology: bindCurrentThread binds the calling thread only and rejects a bad list",
          "[topology]") {
  const Placement p = discoverPlacement();
  if (!p.error.empty()) return;  // no hwloc topology here: nothing to bind with
  cpu_set_t before;
  REQUIRE(sched_getaffinity(0, sizeof(before), &before) == 0);
  int first = -1;
  for (int c = 0; c < CPU_SETSIZE && first < 0; ++c)
    if (CPU_ISSET(c, &before)) first = c;
  REQUIRE(first >= 0);
  std::string err;
  int count = -1;
  std::thread t([&] {
    Status s = bindCurrentThread(std::to_string(first));
    if (!s.ok()) err = s.toString();
    cpu_set_t now;
    if (sched_getaffinity(0, sizeof(now), &now) == 0) count = CPU_COUNT(&now);
  });
  t.join();
  CHECK(err == "");
  CHECK(count == 1);
  cpu_set_t after;
  REQUIRE(sched_getaffinity(0, sizeof(after), &after) == 0);
  CHECK(CPU_EQUAL(&before, &after));  // the caller's own binding is untouched
  CHECK(bindCurrentThread("").code() == Err::InvalidArgument);
  CHECK(bindCurrentThread("zero").code() == Err::InvalidArgument);
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
