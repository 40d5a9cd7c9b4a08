// A small deterministic RNG (splitmix64) for everything the trainer draws:
// initial weights, per-epoch shuffles, straggler choice. Written out here rather
// than std::*_distribution so a seed means the same numbers with every standard
// library; ranks that must agree (weights, stragglers) seed it identically.
#pragma once

#include <cmath>
#include <cstdint>

namespace gradcomp::train {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  // Independent streams from one seed: Rng(seed, epoch, rank) etc.
  Rng(uint64_t seed, uint64_t a, uint64_t b = 0) : state_(seed) {
    state_ = next() ^ (a * 0x9E3779B97F4A7C15ull);
    state_ = next() ^ (b * 0xC2B2AE3D27D4EB4Full);
  }

  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n); n > 0. Modulo bias is negligible for n << 2^64.
  uint64_t below(uint64_t n) { return next() % n; }
  // Uniform in (0, 1): never 0, so log() below is finite.
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
  // Standard normal (Box-Muller; one value per call keeps the stream simple).
  double normal() {
    const double u1 = uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t state_;
};

}  // namespace gradcomp::train
