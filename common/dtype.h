// Element types and reduction ops shared by every layer. Values match
// ncclDataType_t / ncclRedOp_t where NCCL has them, so the plugin maps 1:1.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace gradcomp {

enum class DataType : int {
  Int32 = 2,     // ncclInt32
  Int64 = 4,     // ncclInt64
  Float16 = 6,   // ncclFloat16
  Float32 = 7,   // ncclFloat32
  Float64 = 8,   // ncclFloat64
  BFloat16 = 9,  // ncclBfloat16
};

enum class RedOp : int { Sum = 0, Avg = 4 };  // ncclSum, ncclAvg

size_t dtypeSize(DataType t);
const char* dtypeName(DataType t);  // "float", "half", "bfloat16", "double", "int32", "int64"
bool isFloating(DataType t);
// Accepts nccl-tests names and aliases: float/f32/float32, half/f16/float16,
// bfloat16/bf16, double/f64/float64, int32/int, int64. `origin` names the flag.
Status parseDtype(const std::string& text, const std::string& origin, DataType* out);

const char* redOpName(RedOp op);  // "sum", "avg"
Status parseRedOp(const std::string& text, const std::string& origin, RedOp* out);

}  // namespace gradcomp
