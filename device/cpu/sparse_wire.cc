// COO and dense message bodies of the sparse wire format (CPU backend).
#include "device/cpu/sparse_ops.h"
#include "device/cpu/wire_bytes.h"

namespace gradcomp::device::cpu {
namespace {

// Encoder input: strictly ascending, inside [base, base + count), non-zero.
Status checkEncodable(const char* what, const uint64_t* idx, const float* val, size_t nnz,
                      uint64_t base, uint64_t count) {
  for (size_t i = 0; i < nnz; ++i)
    GC_REQUIRE(idx[i] >= base && idx[i] - base < count && !isPlusZero(val[i]) &&
                   (i == 0 || idx[i] > idx[i - 1]),
               Err::Internal,
               "%s: entry %zu (index %llu) is +0.0, outside [%llu, %llu) or out of order", what,
               i, (unsigned long long)idx[i], (unsigned long long)base,
               (unsigned long long)(base + count));
  return Status::Ok();
}

}  // namespace

Status cooEncode(const uint64_t* idx, const float* val, size_t nnz, uint64_t base, uint64_t count,
                 int indexBytes, void* out) {
  GC_REQUIRE(indexBytes == 4 || indexBytes == 8, Err::InvalidArgument,
             "cooEncode: indexBytes = %d (accepted: 4, 8)", indexBytes);
  GC_CHECK(checkEncodable("cooEncode", idx, val, nnz, base, count));
  uint8_t* b = static_cast<uint8_t*>(out);
  for (size_t i = 0; i < nnz; ++i) {
    putUint(b + i * indexBytes, idx[i] - base, indexBytes);
    putFloat(b + nnz * indexBytes + 4 * i, val[i]);
  }
  return Status::Ok();
}

Status cooDecode(const void* in, size_t nnz, uint64_t base, uint64_t count, int indexBytes,
                 uint64_t* idx, float* val, int source) {
  GC_REQUIRE(indexBytes == 4 || indexBytes == 8, Err::InvalidArgument,
             "cooDecode: indexBytes = %d (accepted: 4, 8)", indexBytes);
  char buf[32];
  const uint8_t* body = static_cast<const uint8_t*>(in);
  const uint8_t* values = body + nnz * indexBytes;
  for (size_t i = 0; i < nnz; ++i) {
    const uint64_t off = getUint(body + i * indexBytes, indexBytes);
    GC_REQUIRE(off < count, Err::RemoteError,
               "sparse message%s: COO entry %zu has offset %llu outside a region of %llu",
               sourceText(source, buf), i, (unsigned long long)off, (unsigned long long)count);
    GC_REQUIRE(i == 0 || base + off > idx[i - 1], Err::RemoteError,
               "sparse message%s: COO offsets not strictly ascending at entry %zu",
               sourceText(source, buf), i);
    const float v = getFloat(values + 4 * i);
    GC_REQUIRE(!isPlusZero(v), Err::RemoteError, "sparse message%s: COO entry %zu carries +0.0",
               sourceText(source, buf), i);
    idx[i] = base + off;
    val[i] = v;
  }
  return Status::Ok();
}

Status denseEncode(const uint64_t* idx, const float* val, size_t nnz, uint64_t base,
                   uint64_t count, void* out) {
  GC_CHECK(checkEncodable("denseEncode", idx, val, nnz, base, count));
  uint8_t* b = static_cast<uint8_t*>(out);
  std::memset(b, 0, 4 * count);
  for (size_t i = 0; i < nnz; ++i) putFloat(b + 4 * (idx[i] - base), val[i]);
  return Status::Ok();
}

Status denseDecode(const void* in, uint64_t count, uint64_t base, size_t nnz, uint64_t* idx,
                   float* val, int source) {
  char buf[32];
  const uint8_t* b = static_cast<const uint8_t*>(in);
  size_t c = 0;
  for (uint64_t i = 0; i < count; ++i) {
    const float v = getFloat(b + 4 * i);
    if (isPlusZero(v)) continue;
    GC_REQUIRE(c < nnz, Err::RemoteError,
               "sparse message%s: dense body holds more than the %zu non-zeros its header "
               "announces", sourceText(source, buf), nnz);
    idx[c] = base + i;
    val[c] = v;
    ++c;
  }
  GC_REQUIRE(c == nnz, Err::RemoteError,
             "sparse message%s: dense body holds %zu non-zeros, header says %zu",
             sourceText(source, buf), c, nnz);
  return Status::Ok();
}

}  // namespace gradcomp::device::cpu
