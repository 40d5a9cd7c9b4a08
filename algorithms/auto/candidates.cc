#include "algorithms/auto/candidates.h"

#include <sstream>

#include "algorithms/algorithm.h"
#include "common/param.h"

namespace gradcomp::algo::autosel {
namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, sep)) parts.push_back(trim(part));
  if (!s.empty() && s.back() == sep) parts.push_back("");
  return parts;
}

Status parseEntry(const std::string& entry, const std::string& origin, CandidateSpec* out) {
  const std::vector<std::string> parts = split(entry, ':');
  out->label = entry;
  out->algo = parts[0];
  const AlgorithmInfo* info = findAlgorithm(out->algo);
  GC_REQUIRE(info == nullptr || !info->selector, Err::InvalidConfig,
             "%s: '%s' chooses among candidates and cannot be one of them", origin.c_str(),
             out->algo.c_str());
  GC_REQUIRE(info != nullptr, Err::InvalidConfig,
             "%s: unknown candidate '%s' (entry '%s'); accepted: %s, each optionally followed by "
             ":PARAM=VALUE",
             origin.c_str(), out->algo.c_str(), entry.c_str(), algorithmNames().c_str());
  GC_REQUIRE(out->algo != "wagma", Err::InvalidConfig,
             "%s: wagma cannot be a candidate (it averages within groups between global "
             "averages, which is not an allreduce)",
             origin.c_str());
  for (size_t i = 1; i < parts.size(); ++i) {
    const size_t eq = parts[i].find('=');
    const std::string name = trim(parts[i].substr(0, eq));
    GC_REQUIRE(eq != std::string::npos && !name.empty(), Err::InvalidConfig,
               "%s: '%s' in entry '%s' is not PARAM=VALUE", origin.c_str(), parts[i].c_str(),
               entry.c_str());
    const std::string value = trim(parts[i].substr(eq + 1));
    bool declared = false;
    std::string accepted;
    for (param::Id id : info->params) {
      const char* p = param::spec(id).name;
      declared = declared || name == p;
      accepted += (accepted.empty() ? "" : ", ") + std::string(p);
    }
    GC_REQUIRE(declared, Err::InvalidConfig,
               "%s: '%s' is not a parameter of %s (its parameters: %s)", origin.c_str(),
               name.c_str(), out->algo.c_str(), accepted.empty() ? "none" : accepted.c_str());
    param::Value v;
    GC_CHECK(param::parse(*param::find(name), value, origin + " " + entry, &v));
    out->params[name] = value;
  }
  return Status::Ok();
}

}  // namespace

Status parseCandidates(const std::string& text, const std::string& origin,
                       std::vector<CandidateSpec>* out) {
  out->clear();
  GC_REQUIRE(!trim(text).empty(), Err::InvalidConfig,
             "%s is empty; it needs at least one algorithm (e.g. dense,qsgd:BITS=4,oktopk)",
             origin.c_str());
  for (const std::string& entry : split(text, ',')) {
    GC_REQUIRE(!entry.empty(), Err::InvalidConfig, "%s='%s': empty entry in the comma list",
               origin.c_str(), text.c_str());
    CandidateSpec spec;
    GC_CHECK(parseEntry(entry, origin, &spec));
    for (const CandidateSpec& seen : *out)
      GC_REQUIRE(seen.label != spec.label, Err::InvalidConfig, "%s: '%s' is listed twice",
                 origin.c_str(), spec.label.c_str());
    out->push_back(spec);
  }
  return Status::Ok();
}

}  // namespace gradcomp::algo::autosel
