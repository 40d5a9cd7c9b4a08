// Synthetic allreduce inputs from a counter-based generator: element i of
// rank r's input for call c is a pure function f(seed, r, i, c). Any rank can
// therefore regenerate every other rank's input for checking, and call c of
// a replayed sequence sees exactly the data the original call c saw.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/dtype.h"
#include "common/status.h"

namespace gradcomp::bench {

enum class InputKind {
  // A heavy-tailed signal shared by all ranks (a Gaussian scale mixture: a
  // few coordinates 8x or 64x larger) plus per-rank Gaussian noise, so the
  // ranks' top-k index sets overlap only partly, as real gradients do.
  Gradient,
  Uniform,  // independent U(-1, 1) per rank
  Integer,  // integers in [-4, 4]: sums are exact in every dtype up to 64 ranks
  OneHot,   // element i is 1 on rank (i + call) mod P and 0 elsewhere: sum 1
  Ones,     // every element 1: sum P
};

const char* inputName(InputKind kind);
// origin names the flag in the error ("--input").
Status parseInput(const std::string& text, const std::string& origin, InputKind* out);

struct InputSpec {
  InputKind kind = InputKind::Gradient;
  uint64_t seed = 1;
  int nranks = 1;
};

// Fills buf (count elements of dtype) with rank `rank`'s input for call `call`,
// rounded once to the dtype (through the CPU backend's conversion).
Status fillInput(const InputSpec& spec, int rank, uint64_t call, DataType dtype, void* buf,
                 size_t count);

}  // namespace gradcomp::bench
