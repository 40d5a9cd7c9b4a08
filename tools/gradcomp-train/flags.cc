#include "tools/gradcomp-train/flags.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>

#include "algorithms/algorithm.h"
#include "common/param.h"

namespace gradcomp::train {
namespace {

Status parseInt(const std::string& text, const std::string& flag, long long lo, long long hi,
                long long* out) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  GC_REQUIRE(!text.empty() && *end == '\0' && errno == 0 && v >= lo && v <= hi,
             Err::InvalidArgument, "%s '%s': expected an integer in %lld..%lld", flag.c_str(),
             text.c_str(), lo, hi);
  *out = v;
  return Status::Ok();
}

template <typename T>
Status parseIntTo(const std::string& text, const std::string& flag, long long lo, long long hi,
                  T* out) {
  long long v = 0;
  GC_CHECK(parseInt(text, flag, lo, hi, &v));
  *out = static_cast<T>(v);
  return Status::Ok();
}

// loOpen: the lower bound itself is rejected (learning rate > 0).
Status parseDouble(const std::string& text, const std::string& flag, double lo, double hi,
                   bool loOpen, double* out) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  const bool inRange = std::isfinite(v) && (loOpen ? v > lo : v >= lo) && v <= hi;
  GC_REQUIRE(!text.empty() && *end == '\0' && errno == 0 && inRange, Err::InvalidArgument,
             "%s '%s': expected a number in %s%g..%g]", flag.c_str(), text.c_str(),
             loOpen ? "(" : "[", lo, hi);
  *out = v;
  return Status::Ok();
}

// A registry parameter by name (any case, optional GRADCOMP_ prefix), validated.
Status addParam(const std::string& rawName, const std::string& value, const std::string& origin,
                std::vector<std::pair<std::string, std::string>>* to) {
  std::string name;
  for (char c : rawName) name += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (name.rfind("GRADCOMP_", 0) == 0) name = name.substr(9);
  const param::Spec* spec = param::find(name);
  GC_REQUIRE(spec, Err::InvalidArgument,
             "%s: GRADCOMP_%s is not a registry parameter (gradcomp-params lists them)",
             origin.c_str(), name.c_str());
  param::Value parsed;
  GC_CHECK(param::parse(*spec, value, origin, &parsed));
  to->emplace_back(name, value);
  return Status::Ok();
}

using Handler = std::function<Status(const std::string& flag, const std::string& value, Flags*)>;

// Trainer flags (all take a value). They win over an algorithm parameter that
// would map to the same flag; such a parameter stays reachable via --param.
const std::map<std::string, Handler>& trainerFlags() {
  static const std::map<std::string, Handler> flags = {
      {"--algo", [](auto&, auto& v, Flags* f) { f->algo = v; return Status::Ok(); }},
      {"--model",
       [](auto& flag, auto& v, Flags* f) {
         GC_REQUIRE(v == "mlp" || v == "cnn", Err::InvalidArgument,
                    "%s '%s': accepted: mlp, cnn", flag.c_str(), v.c_str());
         f->train.model = v;
         return Status::Ok();
       }},
      {"--epochs", [](auto& flag, auto& v, Flags* f) { return parseIntTo(v, flag, 1, 100000, &f->train.epochs); }},
      {"--batch", [](auto& flag, auto& v, Flags* f) { return parseIntTo(v, flag, 1, 65536, &f->train.batch); }},
      {"--lr", [](auto& flag, auto& v, Flags* f) { return parseDouble(v, flag, 0, 100, true, &f->train.lr); }},
      {"--momentum", [](auto& flag, auto& v, Flags* f) { return parseDouble(v, flag, 0, 0.999, false, &f->train.momentum); }},
      {"--momentum-correction",
       [](auto& flag, auto& v, Flags* f) {
         GC_REQUIRE(v == "auto" || v == "on" || v == "off", Err::InvalidArgument,
                    "%s '%s': accepted: auto, on, off", flag.c_str(), v.c_str());
         f->momentumCorrection = v;
         return Status::Ok();
       }},
      {"--bucket-mb", [](auto& flag, auto& v, Flags* f) { return parseDouble(v, flag, 0, 4096, true, &f->train.bucketMb); }},
      {"--average",
       [](auto& flag, auto& v, Flags* f) {
         GC_REQUIRE(v == "grads" || v == "weights", Err::InvalidArgument,
                    "%s '%s': accepted: grads (gradient allreduce), weights (model averaging)",
                    flag.c_str(), v.c_str());
         f->train.average = v == "grads" ? AverageMode::Gradients : AverageMode::Weights;
         return Status::Ok();
       }},
      {"--period", [](auto& flag, auto& v, Flags* f) { return parseIntTo(v, flag, 1, 1000000, &f->train.period); }},
      {"--straggle",
       [](auto& flag, auto& v, Flags* f) {
         const size_t colon = v.find(':');
         GC_REQUIRE(colon != std::string::npos, Err::InvalidArgument,
                    "%s '%s': expected N:MS (N ranks sleep MS milliseconds each step)",
                    flag.c_str(), v.c_str());
         GC_CHECK(parseIntTo(v.substr(0, colon), flag + " N", 0, 1048576, &f->train.straggleRanks));
         return parseIntTo(v.substr(colon + 1), flag + " MS", 0, 600000, &f->train.straggleMs);
       }},
      {"--seed", [](auto& flag, auto& v, Flags* f) { return parseIntTo(v, flag, 0, INT64_MAX, &f->train.seed); }},
      {"--op",
       [](auto& flag, auto& v, Flags* f) {
         GC_REQUIRE(v == "avg" || v == "sum", Err::InvalidArgument,
                    "%s '%s': accepted: avg, sum (sum, then scale by 1/ranks)", flag.c_str(),
                    v.c_str());
         f->sumThenScale = v == "sum";
         return Status::Ok();
       }},
      {"--data-dir", [](auto&, auto& v, Flags* f) { f->dataDir = v; return Status::Ok(); }},
      {"--train-limit", [](auto& flag, auto& v, Flags* f) { return parseIntTo(v, flag, 0, INT64_MAX, &f->trainLimit); }},
      {"--test-limit", [](auto& flag, auto& v, Flags* f) { return parseIntTo(v, flag, 0, INT64_MAX, &f->testLimit); }},
      {"-J", [](auto&, auto& v, Flags* f) { f->jsonPath = v; return Status::Ok(); }},
      {"--json", [](auto&, auto& v, Flags* f) { f->jsonPath = v; return Status::Ok(); }},
      {"--ranks", [](auto& flag, auto& v, Flags* f) { return parseIntTo(v, flag, 1, 1024, &f->ranks); }},
      {"--param",
       [](auto& flag, auto& v, Flags* f) {
         const size_t eq = v.find('=');
         GC_REQUIRE(eq != std::string::npos && eq > 0, Err::InvalidArgument,
                    "%s '%s': expected NAME=VALUE with a registry name such as DENSITY",
                    flag.c_str(), v.c_str());
         return addParam(v.substr(0, eq), v.substr(eq + 1), flag + " " + v.substr(0, eq),
                         &f->algoParams);
       }},
      {"--ag-algo", [](auto&, auto& v, Flags* f) { f->agAlgo = v; return Status::Ok(); }},
      {"--ag-param",
       [](auto& flag, auto& v, Flags* f) {
         const size_t eq = v.find('=');
         GC_REQUIRE(eq != std::string::npos && eq > 0, Err::InvalidArgument,
                    "%s '%s': expected NAME=VALUE with a registry name such as AG_BLOCK",
                    flag.c_str(), v.c_str());
         return addParam(v.substr(0, eq), v.substr(eq + 1), flag + " " + v.substr(0, eq),
                         &f->agParams);
       }},
  };
  return flags;
}

// Where momentum correction is on by default: the top-k selection methods (a
// schedule, not a selector such as auto that may pick dense, reading
// GRADCOMP_DENSITY) and sign. What a top-k method leaves unsent waits in the
// residual, where the correction keeps it a velocity: with plain momentum they
// missed 1.5 points of dense on some seeds, corrected on none. sign sends every
// entry, so the mask clears the whole velocity each step: the optimizer runs
// without momentum on the majority votes, the velocity lives in sign's error
// feedback, and sign converges at the default lr (it diverged with momentum on
// top of +-S votes). docs/results/sparse.md and quantized.md.
bool correctsMomentumByDefault(const std::string& algo) {
  if (algo == "sign") return true;
  const algo::AlgorithmInfo* info = algo::findAlgorithm(algo);
  if (info == nullptr || info->selector) return false;
  for (param::Id id : info->params)
    if (id == param::Id::DENSITY) return true;
  return false;
}

}  // namespace

std::string paramFlag(const std::string& paramName) {
  std::string name = paramName.rfind("GRADCOMP_", 0) == 0 ? paramName.substr(9) : paramName;
  std::string flag = "--";
  for (char c : name)
    flag += c == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return flag;
}

std::string agParamFlag(const std::string& paramName) {
  const std::string flag = paramFlag(paramName);  // "--ag-block" or "--bits"
  return flag.rfind("--ag-", 0) == 0 ? flag : "--ag-" + flag.substr(2);
}

Status parseFlags(int argc, char** argv, Flags* out) {
  Flags f;
  // Split "--flag=value" so both spellings take the same path.
  std::vector<std::pair<std::string, std::string>> items;  // flag, value (or "\1" none)
  std::vector<std::string> raw(argv + 1, argv + argc);
  for (size_t i = 0; i < raw.size(); ++i) {
    const std::string& a = raw[i];
    if (a == "-h" || a == "--help") {
      f.help = true;
      continue;
    }
    if (a == "--sharded") {  // the one flag without a value
      f.train.sharded = true;
      f.rankArgs.push_back(a);
      continue;
    }
    GC_REQUIRE(a.size() > 1 && a[0] == '-', Err::InvalidArgument,
               "unexpected argument '%s' (every option is a flag; see --help)", a.c_str());
    const size_t eq = a.find('=');
    if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
      items.emplace_back(a.substr(0, eq), a.substr(eq + 1));
    } else {
      GC_REQUIRE(i + 1 < raw.size(), Err::InvalidArgument, "%s needs a value (see --help)",
                 a.c_str());
      items.emplace_back(a, raw[++i]);
    }
    if (items.back().first != "--ranks") {
      f.rankArgs.push_back(items.back().first);
      f.rankArgs.push_back(items.back().second);
    }
  }
  // The algorithm decides which parameter flags exist, so find it first.
  for (const auto& [flag, value] : items) {
    if (flag == "--algo") f.algo = value;
    if (flag == "--ag-algo") f.agAlgo = value;
  }
  const algo::AlgorithmInfo* info = algo::findAlgorithm(f.algo);
  GC_REQUIRE(info, Err::InvalidArgument, "--algo '%s' is unknown; registered: %s",
             f.algo.c_str(), algo::algorithmNames().c_str());
  std::map<std::string, std::string> algoFlags;  // flag -> registry name
  for (param::Id id : info->params) algoFlags[paramFlag(param::spec(id).name)] = param::spec(id).name;
  std::map<std::string, std::string> agFlags;  // --ag-* flag -> registry name
  if (!f.agAlgo.empty()) {
    const algo::AlgorithmInfo* ag = algo::findAllgatherAlgorithm(f.agAlgo);
    GC_REQUIRE(ag, Err::InvalidArgument, "--ag-algo '%s' is unknown; allgather algorithms: %s",
               f.agAlgo.c_str(), algo::allgatherNames().c_str());
    for (param::Id id : ag->params) agFlags[agParamFlag(param::spec(id).name)] = param::spec(id).name;
  }

  for (const auto& [flag, value] : items) {
    auto t = trainerFlags().find(flag);
    if (t != trainerFlags().end()) {
      GC_CHECK(t->second(flag, value, &f));
      continue;
    }
    if (auto g = agFlags.find(flag); g != agFlags.end()) {
      GC_CHECK(addParam(g->second, value, flag, &f.agParams));
      continue;
    }
    auto a = algoFlags.find(flag);
    GC_REQUIRE(a != algoFlags.end(), Err::InvalidArgument,
               "unknown flag %s for --algo %s%s%s (see --help for trainer flags; the algorithm's "
               "parameters are flags named after the registry, e.g. DENSITY -> --density; "
               "--ag-algo's with ag-: BITS -> --ag-bits)",
               flag.c_str(), f.algo.c_str(), f.agAlgo.empty() ? "" : " and --ag-algo ",
               f.agAlgo.c_str());
    GC_CHECK(addParam(a->second, value, flag, &f.algoParams));
  }
  GC_REQUIRE(f.train.period == 1 || f.train.average == AverageMode::Weights,
             Err::InvalidArgument, "--period %d needs --average weights (gradients are averaged every step)",
             f.train.period);
  GC_REQUIRE(!f.train.sharded || f.train.average == AverageMode::Gradients,
             Err::InvalidArgument, "--sharded reduce-scatters gradients: it needs --average grads");
  GC_REQUIRE(!f.train.sharded || info->hasReduceScatter(), Err::InvalidArgument,
             "--sharded: --algo %s has no reduce-scatter form (gradcomp-bench --help lists those "
             "that have)", f.algo.c_str());
  GC_REQUIRE(f.agAlgo.empty() || f.train.sharded, Err::InvalidArgument,
             "--ag-algo %s is ZeRO-3's parameter allgather: it needs --sharded", f.agAlgo.c_str());
  GC_REQUIRE(f.agParams.empty() || !f.agAlgo.empty(), Err::InvalidArgument,
             "--ag-param and --ag-* parameter flags need --ag-algo");
  f.train.zero3 = !f.agAlgo.empty();
  const bool correctable = f.train.momentum > 0 && f.train.average == AverageMode::Gradients;
  f.train.momentumCorrection =
      f.momentumCorrection == "on" ||
      (f.momentumCorrection == "auto" && correctable && correctsMomentumByDefault(f.algo));
  GC_REQUIRE(!f.train.momentumCorrection || correctable,
             Err::InvalidArgument,
             "--momentum-correction on needs --momentum > 0 and --average grads (it allreduces "
             "the velocity)");
  // The correction clears the velocity where any rank's step changed a
  // parameter, which ZeRO-3's ranks cannot see through a lossy allgather.
  GC_REQUIRE(!f.train.momentumCorrection || !f.train.zero3, Err::InvalidArgument,
             "--ag-algo (ZeRO-3) has no momentum correction (%s for --algo %s): pass "
             "--momentum-correction off", f.momentumCorrection == "on" ? "asked" : "auto turns it on",
             f.algo.c_str());
  *out = std::move(f);
  return Status::Ok();
}

std::string usage() {
  std::string algoParams;
  for (const algo::AlgorithmInfo* info : algo::listAlgorithms()) {
    algoParams += "  " + info->name + ":";
    if (info->params.empty()) algoParams += " (no parameters)";
    for (param::Id id : info->params) algoParams += " " + paramFlag(param::spec(id).name);
    algoParams += "\n";
  }
  return "NAME\n"
         "  gradcomp-train - data-parallel Fashion-MNIST training over gradcomp\n"
         "\n"
         "SYNOPSIS\n"
         "  gradcomp-train --ranks N [OPTIONS]\n"
         "  mpirun -n N gradcomp-train [OPTIONS]   (also srun, torchrun, gradcomp-run -n N --)\n"
         "\n"
         "DESCRIPTION\n"
         "  Trains an MLP or a small CNN on Fashion-MNIST with one model replica per rank;\n"
         "  gradients (or weights) are reduced by a gradcomp algorithm between real\n"
         "  processes. Prints loss, test accuracy and step time per epoch.\n"
         "\n"
         "OPTIONS\n"
         "  --algo NAME          allreduce algorithm (default dense)\n"
         "  --model mlp|cnn      784-512-256-10 MLP (default) or a small CNN\n"
         "  --epochs N           passes over the training set (default 2)\n"
         "  --batch N            minibatch per rank (default 32)\n"
         "  --lr X               learning rate (default 0.05)\n"
         "  --momentum X         SGD momentum, 0 = plain SGD (default 0.9)\n"
         "  --momentum-correction auto|on|off  DGC momentum correction and factor masking in\n"
         "                       the training loop: the velocity is allreduced (needs\n"
         "                       --momentum > 0 and --average grads); auto (default): on for\n"
         "                       the top-k selection methods (those with --density) and sign\n"
         "  --bucket-mb X        gradient bucket size in MiB, like DDP's bucket_cap_mb (default 25)\n"
         "  --average grads|weights  allreduce gradients every step (default) or the\n"
         "                       weights every --period steps (model averaging, local SGD)\n"
         "  --period T           steps between weight averages (with --average weights)\n"
         "  --sharded            ZeRO-2 / FSDP style: reduce-scatter gradients per bucket,\n"
         "                       each rank steps its shard, parameters allgathered dense\n"
         "  --ag-algo NAME       with --sharded, ZeRO-3: fp32 master shards, the parameters\n"
         "                       computed with are their allgather by NAME (" + algo::allgatherNames() + ")\n"
         "  --ag-bits 8|4, --ag-cast bf16|fp8, --ag-block N, --ag-param NAME=VALUE\n"
         "                       --ag-algo's parameters (GRADCOMP_BITS, AG_CAST, AG_BLOCK)\n"
         "  --straggle N:MS      each step N random ranks sleep MS ms before communicating\n"
         "  --op avg|sum         gcAvg (default) or gcSum then scale by 1/ranks\n"
         "  --seed N             weights, shuffles and stragglers (default 1)\n"
         "  --data-dir DIR       IDX .gz files (default " + std::string(kDefaultDataDir) + ",\n"
         "                       Debian package " + kDatasetPackage + ")\n"
         "  --train-limit N      use the first N training images (default all 60000)\n"
         "  --test-limit N       evaluate on the first N test images (default all 10000)\n"
         "  -J, --json FILE      write per-epoch results as a JSON array\n"
         "  --ranks N            launch N local ranks of this command\n"
         "  --param NAME=VALUE   any registry parameter (name without GRADCOMP_)\n"
         "  -h, --help           this help\n"
         "Algorithm parameter flags:\n" + algoParams +
         "\n"
         "EXIT STATUS\n"
         "  0 when training finished; 1 when a rank failed (data missing, a communication\n"
         "  error); 2 for a usage error.\n"
         "\n"
         "SEE ALSO\n"
         "  gradcomp-bench(1), gradcomp-run(1); docs/usage.md\n";
}

}  // namespace gradcomp::train
