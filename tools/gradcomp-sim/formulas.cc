#include "tools/gradcomp-sim/formulas.h"

#include <cmath>

#include "algorithms/allgather/allgather.h"

namespace gradcomp::sim {

VolumeBound tableVolume(const std::string& algo, int P, size_t n, size_t k) {
  VolumeBound b;
  const double p = P, dn = double(n), dk = double(k), frac = (p - 1) / p;
  const double logP = std::log2(p);
  constexpr double kHeader = 40, kLength = 8;
  if (algo == "dense") {
    b = {true, 8 * dn * frac, 8 * dn * frac, 0, "2n(P-1)/P words"};
  } else if (algo == "topka") {
    // One block per other rank, each with a header and a length word.
    b = {true, 8 * dk * (p - 1), 8 * dk * (p - 1), (kHeader + kLength) * (p - 1),
         "2k(P-1) words"};
  } else if (algo == "dsa") {
    b = {true, 16 * dk * frac, 4 * (2 * dk + dn) * frac, 4 * (kHeader + kLength) * (p - 1),
         "[4k(P-1)/P, (2k+n)(P-1)/P] words"};
  } else if (algo == "gtopk") {
    // 4k log P is the critical path (reduce + broadcast); a rank sends at most
    // one of the two per level, so 2k log P words <= sent <= 4k log P words.
    b = {true, 8 * dk * logP, 16 * dk * logP, 2 * (kHeader + kLength) * logP + 64 * logP,
         "4k log2(P) words"};
  } else if (algo == "oktopk") {
    // Split (P-1 messages), balance (<= P-1), two allgathers of P-1 blocks,
    // counts allgather (16 bytes per block), boundary agreement every tau calls.
    b = {true, 8 * dk * frac, 24 * dk * frac, (4 * kHeader + 4 * kLength + 16) * (p - 1),
         "[2k(P-1)/P, 6k(P-1)/P] words"};
  } else if (algo == "cltk") {
    // The ring of at most k values (fp32: 4 bytes a value, so 2k(P-1)/P words
    // are 8k(P-1)/P bytes), plus the index exchange. One leader
    // (GRADCOMP_CLTK_LEADERS=1): a broadcast, nothing for a leaf, the
    // leader's index set (k offsets of 4 bytes, 8 past 2^32 elements, or an
    // n-bit bitmap, the smaller; a 16-byte header) to each of its ceil(log2 P)
    // children. L leaders: an allgather of their sets of floor(k/L) indexes
    // (the others send a header), a rank sending at most P - 1 blocks: at
    // most L floor(k/L) <= k offsets, at most P - 1 bitmaps. The bounds cover every L: the union holds at least one
    // leader's floor(k/L) >= floor(k/P) indexes and at most k.
    const double children = std::ceil(logP);
    const double width = dn <= 4294967296.0 ? 4 : 8, bitmap = std::ceil(dn / 8);
    const double indexSet = std::fmin(dk * width, bitmap);
    const double shares = std::fmin(dk * width, (p - 1) * bitmap);
    b = {true, 8 * std::floor(dk / p) * frac, 8 * dk * frac + std::fmax(indexSet * children, shares),
         (16 + kLength) * (p - 1) + 16 * children + 64 * logP,
         "[2(k/P)(P-1)/P, 2k(P-1)/P] words + index exchange"};
  }
  return b;
}

namespace {

// payload(m) and the host shape; flat: H = P, L = 1.
Status allgatherShape(const std::string& algo, const param::Overrides& config, int P, size_t n,
                      int ranksPerHost, bool hierarchical, double* payload, int* H, int* L) {
  GC_REQUIRE(P > 0 && (!hierarchical || (ranksPerHost > 0 && P % ranksPerHost == 0)),
             Err::InvalidArgument, "allgather formula: %d ranks, %d per host", P, ranksPerHost);
  *L = hierarchical ? ranksPerHost : 1;
  *H = P / *L;
  uint64_t one = 0;  // a 2-rank flat allgather sends exactly one payload
  GC_CHECK(algo::allgather::wireBytes(algo, config, 2 * (n / size_t(P)), DataType::Float32, 2,
                                      &one));
  *payload = double(one);
  return Status::Ok();
}

}  // namespace

Status allgatherVolume(const std::string& algo, const param::Overrides& config, int P, size_t n,
                       int ranksPerHost, bool hierarchical, VolumeBound* out) {
  double payload = 0;
  int H = 0, L = 0;
  GC_CHECK(allgatherShape(algo, config, P, n, ranksPerHost, hierarchical, &payload, &H, &L));
  const double m = double(n / size_t(P));
  const double bytes = (H - 1) * payload + double(L - 1) * H * m * 4;
  *out = {true, bytes, bytes, 0,
          hierarchical ? "(H-1) payload(n/P) + (L-1) H (n/P) 4" : "(P-1) payload(n/P)"};
  return Status::Ok();
}

Status allgatherTime(const std::string& algo, const param::Overrides& config, int P, size_t n,
                     int ranksPerHost, bool hierarchical, const LinkModel& link, double* seconds) {
  double payload = 0;
  int H = 0, L = 0;
  GC_CHECK(allgatherShape(algo, config, P, n, ranksPerHost, hierarchical, &payload, &H, &L));
  const double m = double(n / size_t(P));
  *seconds = (H - 1) * (link.alphaS + link.betaSPerByte * payload);
  if (L > 1) *seconds += link.intraAlphaS + (L - 1) * link.intraBetaSPerByte * H * m * 4;
  return Status::Ok();
}

}  // namespace gradcomp::sim
