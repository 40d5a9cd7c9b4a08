#include "transport/monitor_socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <set>

namespace gradcomp::transport::monitor {
namespace {

using Clock = std::chrono::steady_clock;

// Every socket made here, so that a forked child can close its copies.
struct Registry {
  std::mutex mu;
  std::set<int> fds;
};
Registry& registry() {
  static Registry* r = new Registry();  // leaked: sockets may close during exit
  return *r;
}

void closeAllInChild() {
  // The child is single-threaded here; the registry's mutex may have been
  // held by another thread of the parent at fork time, so it is not taken.
  for (int fd : registry().fds) close(fd);
  registry().fds.clear();
}

void track(int fd) {
  static std::once_flag once;
  std::call_once(once, [] { pthread_atfork(nullptr, nullptr, closeAllInChild); });
  std::lock_guard<std::mutex> lock(registry().mu);
  registry().fds.insert(fd);
}

int newSocket() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  track(fd);
  return fd;
}

int msLeft(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() < 0 ? 0 : int(left.count()) + 1;
}

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

struct Net {
  uint32_t addr, mask;  // host byte order
};
std::vector<Net> localNets() {
  std::vector<Net> nets;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return nets;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !i->ifa_netmask) continue;
    if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
    nets.push_back({ntohl(reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr),
                    ntohl(reinterpret_cast<sockaddr_in*>(i->ifa_netmask)->sin_addr.s_addr)});
  }
  freeifaddrs(list);
  return nets;
}

}  // namespace

int listenAnyPort(int* port, std::string* why) {
  int fd = newSocket();
  if (fd < 0) {
    *why = std::string("socket: ") + strerror(errno);
    return -1;
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(fd, SOMAXCONN) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    *why = std::string("bind/listen: ") + strerror(errno);
    closeSocket(fd);
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

std::vector<std::string> localAddresses() {
  std::vector<std::string> out;
  for (const Net& n : localNets()) {
    in_addr a{htonl(n.addr)};
    char text[INET_ADDRSTRLEN];
    if (inet_ntop(AF_INET, &a, text, sizeof text)) out.push_back(text);
  }
  return out;
}

std::vector<std::string> connectOrder(const std::vector<std::string>& rootAddrs, bool sameHost) {
  std::vector<std::string> near, far;
  const std::vector<Net> nets = localNets();
  for (const std::string& a : rootAddrs) {
    in_addr v{};
    if (inet_pton(AF_INET, a.c_str(), &v) != 1) continue;
    const uint32_t h = ntohl(v.s_addr);
    bool onSubnet = false;
    for (const Net& n : nets) onSubnet = onSubnet || (h & n.mask) == (n.addr & n.mask);
    (onSubnet ? near : far).push_back(a);
  }
  std::vector<std::string> order;
  if (sameHost) order.push_back("127.0.0.1");
  order.insert(order.end(), near.begin(), near.end());
  order.insert(order.end(), far.begin(), far.end());
  return order;
}

int connectTo(const std::string& addrText, int port, double timeoutS, std::string* why) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  if (inet_pton(AF_INET, addrText.c_str(), &addr.sin_addr) != 1) {
    *why = "bad address " + addrText;
    return -1;
  }
  int fd = newSocket();
  if (fd < 0) {
    *why = std::string("socket: ") + strerror(errno);
    return -1;
  }
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 && errno != EINPROGRESS) {
    *why = addrText + ":" + std::to_string(port) + ": " + strerror(errno);
    closeSocket(fd);
    return -1;
  }
  pollfd p{fd, POLLOUT, 0};
  const auto deadline = after(timeoutS);
  int rc = 0;
  while ((rc = poll(&p, 1, msLeft(deadline))) < 0 && errno == EINTR) {
  }
  int err = 0;
  socklen_t len = sizeof err;
  if (rc <= 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
    *why = addrText + ":" + std::to_string(port) + ": " +
           (rc == 0 ? std::string("no answer within the connect timeout") : strerror(err ? err : errno));
    closeSocket(fd);
    return -1;
  }
  return fd;
}

int acceptOne(int listenFd) {
  int fd = accept4(listenFd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) return -1;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  track(fd);
  return fd;
}

bool sendAll(int fd, const std::string& data, double timeoutS) {
  const auto deadline = after(timeoutS);
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += size_t(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, msLeft(deadline)) <= 0 && Clock::now() >= deadline) return false;
  }
  return true;
}

bool readAvailable(int fd, std::string* buffer) {
  char chunk[4096];
  while (true) {
    ssize_t n = recv(fd, chunk, sizeof chunk, 0);
    if (n > 0) {
      buffer->append(chunk, size_t(n));
      if (buffer->size() > (1u << 20)) return false;  // a peer flooding us: drop it
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    return false;  // 0: end of stream; < 0: reset or another error
  }
}

void closeSocket(int fd) {
  if (fd < 0) return;
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    registry().fds.erase(fd);
  }
  close(fd);
}

}  // namespace gradcomp::transport::monitor
