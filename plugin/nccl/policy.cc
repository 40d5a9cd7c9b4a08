#include "plugin/nccl/policy.h"

#include <fnmatch.h>
#include <sys/stat.h>

#include <sstream>

#include "algorithms/algorithm.h"
#include "algorithms/auto/candidates.h"
#include "common/param.h"
#include "plugin/nccl/config_file.h"

namespace gradcomp::nccl {
namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

Status parseNumber(const std::string& text, const std::string& origin, uint64_t* out) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = strtoull(text.c_str(), &end, 10);
  bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
  GC_REQUIRE(digits && errno == 0 && end && *end == '\0', Err::InvalidConfig,
             "%s: '%s' is not a non-negative integer", origin.c_str(), text.c_str());
  *out = v;
  return Status::Ok();
}

Status checkAlgo(const std::string& name, const std::string& origin) {
  if (name == "off" || algo::findAlgorithm(name) != nullptr) return Status::Ok();
  return makeStatus(Err::InvalidConfig, "%s='%s': unknown algorithm; accepted: off, %s, %s",
                    origin.c_str(), name.c_str(), algo::selectorNames().c_str(),
                    algo::algorithmNames().c_str());
}

// "" (follow the call's algorithm), off, or an algorithm with a
// reduce-scatter form.
Status checkReduceScatterAlgo(const std::string& name, const std::string& origin) {
  if (name.empty() || name == "off") return Status::Ok();
  const algo::AlgorithmInfo* info = algo::findAlgorithm(name);
  if (info && info->hasReduceScatter()) return Status::Ok();
  const std::string forms = algo::reduceScatterNames();
  return makeStatus(Err::InvalidConfig,
                    "%s='%s': %s; accepted: off, empty (the call's algorithm), %s", origin.c_str(),
                    name.c_str(),
                    info ? "the algorithm has no reduce-scatter form" : "unknown algorithm",
                    forms.c_str());
}

Status checkParams(const std::map<std::string, std::string>& params, const std::string& origin) {
  for (const auto& [name, text] : params) {
    const param::Spec* spec = param::find(name);
    GC_REQUIRE(spec != nullptr, Err::InvalidConfig,
               "%s: unknown parameter '%s' (registry names without GRADCOMP_, e.g. DENSITY)",
               origin.c_str(), name.c_str());
    param::Value v;
    GC_CHECK(param::parse(*spec, text, origin + " " + name, &v));
  }
  return Status::Ok();
}

// True when GRADCOMP_<NAME> is in the environment (it then beats the file).
bool fromEnv(param::Id id) {
  param::Value v;
  return param::get(id, &v).ok() && v.fromEnvironment;
}

// GRADCOMP_ALGO=auto (default or a rule): its candidate list as the runtime
// resolves it (the environment, else the rule's params, else the file's
// [params], else the default) must parse, so a bad list is reported at load
// with the variable or file key, and the job runs uncompressed.
Status checkAutoCandidates(const Policy& p, const Rule* rule) {
  const char* key = param::spec(param::Id::AUTO_CANDIDATES).name;
  std::string text, origin;
  if (fromEnv(param::Id::AUTO_CANDIDATES)) {
    GC_CHECK(param::getString(param::Id::AUTO_CANDIDATES, &text));
    origin = "GRADCOMP_AUTO_CANDIDATES";
  } else if (rule && rule->params.count(key)) {
    text = rule->params.at(key);
    origin = rule->origin + " params AUTO_CANDIDATES";
  } else if (p.params.count(key)) {
    text = p.params.at(key);
    origin = p.configPath + " [params] AUTO_CANDIDATES";
  } else {
    GC_CHECK(param::getString(param::Id::AUTO_CANDIDATES, &text));
    origin = "GRADCOMP_AUTO_CANDIDATES";
  }
  std::vector<algo::autosel::CandidateSpec> specs;
  return algo::autosel::parseCandidates(text, origin, &specs);
}

Status parseBytes(const std::string& text, const std::string& origin, uint64_t* out) {
  return param::parseSize(text, origin, out);
}

// GRADCOMP_CONFIG when set (empty: no file; a named file must exist), else
// the system file when it exists.
Status resolveConfigPath(const std::string& systemConfig, Policy* p) {
  if (fromEnv(param::Id::CONFIG)) return param::getString(param::Id::CONFIG, &p->configPath);
  struct stat st;
  p->configIsSystemDefault = !systemConfig.empty() && stat(systemConfig.c_str(), &st) == 0;
  p->configPath = p->configIsSystemDefault ? systemConfig : "";
  return Status::Ok();
}

Status buildPolicy(const std::string& systemConfig, Policy* p) {
  // STRICT first: it decides what every later error means.
  GC_CHECK(param::getBool(param::Id::STRICT, &p->strict));
  GC_CHECK(param::validateEnvironment());
  GC_CHECK(resolveConfigPath(systemConfig, p));
  ConfigFile file;
  if (!p->configPath.empty()) {
    Status loaded = loadConfigFile(p->configPath, &file);
    if (!loaded.ok())
      return makeStatus(loaded.code(), "%s (%s)", loaded.message().c_str(),
                        p->configIsSystemDefault
                            ? "the admin's file, read because GRADCOMP_CONFIG is unset; "
                              "GRADCOMP_CONFIG= (empty) skips it"
                            : "GRADCOMP_CONFIG");
  }
  const std::string fileName = p->configPath.empty() ? "config" : p->configPath;

  // Environment overrides file overrides default.
  std::string algoText = file.algo.value_or("off"), algoOrigin = fileName + " algo";
  if (fromEnv(param::Id::ALGO)) {
    GC_CHECK(param::getString(param::Id::ALGO, &algoText));
    algoOrigin = "GRADCOMP_ALGO";
  }
  GC_CHECK(checkAlgo(algoText, algoOrigin));
  p->algo = algoText;

  std::string rsText = file.rsAlgo.value_or(""), rsOrigin = fileName + " rs_algo";
  if (fromEnv(param::Id::RS_ALGO)) {
    GC_CHECK(param::getString(param::Id::RS_ALGO, &rsText));
    rsOrigin = "GRADCOMP_RS_ALGO";
  }
  GC_CHECK(checkReduceScatterAlgo(rsText, rsOrigin));
  p->rsAlgo = rsText;

  std::string agText = file.agAlgo.value_or("off"), agOrigin = fileName + " ag_algo";
  if (fromEnv(param::Id::AG_ALGO)) {
    GC_CHECK(param::getString(param::Id::AG_ALGO, &agText));
    agOrigin = "GRADCOMP_AG_ALGO";
  }
  GC_REQUIRE(agText == "off" || algo::findAllgatherAlgorithm(agText), Err::InvalidConfig,
             "%s='%s': unknown allgather algorithm; accepted: off, %s", agOrigin.c_str(),
             agText.c_str(), algo::allgatherNames().c_str());
  p->agAlgo = agText;

  std::string selftestText = file.selftest.value_or("auto");
  if (fromEnv(param::Id::SELFTEST)) {
    GC_CHECK(param::getString(param::Id::SELFTEST, &selftestText));
  } else {
    param::Value v;
    GC_CHECK(param::parse(param::spec(param::Id::SELFTEST), selftestText, fileName + " selftest", &v));
    selftestText = v.s;
  }
  p->selftest = selftestText;
  GC_CHECK(param::getDouble(param::Id::SELFTEST_TIMEOUT_S, &p->selftestTimeoutS));
  GC_CHECK(param::getString(param::Id::SELFTEST_INJECT, &p->selftestInject));
  if (file.shadow && !fromEnv(param::Id::SHADOW)) {
    param::Value v;
    GC_CHECK(param::parse(param::spec(param::Id::SHADOW), *file.shadow, fileName + " shadow", &v));
    p->shadow = v.i != 0;
  } else {
    GC_CHECK(param::getBool(param::Id::SHADOW, &p->shadow));
  }

  std::string commsText = file.comms.value_or("all"), commsOrigin = fileName + " comms";
  if (fromEnv(param::Id::COMMS)) {
    GC_CHECK(param::getString(param::Id::COMMS, &commsText));
    commsOrigin = "GRADCOMP_COMMS";
  }
  GC_CHECK(parseCommSelectors(commsText, commsOrigin, &p->comms));
  p->commsText = commsText;

  if (file.minBytes && !fromEnv(param::Id::MIN_BYTES)) {
    GC_CHECK(parseBytes(*file.minBytes, fileName + " min_bytes", &p->minBytes));
  } else {
    int64_t v = 0;
    GC_CHECK(param::getInt(param::Id::MIN_BYTES, &v));
    p->minBytes = static_cast<uint64_t>(v);
  }

  GC_CHECK(checkParams(file.params, fileName + " [params]"));
  p->params = file.params;
  for (const FileRule& fr : file.rules) {
    Rule r;
    r.origin = fr.origin;
    r.commsText = fr.comms.value_or("");
    if (fr.comms) GC_CHECK(parseCommSelectors(*fr.comms, fr.origin + " comms", &r.comms));
    if (fr.minBytes) GC_CHECK(parseBytes(*fr.minBytes, fr.origin + " min_bytes", &r.minBytes));
    if (fr.maxBytes) GC_CHECK(parseBytes(*fr.maxBytes, fr.origin + " max_bytes", &r.maxBytes));
    GC_REQUIRE(r.minBytes < r.maxBytes, Err::InvalidConfig,
               "%s: min_bytes must be below max_bytes", fr.origin.c_str());
    if (fr.algo) {
      GC_CHECK(checkAlgo(*fr.algo, fr.origin + " algo"));
      r.algo = *fr.algo;
    }
    GC_CHECK(checkParams(fr.params, fr.origin + " params"));
    r.params = fr.params;
    p->rules.push_back(std::move(r));
  }
  if (p->algo == "auto") GC_CHECK(checkAutoCandidates(*p, nullptr));
  for (const Rule& r : p->rules)
    if (r.algo == "auto" || (r.algo.empty() && p->algo == "auto")) GC_CHECK(checkAutoCandidates(*p, &r));
  return Status::Ok();
}

}  // namespace

Status parseCommSelectors(const std::string& text, const std::string& origin,
                          std::vector<CommSelector>* out) {
  out->clear();
  std::stringstream ss(text);
  std::string term;
  while (std::getline(ss, term, ',')) {
    term = trim(term);
    CommSelector sel;
    size_t colon = term.find(':');
    std::string kind = term.substr(0, colon), value = colon == std::string::npos ? "" : term.substr(colon + 1);
    if (term == "all") {
      sel.kind = CommSelector::Kind::All;
    } else if (term == "none") {
      sel.kind = CommSelector::Kind::None;
    } else if (kind == "index" && colon != std::string::npos) {
      sel.kind = CommSelector::Kind::Index;
      GC_CHECK(parseNumber(value, origin + " index:", &sel.number));
    } else if (kind == "size" && colon != std::string::npos) {
      sel.kind = CommSelector::Kind::Size;
      GC_CHECK(parseNumber(value, origin + " size:", &sel.number));
    } else if (kind == "name" && colon != std::string::npos && !value.empty()) {
      sel.kind = CommSelector::Kind::Name;
      sel.pattern = value;
    } else {
      return makeStatus(Err::InvalidConfig,
                        "%s='%s': bad term '%s'; accepted: all, none, index:N, size:N, name:GLOB "
                        "(comma-separated)",
                        origin.c_str(), text.c_str(), term.c_str());
    }
    out->push_back(sel);
  }
  GC_REQUIRE(!out->empty(), Err::InvalidConfig,
             "%s is empty; accepted: all, none, index:N, size:N, name:GLOB", origin.c_str());
  return Status::Ok();
}

bool selectorsMatch(const std::vector<CommSelector>& selectors, const CommIdentity& comm) {
  for (const CommSelector& s : selectors) {
    switch (s.kind) {
      case CommSelector::Kind::All: return true;
      case CommSelector::Kind::None: break;
      case CommSelector::Kind::Index: if (comm.index == s.number) return true; break;
      case CommSelector::Kind::Size: if (uint64_t(comm.nranks) == s.number) return true; break;
      case CommSelector::Kind::Name:
        if (!comm.name.empty() && fnmatch(s.pattern.c_str(), comm.name.c_str(), 0) == 0) return true;
        break;
    }
  }
  return false;
}

Status loadPolicy(Policy* out) {
  return loadPolicyWithSystemConfig(param::spec(param::Id::CONFIG).defaultText, out);
}

Status loadPolicyWithSystemConfig(const std::string& systemConfig, Policy* out) {
  Policy p;
  Status s = buildPolicy(systemConfig, &p);
  if (!s.ok()) {
    Policy off;
    off.strict = p.strict;
    off.configPath = p.configPath;
    off.configIsSystemDefault = p.configIsSystemDefault;
    *out = off;
    return s;
  }
  *out = p;
  return Status::Ok();
}

Status algorithmOverrides(const Policy& policy, int rule, param::Overrides* out) {
  auto apply = [&](const std::map<std::string, std::string>& params, const std::string& origin) -> Status {
    for (const auto& [name, text] : params) {
      const param::Spec* spec = param::find(name);
      if (spec == nullptr) continue;  // validated at load
      bool envSet = false;
      for (int i = 0; i < int(param::Id::kCount); ++i)
        if (&param::spec(param::Id(i)) == spec) envSet = fromEnv(param::Id(i));
      if (!envSet) GC_CHECK(out->set(name, text, origin));
    }
    return Status::Ok();
  };
  GC_CHECK(apply(policy.params, policy.configPath + " [params]"));
  if (rule >= 0) GC_CHECK(apply(policy.rules[size_t(rule)].params, policy.rules[size_t(rule)].origin));
  return Status::Ok();
}

const char* verdictName(Verdict v) {
  switch (v) {
    case Verdict::Compress: return "compress";
    case Verdict::Off: return "algorithm off";
    case Verdict::CommNotSelected: return "communicator not selected";
    case Verdict::CommDisabled: return "compression disabled on this communicator";
    case Verdict::CommFailed: return "communicator failed";
    case Verdict::InGroup: return "inside ncclGroupStart/End";
    case Verdict::Capturing: return "CUDA graph capture";
    case Verdict::SmallBuffer: return "below GRADCOMP_MIN_BYTES";
    case Verdict::Dtype: return "data type not f32/f16/bf16";
    case Verdict::Op: return "reduction not sum/avg";
    case Verdict::InPlaceMismatch: return "buffer layout";
    case Verdict::NoExecutor: return "device memory and no CUDA executor";
    case Verdict::AutoDense: return "auto chose NCCL's allreduce";
    case Verdict::NoRsForm: return "algorithm has no reduce-scatter form";
    case Verdict::AgLayout: return "allgather buffers overlap";
    case Verdict::RsLayout: return "reduce-scatter buffers overlap other than in place";
  }
  return "?";
}

bool eligibleDtype(int ncclDtype, DataType* out) {
  switch (ncclDtype) {
    case 6: *out = DataType::Float16; return true;
    case 7: *out = DataType::Float32; return true;
    case 9: *out = DataType::BFloat16; return true;
    default: return false;
  }
}

bool eligibleOp(int ncclOp, RedOp* out) {
  switch (ncclOp) {
    case 0: *out = RedOp::Sum; return true;
    case 4: *out = RedOp::Avg; return true;
    default: return false;  // prod/max/min and user ops (PreMulSum, >= ncclNumOps)
  }
}

Verdict decide(const Policy& policy, const CommIdentity& comm, const CallShape& call, int* rule) {
  *rule = -1;
  const bool rs = call.coll == algo::Collective::ReduceScatter;
  if (call.coll == algo::Collective::AllGather) {
    // GRADCOMP_AG_ALGO, the communicators and sizes of the defaults; the op
    // is not read (NCCL's allgather has none).
    if (policy.agAlgo == "off") return Verdict::Off;
    if (comm.singleProcess || !selectorsMatch(policy.comms, comm)) return Verdict::CommNotSelected;
    DataType dtype;
    if (!eligibleDtype(call.ncclDtype, &dtype)) return Verdict::Dtype;
    if (uint64_t(call.count) * dtypeSize(dtype) < policy.minBytes) return Verdict::SmallBuffer;
    return Verdict::Compress;
  }
  if (rs ? !policy.enabled() : policy.algo == "off") return Verdict::Off;
  if (comm.singleProcess || !selectorsMatch(policy.comms, comm)) return Verdict::CommNotSelected;
  DataType dtype;
  RedOp op;
  if (!eligibleDtype(call.ncclDtype, &dtype)) return Verdict::Dtype;
  if (!eligibleOp(call.ncclOp, &op)) return Verdict::Op;
  uint64_t bytes = uint64_t(call.count) * dtypeSize(dtype);
  if (bytes < policy.minBytes) return Verdict::SmallBuffer;
  for (size_t i = 0; i < policy.rules.size(); ++i) {
    const Rule& r = policy.rules[i];
    if (bytes < r.minBytes || bytes >= r.maxBytes) continue;
    if (!r.comms.empty() && !selectorsMatch(r.comms, comm)) continue;
    *rule = int(i);
    if (!rs) return r.algo == "off" ? Verdict::Off : Verdict::Compress;
    break;
  }
  if (!rs) return Verdict::Compress;
  Verdict why = Verdict::Compress;
  return reduceScatterAlgo(policy, *rule, &why).empty() ? why : Verdict::Compress;
}

std::string reduceScatterAlgo(const Policy& policy, int rule, Verdict* why) {
  *why = Verdict::Off;
  if (policy.rsAlgo == "off") return "";
  if (!policy.rsAlgo.empty()) return policy.rsAlgo;
  const Rule* r = rule >= 0 ? &policy.rules[size_t(rule)] : nullptr;
  const std::string name = r && !r->algo.empty() ? r->algo : policy.algo;
  if (name == "off") return "";
  const algo::AlgorithmInfo* info = algo::findAlgorithm(name);
  *why = Verdict::NoRsForm;
  return info && info->hasReduceScatter() ? name : "";
}

std::string effectiveConfigText(const Policy& policy, const CommIdentity& comm, bool selected,
                                const std::string& deviceExecutor) {
  std::ostringstream os;
  os << "gradcomp.version=1\n";
  os << "executor.device=" << deviceExecutor << "\n";
  os << "GRADCOMP_ALGO=" << policy.algo << "\n";
  os << "GRADCOMP_RS_ALGO=" << policy.rsAlgo << "\n";
  if (policy.agAlgo != "off") os << "GRADCOMP_AG_ALGO=" << policy.agAlgo << "\n";
  os << "GRADCOMP_COMMS=" << policy.commsText << "\n";
  os << "GRADCOMP_MIN_BYTES=" << policy.minBytes << "\n";
  os << "GRADCOMP_SELFTEST=" << policy.selftest << "|" << policy.selftestTimeoutS << "|"
     << policy.selftestInject << "\n";
  os << "GRADCOMP_SHADOW=" << (policy.shadow ? 1 : 0) << "\n";
  os << "communicator.selected=" << (selected ? 1 : 0) << "\n";
  os << "communicator.nranks=" << comm.nranks << "\n";
  // Algorithm parameters as this rank resolves them (environment, else file, else default).
  std::vector<std::string> algos{policy.algo};
  if (!policy.rsAlgo.empty()) algos.push_back(policy.rsAlgo);
  for (size_t i = 0; i < policy.rules.size(); ++i) {
    const Rule& r = policy.rules[i];
    os << "rule" << i << "=" << r.commsText << "|" << r.minBytes << "|" << r.maxBytes << "|"
       << r.algo << "\n";
    for (const auto& [k, v] : r.params) os << "rule" << i << ".GRADCOMP_" << k << "=" << v << "\n";
    if (!r.algo.empty()) algos.push_back(r.algo);
  }
  std::map<std::string, std::string> params;
  if (policy.agAlgo != "off") algos.push_back("allgather:" + policy.agAlgo);
  for (const std::string& name : algos) {
    const algo::AlgorithmInfo* info = name.rfind("allgather:", 0) == 0
                                          ? algo::findAllgatherAlgorithm(name.substr(10))
                                          : algo::findAlgorithm(name);
    if (info == nullptr) continue;
    for (param::Id id : info->params) {
      const param::Spec& spec = param::spec(id);
      param::Value v;
      std::string text;
      if (!fromEnv(id) && policy.params.count(spec.name)) text = policy.params.at(spec.name);
      else if (param::get(id, &v).ok()) text = v.s;
      params[std::string("GRADCOMP_") + spec.name] = text;
    }
  }
  for (const auto& [k, v] : params) os << k << "=" << v << "\n";
  return os.str();
}

std::string firstDifference(const std::vector<std::string>& texts) {
  auto parse = [](const std::string& text) {
    std::map<std::string, std::string> kv;
    std::stringstream ss(text);
    std::string line;
    while (std::getline(ss, line)) {
      size_t eq = line.find('=');
      if (eq != std::string::npos) kv[line.substr(0, eq)] = line.substr(eq + 1);
    }
    return kv;
  };
  if (texts.empty()) return "";
  auto base = parse(texts[0]);
  for (size_t r = 1; r < texts.size(); ++r) {
    if (texts[r] == texts[0]) continue;
    auto other = parse(texts[r]);
    for (const auto* side : {&base, &other}) {
      for (const auto& [k, v] : *side) {
        auto a = base.find(k), b = other.find(k);
        std::string va = a == base.end() ? "<unset>" : a->second;
        std::string vb = b == other.end() ? "<unset>" : b->second;
        if (va != vb)
          return "key '" + k + "' is '" + va + "' on rank 0 but '" + vb + "' on rank " +
                 std::to_string(r);
      }
    }
    return "configuration text differs between rank 0 and rank " + std::to_string(r);
  }
  return "";
}

}  // namespace gradcomp::nccl
