#include "common/param.h"

#include <strings.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <sstream>

#include "common/log.h"

extern char** environ;

namespace gradcomp::param {
namespace {

const Spec kSpecs[] = {
#define GC_PARAM_SPEC_(name, kind, def, constraint, help) {#name, Kind::kind, def, constraint, help},
    GRADCOMP_PARAM_LIST(GC_PARAM_SPEC_)
#undef GC_PARAM_SPEC_
};
constexpr size_t kNumSpecs = sizeof(kSpecs) / sizeof(kSpecs[0]);
static_assert(kNumSpecs == static_cast<size_t>(Id::kCount), "registry out of sync");

const char* kindName(Kind k) {
  switch (k) {
    case Kind::Int: return "integer";
    case Kind::Double: return "number";
    case Kind::Size: return "size";
    case Kind::Bool: return "boolean";
    case Kind::Enum: return "enum";
    case Kind::String: return "string";
  }
  return "?";
}

// "lo..hi" -> bounds (doubles cover every integer range we declare).
bool parseRange(const char* constraint, double* lo, double* hi) {
  const char* dots = strstr(constraint, "..");
  if (!dots) return false;
  *lo = strtod(constraint, nullptr);
  const std::string hiText(dots + 2);
  if (hiText.find_first_of("KMGT") != std::string::npos) {
    uint64_t v = 0;
    if (!parseSize(hiText, "", &v).ok()) return false;
    *hi = static_cast<double>(v);
  } else {
    *hi = strtod(hiText.c_str(), nullptr);
  }
  return true;
}

std::string accepted(const Spec& s) {
  switch (s.kind) {
    case Kind::Int: return std::string("an integer in ") + s.constraint;
    case Kind::Double: return std::string("a number in ") + s.constraint;
    case Kind::Size: return std::string("a byte count with optional K/M/G suffix in ") + s.constraint;
    case Kind::Bool: return "one of 0, 1, on, off, true, false, yes, no";
    case Kind::Enum: return std::string("one of ") + s.constraint;
    case Kind::String: return "text";
  }
  return "";
}

struct Frozen {
  std::mutex mu;
  std::optional<Value> values[kNumSpecs];
  bool warnedUnknown = false;
};
thread_local int tQuiet = 0;

Frozen& frozen() {
  static Frozen f;
  return f;
}

}  // namespace

QuietScope::QuietScope() { ++tQuiet; }
QuietScope::~QuietScope() { --tQuiet; }

const Spec& spec(Id id) { return kSpecs[static_cast<int>(id)]; }

const Spec* find(const std::string& name) {
  for (const Spec& s : kSpecs)
    if (name == s.name) return &s;
  return nullptr;
}

std::vector<const Spec*> all() {
  std::vector<const Spec*> out;
  for (const Spec& s : kSpecs) out.push_back(&s);
  return out;
}

Status parseSize(const std::string& text, const std::string& origin, uint64_t* out) {
  const char* p = text.c_str();
  char* end = nullptr;
  errno = 0;
  if (text.empty() || !isdigit(static_cast<unsigned char>(p[0])))
    return makeStatus(Err::InvalidConfig, "%s='%s': expected a byte count such as 4096, 64K, 1M or 2G",
                      origin.c_str(), text.c_str());
  unsigned long long v = strtoull(p, &end, 10);
  uint64_t mult = 1;
  if (*end) {
    switch (toupper(static_cast<unsigned char>(*end))) {
      case 'K': mult = 1ull << 10; break;
      case 'M': mult = 1ull << 20; break;
      case 'G': mult = 1ull << 30; break;
      case 'T': mult = 1ull << 40; break;
      default: mult = 0;
    }
    ++end;
    if (*end == 'B' || *end == 'b') ++end;  // accept "64MB" as well as "64M"
  }
  if (errno || mult == 0 || *end || (v && mult > UINT64_MAX / v))
    return makeStatus(Err::InvalidConfig, "%s='%s': expected a byte count such as 4096, 64K, 1M or 2G",
                      origin.c_str(), text.c_str());
  *out = v * mult;
  return Status::Ok();
}

Status parse(const Spec& s, const std::string& text, const std::string& origin, Value* out) {
  Value v;
  v.set = true;
  v.s = text;
  auto bad = [&]() {
    return makeStatus(Err::InvalidConfig, "%s='%s' is invalid: expected %s", origin.c_str(),
                      text.c_str(), accepted(s).c_str());
  };
  double lo = 0, hi = 0;
  const bool ranged = parseRange(s.constraint, &lo, &hi);
  switch (s.kind) {
    case Kind::Int: {
      char* end = nullptr;
      errno = 0;
      long long x = strtoll(text.c_str(), &end, 10);
      if (text.empty() || errno || *end) return bad();
      if (ranged && (x < lo || x > hi)) return bad();
      v.i = x;
      break;
    }
    case Kind::Double: {
      char* end = nullptr;
      errno = 0;
      double x = strtod(text.c_str(), &end);
      if (text.empty() || errno || *end || !std::isfinite(x)) return bad();
      if (ranged && (x < lo || x > hi)) return bad();
      v.d = x;
      break;
    }
    case Kind::Size: {
      uint64_t x = 0;
      if (!parseSize(text, origin, &x).ok()) return bad();
      if (ranged && (static_cast<double>(x) < lo || static_cast<double>(x) > hi)) return bad();
      v.i = static_cast<int64_t>(x);
      break;
    }
    case Kind::Bool: {
      static const char* kTrue[] = {"1", "on", "true", "yes"};
      static const char* kFalse[] = {"0", "off", "false", "no"};
      bool found = false;
      for (const char* t : kTrue)
        if (strcasecmp(t, text.c_str()) == 0) v.i = 1, found = true;
      for (const char* f : kFalse)
        if (strcasecmp(f, text.c_str()) == 0) v.i = 0, found = true;
      if (!found) return bad();
      break;
    }
    case Kind::Enum: {
      std::stringstream ss(s.constraint);
      bool found = false;
      for (std::string choice; std::getline(ss, choice, '|');)
        if (strcasecmp(choice.c_str(), text.c_str()) == 0) v.s = choice, found = true;
      if (!found) return bad();
      break;
    }
    case Kind::String:
      break;
  }
  *out = v;
  return Status::Ok();
}

std::vector<std::string> unknownEnvironmentNames() {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) {
    if (strncmp(*e, "GRADCOMP_", 9) != 0) continue;
    const char* eq = strchr(*e, '=');
    const char* nameStart = *e + 9;
    std::string name(nameStart, eq ? static_cast<size_t>(eq - nameStart) : strlen(nameStart));
    if (!find(name)) out.push_back("GRADCOMP_" + name);
  }
  return out;
}

Status get(Id id, Value* out) {
  Frozen& f = frozen();
  bool warn = false;
  Status status;
  {
    std::lock_guard<std::mutex> lock(f.mu);
    if (!f.warnedUnknown && tQuiet == 0) f.warnedUnknown = warn = true;
    auto& slot = f.values[static_cast<int>(id)];
    if (!slot) {
      const Spec& s = spec(id);
      const std::string var = std::string("GRADCOMP_") + s.name;
      const char* env = getenv(var.c_str());
      Value v;
      if (env) {
        status = parse(s, env, var, &v);
        v.fromEnvironment = true;
      } else if (s.defaultText[0]) {
        status = parse(s, s.defaultText, var + " (default)", &v);
      }
      // A bad value stays an error on every read: never silently defaulted.
      if (status.ok()) slot = v;
    }
    if (status.ok()) *out = *slot;
  }
  // Outside the lock: logging reads parameters itself.
  if (warn) {
    for (const std::string& name : unknownEnvironmentNames())
      GC_WARN("%s is not a known gradcomp parameter (ignored; see docs/configuration.md)", name.c_str());
  }
  return status;
}

Status getInt(Id id, int64_t* out) {
  Value v;
  GC_CHECK(get(id, &v));
  *out = v.i;
  return Status::Ok();
}
Status getDouble(Id id, double* out) {
  Value v;
  GC_CHECK(get(id, &v));
  *out = v.d;
  return Status::Ok();
}
Status getBool(Id id, bool* out) {
  Value v;
  GC_CHECK(get(id, &v));
  *out = v.i != 0;
  return Status::Ok();
}
Status getString(Id id, std::string* out) {
  Value v;
  GC_CHECK(get(id, &v));
  *out = v.s;
  return Status::Ok();
}
bool isSet(Id id) {
  Value v;
  return get(id, &v).ok() && v.set;
}

Status validateEnvironment() {
  for (size_t i = 0; i < kNumSpecs; ++i) {
    Value v;
    GC_CHECK(get(static_cast<Id>(i), &v));
  }
  return Status::Ok();
}

std::string markdownDoc() {
  std::ostringstream md;
  md << "# Configuration\n\n"
        "<!-- Generated by `gradcomp-params --markdown` from common/param_list.h; do not edit. -->\n\n"
        "Every variable is read once, at first use, and frozen. A bad value is an error that "
        "names the variable and what it accepts. Unknown `GRADCOMP_*` variables are warned about. "
        "`UCX_*` variables pass through to UCX unchanged.\n\n"
        "| Variable | Type | Default | Accepted | Description |\n"
        "|---|---|---|---|---|\n";
  for (const Spec& s : kSpecs) {
    // A '|' inside a cell would end it: escape enum separators and the like.
    auto cell = [](std::string text) {
      for (size_t pos = 0; (pos = text.find('|', pos)) != std::string::npos; pos += 2)
        text.replace(pos, 1, "\\|");
      return text;
    };
    const std::string acceptedText = s.kind == Kind::String ? "" : cell(accepted(s));
    md << "| `GRADCOMP_" << s.name << "` | " << kindName(s.kind) << " | "
       << (s.defaultText[0] ? std::string("`") + s.defaultText + "`" : std::string("unset")) << " | "
       << acceptedText << " | " << cell(s.help) << " |\n";
  }
  return md.str();
}

Status Overrides::set(const std::string& name, const std::string& text, const std::string& origin) {
  const Spec* s = find(name);
  GC_REQUIRE(s, Err::InvalidConfig, "%s: unknown parameter '%s'", origin.c_str(), name.c_str());
  Value v;
  GC_CHECK(parse(*s, text, origin, &v));
  values_[name] = v;
  return Status::Ok();
}

Status Overrides::get(Id id, Value* out) const {
  auto it = values_.find(spec(id).name);
  if (it != values_.end()) {
    *out = it->second;
    return Status::Ok();
  }
  return param::get(id, out);
}
Status Overrides::getInt(Id id, int64_t* out) const {
  Value v;
  GC_CHECK(get(id, &v));
  *out = v.i;
  return Status::Ok();
}
Status Overrides::getDouble(Id id, double* out) const {
  Value v;
  GC_CHECK(get(id, &v));
  *out = v.d;
  return Status::Ok();
}
Status Overrides::getBool(Id id, bool* out) const {
  Value v;
  GC_CHECK(get(id, &v));
  *out = v.i != 0;
  return Status::Ok();
}
Status Overrides::getString(Id id, std::string* out) const {
  Value v;
  GC_CHECK(get(id, &v));
  *out = v.s;
  return Status::Ok();
}

}  // namespace gradcomp::param
