#include "transport/bootstrap_wire.h"

#include <cstring>

namespace gradcomp::transport::wire {
namespace {

void putU32(std::string* out, uint32_t v) {
  char b[4];
  memcpy(b, &v, 4);  // both ends run the same build on the same kind of host
  out->append(b, 4);
}

// Reads a u32 at *pos, advancing it; false when the message is too short.
bool getU32(const std::string& msg, size_t* pos, uint32_t* v) {
  if (msg.size() < 4 || *pos > msg.size() - 4) return false;
  memcpy(v, msg.data() + *pos, 4);
  *pos += 4;
  return true;
}

}  // namespace

std::string packHello(int rank, int size, uint32_t seq, const std::string& blob) {
  std::string out;
  out.reserve(kHelloHeader + blob.size());
  putU32(&out, kMagic);
  putU32(&out, static_cast<uint32_t>(rank));
  putU32(&out, static_cast<uint32_t>(size));
  putU32(&out, seq);
  out += blob;
  return out;
}

Status unpackHello(const std::string& msg, int expectRank, int expectSize, uint32_t expectSeq,
                   std::string* blob) {
  size_t pos = 0;
  uint32_t magic = 0, rank = 0, size = 0, seq = 0;
  if (!getU32(msg, &pos, &magic) || !getU32(msg, &pos, &rank) || !getU32(msg, &pos, &size) ||
      !getU32(msg, &pos, &seq) || magic != kMagic)
    return makeStatus(Err::RemoteError,
                      "bootstrap: malformed hello for rank %d (%zu bytes, not a gradcomp bootstrap "
                      "message)", expectRank, msg.size());
  GC_REQUIRE(static_cast<int>(rank) == expectRank && static_cast<int>(size) == expectSize,
             Err::InvalidConfig,
             "bootstrap: rank %d reports rank %u of %u, expected %d ranks: are two jobs using "
             "the same GRADCOMP_BOOTSTRAP address, or do GRADCOMP_NRANKS values differ?",
             expectRank, rank, size, expectSize);
  GC_REQUIRE(seq == expectSeq, Err::RemoteError,
             "bootstrap: rank %d is at exchange %u, rank 0 at %u (ranks call allgather a "
             "different number of times)", expectRank, seq, expectSeq);
  GC_REQUIRE(msg.size() - pos <= kMaxBlob, Err::RemoteError,
             "bootstrap: rank %d sent %zu bytes, more than the %zu-byte limit", expectRank,
             msg.size() - pos, kMaxBlob);
  blob->assign(msg, pos, std::string::npos);
  return Status::Ok();
}

std::string packTable(uint32_t seq, const std::vector<std::string>& blobs) {
  std::string out;
  putU32(&out, kMagic);
  putU32(&out, static_cast<uint32_t>(blobs.size()));
  putU32(&out, seq);
  for (const std::string& b : blobs) putU32(&out, static_cast<uint32_t>(b.size()));
  for (const std::string& b : blobs) out += b;
  return out;
}

Status unpackTable(const std::string& msg, int expectSize, uint32_t expectSeq,
                   std::vector<std::string>* blobs) {
  size_t pos = 0;
  uint32_t magic = 0, size = 0, seq = 0;
  if (!getU32(msg, &pos, &magic) || !getU32(msg, &pos, &size) || !getU32(msg, &pos, &seq) ||
      magic != kMagic)
    return makeStatus(Err::RemoteError, "bootstrap: malformed table from rank 0 (%zu bytes)",
                      msg.size());
  GC_REQUIRE(static_cast<int>(size) == expectSize && seq == expectSeq, Err::RemoteError,
             "bootstrap: table from rank 0 has %u ranks at exchange %u, expected %d at %u", size,
             seq, expectSize, expectSeq);
  std::vector<uint32_t> lens(size);
  uint64_t total = 0;
  for (uint32_t& len : lens) {
    if (!getU32(msg, &pos, &len) || len > kMaxBlob)
      return makeStatus(Err::RemoteError, "bootstrap: malformed table from rank 0 (bad length)");
    total += len;
  }
  GC_REQUIRE(total == msg.size() - pos, Err::RemoteError,
             "bootstrap: malformed table from rank 0: lengths add up to %llu bytes, %zu present",
             (unsigned long long)total, msg.size() - pos);
  blobs->clear();
  for (uint32_t len : lens) {
    blobs->push_back(msg.substr(pos, len));
    pos += len;
  }
  return Status::Ok();
}

}  // namespace gradcomp::transport::wire
