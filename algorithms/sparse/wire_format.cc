// Encoding and validating decoding of sparse messages (see wire_format.h).
#include "algorithms/sparse/wire_format.h"

#include <cstring>

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
uint32_t floatBits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}
float bitsFloat(uint32_t b) {
  float v;
  std::memcpy(&v, &b, 4);
  return v;
}

Status decodeCoo(const uint8_t* body, size_t bytes, uint64_t nnz, uint64_t base, uint64_t count,
                 int ib, uint64_t* idx, float* val, size_t capacity) {
  GC_REQUIRE(nnz <= count && nnz <= capacity, Err::RemoteError,
             "sparse message: COO with %llu entries over %llu elements (receiver allows %zu)",
             (unsigned long long)nnz, (unsigned long long)count, capacity);
  GC_REQUIRE(bytes == nnz * (uint64_t(ib) + 4), Err::RemoteError,
             "sparse message: COO body of %zu bytes for %llu entries of %d+4 bytes", bytes,
             (unsigned long long)nnz, ib);
  const uint8_t* values = body + nnz * ib;
  for (uint64_t i = 0; i < nnz; ++i) {
    const uint64_t off = getU(body + i * ib, ib);
    GC_REQUIRE(off < count, Err::RemoteError,
               "sparse message: COO entry %llu has offset %llu outside a region of %llu",
               (unsigned long long)i, (unsigned long long)off, (unsigned long long)count);
    GC_REQUIRE(i == 0 || base + off > idx[i - 1], Err::RemoteError,
               "sparse message: COO offsets not strictly ascending at entry %llu",
               (unsigned long long)i);
    const uint32_t bits = uint32_t(getU(values + 4 * i, 4));
    GC_REQUIRE(bits != 0, Err::RemoteError, "sparse message: COO entry %llu carries +0.0",
               (unsigned long long)i);
    idx[i] = base + off;
    val[i] = bitsFloat(bits);
  }
  return Status::Ok();
}

Status decodeDense(const uint8_t* body, size_t bytes, uint64_t nnz, uint64_t base,
                   uint64_t count, uint64_t* idx, float* val, size_t capacity) {
  GC_REQUIRE(bytes / 4 == count && bytes % 4 == 0, Err::RemoteError,
             "sparse message: dense body of %zu bytes for %llu elements", bytes,
             (unsigned long long)count);
  size_t c = 0;
  for (uint64_t i = 0; i < count; ++i) {
    const uint32_t bits = uint32_t(getU(body + 4 * i, 4));
    if (bits == 0) continue;
    GC_REQUIRE(c < capacity && c < nnz, Err::RemoteError,
               "sparse message: dense body holds more than %llu non-zeros (header) or the "
               "%zu the receiver allows", (unsigned long long)nnz, capacity);
    idx[c] = base + i;
    val[c] = bitsFloat(bits);
    ++c;
  }
  GC_REQUIRE(c == nnz, Err::RemoteError,
             "sparse message: dense body holds %zu non-zeros, header says %llu", c,
             (unsigned long long)nnz);
  return Status::Ok();
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

Status encodeSparse(device::Backend& dev, const uint64_t* idx, const float* val, size_t nnz,
                    uint64_t base, uint64_t count, device::Buffer<uint8_t>* out,
                    WireFormat* format) {
  GC_REQUIRE(nnz <= count, Err::InvalidArgument,
             "encodeSparse: %zu entries over a region of %llu", nnz, (unsigned long long)count);
  const int ib = indexBytesFor(count);
  size_t dsBytes = 0, dsBlocks = 0;
  GC_CHECK(dev.denseStreamSize(idx, nnz, ib, &dsBytes, &dsBlocks));
  const uint64_t cooBytes = uint64_t(nnz) * (ib + 4), denseBytes = count * 4;
  WireFormat f = WireFormat::Coo;
  uint64_t body = cooBytes;
  if (dsBytes < body) f = WireFormat::DenseStream, body = dsBytes;
  if (denseBytes < body) f = WireFormat::Dense, body = denseBytes;

  const size_t at = out->size();
  out->resize(at + kWireHeaderBytes + body);
  uint8_t* h = out->data() + at;
  putU(h, kWireMagic, 4);
  h[4] = kWireVersion;
  h[5] = uint8_t(f);
  h[6] = uint8_t(DataType::Float32);
  h[7] = uint8_t(ib);
  putU(h + 8, count, 8);
  putU(h + 16, nnz, 8);
  putU(h + 24, f == WireFormat::DenseStream ? dsBlocks : 0, 8);
  putU(h + 32, body, 8);
  uint8_t* b = h + kWireHeaderBytes;
  for (size_t i = 0; i < nnz; ++i) {
    GC_REQUIRE(idx[i] >= base && idx[i] - base < count && floatBits(val[i]) != 0 &&
                   (i == 0 || idx[i] > idx[i - 1]),
               Err::InvalidArgument,
               "encodeSparse: entry %zu (index %llu) is +0.0, out of [%llu, %llu) or out of "
               "order", i, (unsigned long long)idx[i], (unsigned long long)base,
               (unsigned long long)(base + count));
  }
  switch (f) {
    case WireFormat::Coo:
      for (size_t i = 0; i < nnz; ++i) {
        putU(b + i * ib, idx[i] - base, ib);
        putU(b + nnz * ib + 4 * i, floatBits(val[i]), 4);
      }
      break;
    case WireFormat::DenseStream: {
      size_t written = 0;
      GC_CHECK(dev.denseStreamEncode(idx, val, nnz, base, ib, b, body, &written));
      break;
    }
    case WireFormat::Dense:
      std::memset(b, 0, body);
      for (size_t i = 0; i < nnz; ++i) putU(b + 4 * (idx[i] - base), floatBits(val[i]), 4);
      break;
  }
  if (format) *format = f;
  return Status::Ok();
}

Status decodeSparse(device::Backend& dev, const uint8_t* data, size_t avail, uint64_t base,
                    uint64_t expectCount, uint64_t* idx, float* val, size_t capacity,
                    size_t* nnz, size_t* consumed) {
  *nnz = 0;
  *consumed = 0;
  GC_REQUIRE(avail >= kWireHeaderBytes, Err::RemoteError,
             "sparse message: %zu bytes, shorter than the %zu-byte header", avail,
             kWireHeaderBytes);
  const uint32_t magic = uint32_t(getU(data, 4));
  GC_REQUIRE(magic == kWireMagic && data[4] == kWireVersion, Err::RemoteError,
             "sparse message: magic %#x version %u (expected %#x version %u)", magic,
             unsigned(data[4]), kWireMagic, unsigned(kWireVersion));
  const uint8_t format = data[5];
  GC_REQUIRE(format <= uint8_t(WireFormat::DenseStream), Err::RemoteError,
             "sparse message: unknown format %u (accepted: 0 dense, 1 coo, 2 densestream)",
             unsigned(format));
  GC_REQUIRE(data[6] == uint8_t(DataType::Float32), Err::RemoteError,
             "sparse message: value dtype %u (accepted: %d float32)", unsigned(data[6]),
             int(DataType::Float32));
  const uint64_t count = getU(data + 8, 8), n = getU(data + 16, 8);
  const uint64_t blocks = getU(data + 24, 8), payload = getU(data + 32, 8);
  GC_REQUIRE(count == expectCount, Err::RemoteError,
             "sparse message: region of %llu elements, the schedule expects %llu",
             (unsigned long long)count, (unsigned long long)expectCount);
  const int ib = data[7];
  GC_REQUIRE(ib == indexBytesFor(count), Err::RemoteError,
             "sparse message: %d-byte offsets for a region of %llu (expected %d)", ib,
             (unsigned long long)count, indexBytesFor(count));
  GC_REQUIRE(payload <= avail - kWireHeaderBytes, Err::RemoteError,
             "sparse message: payload of %llu bytes, only %zu follow the header",
             (unsigned long long)payload, avail - kWireHeaderBytes);
  GC_REQUIRE(format == uint8_t(WireFormat::DenseStream) || blocks == 0, Err::RemoteError,
             "sparse message: block count %llu on a non-DenseStream body",
             (unsigned long long)blocks);
  const uint8_t* body = data + kWireHeaderBytes;
  switch (WireFormat(format)) {
    case WireFormat::Coo:
      GC_CHECK(decodeCoo(body, size_t(payload), n, base, count, ib, idx, val, capacity));
      *nnz = size_t(n);
      break;
    case WireFormat::Dense:
      GC_CHECK(decodeDense(body, size_t(payload), n, base, count, idx, val, capacity));
      *nnz = size_t(n);
      break;
    case WireFormat::DenseStream: {
      size_t got = 0;
      GC_CHECK(dev.denseStreamDecode(body, size_t(payload), size_t(blocks), count, base, ib, idx,
                                     val, capacity, &got));
      GC_REQUIRE(got == n, Err::RemoteError,
                 "sparse message: DenseStream body holds %zu non-zeros, header says %llu", got,
                 (unsigned long long)n);
      *nnz = got;
      break;
    }
  }
  *consumed = kWireHeaderBytes + size_t(payload);
  return Status::Ok();
}

}  // namespace gradcomp::algo::sparse
