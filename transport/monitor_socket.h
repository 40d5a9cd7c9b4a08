// Plain TCP plumbing of the failure monitor (transport/failure_monitor.h):
// IPv4 only, non-blocking sockets, every wait bounded. Sockets are created
// close-on-exec and registered so that a forked child (a data-loader worker)
// closes its copies at once: otherwise the child would keep a dead parent's
// connection open and hide its death from the monitor root.
#pragma once

#include <string>
#include <vector>

namespace gradcomp::transport::monitor {

// A listening socket on every interface, port chosen by the kernel; -1 on
// failure (*why says what failed).
int listenAnyPort(int* port, std::string* why);
// The up, non-loopback IPv4 addresses of this host.
std::vector<std::string> localAddresses();
// The order a client tries the root's addresses in: loopback first when both
// share the host, then those on one of this host's subnets, then the rest.
std::vector<std::string> connectOrder(const std::vector<std::string>& rootAddrs, bool sameHost);
// Connects within timeoutS; the socket is non-blocking. -1 on failure.
int connectTo(const std::string& addr, int port, double timeoutS, std::string* why);
// Accepts one pending connection (non-blocking, registered); -1 when none.
int acceptOne(int listenFd);
// Writes all of data within timeoutS (no SIGPIPE); false on error or timeout.
bool sendAll(int fd, const std::string& data, double timeoutS);
// Appends what is readable now; returns false at end of stream or on error.
bool readAvailable(int fd, std::string* buffer);
// Closes a socket made here and forgets it (idempotent for -1).
void closeSocket(int fd);

}  // namespace gradcomp::transport::monitor
