// gradcomp-run end to end: the built binary runs shell ranks; output is
// prefixed, failures propagate, the other ranks are stopped and reaped.
#include <catch2/catch.hpp>

#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace {

std::string runBinary() {
  if (const char* dir = getenv("GC_TEST_BINARY_DIR"))
    return std::string(dir) + "/tools/gradcomp-run/gradcomp-run";
  // Run by hand from the build tree: tests/test_launcher -> ../tools/...
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  std::string self(buf, n > 0 ? static_cast<size_t>(n) : 0);
  return self.substr(0, self.rfind('/')) + "/../tools/gradcomp-run/gradcomp-run";
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Result {
  int code = -1;
  std::string out, err;
  double seconds = 0;
};

// Runs `gradcomp-run <args>` through the shell, capturing both streams.
Result run(const std::string& args) {
  char dir[] = "/tmp/gc_launcher_XXXXXX";
  REQUIRE(mkdtemp(dir));
  const std::string out = std::string(dir) + "/out", err = std::string(dir) + "/err";
  const std::string cmd = "'" + runBinary() + "' " + args + " >" + out + " 2>" + err;
  auto t0 = std::chrono::steady_clock::now();
  int status = system(cmd.c_str());
  Result r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  unlink(out.c_str());
  unlink(err.c_str());
  rmdir(dir);
  return r;
}

int countLines(const std::string& text) {
  int n = 0;
  for (char c : text) n += c == '\n';
  return n;
}

}  // namespace

TEST_CASE("gradcomp-run: N ranks with their variables and prefixed output", "[launcher]") {
  Result r = run("-n 4 sh -c 'echo rank=$GRADCOMP_RANK of=$GRADCOMP_NRANKS at=$GRADCOMP_BOOTSTRAP; "
                 "echo to-stderr >&2; printf no-newline'");
  INFO(r.out << r.err);
  CHECK(r.code == 0);
  std::string port;
  for (int rank = 0; rank < 4; ++rank) {
    const std::string prefix = "[" + std::to_string(rank) + "] ";
    const std::string line = prefix + "rank=" + std::to_string(rank) + " of=4 at=127.0.0.1:";
    const size_t pos = r.out.find(line);
    REQUIRE(pos != std::string::npos);
    // Every rank sees the same rendezvous port.
    const std::string p = r.out.substr(pos + line.size(), r.out.find('\n', pos) - pos - line.size());
    if (port.empty()) port = p;
    CHECK(p == port);
    CHECK_THAT(r.out, Catch::Contains(prefix + "no-newline\n"));
    CHECK_THAT(r.err, Catch::Contains(prefix + "to-stderr\n"));
  }
  CHECK(countLines(r.out) == 8);
  CHECK(countLines(r.err) == 4);
}

TEST_CASE("gradcomp-run: --no-prefix passes output through", "[launcher]") {
  Result r = run("--no-prefix --np=2 -- sh -c 'echo plain'");
  CHECK(r.code == 0);
  CHECK(r.out == "plain\nplain\n");
}

TEST_CASE("gradcomp-run: a failing rank fails the job and stops the others", "[launcher]") {
  char dirBuf[] = "/tmp/gc_launcher_pids_XXXXXX";
  REQUIRE(mkdtemp(dirBuf));
  const std::string dir = dirBuf;
  REQUIRE(mkfifo((dir + "/ready").c_str(), 0600) == 0);
  // Ranks 0 and 1 ignore SIGTERM, record their pid, report ready through the
  // fifo and would sleep for a minute: the launcher must SIGKILL them after
  // its grace period (5 s). Rank 2 fails once both are ready (bounded read).
  {
    std::ofstream script(dir + "/rank.sh");
    script << "d=" << dir << "\n"
           << "if [ \"$GRADCOMP_RANK\" = 2 ]; then\n"
           << "  exec 3<>$d/ready; read -t 20 a <&3; read -t 20 b <&3; exit 7\n"
           << "fi\n"
           << "trap '' TERM\n"
           << "echo $$ > $d/pid$GRADCOMP_RANK\n"
           << "echo ready > $d/ready\n"
           << "exec sleep 60\n";
  }
  Result r = run("-n 3 bash " + dir + "/rank.sh");
  INFO(r.err);
  CHECK(r.code == 7);
  CHECK_THAT(r.err, Catch::Contains("rank 2 exited with exit code 7"));
  CHECK(r.seconds < 30);
  for (int rank : {0, 1}) {
    const std::string pidFile = dir + "/pid" + std::to_string(rank);
    const int pid = atoi(slurp(pidFile).c_str());
    CHECK(pid > 0);
    // Reaped: the pid no longer exists (pid reuse within seconds is unlikely).
    CHECK((pid > 0 && kill(pid, 0) != 0));
    unlink(pidFile.c_str());
  }
  unlink((dir + "/ready").c_str());
  unlink((dir + "/rank.sh").c_str());
  rmdir(dir.c_str());
}

TEST_CASE("gradcomp-run: a rank killed by a signal gives 128+signal", "[launcher]") {
  Result r = run("-n 2 sh -c 'if [ $GRADCOMP_RANK = 0 ]; then kill -KILL $$; fi; exec sleep 60'");
  CHECK(r.code == 128 + SIGKILL);
  CHECK_THAT(r.err, Catch::Contains("rank 0 exited with signal 9"));
  CHECK(r.seconds < 30);  // rank 1 got SIGTERM, not a minute of sleep
}

TEST_CASE("gradcomp-run: usage errors are one line naming the flag, exit 2", "[launcher]") {
  struct Case {
    const char* args;
    const char* mention;
  } cases[] = {
      {"-n x true", "-n: expected a number of ranks"},
      {"-n 0 true", "-n"},
      {"--np -3 true", "--np"},
      {"-n", "-n: missing"},
      {"true", "missing -n"},
      {"-n 2", "missing the command"},
      {"--frobnicate -n 2 true", "unknown option '--frobnicate'"},
  };
  for (const Case& c : cases) {
    Result r = run(c.args);
    INFO(c.args << " -> " << r.err);
    CHECK(r.code == 2);
    CHECK(countLines(r.err) == 1);
    CHECK_THAT(r.err, Catch::Contains(c.mention));
    CHECK(r.out.empty());
  }
  Result help = run("--help");
  CHECK(help.code == 0);
  CHECK_THAT(help.out, Catch::Contains("SYNOPSIS\n  gradcomp-run -n N [--no-prefix] [--] CMD"));
  CHECK_THAT(help.out, Catch::Contains("EXIT STATUS"));
}

TEST_CASE("gradcomp-run: a command that cannot be executed exits 127", "[launcher]") {
  Result r = run("-n 2 /nonexistent/gradcomp-binary");
  CHECK(r.code == 127);
  CHECK_THAT(r.err, Catch::Contains("cannot execute '/nonexistent/gradcomp-binary'"));
}
