// The fused error-feedback load of the CPU backend (Backend::accumulate).
#pragma once

#include <cstddef>

#include "common/dtype.h"
#include "common/status.h"
#include "device/backend.h"

namespace gradcomp::device::cpu {

Status accumulate(float* acc, const void* in, DataType inType, size_t n, bool add,
                  float countThreshold, AccumulateStats* stats);

// Backend::accumulateCompact: each block compacted right after it is
// accumulated (compactAbove over the block, still in cache), until the
// entries above countThreshold outgrow `capacity`.
Status accumulateCompact(float* acc, const void* in, DataType inType, size_t n, bool add,
                         float countThreshold, uint64_t* idx, float* val, size_t capacity,
                         AccumulateStats* stats, size_t* compacted);

}  // namespace gradcomp::device::cpu
