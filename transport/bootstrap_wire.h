// Wire format of the standalone bootstrap. Every length read from the wire is
// checked against the message size and a hard cap before it is used.
//   hello (rank r -> 0): magic, rank, size, seq, blob bytes
//   table (0 -> every r): magic, size, seq, size x length, the blobs in rank order
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace gradcomp::transport::wire {

constexpr uint32_t kMagic = 0x47434253;  // "GCBS"
constexpr size_t kMaxBlob = size_t(16) << 20;
constexpr size_t kHelloHeader = 16;

// Tags on the bootstrap's own worker: one bit per message kind, the sequence
// number of the allgather, and (for hellos) the sender's rank.
constexpr uint64_t kHelloBit = uint64_t(1) << 62;
constexpr uint64_t kTableBit = uint64_t(1) << 61;
constexpr int kRankBits = 21;
inline uint64_t helloTag(uint32_t seq, int rank) {
  return kHelloBit | (uint64_t(seq) << kRankBits) | uint64_t(rank);
}
inline uint64_t tableTag(uint32_t seq) { return kTableBit | (uint64_t(seq) << kRankBits); }

std::string packHello(int rank, int size, uint32_t seq, const std::string& blob);
// `from` names the sender in errors.
Status unpackHello(const std::string& msg, int expectRank, int expectSize, uint32_t expectSeq,
                   std::string* blob);

std::string packTable(uint32_t seq, const std::vector<std::string>& blobs);
Status unpackTable(const std::string& msg, int expectSize, uint32_t expectSeq,
                   std::vector<std::string>* blobs);

}  // namespace gradcomp::transport::wire
