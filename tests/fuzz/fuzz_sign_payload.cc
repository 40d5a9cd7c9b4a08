// signSGD payloads (device cpu signCountAdd / signMajority / signExpand): a
// peer's vote bits and partial counts, as the reduce-scatter tree folds them.
// Input: u16 n, u8 inBits, u8 maxIn, u8 nranks, then counts and votes (each
// padded or cut to its exact packed size).
// A successful fold adds one vote to each count; the majority's decisions and
// the expansion are well formed.
#include "device/backend.h"
#include "device/quant_types.h"
#include "tests/fuzz/fuzz_common.h"

using namespace gradcomp;

namespace {
uint32_t field(const uint8_t* s, size_t i, int width) {
  uint32_t v = 0;
  for (int b = 0; b < width; ++b) {
    const size_t bit = i * size_t(width) + size_t(b);
    v |= uint32_t((s[bit / 8] >> (bit % 8)) & 1u) << b;
  }
  return v;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const size_t n = in.u16() % 8193;
  const int inBits = 1 + in.u8() % 16;
  const int maxIn = in.u8() % 200;
  const int nranks = 1 + in.u8() % 200;
  device::Backend& dev = device::cpuBackend();
  const std::vector<uint8_t> counts = in.exact(device::packedBytes(n, inBits));
  const std::vector<uint8_t> votes = in.exact(device::packedBytes(n, 1));
  int outBits = 1;
  while ((uint64_t(1) << outBits) <= uint64_t(maxIn) + 1) ++outBits;
  std::vector<uint8_t> out(device::packedBytes(n, outBits));
  Status s = dev.signCountAdd(counts.data(), inBits, maxIn, votes.data(), n, out.data(), outBits, -1);
  if (s.ok()) {
    for (size_t i = 0; i < n; ++i)
      FUZZ_CHECK(field(out.data(), i, outBits) ==
                 field(counts.data(), i, inBits) + field(votes.data(), i, 1));
  } else {
    FUZZ_CHECK(s.code() == Err::RemoteError || s.code() == Err::InvalidArgument);
  }
  // The counts as a final, all-rank count.
  std::vector<uint8_t> decision(device::packedBytes(n, 1));
  // Both tie rules: hash (a tie goes to signTieUp's side) and negative (-1).
  const bool hashTies = (size & 1) != 0;
  const device::SignTies ties{hashTies, 7};
  const uint64_t indexBase = 1000;
  s = dev.signMajority(counts.data(), inBits, n, nranks, ties, indexBase, decision.data());
  if (s.ok()) {
    for (size_t i = 0; i < n; ++i) {
      const uint32_t twice = 2 * field(counts.data(), i, inBits);
      const bool up = twice > uint32_t(nranks) ||
                      (twice == uint32_t(nranks) && device::signTieUp(ties, indexBase + i));
      FUZZ_CHECK(field(decision.data(), i, 1) == uint32_t(up));
    }
  } else {
    FUZZ_CHECK(s.code() == Err::RemoteError || s.code() == Err::InvalidArgument);
  }
  std::vector<float> expanded(n);
  s = dev.signExpand(votes.data(), n, 0.5f, -0.5f, expanded.data(), -1);
  if (s.ok()) {
    for (size_t i = 0; i < n; ++i)
      FUZZ_CHECK(expanded[i] == (field(votes.data(), i, 1) ? 0.5f : -0.5f));
  } else {
    FUZZ_CHECK(s.code() == Err::RemoteError);
  }
  return 0;
}
