// The fused error-feedback load of the CPU backend (Backend::accumulate).
#pragma once

#include <cstddef>

#include "common/dtype.h"
#include "common/status.h"
#include "device/backend.h"

namespace gradcomp::device::cpu {

Status accumulate(float* acc, const void* in, DataType inType, size_t n, bool add,
                  float countThreshold, AccumulateStats* stats);

}  // namespace gradcomp::device::cpu
