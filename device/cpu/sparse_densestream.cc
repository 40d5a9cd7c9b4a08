// DenseStream (Li et al., seed 001; algorithms.md section 4) body encoding
// and validating decoding for the CPU backend. Little-endian throughout.
#include <cstring>

#include "device/cpu/sparse_ops.h"
#include "device/cpu/wire_bytes.h"

namespace gradcomp::device::cpu {
namespace {

Status checkIndexBytes(const char* what, int indexBytes) {
  GC_REQUIRE(indexBytes == 4 || indexBytes == 8, Err::InvalidArgument,
             "%s: indexBytes = %d (accepted: 4, 8)", what, indexBytes);
  return Status::Ok();
}

// Visits the blocks of a sorted COO list: fn(firstEntry, endEntry) per block.
template <class Fn>
Status forEachBlock(const char* what, const uint64_t* idx, size_t count, size_t maxRun, Fn fn) {
  size_t first = 0;
  for (size_t i = 0; i < count; ++i) {
    if (i > 0) {
      GC_REQUIRE(idx[i] > idx[i - 1], Err::InvalidArgument,
                 "%s: COO indexes not strictly ascending at entry %zu", what, i);
      if (idx[i] - idx[i - 1] - 1 > maxRun) {
        fn(first, i);
        first = i;
      }
    }
  }
  if (count > 0) fn(first, count);
  return Status::Ok();
}

}  // namespace

Status denseStreamSize(const uint64_t* idx, size_t count, int indexBytes, size_t* bytes,
                       size_t* blocks) {
  GC_CHECK(checkIndexBytes("denseStreamSize", indexBytes));
  size_t total = 0, nblocks = 0;
  GC_CHECK(forEachBlock("denseStreamSize", idx, count, denseStreamMaxZeroRun(indexBytes),
                        [&](size_t b, size_t e) {
                          total += 2 * size_t(indexBytes) + 4 * size_t(idx[e - 1] - idx[b] + 1);
                          ++nblocks;
                        }));
  *bytes = total;
  *blocks = nblocks;
  return Status::Ok();
}

Status denseStreamEncode(const uint64_t* idx, const float* val, size_t count, uint64_t base,
                         int indexBytes, void* out, size_t bytes) {
  GC_CHECK(checkIndexBytes("denseStreamEncode", indexBytes));
  size_t need = 0, nblocks = 0;
  GC_CHECK(denseStreamSize(idx, count, indexBytes, &need, &nblocks));
  GC_REQUIRE(need == bytes, Err::Internal,
             "denseStreamEncode: the encoding takes %zu bytes, the caller sized %zu", need, bytes);
  const uint64_t maxRel = indexBytes == 4 ? 0xFFFFFFFFull : ~0ull;
  for (size_t i = 0; i < count; ++i) {
    GC_REQUIRE(!isPlusZero(val[i]), Err::Internal,
               "denseStreamEncode: entry %zu holds +0.0 (COO inputs carry non-zeros only)", i);
    GC_REQUIRE(idx[i] >= base && idx[i] - base <= maxRel, Err::Internal,
               "denseStreamEncode: index %llu does not fit base %llu with %d-byte offsets",
               (unsigned long long)idx[i], (unsigned long long)base, indexBytes);
  }
  uint8_t* p = static_cast<uint8_t*>(out);
  const size_t maxRun = denseStreamMaxZeroRun(indexBytes);
  GC_CHECK(forEachBlock("denseStreamEncode", idx, count, maxRun, [&](size_t b, size_t e) {
    const uint64_t start = idx[b] - base, len = idx[e - 1] - idx[b] + 1;
    putUint(p, start, indexBytes);
    putUint(p + indexBytes, len, indexBytes);
    p += 2 * indexBytes;
    std::memset(p, 0, 4 * len);  // zeros of the runs inside the block (+0.0 bits)
    for (size_t i = b; i < e; ++i) putFloat(p + 4 * (idx[i] - idx[b]), val[i]);
    p += 4 * len;
  }));
  return Status::Ok();
}

Status denseStreamDecode(const void* in, size_t bytes, size_t blocks, uint64_t n, uint64_t base,
                         int indexBytes, size_t nnz, uint64_t* idx, float* val, int source) {
  char src[32];
  sourceText(source, src);
  GC_CHECK(checkIndexBytes("denseStreamDecode", indexBytes));
  const uint8_t* p = static_cast<const uint8_t*>(in);
  const size_t maxRun = denseStreamMaxZeroRun(indexBytes);
  size_t pos = 0, c = 0;
  uint64_t prevEnd = 0;
  for (size_t b = 0; b < blocks; ++b) {
    GC_REQUIRE(bytes - pos >= 2 * size_t(indexBytes), Err::RemoteError,
               "DenseStream%s: block %zu header runs past the %zu-byte body", src, b, bytes);
    const uint64_t start = getUint(p + pos, indexBytes);
    const uint64_t len = getUint(p + pos + indexBytes, indexBytes);
    pos += 2 * indexBytes;
    GC_REQUIRE(len >= 1 && start < n && len <= n - start, Err::RemoteError,
               "DenseStream%s: block %zu [start %llu, length %llu] outside a region of %llu", src, b,
               (unsigned long long)start, (unsigned long long)len, (unsigned long long)n);
    GC_REQUIRE(b == 0 || (start >= prevEnd && start - prevEnd > maxRun), Err::RemoteError,
               "DenseStream%s: block %zu starts at %llu, not more than T = %zu zeros after the "
               "previous block's end %llu", src, b, (unsigned long long)start, maxRun,
               (unsigned long long)prevEnd);
    GC_REQUIRE(len <= (bytes - pos) / 4, Err::RemoteError,
               "DenseStream%s: block %zu of length %llu runs past the %zu-byte body", src, b,
               (unsigned long long)len, bytes);
    size_t zeroRun = 0;
    for (uint64_t j = 0; j < len; ++j) {
      const float v = getFloat(p + pos + 4 * j);
      if (isPlusZero(v)) {
        GC_REQUIRE(j != 0 && j != len - 1 && ++zeroRun <= maxRun, Err::RemoteError,
                   "DenseStream%s: block %zu breaks the structure at offset %llu (blocks start "
                   "and end non-zero, inner zero runs <= %zu)", src, b, (unsigned long long)j, maxRun);
        continue;
      }
      zeroRun = 0;
      GC_REQUIRE(c < nnz, Err::RemoteError,
                 "DenseStream%s: more than the %zu non-zeros the header announces", src, nnz);
      idx[c] = base + start + j;
      val[c] = v;
      ++c;
    }
    pos += 4 * len;
    prevEnd = start + len;
  }
  GC_REQUIRE(pos == bytes, Err::RemoteError,
             "DenseStream%s: %zu blocks end at byte %zu of a %zu-byte body", src, blocks, pos, bytes);
  GC_REQUIRE(c == nnz, Err::RemoteError,
             "DenseStream%s: body holds %zu non-zeros, header says %zu", src, c, nnz);
  return Status::Ok();
}

}  // namespace gradcomp::device::cpu
