// DenseStream bodies (device/backend.h denseStreamDecode, CPU reference) with
// arbitrary block counts, index widths, regions and entry counts.
// Input: u8 flags (bit 0: 8-byte indexes), u16 region n, u16 blocks,
// u16 nnz (the entries the body must hold), u32 base, then the body. A
// decoded list must be strictly ascending inside [base, base + n) and carry
// no +0.0, and re-encode to a stream that decodes to the same entries.
#include "device/backend.h"
#include "tests/fuzz/fuzz_common.h"

using namespace gradcomp;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const int indexBytes = (in.u8() & 1) ? 8 : 4;
  const uint64_t n = in.u16();
  const size_t blocks = in.u16() % 1025;
  const size_t nnz = in.u16() % 4097;  // the entries the body must hold, exactly
  const uint64_t base = in.u32();
  const std::vector<uint8_t> body = in.rest();
  device::Backend& dev = device::cpuBackend();
  std::vector<uint64_t> idx(nnz);
  std::vector<float> val(nnz);
  Status s = dev.denseStreamDecode(body.data(), body.size(), blocks, n, base, indexBytes, nnz,
                                   idx.data(), val.data(), /*source=*/1);
  if (!s.ok()) {
    FUZZ_CHECK(s.code() == Err::RemoteError);
    return 0;
  }
  for (size_t i = 0; i < nnz; ++i) {
    FUZZ_CHECK(idx[i] >= base && idx[i] - base < n);
    FUZZ_CHECK(i == 0 || idx[i] > idx[i - 1]);
    FUZZ_CHECK(!fuzz::sameBits(val[i], 0.0f));
  }
  // What decoded re-encodes to a stream that decodes to the same entries.
  size_t bytes = 0, blocks2 = 0;
  FUZZ_CHECK(dev.denseStreamSize(idx.data(), nnz, indexBytes, &bytes, &blocks2).ok());
  std::vector<uint8_t> again(bytes);
  FUZZ_CHECK(dev.denseStreamEncode(idx.data(), val.data(), nnz, base, indexBytes, again.data(),
                                   again.size()).ok());
  std::vector<uint64_t> idx2(nnz);
  std::vector<float> val2(nnz);
  FUZZ_CHECK(dev.denseStreamDecode(again.data(), again.size(), blocks2, n, base, indexBytes, nnz,
                                   idx2.data(), val2.data(), 1).ok());
  for (size_t i = 0; i < nnz; ++i)
    FUZZ_CHECK(idx2[i] == idx[i] && fuzz::sameBits(val2[i], val[i]));
  return 0;
}
