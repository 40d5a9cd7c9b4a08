// The net plugin's connection handle (plugin/net/ucx_net.h decodeHandle): the
// NCCL_NET_HANDLE_MAXSIZE opaque bytes a peer sends through NCCL's bootstrap,
// checked before connect() gives any of it to UCX.
// Input: the handle (padded or cut to 128 bytes).
// An accepted handle names its connection tag and an "a.b.c.d:port" peer.
#include "plugin/net/net_common.h"
#include "plugin/net/ucx_net.h"
#include "tests/fuzz/fuzz_common.h"

using namespace gradcomp;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const std::vector<uint8_t> handle = in.exact(NCCL_NET_HANDLE_MAXSIZE);
  uint32_t connTag = 0;
  std::string peer;
  Status s = net::decodeHandle(handle.data(), &connTag, &peer);
  if (!s.ok()) {
    FUZZ_CHECK(s.code() == Err::InvalidArgument);
    return 0;
  }
  uint32_t tag;
  std::memcpy(&tag, handle.data() + 4, sizeof tag);
  FUZZ_CHECK(connTag == tag);
  FUZZ_CHECK(peer.find(':') != std::string::npos && peer.substr(peer.find(':')) != ":0");
  return 0;
}
