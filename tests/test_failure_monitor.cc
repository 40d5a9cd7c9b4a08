// The failure monitor (transport/failure_monitor.h): its wire format, the
// root's decision logic on a scripted clock, and whole monitors over real
// loopback TCP inside one process (each rank a FailureMonitor object; a crash
// is a connection closed without Bye, a stopped rank one that stops
// answering). Multi-process kills and stops are in test_transport_faults.cc
// and test_faults_matrix.cc.
#include <catch2/catch.hpp>

#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>

#include "transport/failure_monitor.h"
#include "transport/monitor_root.h"
#include "transport/monitor_socket.h"
#include "transport/monitor_wire.h"

using namespace gradcomp;
using namespace gradcomp::transport;
using namespace gradcomp::transport::monitor;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

Clock::time_point in(double s) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

Message suspect(int who, SuspectKind kind = SuspectKind::Silent, double seconds = 20) {
  Message m;
  m.type = MsgType::Suspect;
  m.rank = who;
  m.kind = uint8_t(kind);
  m.seconds = seconds;
  m.text = "no progress from rank " + std::to_string(who);
  return m;
}

Message pong(uint64_t nonce, int waitingOn) {
  Message m;
  m.type = MsgType::Pong;
  m.token = nonce;
  m.rank = waitingOn;
  return m;
}

// A RootEngine with recording hooks.
struct Scripted {
  std::vector<std::pair<int, uint64_t>> pings;  // (rank, nonce)
  std::vector<bool> connected;
  int rootWaits = -1;
  int decisions = 0, rank = -1;
  Err code = Err::Ok;
  std::string cause;
  RootEngine engine;
  explicit Scripted(int size)
      : connected(size_t(size), true),
        engine(size, {[this](int r, uint64_t n) {
                        pings.emplace_back(r, n);
                        return bool(connected[size_t(r)]);
                      },
                      [this](int r, Err c, const std::string& why) {
                        ++decisions;
                        rank = r;
                        code = c;
                        cause = why;
                      },
                      [this] { return rootWaits; }}) {}
  uint64_t lastNonce(int r) const {
    for (auto it = pings.rbegin(); it != pings.rend(); ++it)
      if (it->first == r) return it->second;
    return 0;
  }
};

}  // namespace

TEST_CASE("monitor wire: records round-trip and malformed ones are rejected", "[monitor]") {
  Message m;
  m.type = MsgType::Verdict;
  m.rank = 7;
  m.kind = uint8_t(Err::Timeout);
  m.token = 0x1234567890abcdefull;
  m.seconds = 20.5;
  m.text = "connection closed";
  std::string buffer = encode(m) + encode(pong(9, 3));
  const std::string whole = buffer;
  // Byte by byte: nothing is decoded before a record is complete.
  std::string partial;
  std::vector<Message> got;
  for (char c : whole) {
    partial += c;
    REQUIRE(decode(&partial, &got).ok());
  }
  REQUIRE(got.size() == 2);
  CHECK(partial.empty());
  CHECK(got[0].type == MsgType::Verdict);
  CHECK(got[0].rank == 7);
  CHECK(got[0].kind == uint8_t(Err::Timeout));
  CHECK(got[0].token == m.token);
  CHECK(got[0].seconds == 20.5);
  CHECK(got[0].text == "connection closed");
  CHECK(got[1].type == MsgType::Pong);
  CHECK(got[1].rank == 3);

  std::string bad = whole;
  bad[4] = char(42);  // unknown type
  got.clear();
  CHECK(decode(&bad, &got).code() == Err::RemoteError);
  std::string huge = whole;
  const uint32_t len = 1u << 30;
  memcpy(&huge[0], &len, 4);
  CHECK(decode(&huge, &got).code() == Err::RemoteError);
  Message nan = m;
  nan.seconds = std::nan("");
  std::string nanText = encode(nan);
  CHECK(decode(&nanText, &got).code() == Err::RemoteError);
  Message longText = m;
  longText.text.assign(5000, 'x');
  std::string cut = encode(longText);
  got.clear();
  REQUIRE(decode(&cut, &got).ok());
  CHECK(got.at(0).text.size() == kMaxText);
}

TEST_CASE("monitor wire: exchange text round-trips and malformed text is rejected", "[monitor]") {
  RankInfo root;
  root.enabled = true;
  root.pid = 4242;
  root.host = "node7";
  root.port = 29600;
  root.token = 0xfeedull;
  root.addrs = {"10.0.0.1", "192.168.5.3"};
  RankInfo back;
  REQUIRE(unpackInfo(packInfo(root), 0, &back).ok());
  CHECK(back.enabled);
  CHECK(back.pid == 4242);
  CHECK(back.host == "node7");
  CHECK(back.port == 29600);
  CHECK(back.token == 0xfeedull);
  CHECK(back.addrs == root.addrs);
  RankInfo off;
  off.pid = 5;
  off.host = "n2";
  REQUIRE(unpackInfo(packInfo(off), 3, &back).ok());
  CHECK_FALSE(back.enabled);
  CHECK(back.host == "n2");
  for (const char* text : {"", "gcmon2 1 h 1 0 -", "gcmon1 1 h 70000 0 -", "gcmon1 1 h 5 0 10.0.0.300",
                           "gcmon1 x h 5 0 -", "gcmon1 off"}) {
    INFO(text);
    Status s = unpackInfo(text, 2, &back);
    CHECK(s.code() == Err::RemoteError);
    CHECK_THAT(s.message(), Catch::Contains("rank 2"));
  }
}

TEST_CASE("monitor root: a closed connection is decided at once, and only once", "[monitor]") {
  Scripted s(4);
  s.engine.onClosed(2);
  CHECK(s.decisions == 1);
  CHECK(s.rank == 2);
  CHECK(s.code == Err::RemoteError);
  CHECK(s.cause == "connection closed");
  s.engine.onClosed(3);
  s.engine.onSuspect(1, suspect(3));
  s.engine.tick(in(10));
  CHECK(s.decisions == 1);
  CHECK(s.rank == 2);
}

TEST_CASE("monitor root: a suspect that does not answer the probe is the culprit", "[monitor]") {
  Scripted s(4);
  s.engine.onSuspect(1, suspect(2));
  REQUIRE(s.pings.size() == 1);
  CHECK(s.pings[0].first == 2);
  s.engine.tick(in(kProbeS * 0.5));
  CHECK(s.decisions == 0);
  CHECK(s.engine.nextDeadline() <= in(kProbeS));
  s.engine.tick(in(kProbeS + 0.01));
  REQUIRE(s.decisions == 1);
  CHECK(s.rank == 2);
  CHECK(s.code == Err::Timeout);
  CHECK_THAT(s.cause, Catch::Contains("no progress for 20.0 s") &&
                          Catch::Contains("stopped or hung") && Catch::Contains("reported by rank 1"));
}

TEST_CASE("monitor root: probes follow waits from victim to culprit", "[monitor]") {
  Scripted s(5);
  s.engine.onSuspect(1, suspect(3));  // rank 1 waited for 3 ...
  s.engine.onPong(3, pong(s.lastNonce(3), 4));  // ... which waits for 4 ...
  s.engine.onPong(4, pong(s.lastNonce(4), 2));  // ... which waits for 2 (stopped)
  s.engine.onPong(2, pong(s.lastNonce(2) + 99, -1));  // a stale nonce is not an answer
  CHECK(s.decisions == 0);
  s.engine.tick(in(kProbeS + 0.01));
  REQUIRE(s.decisions == 1);
  CHECK(s.rank == 2);
  CHECK_THAT(s.cause, Catch::Contains("reported by rank 1, which waited for rank 3, which waits "
                                      "for rank 4, which waits for rank 2"));
}

TEST_CASE("monitor root: a live suspect outside any collective is named after rechecks", "[monitor]") {
  Scripted s(3);
  s.engine.onSuspect(2, suspect(1));
  for (int i = 0; i < kIdleAnswers; ++i) {
    REQUIRE(s.decisions == 0);
    s.engine.onPong(1, pong(s.lastNonce(1), -1));
    s.engine.tick(in(kRecheckS + 0.01));
  }
  REQUIRE(s.decisions == 1);
  CHECK(s.rank == 1);
  CHECK_THAT(s.cause, Catch::Contains("not waiting in a gradcomp collective"));
  CHECK(s.pings.size() == size_t(kIdleAnswers));
}

TEST_CASE("monitor root: a suspect that starts waiting during rechecks is followed", "[monitor]") {
  Scripted s(4);
  s.rootWaits = -1;
  s.engine.onSuspect(3, suspect(0));  // the root itself, outside a collective for now
  s.rootWaits = 2;                     // then waiting for rank 2
  s.engine.tick(in(kRecheckS + 0.01));
  s.engine.tick(in(kProbeS + kRecheckS + 0.02));
  REQUIRE(s.decisions == 1);
  CHECK(s.rank == 2);
}

TEST_CASE("monitor root: waits in a cycle decide nothing", "[monitor]") {
  Scripted s(4);
  s.engine.onSuspect(1, suspect(3));
  s.engine.onPong(3, pong(s.lastNonce(3), 1));
  s.engine.tick(in(10));
  CHECK(s.decisions == 0);
  CHECK(s.engine.nextDeadline() == Clock::time_point::max());
}

TEST_CASE("monitor root: own failures, departed ranks and missing connections", "[monitor]") {
  {
    Scripted s(3);
    Message self = suspect(2, SuspectKind::Self);
    self.token = uint64_t(Err::Timeout);
    self.text = "Timeout: CUDA executor: the stream did not reach call 4";
    s.engine.onSuspect(2, self);
    CHECK(s.rank == 2);
    CHECK(s.code == Err::Timeout);
    CHECK(s.cause == self.text);
  }
  {
    Scripted s(3);
    s.engine.onLeft(2);
    CHECK(s.decisions == 0);  // leaving in order is no failure ...
    s.engine.onSuspect(1, suspect(2));
    CHECK(s.rank == 2);       // ... until someone still waits for it
    CHECK_THAT(s.cause, Catch::Contains("destroyed its communicator"));
  }
  {
    Scripted s(3);
    s.connected[2] = false;
    s.engine.onSuspect(1, suspect(2, SuspectKind::Link));
    CHECK(s.rank == 2);
    CHECK_THAT(s.cause, Catch::Contains("link from rank 1 failed") &&
                            Catch::Contains("no failure monitor connection"));
  }
  {
    Scripted s(3);  // nonsense is ignored
    s.engine.onSuspect(1, suspect(1));
    s.engine.onSuspect(1, suspect(9));
    s.engine.onSuspect(-1, suspect(2));
    s.engine.onPong(2, pong(1, 0));
    CHECK(s.decisions == 0);
    CHECK(s.pings.empty());
  }
}

namespace {

// `n` monitors of one communicator in this process, over loopback TCP.
struct Ring {
  std::vector<std::shared_ptr<FailureMonitor>> m;
  explicit Ring(int n, double timeoutS = 5) {
    for (int r = 0; r < n; ++r) m.push_back(FailureMonitor::prepare(r, n, timeoutS));
    std::vector<std::string> blobs;
    for (auto& x : m) blobs.push_back(x->blob());
    const std::vector<bool> sameHost(size_t(n), true);
    for (auto& x : m) x->start(blobs, sameHost);
    for (auto& x : m) REQUIRE(x->enabled());
  }
};

// Polls until pred holds or `seconds` pass; returns how long it took.
template <class Pred>
double waitFor(Pred pred, double seconds) {
  const auto t0 = Clock::now();
  while (!pred() && since(t0) < seconds) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  return since(t0);
}

}  // namespace

TEST_CASE("monitor: a crashed rank is reported to every rank at once", "[monitor]") {
  for (int victim : {2, 0}) {
    INFO("victim " << victim);
    Ring ring(4);
    ring.m[victim]->crashForTest();
    for (int r = 0; r < 4; ++r) {
      if (r == victim) continue;
      const double took = waitFor([&] { return ring.m[r]->failed(); }, 5);
      CHECK(took < 2.0);
      const Status v = ring.m[r]->verdict();
      CHECK(v.code() == Err::RemoteError);
      CHECK_THAT(v.message(), Catch::StartsWith("rank " + std::to_string(victim) + " (") &&
                                  Catch::Contains(", pid " + std::to_string(getpid()) + ")") &&
                                  Catch::EndsWith("failed: connection closed"));
      CHECK(ring.m[r]->failedRank() == victim);
    }
  }
}

TEST_CASE("monitor: with 64 ranks a crash reaches all at once and a stop is agreed on", "[monitor]") {
  constexpr int kRanks = 64;
  Ring ring(kRanks);
  const auto t0 = Clock::now();
  ring.m[37]->crashForTest();
  for (int r = 0; r < kRanks; ++r) {
    if (r == 37) continue;
    REQUIRE(waitFor([&] { return ring.m[r]->failed(); }, 5) < 2.0);
    CHECK(ring.m[r]->failedRank() == 37);
  }
  CHECK(since(t0) < 2.0);

  Ring second(kRanks);
  second.m[50]->freezeForTest();
  // A chain of victims: rank r waits for rank r + 1, up to 49, which waits for 50.
  for (int r = 1; r < 50; ++r) second.m[r]->beginWait(r + 1);
  const Status own(Err::Timeout, "no progress from rank 2");
  const Status agreed = second.m[1]->settle(2, SuspectKind::Silent, 5.0, own);
  CHECK_THAT(agreed.message(), Catch::StartsWith("rank 50 (") && Catch::Contains("stopped or hung"));
  for (int r = 0; r < kRanks; ++r)
    if (r != 50) CHECK(waitFor([&] { return second.m[r]->failedRank() == 50; }, 2) < 1.0);
}

TEST_CASE("monitor: a stopped rank is named by every rank after a suspicion", "[monitor]") {
  Ring ring(4);
  ring.m[2]->freezeForTest();
  ring.m[3]->beginWait(2);  // rank 1 waits for 3, which waits for 2
  const auto t0 = Clock::now();
  const Status own(Err::Timeout, "no progress from rank 3 for 5.0 s");
  const Status agreed = ring.m[1]->settle(3, SuspectKind::Silent, 5.0, own);
  const double took = since(t0);
  CHECK(took >= kProbeS * 0.9);
  CHECK(took < kAgreementS + 0.2);
  CHECK(agreed.code() == Err::Timeout);
  CHECK_THAT(agreed.message(), Catch::StartsWith("rank 2 (") && Catch::Contains("stopped or hung") &&
                                   Catch::Contains("reported by rank 1, which waited for rank 3"));
  for (int r : {0, 1, 3}) {
    CHECK(waitFor([&] { return ring.m[r]->failed(); }, 2) < 1.0);
    CHECK(ring.m[r]->verdict().message() == agreed.message());
  }
  // A later suspicion gets the same verdict at once.
  CHECK(ring.m[3]->settle(2, SuspectKind::Silent, 5.0, own).message() == agreed.message());
}

// A rank with waits in two threads (WAGMA's stream on a stopped peer, its
// collective on another that answered): the answer to a probe names the
// oldest wait in progress, so the chain reaches the stopped rank instead of
// blaming the rank whose collective's wait just ended (faults_full, wagma x
// sigstop, session 10).
TEST_CASE("monitor: one thread's wait ending does not hide another's", "[monitor]") {
  Ring ring(4);
  FailureMonitor& two = *ring.m[2];
  CHECK(two.waitingOn() == -1);
  const uint64_t stream = two.beginWait(3);
  const uint64_t collective = two.beginWait(1);
  CHECK(two.waitingOn() == 3);
  two.endWait(collective);
  two.endWait(collective + 100);  // unknown: ignored
  CHECK(two.waitingOn() == 3);
  ring.m[3]->freezeForTest();
  const Status own(Err::Timeout, "no progress from rank 2 for 5.0 s");
  const Status agreed = ring.m[1]->settle(2, SuspectKind::Silent, 5.0, own);
  CHECK_THAT(agreed.message(), Catch::StartsWith("rank 3 (") && Catch::Contains("stopped or hung") &&
                                   Catch::Contains("reported by rank 1, which waited for rank 2"));
  two.endWait(stream);
  CHECK(two.waitingOn() == -1);
  const uint64_t later = two.beginWait(0);
  CHECK(two.waitingOn() == 0);
  two.endWait(later);
}

TEST_CASE("monitor: orderly leaving is no failure; a rank's own failure is", "[monitor]") {
  Ring ring(3);
  ring.m[2].reset();  // destroyed: says Bye
  ring.m[0].reset();  // the root too
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK_FALSE(ring.m[1]->failed());
  CHECK(ring.m[1]->verdict().message() == "");
  // With the root gone there is no one to agree with: the own error, at once.
  const Status own(Err::Timeout, "mine");
  const auto t0 = Clock::now();
  CHECK(ring.m[1]->settle(2, SuspectKind::Silent, 1, own).message() == "mine");
  CHECK(since(t0) < 0.5);

  Ring second(3);
  second.m[1]->reportSelf(Status(Err::Timeout, "CUDA executor: the stream did not reach call 3"));
  CHECK(waitFor([&] { return second.m[2]->failed(); }, 5) < 2.0);
  CHECK_THAT(second.m[2]->verdict().message(),
             Catch::StartsWith("rank 1 (") && Catch::EndsWith("failed: Timeout: CUDA executor: the "
                                                              "stream did not reach call 3"));
  CHECK(second.m[0]->verdict().code() == Err::Timeout);
}

namespace {

// A root that accepts and acknowledges the Hello, then answers nothing but
// (with `ackSuspicions`) acknowledgements: a root alive but undecided, or a
// stopped rank 0 when it stays silent.
struct SilentRoot {
  int listenFd = -1;
  RankInfo info;
  std::atomic<bool> done{false};
  std::thread thread;
  SilentRoot(bool ackSuspicions) {
    std::string why;
    listenFd = listenAnyPort(&info.port, &why);
    REQUIRE(listenFd >= 0);
    info.enabled = true;
    info.pid = 1;
    info.host = "root-host";
    info.token = 77;
    thread = std::thread([this, ackSuspicions] {
      pollfd p{listenFd, POLLIN, 0};
      poll(&p, 1, 5000);
      const int fd = acceptOne(listenFd);
      std::string buf;
      bool helloed = false;
      for (int i = 0; i < 800 && !done; ++i) {  // 4 s at most
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        std::vector<Message> got;
        readAvailable(fd, &buf);
        (void)decode(&buf, &got);
        for (const Message& m : got) {
          Message reply;
          reply.token = m.token;
          reply.type = m.type == MsgType::Hello ? MsgType::HelloAck : MsgType::Ack;
          if (m.type == MsgType::Hello && m.token == 77) helloed = true;
          if ((m.type == MsgType::Hello && helloed) || (m.type == MsgType::Suspect && ackSuspicions))
            sendAll(fd, encode(reply), 1);
        }
      }
      closeSocket(fd);
    });
  }
  ~SilentRoot() {
    done = true;
    thread.join();
    closeSocket(listenFd);
  }
};

}  // namespace

TEST_CASE("monitor: a rank's own error becomes every rank's verdict, the first one wins",
          "[monitor]") {
  for (int failing : {2, 0}) {
    INFO("failing rank " << failing);
    Ring ring(3, 20);
    const auto t0 = Clock::now();
    const Status got =
        ring.m[failing]->agreeOnOwnFailure(Status(Err::InvalidArgument, "region of 7 elements"));
    CHECK(since(t0) < 1.0);  // the root answers at once
    CHECK(got.code() == Err::InvalidArgument);
    CHECK_THAT(got.message(), Catch::StartsWith("rank " + std::to_string(failing) + " (") &&
                                  Catch::EndsWith("failed: InvalidArgument: region of 7 elements"));
    for (int r = 0; r < 3; ++r) {
      CHECK(waitFor([&] { return ring.m[r]->failed(); }, 5) < 2.0);
      CHECK(ring.m[r]->verdict().message() == got.message());
      CHECK(ring.m[r]->failedRank() == failing);
    }
    // A later own failure, or a suspicion, gets the first verdict at once.
    const int other = (failing + 1) % 3;
    CHECK(ring.m[other]->agreeOnOwnFailure(Status(Err::RemoteError, "late")).message() == got.message());
    CHECK(ring.m[other]->settle(failing, SuspectKind::Silent, 20, Status(Err::Timeout, "own"))
              .message() == got.message());
  }
  // The verdict wins over a root that left after deciding (its Bye follows the verdict).
  Ring ring(3, 20);
  (void)ring.m[1]->agreeOnOwnFailure(Status(Err::RemoteError, "bad header"));
  REQUIRE(waitFor([&] { return ring.m[2]->failed(); }, 5) < 2.0);
  ring.m[0].reset();  // the root says Bye
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK_THAT(ring.m[2]->agreeOnOwnFailure(Status(Err::RemoteError, "mine")).message(),
             Catch::StartsWith("rank 1 (") && Catch::EndsWith("failed: RemoteError: bad header"));
  // Without a monitor the own error comes back unchanged.
  auto off = FailureMonitor::prepare(0, 3, 20, false);
  CHECK(off->agreeOnOwnFailure(Status(Err::RemoteError, "alone")).message() == "alone");
}

TEST_CASE("monitor: a client whose root never decides reports its own suspicion in time", "[monitor]") {
  SilentRoot root(true);
  auto client = FailureMonitor::prepare(1, 2, 5);
  client->start({packInfo(root.info), client->blob()}, {true, true});
  REQUIRE(client->enabled());
  const auto t0 = Clock::now();
  const Status s = client->settle(0, SuspectKind::Silent, 5, Status(Err::Timeout, "no progress from rank 0"));
  const double took = since(t0);
  CHECK(took >= kAgreementS * 0.9);
  CHECK(took < kAgreementS + 0.5);
  CHECK(s.code() == Err::Timeout);
  CHECK(s.message() == "no progress from rank 0; no verdict from the failure monitor within 1.5 s");
  client.reset();
}

TEST_CASE("monitor: a client whose root does not even acknowledge names rank 0", "[monitor]") {
  SilentRoot root(false);  // a stopped rank 0
  auto client = FailureMonitor::prepare(2, 3, 5);
  client->start({packInfo(root.info), "gcmon1 off 5 h", client->blob()}, {true, true, true});
  REQUIRE(client->enabled());
  const auto t0 = Clock::now();
  const Status s = client->settle(1, SuspectKind::Silent, 5, Status(Err::Timeout, "no progress from rank 1"));
  CHECK(since(t0) < kAgreementS + 0.5);
  CHECK(s.code() == Err::Timeout);
  CHECK_THAT(s.message(), Catch::StartsWith("rank 0 (root-host, pid 1) failed: its failure monitor") &&
                              Catch::Contains("stopped or hung") &&
                              Catch::EndsWith("(rank 2's own finding: no progress from rank 1)"));
  client.reset();
}

TEST_CASE("monitor: strangers on the root's port are dropped, GRADCOMP_MONITOR=0 turns it off",
          "[monitor]") {
  Ring ring(2);
  RankInfo root;
  REQUIRE(unpackInfo(ring.m[0]->blob(), 0, &root).ok());
  std::string why;
  const int fd = connectTo("127.0.0.1", root.port, 2, &why);
  REQUIRE(fd >= 0);
  Message hello;
  hello.type = MsgType::Hello;
  hello.rank = 1;
  hello.token = root.token + 1;  // another job's token
  REQUIRE(sendAll(fd, encode(hello), 1));
  std::string buf;
  CHECK(waitFor([&] { return !readAvailable(fd, &buf); }, 3) < 2.0);  // closed by the root
  CHECK(buf.empty());
  closeSocket(fd);
  CHECK_FALSE(ring.m[0]->failed());
  CHECK_FALSE(ring.m[1]->failed());

  auto off = FailureMonitor::prepare(0, 2, 5, /*GRADCOMP_MONITOR*/ false);
  CHECK_FALSE(off->enabled());
  CHECK_THAT(off->blob(), Catch::StartsWith("gcmon1 off"));
  CHECK(off->settle(1, SuspectKind::Silent, 1, Status(Err::Timeout, "own")).message() == "own");
}
