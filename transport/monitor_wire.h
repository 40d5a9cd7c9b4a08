// Wire format of the failure monitor (transport/failure_monitor.h): the text
// each rank contributes to the communicator's address exchange, and the
// length-prefixed records on the monitor's TCP connections. Every length and
// field read from the wire is checked before it is used; a malformed record
// closes the connection that sent it.
//   record: u32 body bytes | u8 type | i32 rank | u8 kind | u64 token | f64 seconds | text
// (host byte order: both ends run the same build on the same kind of host).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace gradcomp::transport::monitor {

enum class MsgType : uint8_t {
  Hello = 1,  // client -> root: rank, token (the job's, from the exchange)
  HelloAck,   // root -> client: token
  Bye,        // either way: leaving in order (no failure)
  Suspect,    // client -> root: rank = suspect, kind = SuspectKind, seconds = silence,
              // token = nonce (Self: the Err code), text = detail
  Ping,       // root -> client: token = nonce
  Pong,       // client -> root: token = nonce, rank = peer it waits on (-1: none), seconds = how long
  Verdict,    // root -> client: rank = the failed rank, kind = Err code, text = cause
  Ack,        // root -> client: token = the nonce of a Suspect it received (the root is alive)
};

enum class SuspectKind : uint8_t {
  Silent = 1,  // no progress from the suspect for GRADCOMP_TIMEOUT_S
  Link = 2,    // the transport's connection to the suspect failed (UCX endpoint error)
  Self = 3,    // the reporter failed on its own (suspect = reporter), e.g. a stuck GPU stream
};

struct Message {
  MsgType type = MsgType::Bye;
  int32_t rank = -1;
  uint8_t kind = 0;
  uint64_t token = 0;
  double seconds = 0;
  std::string text;
};

constexpr size_t kMaxText = 1024;
constexpr size_t kHeaderBytes = 4 + 1 + 4 + 1 + 8 + 8;

std::string encode(const Message& m);  // text beyond kMaxText is cut
// Moves every complete record at the front of *buffer into *out. A record
// with an unknown type, a length out of range or a non-finite number is a
// RemoteError (the caller closes that connection).
Status decode(std::string* buffer, std::vector<Message>* out);

// One rank's part of the address exchange (printable text, no NUL):
//   "gcmon1 <pid> <host> <port> <token hex> <addr,addr,...>"  (port 0 on non-root ranks)
//   "gcmon1 off <pid> <host>"                                   (monitor disabled there)
struct RankInfo {
  bool enabled = false;
  int pid = 0;
  std::string host;
  int port = 0;
  uint64_t token = 0;
  std::vector<std::string> addrs;  // the root's IPv4 addresses, in dotted form
};
std::string packInfo(const RankInfo& info);
Status unpackInfo(const std::string& text, int rank, RankInfo* out);

}  // namespace gradcomp::transport::monitor
