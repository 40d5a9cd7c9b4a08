#include "plugin/nccl/config_file.h"

#define TOML_HEADER_ONLY 1
#define TOML_EXCEPTIONS 0
#include <toml++/toml.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

namespace gradcomp::nccl {
namespace {

std::string where(const std::string& origin, const toml::node& node) {
  const auto& src = node.source();
  return origin + ":" + std::to_string(src.begin.line);
}

// Scalars as text, so that one validating parser (the registry's) reads them.
Status scalarText(const toml::node& node, const std::string& what, std::string* out) {
  if (auto s = node.value<std::string>()) {
    *out = *s;
  } else if (node.is_integer()) {
    *out = std::to_string(*node.value<int64_t>());
  } else if (node.is_floating_point()) {
    char buf[64];  // shortest text that reads back as the same double
    auto r = std::to_chars(buf, buf + sizeof buf, *node.value<double>());
    *out = std::string(buf, r.ptr);
  } else if (auto b = node.value<bool>()) {
    *out = *b ? "1" : "0";
  } else {
    return makeStatus(Err::InvalidConfig, "%s: %s must be a string, number or boolean",
                      what.c_str(), what.c_str());
  }
  return Status::Ok();
}

Status readParams(const toml::node& node, const std::string& what,
                  std::map<std::string, std::string>* out) {
  const toml::table* t = node.as_table();
  if (t == nullptr) return makeStatus(Err::InvalidConfig, "%s must be a table", what.c_str());
  for (const auto& [key, value] : *t) {
    std::string text;
    GC_CHECK(scalarText(value, what + "." + std::string(key.str()), &text));
    (*out)[std::string(key.str())] = text;
  }
  return Status::Ok();
}

Status readRule(const toml::table& t, const std::string& origin, FileRule* rule) {
  for (const auto& [key, value] : t) {
    std::string k(key.str()), text;
    std::string what = origin + " key '" + k + "'";
    if (k == "params") {
      GC_CHECK(readParams(value, what, &rule->params));
      continue;
    }
    GC_CHECK(scalarText(value, what, &text));
    if (k == "comms") rule->comms = text;
    else if (k == "min_bytes") rule->minBytes = text;
    else if (k == "max_bytes") rule->maxBytes = text;
    else if (k == "algo") rule->algo = text;
    else
      return makeStatus(Err::InvalidConfig,
                        "%s: unknown key; a [[rule]] accepts comms, min_bytes, max_bytes, algo, params",
                        what.c_str());
  }
  return Status::Ok();
}

}  // namespace

Status parseConfigText(const std::string& text, const std::string& origin, ConfigFile* out) {
  *out = ConfigFile();
  // ASCII only: toml++ 3.3 reaches __builtin_unreachable (undefined behavior)
  // classifying some non-ASCII characters as whitespace (found by fuzz_config_file).
  for (size_t i = 0, line = 1; i < text.size(); line += text[i++] == '\n')
    GC_REQUIRE(!(uint8_t(text[i]) & 0x80), Err::InvalidConfig,
               "%s:%zu: byte %#x is not ASCII (configuration files are ASCII)", origin.c_str(),
               line, unsigned(uint8_t(text[i])));
  toml::parse_result parsed = toml::parse(text, origin);
  if (!parsed) {
    const auto& err = parsed.error();
    return makeStatus(Err::InvalidConfig, "%s:%u:%u: %.*s", origin.c_str(),
                      err.source().begin.line, err.source().begin.column,
                      static_cast<int>(err.description().size()), err.description().data());
  }
  const toml::table& root = parsed.table();
  for (const auto& [key, value] : root) {
    std::string k(key.str()), text;
    std::string what = where(origin, value) + " key '" + k + "'";
    if (k == "params") {
      GC_CHECK(readParams(value, what, &out->params));
    } else if (k == "rule") {
      const toml::array* rules = value.as_array();
      GC_REQUIRE(rules != nullptr, Err::InvalidConfig,
                 "%s: 'rule' must be an array of tables ([[rule]])", what.c_str());
      for (size_t i = 0; i < rules->size(); ++i) {
        const toml::table* t = (*rules)[i].as_table();
        std::string ruleOrigin = where(origin, (*rules)[i]) + " rule " + std::to_string(i + 1);
        GC_REQUIRE(t != nullptr, Err::InvalidConfig, "%s: must be a table", ruleOrigin.c_str());
        FileRule rule;
        rule.origin = ruleOrigin;
        GC_CHECK(readRule(*t, ruleOrigin, &rule));
        out->rules.push_back(std::move(rule));
      }
    } else {
      GC_CHECK(scalarText(value, what, &text));
      if (k == "algo") out->algo = text;
      else if (k == "comms") out->comms = text;
      else if (k == "min_bytes") out->minBytes = text;
      else if (k == "rs_algo") out->rsAlgo = text;
      else if (k == "ag_algo") out->agAlgo = text;
      else if (k == "selftest") out->selftest = text;
      else if (k == "shadow") out->shadow = text;
      else
        return makeStatus(Err::InvalidConfig,
                          "%s: unknown key; accepted: algo, rs_algo, ag_algo, comms, min_bytes, "
                          "selftest, "
                          "shadow, [params], [[rule]]",
                          what.c_str());
    }
  }
  return Status::Ok();
}

Status loadConfigFile(const std::string& path, ConfigFile* out) {
  std::ifstream in(path);
  GC_REQUIRE(in.good(), Err::InvalidConfig, "%s: cannot open the file: %s", path.c_str(),
             strerror(errno));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return parseConfigText(buffer.str(), path, out);
}

}  // namespace gradcomp::nccl
