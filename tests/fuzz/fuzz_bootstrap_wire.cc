// The standalone bootstrap's address exchange (transport/bootstrap_wire.h):
// hello messages rank 0 receives and the table every rank receives.
// Input: u8 kind (bit 0: table), u8 rank/size, u8 seq, then the message.
// A message that unpacks must be exactly what pack produces from the result.
#include "tests/fuzz/fuzz_common.h"
#include "transport/bootstrap_wire.h"

using namespace gradcomp;
using namespace gradcomp::transport;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const bool table = in.u8() & 1;
  const int ranks = 1 + in.u8() % 64;
  const uint32_t seq = in.u8();
  const std::vector<uint8_t> bytes = in.rest();
  const std::string msg(bytes.begin(), bytes.end());
  if (!table) {
    std::string blob;
    Status s = wire::unpackHello(msg, ranks - 1, ranks, seq, &blob);
    if (s.ok()) FUZZ_CHECK(wire::packHello(ranks - 1, ranks, seq, blob) == msg);
    else FUZZ_CHECK(s.code() == Err::RemoteError || s.code() == Err::InvalidConfig);
  } else {
    std::vector<std::string> blobs;
    Status s = wire::unpackTable(msg, ranks, seq, &blobs);
    if (s.ok()) FUZZ_CHECK(blobs.size() == size_t(ranks) && wire::packTable(seq, blobs) == msg);
    else FUZZ_CHECK(s.code() == Err::RemoteError);
  }
  return 0;
}
