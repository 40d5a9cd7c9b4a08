// Encoding and validating decoding of sparse messages (see wire_format.h).
#include "algorithms/sparse/wire_format.h"

#include <map>
#include <string>

#include "common/dtype.h"

namespace gradcomp::algo::sparse {
namespace {

void putU(uint8_t* p, uint64_t v, int bytes) {
  for (int b = 0; b < bytes; ++b) p[b] = uint8_t(v >> (8 * b));
}
uint64_t getU(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int b = 0; b < bytes; ++b) v |= uint64_t(p[b]) << (8 * b);
  return v;
}

std::string fromText(int source) {
  return source >= 0 ? " from rank " + std::to_string(source) : std::string();
}

}  // namespace

const char* wireFormatName(WireFormat f) {
  switch (f) {
    case WireFormat::Dense: return "dense";
    case WireFormat::Coo: return "coo";
    case WireFormat::DenseStream: return "densestream";
  }
  return "?";
}

Status encodeSparse(device::Backend& dev, const std::vector<SparsePiece>& pieces,
                    const std::vector<Bytes*>& out, std::vector<WireFormat>* formats) {
  GC_REQUIRE(pieces.size() == out.size(), Err::Internal, "encodeSparse: %zu pieces, %zu outputs",
             pieces.size(), out.size());
  // DenseStream sizes depend on the index gaps: computed on the device, read
  // back together (two control words per piece).
  device::HostArray<size_t> sizes(dev);
  sizes.resize(2 * pieces.size());
  bool any = false;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const SparsePiece& p = pieces[i];
    GC_REQUIRE(p.nnz <= p.count, Err::Internal, "encodeSparse: %zu entries over a region of %llu",
               p.nnz, (unsigned long long)p.count);
    if (p.nnz == 0) continue;  // empty: COO wins with an empty body
    GC_CHECK(dev.denseStreamSize(p.list->idx.data() + p.first, p.nnz, indexBytesFor(p.count),
                                 &sizes[2 * i], &sizes[2 * i + 1]));
    any = true;
  }
  if (any) GC_CHECK(dev.sync());
  // Choose every body first and reserve each output once: a message body is
  // written by a primitive later, so its buffer must not move afterwards.
  std::vector<WireFormat> chosen(pieces.size());
  std::vector<uint64_t> bodyBytes(pieces.size());
  std::map<Bytes*, size_t> finalSize;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const SparsePiece& p = pieces[i];
    const int ib = indexBytesFor(p.count);
    const size_t dsBytes = p.nnz ? sizes[2 * i] : 0;
    const uint64_t cooBytes = uint64_t(p.nnz) * (ib + 4), denseBytes = p.count * 4;
    WireFormat f = WireFormat::Coo;
    uint64_t body = cooBytes;
    if (dsBytes < body) f = WireFormat::DenseStream, body = dsBytes;
    if (denseBytes < body) f = WireFormat::Dense, body = denseBytes;
    chosen[i] = f;
    bodyBytes[i] = body;
    auto it = finalSize.emplace(out[i], out[i]->size()).first;
    it->second += kWireHeaderBytes + size_t(body);
  }
  for (auto& [msg, bytes] : finalSize) msg->reserve(bytes);
  for (size_t i = 0; i < pieces.size(); ++i) {
    const SparsePiece& p = pieces[i];
    const int ib = indexBytesFor(p.count);
    const WireFormat f = chosen[i];
    const uint64_t body = bodyBytes[i];
    const size_t dsBlocks = p.nnz ? sizes[2 * i + 1] : 0;
    Bytes& msg = *out[i];
    const size_t at = msg.size();
    msg.resize(at + kWireHeaderBytes + body);
    uint8_t* h = msg.data() + at;
    putU(h, kWireMagic, 4);
    h[4] = kWireVersion;
    h[5] = uint8_t(f);
    h[6] = uint8_t(DataType::Float32);
    h[7] = uint8_t(ib);
    putU(h + 8, p.count, 8);
    putU(h + 16, p.nnz, 8);
    putU(h + 24, f == WireFormat::DenseStream ? dsBlocks : 0, 8);
    putU(h + 32, body, 8);
    uint8_t* b = h + kWireHeaderBytes;
    const uint64_t* idx = p.list ? p.list->idx.data() + p.first : nullptr;
    const float* val = p.list ? p.list->val.data() + p.first : nullptr;
    switch (f) {
      case WireFormat::Coo:
        if (p.nnz) GC_CHECK(dev.cooEncode(idx, val, p.nnz, p.base, p.count, ib, b));
        break;
      case WireFormat::DenseStream:
        GC_CHECK(dev.denseStreamEncode(idx, val, p.nnz, p.base, ib, b, body));
        break;
      case WireFormat::Dense:
        GC_CHECK(dev.denseEncode(idx, val, p.nnz, p.base, p.count, b));
        break;
    }
  }
  if (formats) *formats = chosen;
  return Status::Ok();
}

Status encodeSparse(device::Backend& dev, const SparsePiece& piece, Bytes* out,
                    WireFormat* format) {
  std::vector<WireFormat> f;
  GC_CHECK(encodeSparse(dev, std::vector<SparsePiece>{piece}, std::vector<Bytes*>{out}, &f));
  if (format) *format = f[0];
  return Status::Ok();
}

Status decodeSparse(device::Backend& dev, const uint8_t* data, size_t avail, uint64_t base,
                    uint64_t expectCount, uint64_t* idx, float* val, size_t capacity, int source,
                    size_t* nnz, size_t* consumed) {
  *nnz = 0;
  *consumed = 0;
  const std::string from = fromText(source);
  GC_REQUIRE(avail >= kWireHeaderBytes, Err::RemoteError,
             "sparse message%s: %zu bytes, shorter than the %zu-byte header", from.c_str(), avail,
             kWireHeaderBytes);
  const uint32_t magic = uint32_t(getU(data, 4));
  GC_REQUIRE(magic == kWireMagic && data[4] == kWireVersion, Err::RemoteError,
             "sparse message%s: magic %#x version %u (expected %#x version %u)", from.c_str(),
             magic, unsigned(data[4]), kWireMagic, unsigned(kWireVersion));
  const uint8_t format = data[5];
  GC_REQUIRE(format <= uint8_t(WireFormat::DenseStream), Err::RemoteError,
             "sparse message%s: unknown format %u (accepted: 0 dense, 1 coo, 2 densestream)",
             from.c_str(), unsigned(format));
  GC_REQUIRE(data[6] == uint8_t(DataType::Float32), Err::RemoteError,
             "sparse message%s: value dtype %u (accepted: %d float32)", from.c_str(),
             unsigned(data[6]), int(DataType::Float32));
  const uint64_t count = getU(data + 8, 8), n = getU(data + 16, 8);
  const uint64_t blocks = getU(data + 24, 8), payload = getU(data + 32, 8);
  GC_REQUIRE(count == expectCount, Err::RemoteError,
             "sparse message%s: region of %llu elements, the schedule expects %llu",
             from.c_str(), (unsigned long long)count, (unsigned long long)expectCount);
  const int ib = data[7];
  GC_REQUIRE(ib == indexBytesFor(count), Err::RemoteError,
             "sparse message%s: %d-byte offsets for a region of %llu (expected %d)", from.c_str(),
             ib, (unsigned long long)count, indexBytesFor(count));
  GC_REQUIRE(payload <= avail - kWireHeaderBytes, Err::RemoteError,
             "sparse message%s: payload of %llu bytes, only %zu follow the header", from.c_str(),
             (unsigned long long)payload, avail - kWireHeaderBytes);
  GC_REQUIRE(format == uint8_t(WireFormat::DenseStream) || blocks == 0, Err::RemoteError,
             "sparse message%s: block count %llu on a non-DenseStream body", from.c_str(),
             (unsigned long long)blocks);
  GC_REQUIRE(n <= count && n <= capacity, Err::RemoteError,
             "sparse message%s: %llu entries over %llu elements (the receiver allows %zu)",
             from.c_str(), (unsigned long long)n, (unsigned long long)count, capacity);
  const uint8_t* body = data + kWireHeaderBytes;
  switch (WireFormat(format)) {
    case WireFormat::Coo:
      GC_REQUIRE(payload == n * (uint64_t(ib) + 4), Err::RemoteError,
                 "sparse message%s: COO body of %llu bytes for %llu entries of %d+4 bytes",
                 from.c_str(), (unsigned long long)payload, (unsigned long long)n, ib);
      if (n) GC_CHECK(dev.cooDecode(body, size_t(n), base, count, ib, idx, val, source));
      break;
    case WireFormat::Dense:
      GC_REQUIRE(payload == count * 4, Err::RemoteError,
                 "sparse message%s: dense body of %llu bytes for %llu elements", from.c_str(),
                 (unsigned long long)payload, (unsigned long long)count);
      GC_CHECK(dev.denseDecode(body, count, base, size_t(n), idx, val, source));
      break;
    case WireFormat::DenseStream:
      GC_CHECK(dev.denseStreamDecode(body, size_t(payload), size_t(blocks), count, base, ib,
                                     size_t(n), idx, val, source));
      break;
  }
  *nnz = size_t(n);
  *consumed = kWireHeaderBytes + size_t(payload);
  return Status::Ok();
}

}  // namespace gradcomp::algo::sparse
