// Index sets without values (Backend::indexEncode / indexDecode): offsets or
// a bitmap. The bitmap is read 64 bits at a time so a sparse set costs a word
// test per 64 positions plus one step per member.
#include <cstring>

#include "device/backend.h"
#include "device/cpu/sparse_ops.h"
#include "device/cpu/wire_bytes.h"

namespace gradcomp::device::cpu {
namespace {

Status checkWidth(const char* what, int indexBytes) {
  GC_REQUIRE(indexBytes == 4 || indexBytes == 8 || indexBytes == Backend::kIndexBitmap,
             Err::InvalidArgument, "%s: indexBytes = %d (accepted: 4, 8, 0 = bitmap)", what,
             indexBytes);
  return Status::Ok();
}

}  // namespace

Status indexEncode(const uint64_t* idx, size_t count, uint64_t base, uint64_t n, int indexBytes,
                   void* out) {
  GC_CHECK(checkWidth("indexEncode", indexBytes));
  for (size_t i = 0; i < count; ++i)
    GC_REQUIRE(idx[i] >= base && idx[i] - base < n && (i == 0 || idx[i] > idx[i - 1]),
               Err::Internal, "indexEncode: entry %zu (index %llu) outside [%llu, %llu) or out of order",
               i, (unsigned long long)idx[i], (unsigned long long)base,
               (unsigned long long)(base + n));
  uint8_t* b = static_cast<uint8_t*>(out);
  if (indexBytes != Backend::kIndexBitmap) {
    for (size_t i = 0; i < count; ++i) putUint(b + i * indexBytes, idx[i] - base, indexBytes);
    return Status::Ok();
  }
  std::memset(b, 0, size_t((n + 7) / 8));
  for (size_t i = 0; i < count; ++i) {
    const uint64_t off = idx[i] - base;
    b[off / 8] = uint8_t(b[off / 8] | (1u << (off % 8)));
  }
  return Status::Ok();
}

Status indexDecode(const void* in, size_t count, uint64_t base, uint64_t n, int indexBytes,
                   uint64_t* idx, int source) {
  GC_CHECK(checkWidth("indexDecode", indexBytes));
  char buf[32];
  const uint8_t* b = static_cast<const uint8_t*>(in);
  if (indexBytes != Backend::kIndexBitmap) {
    for (size_t i = 0; i < count; ++i) {
      const uint64_t off = getUint(b + i * indexBytes, indexBytes);
      GC_REQUIRE(off < n, Err::RemoteError,
                 "index set%s: entry %zu has offset %llu outside a region of %llu",
                 sourceText(source, buf), i, (unsigned long long)off, (unsigned long long)n);
      GC_REQUIRE(i == 0 || base + off > idx[i - 1], Err::RemoteError,
                 "index set%s: offsets not strictly ascending at entry %zu", sourceText(source, buf),
                 i);
      idx[i] = base + off;
    }
    return Status::Ok();
  }
  const size_t bytes = size_t((n + 7) / 8);
  if (n % 8 != 0)
    GC_REQUIRE((b[bytes - 1] >> (n % 8)) == 0, Err::RemoteError,
               "index set%s: bitmap has bits set past its region of %llu", sourceText(source, buf),
               (unsigned long long)n);
  size_t c = 0;
  for (size_t w = 0; w < bytes; w += 8) {
    uint64_t word = 0;
    std::memcpy(&word, b + w, bytes - w < 8 ? bytes - w : 8);  // little-endian host
    while (word != 0) {
      GC_REQUIRE(c < count, Err::RemoteError,
                 "index set%s: bitmap has more than the %zu members its header announces",
                 sourceText(source, buf), count);
      idx[c++] = base + uint64_t(w) * 8 + uint64_t(__builtin_ctzll(word));
      word &= word - 1;
    }
  }
  GC_REQUIRE(c == count, Err::RemoteError,
             "index set%s: bitmap has %zu members, its header announces %zu",
             sourceText(source, buf), c, count);
  return Status::Ok();
}

}  // namespace gradcomp::device::cpu
