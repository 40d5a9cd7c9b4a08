// Typed access to the GRADCOMP_* registry (common/param_list.h).
// Contract: a value is parsed and validated at its first read and frozen from
// then on (later changes to the environment are ignored). A bad value is an
// InvalidConfig error naming the variable and what is accepted; it is never
// silently replaced by the default. The first read also warns once about
// GRADCOMP_* variables that the registry does not know.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/param_list.h"
#include "common/status.h"

namespace gradcomp::param {

enum class Kind { Int, Double, Size, Bool, Enum, String };

enum class Id : int {
#define GC_PARAM_ID_(name, kind, def, constraint, help) name,
  GRADCOMP_PARAM_LIST(GC_PARAM_ID_)
#undef GC_PARAM_ID_
  kCount
};

struct Spec {
  const char* name;  // without the GRADCOMP_ prefix
  Kind kind;
  const char* defaultText;
  const char* constraint;
  const char* help;
};

struct Value {
  bool set = false;  // false: unset (empty default, not in the environment)
  int64_t i = 0;     // Int, Size, Bool (0/1)
  double d = 0;      // Double
  std::string s;     // Enum, String (and the original text for every kind)
  bool fromEnvironment = false;  // GRADCOMP_<NAME> was set (not the default)
};

const Spec& spec(Id id);
// Lookup by name without prefix, case-sensitive; nullptr when unknown.
const Spec* find(const std::string& name);
std::vector<const Spec*> all();

// The one validating parser: `origin` names the source in errors
// (e.g. "GRADCOMP_TIMEOUT_S" or "--timeout").
Status parse(const Spec& spec, const std::string& text, const std::string& origin, Value* out);

// Value from the environment (else default), frozen at first read.
Status get(Id id, Value* out);
Status getInt(Id id, int64_t* out);  // also Size and Bool
Status getDouble(Id id, double* out);
Status getBool(Id id, bool* out);
Status getString(Id id, std::string* out);  // also Enum
bool isSet(Id id);

// Validate every GRADCOMP_* variable present in the environment; first error.
Status validateEnvironment();
// GRADCOMP_* names in the environment that the registry does not know.
std::vector<std::string> unknownEnvironmentNames();

// While alive on this thread, reads do not emit the unknown-variable warning
// (the logger reads its own level through the registry).
class QuietScope {
 public:
  QuietScope();
  ~QuietScope();
};

// Markdown for docs/configuration.md.
std::string markdownDoc();

// Per-call overrides over the registry (bench flags, config files, public API):
// a name without prefix -> text, validated with the same spec as the variable.
class Overrides {
 public:
  Status set(const std::string& name, const std::string& text, const std::string& origin);
  Status get(Id id, Value* out) const;
  Status getInt(Id id, int64_t* out) const;
  Status getDouble(Id id, double* out) const;
  Status getBool(Id id, bool* out) const;
  Status getString(Id id, std::string* out) const;
  const std::map<std::string, Value>& values() const { return values_; }

 private:
  std::map<std::string, Value> values_;
};

// Size with optional K/M/G/T suffix (powers of 1024), e.g. "64M". Shared by the
// registry and the tools so sizes mean the same everywhere.
Status parseSize(const std::string& text, const std::string& origin, uint64_t* out);

}  // namespace gradcomp::param
