// The failure monitor's wire (transport/monitor_wire.h): the records on its
// TCP connections and the text each rank puts in the address exchange.
// Input: u8 mode (bit 0: exchange text, else a record stream), u8 rank, then
// the bytes. A record stream that decodes must re-encode to exactly the bytes
// consumed; exchange text that unpacks must pack to text that unpacks to the
// same fields.
#include <cstring>

#include "tests/fuzz/fuzz_common.h"
#include "transport/monitor_wire.h"

using namespace gradcomp;
using namespace gradcomp::transport::monitor;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const bool text = in.u8() & 1;
  const int rank = in.u8();
  const std::vector<uint8_t> bytes = in.rest();
  if (text) {
    RankInfo info;
    Status s = unpackInfo(std::string(bytes.begin(), bytes.end()), rank, &info);
    if (!s.ok()) {
      FUZZ_CHECK(s.code() == Err::RemoteError);
      return 0;
    }
    RankInfo again;
    FUZZ_CHECK(unpackInfo(packInfo(info), rank, &again).ok());
    FUZZ_CHECK(again.enabled == info.enabled && again.pid == info.pid && again.host == info.host);
    FUZZ_CHECK(!info.enabled || (again.port == info.port && again.token == info.token &&
                                 again.addrs == info.addrs));
    return 0;
  }
  std::string buffer(bytes.begin(), bytes.end());
  std::vector<Message> got;
  Status s = decode(&buffer, &got);
  if (!s.ok()) {
    FUZZ_CHECK(s.code() == Err::RemoteError);
    return 0;
  }
  std::string reencoded;
  for (const Message& m : got) {
    FUZZ_CHECK(m.text.size() <= kMaxText);
    reencoded += encode(m);
  }
  FUZZ_CHECK(reencoded.size() + buffer.size() == bytes.size());
  FUZZ_CHECK(reencoded.empty() || std::memcmp(reencoded.data(), bytes.data(), reencoded.size()) == 0);
  FUZZ_CHECK(buffer.size() < 4 || buffer.size() < kHeaderBytes + kMaxText);  // only a partial record left
  return 0;
}
