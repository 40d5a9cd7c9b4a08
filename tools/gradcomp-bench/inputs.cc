#include "tools/gradcomp-bench/inputs.h"

#include <strings.h>

#include <algorithm>

#include "device/backend.h"

namespace gradcomp::bench {
namespace {

// splitmix64's finalizer: a bijective 64-bit mix, good enough that hashes of
// consecutive counters look independent.
inline uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ull;

// Key of one (seed, stream, call) sequence; element i hashes key + i*golden.
// Stream 0 is the signal shared by all ranks, stream r+1 is rank r's own.
uint64_t streamKey(uint64_t seed, uint64_t stream, uint64_t call) {
  return mix(mix(mix(seed ^ 0x6772616463ull) ^ stream) + call * kGolden);
}

inline uint64_t elementHash(uint64_t key, uint64_t index) { return mix(key + index * kGolden); }

// Irwin-Hall approximation of N(0,1) from the low 48 bits: three 16-bit
// uniforms, mean 1.5, variance 1/4. Cheap and bounded (|x| <= 3), which is
// all a synthetic gradient needs.
inline double gauss48(uint64_t h) {
  const double k = 1.0 / 65536.0;
  const double sum = double(h & 0xffff) * k + double((h >> 16) & 0xffff) * k +
                     double((h >> 32) & 0xffff) * k;
  return (sum - 1.5) * 2.0;
}

// Shared heavy-tailed signal: N(0,1) scaled by 64 with probability 1/1024 and by
// 8 with probability 15/1024, selected by the top 16 bits.
inline double signal(uint64_t h) {
  const uint64_t top = h >> 48;
  const double scale = top < 64 ? 64.0 : top < 1024 ? 8.0 : 1.0;
  return scale * gauss48(h);
}

double value(const InputSpec& spec, uint64_t sharedKey, uint64_t rankKey, int rank,
             uint64_t call, uint64_t index) {
  switch (spec.kind) {
    case InputKind::Gradient:
      return signal(elementHash(sharedKey, index)) + 0.5 * gauss48(elementHash(rankKey, index));
    case InputKind::Uniform:
      return double(elementHash(rankKey, index) >> 11) * (2.0 / 9007199254740992.0) - 1.0;
    case InputKind::Integer:
      return double(int64_t((elementHash(rankKey, index) >> 32) % 9) - 4);
    case InputKind::OneHot:
      return (index + call) % uint64_t(spec.nranks) == uint64_t(rank) ? 1.0 : 0.0;
    case InputKind::Ones:
      return 1.0;
  }
  return 0.0;
}

const struct {
  const char* name;
  InputKind kind;
} kInputs[] = {{"gradient", InputKind::Gradient},
               {"uniform", InputKind::Uniform},
               {"integer", InputKind::Integer},
               {"onehot", InputKind::OneHot},
               {"ones", InputKind::Ones}};

}  // namespace

const char* inputName(InputKind kind) {
  for (const auto& e : kInputs)
    if (e.kind == kind) return e.name;
  return "?";
}

Status parseInput(const std::string& text, const std::string& origin, InputKind* out) {
  for (const auto& e : kInputs)
    if (strcasecmp(e.name, text.c_str()) == 0) {
      *out = e.kind;
      return Status::Ok();
    }
  return makeStatus(Err::InvalidArgument,
                    "%s='%s' is invalid: expected one of gradient, uniform, integer, onehot, ones",
                    origin.c_str(), text.c_str());
}

Status fillInput(const InputSpec& spec, int rank, uint64_t call, DataType dtype, void* buf,
                 size_t count) {
  GC_REQUIRE(rank >= 0 && rank < spec.nranks, Err::Internal, "input rank %d outside 0..%d", rank,
             spec.nranks - 1);
  const uint64_t sharedKey = streamKey(spec.seed, 0, call);
  const uint64_t rankKey = streamKey(spec.seed, uint64_t(rank) + 1, call);
  // Generate in fp64 chunks, then round once to the dtype.
  constexpr size_t kChunk = 4096;
  double chunk[kChunk];
  char* dst = static_cast<char*>(buf);
  const size_t elemSize = dtypeSize(dtype);
  for (size_t base = 0; base < count; base += kChunk) {
    const size_t n = std::min(kChunk, count - base);
    for (size_t j = 0; j < n; ++j) chunk[j] = value(spec, sharedKey, rankKey, rank, call, base + j);
    GC_CHECK(device::cpuBackend().convert(dst + base * elemSize, dtype, chunk, DataType::Float64, n));
  }
  return Status::Ok();
}

}  // namespace gradcomp::bench
