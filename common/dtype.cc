#include "common/dtype.h"

#include <strings.h>

namespace gradcomp {

size_t dtypeSize(DataType t) {
  switch (t) {
    case DataType::Int32: return 4;
    case DataType::Int64: return 8;
    case DataType::Float16: return 2;
    case DataType::Float32: return 4;
    case DataType::Float64: return 8;
    case DataType::BFloat16: return 2;
  }
  return 0;
}

const char* dtypeName(DataType t) {
  switch (t) {
    case DataType::Int32: return "int32";
    case DataType::Int64: return "int64";
    case DataType::Float16: return "half";
    case DataType::Float32: return "float";
    case DataType::Float64: return "double";
    case DataType::BFloat16: return "bfloat16";
  }
  return "?";
}

bool isFloating(DataType t) { return t != DataType::Int32 && t != DataType::Int64; }

Status parseDtype(const std::string& text, const std::string& origin, DataType* out) {
  static const struct { const char* name; DataType t; } kNames[] = {
      {"float", DataType::Float32},   {"f32", DataType::Float32},     {"float32", DataType::Float32},
      {"half", DataType::Float16},    {"f16", DataType::Float16},     {"float16", DataType::Float16},
      {"bfloat16", DataType::BFloat16}, {"bf16", DataType::BFloat16},
      {"double", DataType::Float64},  {"f64", DataType::Float64},     {"float64", DataType::Float64},
      {"int32", DataType::Int32},     {"int", DataType::Int32},       {"int64", DataType::Int64}};
  for (const auto& e : kNames)
    if (strcasecmp(e.name, text.c_str()) == 0) {
      *out = e.t;
      return Status::Ok();
    }
  return makeStatus(Err::InvalidArgument,
                    "%s='%s' is invalid: expected one of float, half, bfloat16, double, int32, int64",
                    origin.c_str(), text.c_str());
}

const char* redOpName(RedOp op) { return op == RedOp::Sum ? "sum" : "avg"; }

Status parseRedOp(const std::string& text, const std::string& origin, RedOp* out) {
  if (strcasecmp(text.c_str(), "sum") == 0) *out = RedOp::Sum;
  else if (strcasecmp(text.c_str(), "avg") == 0) *out = RedOp::Avg;
  else
    return makeStatus(Err::InvalidArgument, "%s='%s' is invalid: expected sum or avg", origin.c_str(),
                      text.c_str());
  return Status::Ok();
}

}  // namespace gradcomp
