#include "transport/failure_monitor.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "common/log.h"
#include "common/param.h"
#include "transport/monitor_root.h"
#include "transport/monitor_socket.h"
#include "transport/ucx_context.h"

namespace gradcomp::transport {

using monitor::Message;
using monitor::MsgType;
using monitor::SuspectKind;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kIdlePollMs = 200;   // the thread's longest sleep (stop requests wake it at once)
constexpr double kSendS = 0.5;     // bound on one record's write
constexpr double kConnectMaxS = 5; // bound on reaching the root at setup

std::string hostName() {
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0 || !host[0]) return "?";
  return host;
}

Message make(MsgType type, int rank = -1, uint64_t token = 0) {
  Message m;
  m.type = type;
  m.rank = rank;
  m.token = token;
  return m;
}

}  // namespace

FailureMonitor::FailureMonitor(int rank, int size, double timeoutS)
    : rank_(rank), size_(size), timeoutS_(timeoutS), ownerPid_(getpid()) {}

std::shared_ptr<FailureMonitor> FailureMonitor::prepare(int rank, int size, double timeoutS) {
  bool wanted = true;
  (void)param::getBool(param::Id::MONITOR, &wanted);
  return prepare(rank, size, timeoutS, wanted);
}

std::shared_ptr<FailureMonitor> FailureMonitor::prepare(int rank, int size, double timeoutS,
                                                        bool wanted) {
  std::shared_ptr<FailureMonitor> m(new FailureMonitor(rank, size, timeoutS));
  m->mine_.pid = getpid();
  m->mine_.host = hostName();
  if (size > 1 && wanted) m->wakeFd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (size > 1 && wanted && m->wakeFd_ >= 0 && rank == 0) {
    std::string why;
    m->listenFd_ = monitor::listenAnyPort(&m->mine_.port, &why);
    if (m->listenFd_ < 0) {
      GC_INFO(TRANSPORT, "failure monitor off: rank 0 cannot listen (%s); dead peers are found "
              "by GRADCOMP_TIMEOUT_S only", why.c_str());
    } else {
      m->mine_.enabled = true;
      m->mine_.addrs = monitor::localAddresses();
      m->mine_.token = std::random_device{}() * 0x100000001ull ^ uint64_t(getpid()) << 20;
      m->enabled_ = true;
      m->thread_ = std::make_unique<std::thread>([p = m.get()] { p->rootLoop(); });
    }
  } else if (size > 1 && wanted && m->wakeFd_ >= 0) {
    m->mine_.enabled = true;  // a client: enabled once it reaches the root
  }
  m->blob_ = monitor::packInfo(m->mine_);
  return m;
}

void FailureMonitor::start(const std::vector<std::string>& blobs, const std::vector<bool>& sameHost) {
  std::vector<monitor::RankInfo> table(static_cast<size_t>(size_));
  for (int r = 0; r < size_ && r < int(blobs.size()); ++r) {
    Status s = monitor::unpackInfo(blobs[size_t(r)], r, &table[size_t(r)]);
    if (!s.ok()) GC_INFO(TRANSPORT, "%s", s.message().c_str());
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    table_ = table;
  }
  if (rank_ == 0 || !mine_.enabled || size_ < 2) return;
  if (!connectToRoot(sameHost)) return;
  enabled_ = true;
  thread_ = std::make_unique<std::thread>([this] { clientLoop(); });
}

bool FailureMonitor::connectToRoot(const std::vector<bool>& sameHost) {
  const monitor::RankInfo& root = table_[0];
  if (!root.enabled) return false;  // rank 0 runs without a monitor: so do we
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(std::min(timeoutS_, kConnectMaxS)));
  std::string errors;
  for (const std::string& addr :
       monitor::connectOrder(root.addrs, !sameHost.empty() && sameHost[0])) {
    const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    if (left <= 0) break;
    std::string why;
    int fd = monitor::connectTo(addr, root.port, std::min(left, 2.0), &why);
    if (fd < 0) {
      errors += (errors.empty() ? "" : "; ") + why;
      continue;
    }
    // The root's answer proves this is our job's root, not another listener.
    bool acked = monitor::sendAll(fd, monitor::encode(make(MsgType::Hello, rank_, root.token)), kSendS);
    std::string in;
    std::vector<Message> got;
    while (acked && got.empty() && Clock::now() < deadline) {
      pollfd p{fd, POLLIN, 0};
      poll(&p, 1, 50);
      if (!monitor::readAvailable(fd, &in) || !monitor::decode(&in, &got).ok()) break;
    }
    acked = acked && !got.empty() && got[0].type == MsgType::HelloAck && got[0].token == root.token;
    if (acked) {
      rootFd_ = fd;
      return true;
    }
    errors += (errors.empty() ? "" : "; ") + addr + ": no answer from rank 0's monitor";
    monitor::closeSocket(fd);
  }
  GC_INFO(TRANSPORT, "failure monitor off on rank %d: cannot reach rank 0 (%s); dead peers are "
          "found by GRADCOMP_TIMEOUT_S only", rank_, errors.c_str());
  return false;
}

FailureMonitor::~FailureMonitor() {
  if (getpid() != ownerPid_) {  // a forked child: the thread and sockets are the parent's
    if (thread_) (void)thread_.release();
    return;
  }
  stopThread();
  if (rootFd_ >= 0) {
    std::lock_guard<std::mutex> lock(sendMu_);
    (void)monitor::sendAll(rootFd_, monitor::encode(make(MsgType::Bye, rank_)), kSendS);
    monitor::closeSocket(rootFd_);
    rootFd_ = -1;
  }
  monitor::closeSocket(listenFd_);
  if (wakeFd_ >= 0) close(wakeFd_);
}

void FailureMonitor::stopThread() {
  stop_ = true;
  wake();
  if (thread_ && thread_->joinable()) thread_->join();
  thread_.reset();
}

void FailureMonitor::crashForTest() {
  frozen_ = true;  // the root's thread leaves without its Byes
  stopThread();
  {
    std::lock_guard<std::mutex> lock(sendMu_);
    monitor::closeSocket(rootFd_);  // no Bye: the root sees a crash
    rootFd_ = -1;
  }
  monitor::closeSocket(listenFd_);
  listenFd_ = -1;
}

void FailureMonitor::wake() {
  if (wakeFd_ < 0) return;
  uint64_t one = 1;
  (void)!write(wakeFd_, &one, sizeof one);
}

Status FailureMonitor::verdict() const {
  if (!failed()) return Status::Ok();
  std::lock_guard<std::mutex> lock(mu_);
  return verdict_;
}

int FailureMonitor::failedRank() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failedRank_;
}

std::string FailureMonitor::who(int rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string text = "rank " + std::to_string(rank);
  if (rank >= 0 && size_t(rank) < table_.size() && table_[size_t(rank)].pid > 0)
    text += " (" + table_[size_t(rank)].host + ", pid " + std::to_string(table_[size_t(rank)].pid) + ")";
  return text;
}

void FailureMonitor::setVerdict(int rank, Err code, const std::string& cause) {
  const std::string name = who(rank);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_) return;
    failedRank_ = rank;
    verdict_ = Status(code, name + " failed: " + cause);
    failed_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
  ucx::quietLogsAfterFailure();
  GC_INFO(TRANSPORT, "failure monitor (rank %d): %s failed: %s", rank_, name.c_str(), cause.c_str());
}

void FailureMonitor::send(const Message& m) {
  std::lock_guard<std::mutex> lock(sendMu_);
  if (rootFd_ >= 0) (void)monitor::sendAll(rootFd_, monitor::encode(m), kSendS);
}

Status FailureMonitor::settle(int peer, monitor::SuspectKind kind, double silenceS, const Status& own) {
  if (failed()) return verdict();  // first: a root that decided and then left
  if (!enabled_ || rootGone_) return own;
  const uint64_t nonce = ++suspicions_;
  Message m = make(MsgType::Suspect, peer, nonce);
  m.kind = uint8_t(kind);
  m.seconds = silenceS;
  m.text = own.message();
  if (rank_ == 0) {
    std::lock_guard<std::mutex> lock(mu_);
    local_.push_back(m);
  } else {
    send(m);
  }
  wake();
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::duration<double>(kAgreementS), [&] { return failed_.load(); });
    if (failed_) return verdict_;
  }
  char tail[200];
  if (rank_ != 0 && acked_.load() < nonce) {
    // The root's monitor thread answers at once unless its process is
    // stopped or hung: every client that suspects anything concludes this.
    // It becomes this rank's verdict, so that every later wait agrees.
    snprintf(tail, sizeof tail,
             "its failure monitor (which decides failures) did not answer within %.1f s: stopped "
             "or hung (rank %d's own finding: ", kAgreementS, rank_);
    setVerdict(0, Err::Timeout, tail + own.message() + ")");
    return verdict();
  }
  snprintf(tail, sizeof tail, "; no verdict from the failure monitor within %.1f s", kAgreementS);
  return Status(own.code(), own.message() + tail);
}

void FailureMonitor::reportSelf(const Status& why) {
  if (!enabled_ || why.ok() || failed()) return;
  Message m = make(MsgType::Suspect, rank_, uint64_t(why.code()));
  m.kind = uint8_t(monitor::SuspectKind::Self);
  m.text = why.toString();
  if (rank_ == 0) {
    std::lock_guard<std::mutex> lock(mu_);
    local_.push_back(m);
  } else {
    send(m);
  }
  wake();
}

Status FailureMonitor::agreeOnOwnFailure(const Status& own) {
  if (own.ok()) return own;
  if (failed()) return verdict();  // first: a root that decided and then left
  if (!enabled_ || rootGone_) return own;
  reportSelf(own);
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::duration<double>(kAgreementS), [&] { return failed_.load(); });
    if (failed_) return verdict_;
  }
  char tail[100];
  snprintf(tail, sizeof tail, "; no verdict from the failure monitor within %.1f s", kAgreementS);
  return Status(own.code(), own.message() + tail);
}

void FailureMonitor::clientLoop() {
  std::string in;
  bool rootLeft = false;
  while (!stop_) {
    pollfd fds[2] = {{wakeFd_, POLLIN, 0}, {rootFd_, POLLIN, 0}};
    const int n = rootFd_ >= 0 ? 2 : 1;
    if (poll(fds, nfds_t(n), kIdlePollMs) <= 0) continue;
    if (fds[0].revents) {
      uint64_t v;
      (void)!read(wakeFd_, &v, sizeof v);
    }
    if (n < 2 || !fds[1].revents) continue;
    std::vector<Message> got;
    bool open = monitor::readAvailable(rootFd_, &in);  // records before a close count too
    open = monitor::decode(&in, &got).ok() && open;
    for (const Message& m : got) {
      if (m.type == MsgType::Verdict) {
        const Err code = m.kind > 0 && m.kind <= uint8_t(Err::Internal) ? Err(m.kind) : Err::RemoteError;
        setVerdict(m.rank, code, m.text);
      } else if (m.type == MsgType::Ping && !frozen_) {
        Message pong = make(MsgType::Pong, waitingOn(), m.token);
        send(pong);
      } else if (m.type == MsgType::Ack) {
        acked_.store(std::max(acked_.load(), m.token));
      } else if (m.type == MsgType::Bye) {
        rootLeft = true;
      }
    }
    if (open && !rootLeft) continue;
    if (!rootLeft && !stop_) setVerdict(0, Err::RemoteError, "connection closed");
    rootGone_ = true;
    std::lock_guard<std::mutex> lock(sendMu_);
    monitor::closeSocket(rootFd_);
    rootFd_ = -1;
  }
}

uint64_t FailureMonitor::beginWait(int peer) {
  std::lock_guard<std::mutex> lock(waitsMu_);
  waits_.emplace_back(++nextWait_, peer);
  return nextWait_;
}

void FailureMonitor::endWait(uint64_t token) {
  std::lock_guard<std::mutex> lock(waitsMu_);
  for (auto it = waits_.begin(); it != waits_.end(); ++it)
    if (it->first == token) {
      waits_.erase(it);
      return;
    }
}

int FailureMonitor::waitingOn() const {
  std::lock_guard<std::mutex> lock(waitsMu_);
  return waits_.empty() ? -1 : waits_.front().second;
}

void FailureMonitor::rootLoop() {
  struct Conn {
    int fd;
    int rank = -1;  // known after its Hello
    std::string in;
  };
  std::vector<Conn> conns;
  std::vector<int> fdOf(size_t(size_), -1);
  auto toRank = [&](int r, const Message& m) {
    return fdOf[size_t(r)] >= 0 && monitor::sendAll(fdOf[size_t(r)], monitor::encode(m), kSendS);
  };
  monitor::RootEngine engine(size_, {
      [&](int r, uint64_t nonce) {
        if (fdOf[size_t(r)] < 0) return false;
        (void)toRank(r, make(MsgType::Ping, -1, nonce));  // a failed write shows up as a close
        return true;
      },
      [&](int r, Err code, const std::string& cause) {
        setVerdict(r, code, cause);
        Message v = make(MsgType::Verdict, r);
        v.kind = uint8_t(code);
        v.text = cause;
        for (int p = 1; p < size_; ++p) (void)toRank(p, v);
      },
      [&] { return waitingOn(); }});
  auto drop = [&](Conn& c, bool failure) {
    if (c.rank >= 0) {
      fdOf[size_t(c.rank)] = -1;
      if (failure) engine.onClosed(c.rank);
      else engine.onLeft(c.rank);
    }
    monitor::closeSocket(c.fd);
    c.fd = -1;
  };
  while (!stop_) {
    std::vector<pollfd> fds = {{wakeFd_, POLLIN, 0}, {listenFd_, POLLIN, 0}};
    for (const Conn& c : conns) fds.push_back({c.fd, POLLIN, 0});
    int waitMs = kIdlePollMs;
    const auto next = engine.nextDeadline();
    if (next != Clock::time_point::max())
      waitMs = int(std::max<int64_t>(0, std::min<int64_t>(waitMs, std::chrono::duration_cast<
                   std::chrono::milliseconds>(next - Clock::now()).count() + 1)));
    poll(fds.data(), nfds_t(fds.size()), waitMs);
    if (fds[0].revents) {
      uint64_t v;
      (void)!read(wakeFd_, &v, sizeof v);
    }
    std::deque<Message> local;
    {
      std::lock_guard<std::mutex> lock(mu_);
      local.swap(local_);
    }
    for (const Message& m : local) engine.onSuspect(0, m);
    for (size_t i = 0; i < conns.size(); ++i) {
      Conn& c = conns[i];
      if (!fds[2 + i].revents) continue;
      std::vector<Message> got;
      bool open = monitor::readAvailable(c.fd, &c.in);
      open = monitor::decode(&c.in, &got).ok() && open;
      bool stray = false;
      for (const Message& m : got) {
        if (c.rank < 0) {  // the first record must be a Hello with our token
          stray = m.type != MsgType::Hello || m.token != mine_.token || m.rank <= 0 ||
                  m.rank >= size_ || fdOf[size_t(m.rank)] >= 0;
          if (stray) break;
          c.rank = m.rank;
          fdOf[size_t(c.rank)] = c.fd;
          (void)toRank(c.rank, make(MsgType::HelloAck, -1, mine_.token));
        } else if (m.type == MsgType::Bye) {
          drop(c, false);
          break;
        } else if (m.type == MsgType::Suspect) {
          if (SuspectKind(m.kind) != SuspectKind::Self) (void)toRank(c.rank, make(MsgType::Ack, -1, m.token));
          engine.onSuspect(c.rank, m);
        } else if (m.type == MsgType::Pong) {
          engine.onPong(c.rank, m);
        }
      }
      // A closed connection of a rank that said no Bye: its process is gone.
      // Before its Hello it is a stray connection, dropped quietly.
      if (c.fd >= 0 && (!open || stray)) drop(c, c.rank >= 0);
    }
    if (fds[1].revents)
      for (int fd; (fd = monitor::acceptOne(listenFd_)) >= 0;) conns.push_back(Conn{fd, -1, {}});
    conns.erase(std::remove_if(conns.begin(), conns.end(), [](const Conn& c) { return c.fd < 0; }),
                conns.end());
    engine.tick(Clock::now());
  }
  for (Conn& c : conns) {
    if (c.rank >= 0 && !frozen_) (void)monitor::sendAll(c.fd, monitor::encode(make(MsgType::Bye)), kSendS);
    monitor::closeSocket(c.fd);
  }
}

}  // namespace gradcomp::transport
