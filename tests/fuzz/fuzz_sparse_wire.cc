// Sparse messages (algorithms/sparse/wire_format.h): header + COO, DenseStream
// or Dense body, possibly several back to back, as a receiver decodes them.
// Input: u8 region selector, u16 count, u16 capacity, u32 base, then messages.
// A decoded list must be strictly ascending, inside [base, base + count), fit
// the capacity, carry no +0.0, and re-encode into a message that decodes to
// the same list.
#include "algorithms/sparse/wire_format.h"
#include "tests/fuzz/fuzz_common.h"

using namespace gradcomp;
using namespace gradcomp::algo::sparse;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const uint8_t region = in.u8();
  // Regions over 2^32 elements switch offsets to 8 bytes; nothing is sized by count.
  uint64_t count = in.u16();
  if (region & 1) count += uint64_t(1) << 32;
  const size_t capacity = in.u16() % 4097;
  const uint64_t base = in.u32();
  const std::vector<uint8_t> msgs = in.rest();
  device::Backend& dev = device::cpuBackend();
  std::vector<uint64_t> idx(capacity);
  std::vector<float> val(capacity);
  size_t pos = 0;
  for (int m = 0; m < 8 && pos < msgs.size(); ++m) {
    // Each message in its own exact buffer: the decoder may read `avail` bytes.
    std::vector<uint8_t> buf(msgs.begin() + long(pos), msgs.end());
    size_t nnz = 0, consumed = 0;
    // The header is checked by decodeSparse, the body at the next sync.
    Status s = decodeSparse(dev, buf.data(), buf.size(), base, count, idx.data(), val.data(),
                            capacity, /*source=*/1, &nnz, &consumed);
    if (s.ok()) s = dev.sync();
    if (!s.ok()) {
      FUZZ_CHECK(s.code() == Err::RemoteError);
      break;
    }
    FUZZ_CHECK(consumed >= kWireHeaderBytes && consumed <= buf.size());
    FUZZ_CHECK(nnz <= capacity);
    for (size_t i = 0; i < nnz; ++i) {
      FUZZ_CHECK(idx[i] >= base && idx[i] - base < count);
      FUZZ_CHECK(i == 0 || idx[i] > idx[i - 1]);
      FUZZ_CHECK(!fuzz::sameBits(val[i], 0.0f));
    }
    if (count <= (uint64_t(1) << 16)) {  // dense bodies stay small
      Coo list(dev);
      list.resize(nnz);
      for (size_t i = 0; i < nnz; ++i) list.idx.data()[i] = idx[i], list.val.data()[i] = val[i];
      Bytes again(dev);
      FUZZ_CHECK(encodeSparse(dev, SparsePiece{&list, 0, nnz, base, count}, &again).ok());
      FUZZ_CHECK(dev.sync().ok());
      std::vector<uint64_t> idx2(capacity);
      std::vector<float> val2(capacity);
      size_t nnz2 = 0, consumed2 = 0;
      FUZZ_CHECK(decodeSparse(dev, again.data(), again.size(), base, count, idx2.data(),
                              val2.data(), capacity, 1, &nnz2, &consumed2).ok());
      FUZZ_CHECK(dev.sync().ok());
      FUZZ_CHECK(nnz2 == nnz && consumed2 == again.size());
      for (size_t i = 0; i < nnz; ++i)
        FUZZ_CHECK(idx2[i] == idx[i] && fuzz::sameBits(val2[i], val[i]));
    }
    pos += consumed;
  }
  return 0;
}
