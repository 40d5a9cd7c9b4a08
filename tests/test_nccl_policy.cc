// The interposer's pure decision functions: selectors, per-call verdicts,
// config-file parsing, the admin's default file and the cross-rank comparison text.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "plugin/nccl/config_file.h"
#include "plugin/nccl/nccl_abi.h"
#include "plugin/nccl/policy.h"
#include "support/multiproc.h"

using namespace gradcomp;
using namespace gradcomp::nccl;

namespace {
Policy densePolicy() {
  Policy p;
  p.algo = "dense";
  REQUIRE(parseCommSelectors("all", "test", &p.comms).ok());
  p.minBytes = 1 << 20;
  return p;
}
CommIdentity comm(uint64_t index, int nranks, std::string name = "") {
  CommIdentity c;
  c.index = index;
  c.nranks = nranks;
  c.name = std::move(name);
  return c;
}
}  // namespace

TEST_CASE("communicator selectors", "[nccl][policy]") {
  std::vector<CommSelector> s;
  REQUIRE(parseCommSelectors("index:0, size:8,name:dp_*", "GRADCOMP_COMMS", &s).ok());
  CHECK(selectorsMatch(s, comm(0, 2)));
  CHECK(selectorsMatch(s, comm(3, 8)));
  CHECK(selectorsMatch(s, comm(3, 4, "dp_group")));
  CHECK_FALSE(selectorsMatch(s, comm(3, 4, "tp_group")));
  CHECK_FALSE(selectorsMatch(s, comm(3, 4)));
  REQUIRE(parseCommSelectors("none", "x", &s).ok());
  CHECK_FALSE(selectorsMatch(s, comm(0, 2)));
  for (const char* bad : {"", "size:", "size:x", "index:-1", "rank:0", "name:"}) {
    Status st = parseCommSelectors(bad, "GRADCOMP_COMMS", &s);
    INFO(bad);
    CHECK(st.code() == Err::InvalidConfig);
    CHECK(st.message().find("GRADCOMP_COMMS") != std::string::npos);
  }
}

TEST_CASE("verdicts: eligible dtypes, ops and sizes only", "[nccl][policy]") {
  Policy p = densePolicy();
  int rule = 0;
  auto v = [&](size_t count, int dt, int op) { return decide(p, comm(0, 4), CallShape{count, dt, op}, &rule); };
  CHECK(v(1 << 18, ncclFloat32, ncclSum) == Verdict::Compress);   // exactly 1 MiB
  CHECK(v((1 << 18) - 1, ncclFloat32, ncclSum) == Verdict::SmallBuffer);
  CHECK(v(1 << 19, ncclFloat16, ncclAvg) == Verdict::Compress);
  CHECK(v(1 << 19, ncclBfloat16, ncclSum) == Verdict::Compress);
  CHECK(v(1 << 20, ncclFloat64, ncclSum) == Verdict::Dtype);
  CHECK(v(1 << 20, ncclInt32, ncclSum) == Verdict::Dtype);
  CHECK(v(1 << 20, ncclFloat8e4m3, ncclSum) == Verdict::Dtype);
  CHECK(v(1 << 20, ncclFloat32, ncclMax) == Verdict::Op);
  CHECK(v(1 << 20, ncclFloat32, 5) == Verdict::Op);  // PreMulSum / user op
  CommIdentity single = comm(0, 2);
  single.singleProcess = true;
  CHECK(decide(p, single, CallShape{1 << 20, ncclFloat32, ncclSum}, &rule) == Verdict::CommNotSelected);
  p.algo = "off";
  CHECK(v(1 << 20, ncclFloat32, ncclSum) == Verdict::Off);
}

TEST_CASE("rules: first match by communicator and size range", "[nccl][policy]") {
  Policy p = densePolicy();
  Rule big;
  big.minBytes = 64 << 20;
  big.algo = "off";
  Rule named;
  REQUIRE(parseCommSelectors("name:dp", "r", &named.comms).ok());
  named.algo = "dense";
  p.rules = {big, named};
  int rule = -2;
  CHECK(decide(p, comm(0, 4), CallShape{32 << 20, ncclFloat32, ncclSum}, &rule) == Verdict::Off);
  CHECK(rule == 0);
  CHECK(decide(p, comm(0, 4, "dp"), CallShape{1 << 20, ncclFloat32, ncclSum}, &rule) == Verdict::Compress);
  CHECK(rule == 1);
  CHECK(decide(p, comm(0, 4), CallShape{1 << 20, ncclFloat32, ncclSum}, &rule) == Verdict::Compress);
  CHECK(rule == -1);
}

TEST_CASE("config file: keys, rules and errors that name the place", "[nccl][policy]") {
  ConfigFile f;
  REQUIRE(parseConfigText("algo = \"dense\"\nmin_bytes = 4194304\n[params]\nDENSITY = 0.05\n"
                          "[[rule]]\ncomms = \"size:8\"\nmax_bytes = \"1G\"\nparams = { DENSITY = 0.001 }\n",
                          "admin.toml", &f).ok());
  CHECK(f.algo.value_or("") == "dense");
  CHECK(f.minBytes.value_or("") == "4194304");
  CHECK(f.params.at("DENSITY") == "0.05");
  REQUIRE(f.rules.size() == 1);
  CHECK(f.rules[0].comms.value_or("") == "size:8");
  CHECK(f.rules[0].params.at("DENSITY") == "0.001");
  Status bad = parseConfigText("algo = \"dense\"\nmin_byte = 3\n", "admin.toml", &f);
  CHECK(bad.code() == Err::InvalidConfig);
  CHECK(bad.message().find("min_byte") != std::string::npos);
  CHECK(bad.message().find("admin.toml:2") != std::string::npos);
  Status syntax = parseConfigText("algo = \n", "admin.toml", &f);
  CHECK(syntax.code() == Err::InvalidConfig);
  CHECK(syntax.message().find("admin.toml:1") != std::string::npos);
}

TEST_CASE("cross-rank comparison names the first differing key", "[nccl][policy]") {
  std::string a = "GRADCOMP_ALGO=dense\nGRADCOMP_MIN_BYTES=1048576\n";
  std::string b = "GRADCOMP_ALGO=dense\nGRADCOMP_MIN_BYTES=2097152\n";
  CHECK(firstDifference({a, a, a}).empty());
  std::string d = firstDifference({a, a, b});
  CHECK(d.find("GRADCOMP_MIN_BYTES") != std::string::npos);
  CHECK(d.find("rank 2") != std::string::npos);
  CHECK(d.find("1048576") != std::string::npos);
  Policy p = densePolicy();
  std::string t = effectiveConfigText(p, comm(0, 4), true);
  CHECK(t.find("communicator.selected=1") != std::string::npos);
  CHECK(t != effectiveConfigText(p, comm(0, 4), false));
  // A rank without the CUDA executor disagrees with one that has it: the
  // wiring then disables compression on every rank (no rank-local choice).
  const std::string withCuda = effectiveConfigText(p, comm(0, 4), true, "cuda");
  const std::string without = effectiveConfigText(p, comm(0, 4), true, "none");
  const std::string why = firstDifference({withCuda, withCuda, without});
  CHECK(why.find("executor.device") != std::string::npos);
  CHECK(why.find("rank 2") != std::string::npos);
}

namespace {

struct Loaded {
  bool ok = false;
  std::string message, algo, configPath;
  uint64_t minBytes = 0;
  bool systemDefault = false;
};

// loadPolicyWithSystemConfig in a child (parameters are frozen at first read)
// whose GRADCOMP_ALGO/CONFIG/MIN_BYTES are exactly `env`.
Loaded loadInChild(const std::string& systemConfig, const std::map<std::string, std::string>& env) {
  char out[] = "/tmp/gc_policy_out_XXXXXX";
  int fd = mkstemp(out);
  REQUIRE(fd >= 0);
  close(fd);
  auto exits = test::runRanks(1, [&](int) {
    for (const char* v : {"GRADCOMP_ALGO", "GRADCOMP_CONFIG", "GRADCOMP_MIN_BYTES",
                          "GRADCOMP_RS_ALGO"}) unsetenv(v);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    Policy p;
    Status s = loadPolicyWithSystemConfig(systemConfig, &p);
    std::ofstream(out) << s.ok() << "\n" << s.message() << "\n" << p.algo << "\n" << p.minBytes
                       << "\n" << p.configPath << "\n" << p.configIsSystemDefault << "\n";
    return 0;
  }, {}, 30);
  REQUIRE(test::allSucceeded(exits));
  std::ifstream in(out);
  Loaded l;
  std::string line;
  std::getline(in, line), l.ok = line == "1";
  std::getline(in, l.message);
  std::getline(in, l.algo);
  std::getline(in, line), l.minBytes = std::stoull(line);
  std::getline(in, l.configPath);
  std::getline(in, line), l.systemDefault = line == "1";
  unlink(out);
  return l;
}

}  // namespace

TEST_CASE("the admin's default file: read when GRADCOMP_CONFIG is unset, optional, strict when bad",
          "[nccl][policy][mp]") {
  char dir[] = "/tmp/gc_sysconf_XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string system = std::string(dir) + "/gradcomp.conf", other = std::string(dir) + "/job.toml";

  Loaded l = loadInChild(system, {});  // no file: fine, the defaults
  CHECK(l.ok);
  CHECK(l.algo == "off");
  CHECK(l.configPath.empty());

  std::ofstream(system) << "# site defaults\nalgo = \"dense\"\nmin_bytes = \"2M\"\n";
  l = loadInChild(system, {});
  INFO(l.message);
  CHECK(l.ok);
  CHECK(l.algo == "dense");
  CHECK(l.minBytes == (2u << 20));
  CHECK(l.configPath == system);
  CHECK(l.systemDefault);
  // The environment still overrides it key by key.
  l = loadInChild(system, {{"GRADCOMP_ALGO", "oktopk"}});
  CHECK((l.ok && l.algo == "oktopk" && l.minBytes == (2u << 20)));
  // GRADCOMP_CONFIG names another file instead, or none when empty.
  std::ofstream(other) << "algo = \"qsgd\"\n";
  l = loadInChild(system, {{"GRADCOMP_CONFIG", other}});
  CHECK((l.ok && l.algo == "qsgd" && l.minBytes == (1u << 20) && !l.systemDefault));
  l = loadInChild(system, {{"GRADCOMP_CONFIG", ""}});
  CHECK((l.ok && l.algo == "off" && l.configPath.empty()));
  // A file named by GRADCOMP_CONFIG must exist.
  l = loadInChild(system, {{"GRADCOMP_CONFIG", std::string(dir) + "/missing.toml"}});
  CHECK_FALSE(l.ok);
  CHECK_THAT(l.message, Catch::Contains("missing.toml: cannot open the file"));
  CHECK_THAT(l.message, Catch::Contains("(GRADCOMP_CONFIG)"));

  // Malformed: an error naming the file, the line and why it was read.
  std::ofstream(system) << "algo = \"dense\"\nmin_bytes = \n";
  l = loadInChild(system, {});
  CHECK_FALSE(l.ok);
  CHECK(l.algo == "off");
  CHECK_THAT(l.message, Catch::Contains(system + ":2"));
  CHECK_THAT(l.message, Catch::Contains("read because GRADCOMP_CONFIG is unset"));
  std::ofstream(system) << "algo = \"dense\"\ncompress = true\n";
  l = loadInChild(system, {});
  CHECK_FALSE(l.ok);
  CHECK_THAT(l.message, Catch::Contains("key 'compress'"));
  l = loadInChild(system, {{"GRADCOMP_CONFIG", ""}});  // the escape hatch
  CHECK(l.ok);
  std::filesystem::remove_all(dir);
}

TEST_CASE("reduce-scatter verdicts: the call's algorithm where it has the form, GRADCOMP_RS_ALGO",
          "[nccl][policy]") {
  using gradcomp::algo::Collective;
  Policy p = densePolicy();
  int rule = 0;
  auto rs = [&](size_t count, int dt, int op) {
    return decide(p, comm(0, 4), CallShape{count, dt, op, Collective::ReduceScatter}, &rule);
  };
  Verdict why = Verdict::Compress;
  CHECK(rs(1 << 18, ncclFloat32, ncclSum) == Verdict::Compress);  // the whole input: 1 MiB
  CHECK(reduceScatterAlgo(p, -1, &why) == "dense");
  CHECK(rs((1 << 18) - 4, ncclFloat32, ncclSum) == Verdict::SmallBuffer);
  CHECK(rs(1 << 20, ncclInt32, ncclSum) == Verdict::Dtype);
  CHECK(rs(1 << 20, ncclFloat32, ncclMax) == Verdict::Op);
  p.algo = "wagma";  // no reduce-scatter form: pass-through, said so
  CHECK(rs(1 << 20, ncclFloat32, ncclSum) == Verdict::NoRsForm);
  CHECK(reduceScatterAlgo(p, -1, &why).empty());
  CHECK(why == Verdict::NoRsForm);
  p.rsAlgo = "dense";  // named: used whatever GRADCOMP_ALGO is
  CHECK(rs(1 << 20, ncclFloat32, ncclSum) == Verdict::Compress);
  p.algo = "off";  // allreduce off, reduce-scatter on
  CHECK(p.enabled());
  CHECK(rs(1 << 20, ncclFloat32, ncclSum) == Verdict::Compress);
  CHECK(decide(p, comm(0, 4), CallShape{1 << 20, ncclFloat32, ncclSum}, &rule) == Verdict::Off);
  p.rsAlgo = "off";
  CHECK_FALSE(p.enabled());
  CHECK(rs(1 << 20, ncclFloat32, ncclSum) == Verdict::Off);
  // A rule's algorithm applies to reduce-scatter too.
  p = densePolicy();
  Rule big;
  big.minBytes = 64 << 20;
  big.algo = "wagma";
  p.rules = {big};
  CHECK(rs(32 << 20, ncclFloat32, ncclSum) == Verdict::NoRsForm);
  CHECK(rule == 0);
  CHECK(rs(1 << 20, ncclFloat32, ncclSum) == Verdict::Compress);
  CHECK(rule == -1);
  // The collective is part of every rank's configuration text.
  p.rsAlgo = "off";
  CHECK(effectiveConfigText(p, comm(0, 4), true).find("GRADCOMP_RS_ALGO=off\n") !=
        std::string::npos);
}

TEST_CASE("GRADCOMP_RS_ALGO: an algorithm without the form is named with the accepted ones",
          "[nccl][policy][mp]") {
  Loaded l = loadInChild("", {{"GRADCOMP_ALGO", "dense"}, {"GRADCOMP_RS_ALGO", "wagma"}});
  CHECK_FALSE(l.ok);
  CHECK_THAT(l.message, Catch::Contains("GRADCOMP_RS_ALGO='wagma': the algorithm has no "
                                        "reduce-scatter form; accepted: off, empty") &&
                            Catch::Contains("dense"));
  l = loadInChild("", {{"GRADCOMP_ALGO", "dense"}, {"GRADCOMP_RS_ALGO", "dense"}});
  CHECK(l.ok);
}
