// gradcomp-bench as a user runs it: the built executable, its exit codes,
// stderr and -J output. Every run is under `timeout`, so a hang fails the
// test instead of the CI.
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "support/multiproc.h"

namespace {

struct Result {
  int exitCode = -1;
  std::string out, err;
};

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The build tree: GC_TEST_BINARY_DIR when CTest sets it, else the parent of
// this test executable's directory (<build>/tests/test_bench_cli).
std::string binaryDir() {
  if (const char* dir = getenv("GC_TEST_BINARY_DIR")) return dir;
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  REQUIRE(n > 0);
  std::string path(self, size_t(n));
  for (int up = 0; up < 2; ++up) path = path.substr(0, path.rfind('/'));
  return path;
}

std::string benchPath() {
  const std::string path = binaryDir() + "/tools/gradcomp-bench/gradcomp-bench";
  INFO("gradcomp-bench expected at " << path);
  REQUIRE(access(path.c_str(), X_OK) == 0);
  return path;
}

// A scratch directory per test process, removed at exit. A plain char array:
// it must outlive static destructors, which run before this atexit handler.
char gScratch[] = "/tmp/gc_bench_cli_XXXXXX";

std::string scratch() {
  static const bool made = [] {
    REQUIRE(mkdtemp(gScratch) != nullptr);
    atexit([] { (void)!system((std::string("rm -rf ") + gScratch).c_str()); });
    return true;
  }();
  (void)made;
  return gScratch;
}

// Runs the bench with `args` (no shell metacharacters) and extra environment.
// CTest's GC_TEST_SOURCE_DIR/BINARY_DIR are removed: they are not registry
// parameters, and the bench would warn about them.
Result runBench(const std::vector<std::string>& args, const std::map<std::string, std::string>& env = {},
                int timeoutS = 60) {
  std::string cmd = "cd " + scratch() + " && env -u GC_TEST_SOURCE_DIR -u GC_TEST_BINARY_DIR";
  for (const auto& [k, v] : env) cmd += " " + k + "=" + v;
  cmd += " timeout -k 5 " + std::to_string(timeoutS) + " " + benchPath();
  for (const std::string& a : args) cmd += " '" + a + "'";
  cmd += " >" + scratch() + "/out 2>" + scratch() + "/err";
  const int status = system(cmd.c_str());
  Result r;
  r.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = readFile(scratch() + "/out");
  r.err = readFile(scratch() + "/err");
  return r;
}

bool contains(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

// The flat JSON the bench writes: an array of objects whose values are
// numbers, strings or null. Values are kept as their text ("null" for null).
using JsonRow = std::map<std::string, std::string>;

std::vector<JsonRow> parseRows(const std::string& text) {
  std::vector<JsonRow> rows;
  size_t i = 0;
  auto skip = [&] {
    while (i < text.size() && isspace(static_cast<unsigned char>(text[i]))) ++i;
  };
  auto expect = [&](char c) {
    skip();
    REQUIRE(i < text.size());
    REQUIRE(text[i] == c);
    ++i;
  };
  auto str = [&] {
    expect('"');
    const size_t end = text.find('"', i);
    REQUIRE(end != std::string::npos);
    std::string s = text.substr(i, end - i);
    i = end + 1;
    return s;
  };
  expect('[');
  skip();
  while (i < text.size() && text[i] == '{') {
    ++i;
    JsonRow row;
    for (;;) {
      const std::string key = str();
      expect(':');
      skip();
      std::string value;
      if (text[i] == '"') {
        value = str();
      } else {
        const size_t end = text.find_first_of(",}", i);
        REQUIRE(end != std::string::npos);
        value = text.substr(i, end - i);
        while (!value.empty() && isspace(static_cast<unsigned char>(value.back()))) value.pop_back();
        i = end;
      }
      row[key] = value;
      skip();
      if (text[i] == ',') {
        ++i;
        continue;
      }
      expect('}');
      break;
    }
    rows.push_back(row);
    skip();
    if (i < text.size() && text[i] == ',') ++i;
    skip();
  }
  expect(']');
  return rows;
}

const char* kFields[] = {"coll", "size_bytes", "count",      "dtype",          "op",
                         "algo",       "ranks",      "time_us",        "algbw_gbps",
                         "busbw_gbps", "wire_bytes_max", "wire_bytes_mean", "ratio",
                         "rel_err",    "wrong",      "backend",        "d2h_bytes",
                         "h2d_bytes",  "host_syncs", "choice",         "choices",
                         "hosts",      "hierarchy",  "inter_host_bytes_max", "inter_host_bytes_mean"};

double num(const JsonRow& row, const char* key) {
  auto it = row.find(key);
  REQUIRE(it != row.end());
  REQUIRE(it->second != "null");
  return std::stod(it->second);
}

// The registered algorithms, as gradcomp-bench --help lists them.
std::vector<std::string> algorithmNames() {
  Result r = runBench({"--help"});
  REQUIRE(r.exitCode == 0);
  const size_t at = r.out.find("--algo NAME");
  REQUIRE(at != std::string::npos);
  const size_t start = r.out.find_first_not_of(' ', at + 11), end = r.out.find('\n', start);
  const std::string algos = r.out.substr(start, end - start);  // "dense, dsa, ... (default dense)"
  std::vector<std::string> names;
  std::string word;
  for (char ch : algos) {  // names are lowercase letters and digits
    if (std::isalnum(static_cast<unsigned char>(ch))) {
      word += ch;
    } else if (!word.empty()) {
      if (word == "default") break;
      names.push_back(word);
      word.clear();
    }
  }
  return names;
}

}  // namespace

TEST_CASE("gradcomp-bench rejects bad input with exit 2 and one line naming the flag",
          "[bench]") {
  struct Case {
    std::vector<std::string> args;
    std::map<std::string, std::string> env;
    std::vector<std::string> mentions;
  };
  const std::vector<Case> cases = {
      {{"-b", "12Q"}, {}, {"-b", "12Q", "64K"}},
      {{"--minbytes=1X"}, {}, {"--minbytes", "1X"}},
      {{"--algo", "nosuch"}, {}, {"--algo", "nosuch", "dense"}},
      {{"-d", "int8"}, {}, {"-d", "int8", "bfloat16"}},
      {{"-d", "int32"}, {}, {"-d", "float, half, bfloat16, double"}},
      {{"-b", "1K", "-e"}, {}, {"-e", "needs a value"}},
      {{"--ranks", "0"}, {}, {"--ranks", "1..256"}},
      {{"--ranks", "two"}, {}, {"--ranks", "two"}},
      {{"-c", "2"}, {}, {"-c", "0 or 1"}},
      {{"-o", "max"}, {}, {"-o", "sum or avg"}},
      {{"--input", "zipf"}, {}, {"--input", "gradient"}},
      {{"--frobnicate", "1"}, {}, {"--frobnicate"}},
      {{"-x", "1"}, {}, {"-x"}},
      {{"stray"}, {}, {"stray"}},
      {{"-b", "1M", "-e", "1K"}, {}, {"-b", "-e"}},
      {{"--param", "NOPE=1"}, {}, {"--param", "NOPE"}},
      {{"--algo", "dense", "--density", "0.1"}, {}, {"--density", "dense", "--param"}},
      {{"--coll", "gather"}, {}, {"--coll", "gather", "reducescatter"}},
      {{"--algo", "wagma", "--coll", "reducescatter"}, {},
       {"--coll", "wagma", "no reduce-scatter form", "dense"}},
      {{"--ranks", "2", "-b", "1K", "-e", "1K"}, {{"GRADCOMP_TIMEOUT_S", "abc"}},
       {"GRADCOMP_TIMEOUT_S", "abc", "0.05..86400"}},
  };
  for (const Case& c : cases) {
    std::string line;
    for (const auto& a : c.args) line += a + " ";
    INFO("gradcomp-bench " << line);
    const Result r = runBench(c.args, c.env, 30);
    INFO("stderr: " << r.err);
    CHECK(r.exitCode == 2);
    CHECK(r.out.empty());
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK(r.err.rfind("gradcomp-bench: ", 0) == 0);
    for (const std::string& m : c.mentions) CHECK(contains(r.err, m));
  }
}

TEST_CASE("gradcomp-bench --help lists the flags and exits 0", "[bench]") {
  const Result r = runBench({"--help"});
  CHECK(r.exitCode == 0);
  for (const char* flag : {"--minbytes", "--stepfactor", "--algo", "--ranks", "--input", "dense"})
    CHECK(contains(r.out, flag));
}

TEST_CASE("gradcomp-bench --algo auto names the candidates the timed calls ran", "[bench][mp]") {
  const Result r = runBench({"--ranks", "3", "--algo", "auto", "--auto-probe-limit-ms", "60000",
                             "-b", "256K", "-e", "1M", "-f", "4", "-w", "64", "-n", "4", "-c", "0",
                             "-J", "auto.json"},
                            {}, 240);
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.exitCode == 0);
  const std::vector<JsonRow> rows = parseRows(readFile(scratch() + "/auto.json"));
  REQUIRE(rows.size() == 2);
  for (const JsonRow& row : rows) {
    CHECK(row.at("algo") == "auto");
    const std::string choice = row.at("choice");
    CHECK((choice == "dense" || choice == "qsgd:BITS=8" || choice == "qsgd:BITS=4" ||
           choice == "oktopk" || choice.find('+') != std::string::npos));
    // "label*n,...": the timed calls, all accounted for
    int calls = 0;
    const std::string& all = row.at("choices");
    for (size_t at = all.find('*'); at != std::string::npos; at = all.find('*', at + 1))
      calls += std::atoi(all.c_str() + at + 1);
    CHECK(calls == 4);
    CHECK(contains(r.out, " " + choice + " "));  // the table's algo column
  }
}

TEST_CASE("gradcomp-bench --algo auto checks every call against its reference", "[bench][mp]") {
  // Trials of dense and oktopk in the warm-up calls, flushes among them: the
  // reference replays each call's choice, so #wrong is a number, 0.
  const Result r = runBench({"--ranks", "3", "--algo", "auto", "--auto-probe-limit-ms", "60000",
                             "--auto-candidates", "dense,oktopk", "-b", "256K", "-e", "256K",
                             "-w", "24", "-n", "4", "-J", "autock.json"},
                            {}, 240);
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.exitCode == 0);
  CHECK(contains(r.out, "# Wrong values         : 0 OK"));
  const std::vector<JsonRow> rows = parseRows(readFile(scratch() + "/autock.json"));
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].at("wrong") == "0");
}

TEST_CASE("gradcomp-bench dense on 3 ranks in bfloat16 writes complete JSON rows",
          "[bench][mp]") {
  const Result r = runBench({"--ranks", "3", "--algo", "dense", "-b", "1K", "-e", "64K", "-f", "4",
                             "-d", "bfloat16", "-J", "rows.json"},
                            {}, 240);
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.exitCode == 0);
  CHECK(contains(r.out, "# Wrong values         : 0 OK"));
  const std::vector<JsonRow> rows = parseRows(readFile(scratch() + "/rows.json"));
  REQUIRE(rows.size() == 4);  // 1K, 4K, 16K, 64K
  uint64_t expectSize = 1024;
  for (const JsonRow& row : rows) {
    INFO("size " << expectSize);
    CHECK(row.size() == sizeof(kFields) / sizeof(kFields[0]));
    for (const char* f : kFields) CHECK(row.count(f) == 1);
    CHECK(num(row, "size_bytes") == double(expectSize));
    CHECK(num(row, "count") == double(expectSize / 2));
    CHECK(row.at("dtype") == "bfloat16");
    CHECK(row.at("op") == "sum");
    CHECK(row.at("algo") == "dense");
    CHECK(num(row, "ranks") == 3);
    CHECK(num(row, "wrong") == 0);
    CHECK(num(row, "time_us") > 0);
    CHECK(num(row, "busbw_gbps") == Approx(num(row, "algbw_gbps") * 4.0 / 3.0));
    CHECK(num(row, "wire_bytes_max") >= num(row, "wire_bytes_mean"));
    CHECK(num(row, "wire_bytes_mean") > 0);
    CHECK(num(row, "ratio") > 0);
    // bf16 keeps 8 significant bits: each rounding is off by at most 2^-9.
    CHECK(num(row, "rel_err") < 1e-2);
    expectSize *= 4;
  }
}

TEST_CASE("gradcomp-bench integer inputs sum exactly on 2 ranks", "[bench][mp]") {
  // 256K is above GRADCOMP_DENSE_RD_MAX_BYTES (64K): the ring path runs too.
  const Result r = runBench({"--ranks", "2", "--input", "integer", "-b", "4K", "-e", "256K", "-f",
                             "8", "-d", "float", "-n", "5", "-w", "2", "-J", "int.json"},
                            {}, 240);
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.exitCode == 0);
  const std::vector<JsonRow> rows = parseRows(readFile(scratch() + "/int.json"));
  REQUIRE(rows.size() == 3);  // 4K, 32K, 256K
  for (const JsonRow& row : rows) {
    CHECK(num(row, "rel_err") == 0.0);
    CHECK(num(row, "wrong") == 0);
    CHECK(num(row, "ranks") == 2);
  }
  // With 2 ranks the ring sends exactly half the buffer per phase: ratio 1.
  CHECK(num(rows.back(), "ratio") == Approx(1.0));
}

TEST_CASE("gradcomp-bench on one rank sends nothing and -c 0 skips the check", "[bench][mp]") {
  const Result r = runBench(
      {"--ranks", "1", "-b", "4K", "-e", "4K", "-c", "0", "-n", "3", "-w", "1", "-J", "one.json"}, {},
      120);
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.exitCode == 0);
  CHECK(contains(r.out, "N/A"));
  const std::vector<JsonRow> rows = parseRows(readFile(scratch() + "/one.json"));
  REQUIRE(rows.size() == 1);
  CHECK(num(rows[0], "wire_bytes_max") == 0);
  CHECK(num(rows[0], "busbw_gbps") == 0);
  CHECK(rows[0].at("ratio") == "null");
  CHECK(rows[0].at("rel_err") == "null");
  CHECK(rows[0].at("wrong") == "null");
}

TEST_CASE("gradcomp-bench ratio is 1 for the dense ring with an uneven count", "[bench][mp]") {
  // 256K floats = 65536 elements, not divisible by 3: chunks 21846/21845/21845.
  // Above GRADCOMP_DENSE_RD_MAX_BYTES the dense algorithm is the ring, so its
  // measured wire must equal the ring volume the bench computes.
  const Result r = runBench({"--ranks", "3", "-b", "256K", "-e", "256K", "-n", "2", "-w", "1", "-c",
                             "0", "-J", "ring.json"},
                            {}, 120);
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.exitCode == 0);
  const std::vector<JsonRow> rows = parseRows(readFile(scratch() + "/ring.json"));
  REQUIRE(rows.size() == 1);
  // Worst rank skips the two adjacent smallest chunks: (2*65536 - 2*21845) * 4.
  CHECK(num(rows[0], "wire_bytes_max") == double((2 * 65536 - 2 * 21845) * 4));
  CHECK(num(rows[0], "ratio") == 1.0);
}

// The device-resident path between real processes over UCX: every algorithm
// on the cpu-device backend (device memory that faults on host access,
// deferred primitives), P = 3 and 4, three dtypes, every call checked.
TEST_CASE("gradcomp-bench --backend cpu-device: every algorithm, P 3 and 4, f32/f16/bf16, #wrong 0",
          "[bench][mp][memory]") {
  const std::vector<std::string> names = algorithmNames();
  REQUIRE(names.size() >= 10);
  for (const std::string& algo : names)
    for (const char* ranks : {"3", "4"})
      for (const char* dtype : {"float", "half", "bfloat16"}) {
        INFO(algo << " P=" << ranks << " " << dtype);
        const std::string json = scratch() + "/dev.json";
        const Result r = runBench({"--ranks", ranks, "--algo", algo, "--backend", "cpu-device", "-b",
                                   "96K", "-e", "96K", "-n", "2", "-w", "1", "-c", "1", "-d", dtype,
                                   "-J", json});
        INFO(r.err);
        REQUIRE(r.exitCode == 0);
        CHECK(contains(r.out, "Wrong values         : 0 OK"));
        const auto rows = parseRows(readFile(json));
        REQUIRE(rows.size() == 1);
        CHECK(rows[0].at("backend") == "cpu-device");
        CHECK(rows[0].at("wrong") == "0");
        CHECK(std::stod(rows[0].at("host_syncs")) >= 1);
      }
}

// Only payloads cross between host and device: for the compressed
// algorithms the host <-> device bytes per rank and call stay within 3x the
// bytes the rank sends (issue 19's bound; each payload crosses once at the
// sender and once at each receiver, plus control words).
TEST_CASE("gradcomp-bench cpu-device: oktopk and qsgd 4 bit move at most 3x their wire bytes "
          "across PCIe at 16M floats", "[bench][mp][memory]") {
  const std::vector<std::vector<std::string>> runs = {{"--algo", "oktopk", "--density", "0.01"},
                                                      {"--algo", "qsgd", "--bits", "4"}};
  for (const auto& algo : runs) {
    INFO(algo[1]);
    const std::string json = scratch() + "/traffic.json";
    std::vector<std::string> args = {"--ranks", "4", "--backend", "cpu-device", "-b", "64M", "-e",
                                     "64M", "-n", "1", "-w", "1", "-c", "0", "-J", json};
    args.insert(args.end(), algo.begin(), algo.end());
    const Result r = runBench(args, {}, 300);
    INFO(r.err);
    REQUIRE(r.exitCode == 0);
    const auto rows = parseRows(readFile(json));
    REQUIRE(rows.size() == 1);
    const double wire = std::stod(rows[0].at("wire_bytes_max"));
    const double pcie = std::stod(rows[0].at("d2h_bytes")) + std::stod(rows[0].at("h2d_bytes"));
    INFO("wire " << wire << " B, d2h + h2d " << pcie << " B");
    CHECK(wire > 0);
    CHECK(pcie > 0);
    CHECK(pcie <= 3 * wire);
  }
}

// Host synchronizations per call are O(communication rounds), not
// O(primitives) or O(n) (issue 19): every algorithm syncs as often at 16 MiB
// as at 1 MiB (a design that synced per primitive over chunks of the buffer,
// as WAGMA's negate once did, grows 16x here), and a few times per round.
TEST_CASE("gradcomp-bench cpu-device: host syncs per call do not grow with the buffer",
          "[bench][mp][memory]") {
  std::vector<std::string> names = algorithmNames();
  REQUIRE(names.size() >= 10);
  for (const std::string& algo : names) {
    INFO(algo);
    const std::string json = scratch() + "/syncs.json";
    const Result r = runBench({"--ranks", "4", "--algo", algo, "--backend", "cpu-device", "-b",
                               "1M", "-e", "16M", "-f", "16", "-n", "2", "-w", "1", "-c", "0",
                               "-J", json},
                              {}, 240);
    INFO(r.err);
    REQUIRE(r.exitCode == 0);
    const auto rows = parseRows(readFile(json));
    REQUIRE(rows.size() == 2);
    const double small = num(rows[0], "host_syncs"), large = num(rows[1], "host_syncs");
    INFO("host syncs per call: " << small << " at 1 MiB, " << large << " at 16 MiB");
    CHECK(small >= 1);
    CHECK(large <= small + 1);
    CHECK(large <= 24);  // P = 4: the deepest schedule (gtopk) syncs 15 times
  }
}

TEST_CASE("gradcomp-bench --hosts: hierarchical dense, oktopk and qsgd are right and send about "
          "1/L of flat between hosts", "[bench][mp][hierarchy]") {
  // 2 hosts x 2 ranks (L = 2), then 2 x 4 (L = 4) for the compressed ones.
  struct Case {
    std::vector<std::string> algo;
    int ranks;
    double maxShare;  // hierarchical / flat inter-host bytes (mean over ranks)
  };
  const std::vector<Case> cases = {{{"--algo", "dense"}, 4, 0.75},
                                   {{"--algo", "oktopk", "--density", "0.01"}, 4, 0.75},
                                   {{"--algo", "qsgd", "--bits", "4"}, 4, 0.6},
                                   {{"--algo", "qsgd", "--bits", "4"}, 8, 0.35},
                                   {{"--algo", "oktopk", "--density", "0.01"}, 8, 0.45}};
  for (const Case& c : cases) {
    double inter[2] = {0, 0};
    for (int h = 0; h < 2; ++h) {
      std::vector<std::string> args = {"--ranks", std::to_string(c.ranks), "--hosts", "2",
                                       "--hierarchy", h ? "host" : "flat", "-b", "256K", "-e",
                                       "256K", "-n", "3", "-w", "2", "-J", "rows.json"};
      args.insert(args.end(), c.algo.begin(), c.algo.end());
      const Result r = runBench(args, {}, 240);
      INFO(c.algo[1] << " on " << c.ranks << " ranks, " << (h ? "host" : "flat") << "\nstdout: "
                     << r.out << "\nstderr: " << r.err);
      REQUIRE(r.exitCode == 0);
      const std::vector<JsonRow> rows = parseRows(readFile(scratch() + "/rows.json"));
      REQUIRE(rows.size() == 1);
      CHECK(num(rows[0], "wrong") == 0);
      CHECK(num(rows[0], "hosts") == 2);
      CHECK(rows[0].at("hierarchy") == (h ? "host" : "flat"));
      CHECK(num(rows[0], "inter_host_bytes_max") >= num(rows[0], "inter_host_bytes_mean"));
      CHECK(num(rows[0], "inter_host_bytes_max") <= num(rows[0], "wire_bytes_max"));
      inter[h] = num(rows[0], "inter_host_bytes_mean");
    }
    INFO(c.algo[1] << " on " << c.ranks << " ranks: inter-host bytes flat " << inter[0]
                   << ", hierarchical " << inter[1]);
    CHECK(inter[1] > 0);
    CHECK(inter[1] <= c.maxShare * inter[0]);
  }
  // The device memory discipline (cpu-device), half precision and avg.
  for (const char* algo : {"dense", "oktopk", "qsgd"}) {
    const Result r = runBench({"--ranks", "4", "--hosts", "2", "--backend", "cpu-device", "-d",
                               "half", "-o", "avg", "--algo", algo, "-b", "4K", "-e", "64K", "-f",
                               "16", "-n", "2", "-w", "1", "-J", "rows.json"},
                              {}, 240);
    INFO(algo << " cpu-device half avg\nstdout: " << r.out << "\nstderr: " << r.err);
    REQUIRE(r.exitCode == 0);
    for (const JsonRow& row : parseRows(readFile(scratch() + "/rows.json"))) {
      CHECK(row.at("hierarchy") == "host");
      CHECK(num(row, "wrong") == 0);
    }
  }
}

// The hierarchical reduce-scatter (algorithms/hierarchy/hierarchical.h):
// every shard right against the hierarchical reference, about 1/L of flat's
// compressed bytes between hosts, and the device memory discipline.
TEST_CASE("gradcomp-bench --hosts --coll reducescatter: hierarchical shards are right and send "
          "less between hosts", "[bench][mp][hierarchy][rs]") {
  for (const std::vector<std::string>& algo :
       {std::vector<std::string>{"--algo", "qsgd", "--bits", "4"},
        std::vector<std::string>{"--algo", "oktopk", "--density", "0.01"}}) {
    double inter[2] = {0, 0};
    for (int h = 0; h < 2; ++h) {
      std::vector<std::string> args = {"--ranks", "4", "--hosts", "2", "--coll", "reducescatter",
                                       "--hierarchy", h ? "host" : "flat", "-b", "256K", "-e",
                                       "256K", "-n", "3", "-w", "2", "-J", "rows.json"};
      args.insert(args.end(), algo.begin(), algo.end());
      const Result r = runBench(args, {}, 240);
      INFO(algo[1] << " " << (h ? "host" : "flat") << "\nstdout: " << r.out << "\nstderr: "
                   << r.err);
      REQUIRE(r.exitCode == 0);
      const std::vector<JsonRow> rows = parseRows(readFile(scratch() + "/rows.json"));
      REQUIRE(rows.size() == 1);
      CHECK(rows[0].at("coll") == "reducescatter");
      CHECK(rows[0].at("hierarchy") == (h ? "host" : "flat"));
      CHECK(num(rows[0], "wrong") == 0);
      inter[h] = num(rows[0], "inter_host_bytes_mean");
    }
    INFO(algo[1] << ": inter-host bytes flat " << inter[0] << ", hierarchical " << inter[1]);
    CHECK(inter[1] > 0);
    CHECK(inter[1] <= 0.75 * inter[0]);
  }
  const Result r = runBench({"--ranks", "4", "--hosts", "2", "--coll", "reducescatter",
                             "--backend", "cpu-device", "-d", "half", "-o", "avg", "--algo", "qsgd",
                             "-b", "8K", "-e", "128K", "-f", "16", "-n", "2", "-w", "1", "-J",
                             "rows.json"},
                            {}, 240);
  INFO("cpu-device half avg\nstdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.exitCode == 0);
  for (const JsonRow& row : parseRows(readFile(scratch() + "/rows.json"))) {
    CHECK(row.at("hierarchy") == "host");
    CHECK(num(row, "wrong") == 0);
  }
}

TEST_CASE("gradcomp-bench without --hosts: one host and no inter-host bytes, and --hosts must divide "
          "--ranks", "[bench][mp][hierarchy]") {
  const Result r = runBench({"--ranks", "2", "--algo", "qsgd", "-b", "4K", "-e", "4K", "-n", "1",
                             "-w", "0", "-J", "rows.json"});
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.exitCode == 0);
  const std::vector<JsonRow> rows = parseRows(readFile(scratch() + "/rows.json"));
  REQUIRE(rows.size() == 1);
  CHECK(num(rows[0], "hosts") == 1);
  CHECK(rows[0].at("hierarchy") == "flat");
  CHECK(num(rows[0], "inter_host_bytes_max") == 0);
  const Result bad = runBench({"--ranks", "3", "--hosts", "2"});
  CHECK(bad.exitCode == 2);
  CHECK(contains(bad.err, "--hosts 2 needs --ranks N with N a multiple of it (--ranks 3)"));
}

namespace {

struct RankRun {
  int exitCode = -1;
  double seconds = -1;  // from the launch of all ranks to this rank's exit
  std::string lastLine;  // of its stderr
};

// Starts P ranks of the bench as a launcher would (one process each, the
// bootstrap variables set), rank r with argsOf(r), and waits for all.
std::vector<RankRun> runRanksOfBench(int P, const std::function<std::string(int)>& argsOf,
                                     const std::string& env) {
  const std::string dir = scratch();
  const int port = gradcomp::test::freeLoopbackPort();
  REQUIRE(port > 0);
  std::string script = "cd " + dir + " && start=$(date +%s.%N); ";
  for (int r = 0; r < P; ++r)
    script += "(env -u GC_TEST_SOURCE_DIR -u GC_TEST_BINARY_DIR GRADCOMP_RANK=" + std::to_string(r) +
              " GRADCOMP_NRANKS=" + std::to_string(P) + " GRADCOMP_BOOTSTRAP=127.0.0.1:" +
              std::to_string(port) + " " + env + " timeout -k 5 60 " + benchPath() + " " + argsOf(r) +
              " >" + dir + "/rank" + std::to_string(r) + ".out 2>" + dir + "/rank" + std::to_string(r) +
              ".err; echo $? $(echo \"$(date +%s.%N) - $start\" | bc) >" + dir + "/rank" +
              std::to_string(r) + ".rc) & ";
  script += "wait";
  REQUIRE(system(("bash -c '" + script + "'").c_str()) == 0);
  std::vector<RankRun> runs(static_cast<size_t>(P));
  for (int r = 0; r < P; ++r) {
    std::istringstream rc(readFile(dir + "/rank" + std::to_string(r) + ".rc"));
    rc >> runs[size_t(r)].exitCode >> runs[size_t(r)].seconds;
    std::istringstream err(readFile(dir + "/rank" + std::to_string(r) + ".err"));
    for (std::string line; std::getline(err, line);)
      if (!line.empty()) runs[size_t(r)].lastLine = line;
  }
  return runs;
}

}  // namespace

TEST_CASE("gradcomp-bench ranks started with different sizes all fail at once naming both sides",
          "[bench][mp][call_check]") {
  // The run of issue 35: oktopk, ranks 2 and 3 with twice the size of 0 and 1,
  // GRADCOMP_TIMEOUT_S=20. Before, ranks 0 and 1 waited the whole timeout.
  const auto runs = runRanksOfBench(
      4, [](int r) { return std::string("--algo oktopk -n 2 -w 1 ") + (r >= 2 ? "-b 2M -e 2M" : "-b 1M -e 1M"); },
      "GRADCOMP_TIMEOUT_S=20");
  auto verdictOf = [](const std::string& line) {  // "gradcomp-bench: rank r: <verdict>[; rank r was ...]"
    const size_t at = line.find(": ", line.find("rank "));
    const std::string v = at == std::string::npos ? line : line.substr(at + 2);
    return v.substr(0, v.find("; rank ", v.find(" failed: ")));
  };
  const std::string verdict = verdictOf(runs[0].lastLine);
  for (size_t r = 0; r < runs.size(); ++r) {
    INFO("rank " << r << ": exit " << runs[r].exitCode << " after " << runs[r].seconds
                 << " s: " << runs[r].lastLine);
    CHECK(runs[r].exitCode == 1);
    CHECK(runs[r].seconds < 10.0);  // start-up included; the timeout would take 20 s
    CHECK(verdictOf(runs[r].lastLine) == verdict);
  }
  CHECK_THAT(verdict, Catch::Contains(" failed: RemoteError: rank ") &&
                          Catch::Contains(" called allreduce #0 with count ") &&
                          (Catch::Contains("with count 262144 float sum, rank ") ||
                           Catch::Contains("with count 524288 float sum, rank ")));
}

TEST_CASE("gradcomp-bench --coll reducescatter: nccl-tests' columns, exact sums, (P-1)/P on the wire",
          "[bench][mp]") {
  const Result r = runBench({"--ranks", "3", "--coll", "reducescatter", "--algo", "dense",
                             "--input", "integer", "-b", "96K", "-e", "384K", "-f", "4", "-n", "3",
                             "-w", "1", "-J", "rs.json"},
                            {}, 240);
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.exitCode == 0);
  CHECK(contains(r.out, "# gradcomp-bench: reducescatter, algo dense, ranks 3"));
  CHECK(contains(r.out, "# Wrong values         : 0 OK"));
  const std::vector<JsonRow> rows = parseRows(readFile(scratch() + "/rs.json"));
  REQUIRE(rows.size() == 2);  // 96K, 384K: whole inputs, 3 equal shards
  for (const JsonRow& row : rows) {
    const double size = num(row, "size_bytes");
    CHECK(row.at("coll") == "reducescatter");
    CHECK(num(row, "count") == size / 4 / 3);  // the recvcount, as reduce_scatter_perf
    CHECK(num(row, "wrong") == 0);
    CHECK(num(row, "rel_err") == 0.0);  // integer inputs: exact
    // The ring reduce-scatter sends P-1 of P shards, on every rank.
    CHECK(num(row, "wire_bytes_max") == size * 2 / 3);
    CHECK(num(row, "wire_bytes_mean") == size * 2 / 3);
    CHECK(num(row, "ratio") == Approx(1.0));
    CHECK(num(row, "busbw_gbps") == Approx(num(row, "algbw_gbps") * 2.0 / 3.0));
  }
}

TEST_CASE("gradcomp-bench --coll allgather: all_gather_perf's columns, the reference, wire bytes",
          "[bench][mp][allgather]") {
  // 96K of fp32 output over 3 ranks: sendcount 8192, 4 blocks of 2048.
  const Result r = runBench({"--ranks", "3", "--coll", "allgather", "--algo", "blockq", "-b",
                             "96K", "-e", "96K", "-n", "2", "-w", "1", "-J", "ag.json"},
                            {}, 120);
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.exitCode == 0);
  CHECK(contains(r.out, "# gradcomp-bench: allgather, algo blockq, ranks 3"));
  CHECK(contains(r.out, "# Wrong values         : 0 OK"));
  const std::vector<JsonRow> rows = parseRows(readFile(scratch() + "/ag.json"));
  REQUIRE(rows.size() == 1);
  const JsonRow& row = rows[0];
  CHECK(row.at("coll") == "allgather");
  CHECK(num(row, "count") == 8192);  // the sendcount, as all_gather_perf
  CHECK(num(row, "wrong") == 0);
  CHECK(num(row, "wire_bytes_max") == 2 * (4 * 4 + 8192));  // (P-1) x (scales + int8 codes)
  CHECK(num(row, "busbw_gbps") == Approx(num(row, "algbw_gbps") * 2.0 / 3.0));
  const Result d = runBench({"--ranks", "3", "--coll", "allgather", "--algo", "dense", "-b",
                             "96K", "-e", "96K", "-n", "2", "-w", "1", "-J", "agd.json"},
                            {}, 120);
  REQUIRE(d.exitCode == 0);
  const JsonRow dense = parseRows(readFile(scratch() + "/agd.json")).at(0);
  CHECK(num(dense, "rel_err") == 0.0);
  CHECK(num(dense, "wire_bytes_max") == 96 * 1024 * 2 / 3);
  CHECK(num(dense, "ratio") == Approx(1.0));
}

TEST_CASE("gradcomp-bench --coll allgather --hosts: the hierarchical form, checked against its "
          "reference, (H-1) payloads between hosts", "[bench][mp][allgather][hierarchy]") {
  // 128K of fp32 output over 2 hosts x 2 ranks: sendcount 8192, 4 blocks of 2048.
  const Result r = runBench({"--ranks", "4", "--hosts", "2", "--hierarchy", "host", "--coll",
                             "allgather", "--algo", "blockq", "-b", "128K", "-e", "128K", "-n",
                             "2", "-w", "1", "-J", "agh.json"},
                            {}, 120);
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.exitCode == 0);
  const JsonRow row = parseRows(readFile(scratch() + "/agh.json")).at(0);
  CHECK(row.at("hierarchy") == "host");
  CHECK(num(row, "wrong") == 0);
  const double payload = 4 * 4 + 8192;  // scales + int8 codes
  CHECK(num(row, "inter_host_bytes_max") == payload);           // (H-1) payloads
  CHECK(num(row, "inter_host_bytes_mean") == payload);
  CHECK(num(row, "wire_bytes_max") == payload + 2 * 8192 * 4);  // + (L-1) H m 4 inside
}
