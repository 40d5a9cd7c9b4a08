#include "transport/monitor_wire.h"

#include <arpa/inet.h>

#include <cmath>
#include <cstring>
#include <sstream>

namespace gradcomp::transport::monitor {
namespace {

template <class T>
void put(std::string* out, T v) {
  char b[sizeof(T)];
  memcpy(b, &v, sizeof(T));
  out->append(b, sizeof(T));
}

template <class T>
T get(const char* p) {
  T v;
  memcpy(&v, p, sizeof(T));
  return v;
}

bool validType(uint8_t t) {
  return t >= uint8_t(MsgType::Hello) && t <= uint8_t(MsgType::Ack);
}

// Host names and addresses travel as words of the exchange text.
bool printableWord(const std::string& s) {
  if (s.empty() || s.size() > 255) return false;
  for (unsigned char c : s)
    if (c <= ' ' || c >= 0x7f) return false;
  return true;
}

}  // namespace

std::string encode(const Message& m) {
  const size_t text = std::min(m.text.size(), kMaxText);
  std::string out;
  out.reserve(kHeaderBytes + text);
  put<uint32_t>(&out, uint32_t(kHeaderBytes - 4 + text));
  put<uint8_t>(&out, uint8_t(m.type));
  put<int32_t>(&out, m.rank);
  put<uint8_t>(&out, m.kind);
  put<uint64_t>(&out, m.token);
  put<double>(&out, m.seconds);
  out.append(m.text, 0, text);
  return out;
}

Status decode(std::string* buffer, std::vector<Message>* out) {
  size_t pos = 0;
  while (buffer->size() - pos >= 4) {
    const uint32_t body = get<uint32_t>(buffer->data() + pos);
    GC_REQUIRE(body >= kHeaderBytes - 4 && body <= kHeaderBytes - 4 + kMaxText, Err::RemoteError,
               "failure monitor: record of %u bytes (expected %zu..%zu)", body, kHeaderBytes - 4,
               kHeaderBytes - 4 + kMaxText);
    if (buffer->size() - pos - 4 < body) break;  // incomplete: wait for the rest
    const char* p = buffer->data() + pos + 4;
    Message m;
    const uint8_t type = get<uint8_t>(p);
    GC_REQUIRE(validType(type), Err::RemoteError, "failure monitor: unknown record type %u",
               unsigned(type));
    m.type = MsgType(type);
    m.rank = get<int32_t>(p + 1);
    m.kind = get<uint8_t>(p + 5);
    m.token = get<uint64_t>(p + 6);
    m.seconds = get<double>(p + 14);
    GC_REQUIRE(std::isfinite(m.seconds), Err::RemoteError,
               "failure monitor: record with a non-finite number");
    m.text.assign(p + 22, body - (kHeaderBytes - 4));
    out->push_back(std::move(m));
    pos += 4 + body;
  }
  buffer->erase(0, pos);
  return Status::Ok();
}

std::string packInfo(const RankInfo& info) {
  std::ostringstream os;
  const std::string host = printableWord(info.host) ? info.host : "?";
  if (!info.enabled) {
    os << "gcmon1 off " << info.pid << ' ' << host;
    return os.str();
  }
  os << "gcmon1 " << info.pid << ' ' << host << ' ' << info.port << ' ' << std::hex << info.token
     << std::dec << ' ';
  for (size_t i = 0; i < info.addrs.size(); ++i) os << (i ? "," : "") << info.addrs[i];
  if (info.addrs.empty()) os << '-';
  return os.str();
}

Status unpackInfo(const std::string& text, int rank, RankInfo* out) {
  auto bad = [&]() {
    return makeStatus(Err::RemoteError,
                      "failure monitor: rank %d sent malformed monitor information (%zu bytes)",
                      rank, text.size());
  };
  std::istringstream is(text);
  std::string magic, first;
  if (!(is >> magic >> first) || magic != "gcmon1") return bad();
  RankInfo info;
  if (first == "off") {
    if (!(is >> info.pid >> info.host) || !printableWord(info.host)) return bad();
    *out = info;
    return Status::Ok();
  }
  info.enabled = true;
  std::string addrs;
  char* end = nullptr;
  info.pid = int(strtol(first.c_str(), &end, 10));
  if (*end || !(is >> info.host >> info.port >> std::hex >> info.token >> std::dec >> addrs))
    return bad();
  if (!printableWord(info.host) || info.port < 0 || info.port > 65535) return bad();
  if (addrs != "-") {
    std::stringstream list(addrs);
    for (std::string a; std::getline(list, a, ',');) {
      in_addr probe{};
      if (inet_pton(AF_INET, a.c_str(), &probe) != 1) return bad();
      info.addrs.push_back(a);
    }
  }
  *out = info;
  return Status::Ok();
}

}  // namespace gradcomp::transport::monitor
