#include "tools/gradcomp-bench/options.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "algorithms/algorithm.h"
#include "common/param.h"

namespace gradcomp::bench {
namespace {

constexpr int kMaxRanks = 256;

// One flag occurrence as typed: `spelled` is what the user wrote ("-b",
// "--minbytes"), `name` the normalized long name ("minbytes").
struct RawFlag {
  std::string spelled;
  std::string name;
  std::string value;
};

// nccl-tests spells long flags with underscores (--warmup_iters), registry
// flags use dashes (--dense-rd-max-bytes); either spelling is accepted.
std::string normalize(std::string name) {
  for (char& c : name) c = c == '_' ? '-' : char(tolower(static_cast<unsigned char>(c)));
  return name;
}

const char* longForShort(char c) {
  switch (c) {
    case 'b': return "minbytes";
    case 'e': return "maxbytes";
    case 'f': return "stepfactor";
    case 'n': return "iters";
    case 'w': return "warmup-iters";
    case 'c': return "check";
    case 'd': return "datatype";
    case 'o': return "op";
    case 'J': return "json";
  }
  return nullptr;
}

std::string reduceScatterAlgos() { return algo::reduceScatterNames(); }

Status bad(const RawFlag& f, const char* accepted) {
  return makeStatus(Err::InvalidArgument, "%s='%s' is invalid: expected %s", f.spelled.c_str(),
                    f.value.c_str(), accepted);
}

Status parseInt(const RawFlag& f, int64_t lo, int64_t hi, int64_t* out) {
  char* end = nullptr;
  errno = 0;
  const long long v = strtoll(f.value.c_str(), &end, 10);
  if (f.value.empty() || errno || *end || v < lo || v > hi)
    return makeStatus(Err::InvalidArgument, "%s='%s' is invalid: expected an integer in %lld..%lld",
                      f.spelled.c_str(), f.value.c_str(), static_cast<long long>(lo),
                      static_cast<long long>(hi));
  *out = v;
  return Status::Ok();
}

// Splits argv into flag occurrences; `rankArgs` receives everything except
// --ranks and its value.
Status scan(int argc, char** argv, std::vector<RawFlag>* flags, Options* out) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      out->help = true;
      continue;
    }
    RawFlag f;
    bool inlineValue = false;
    if (arg.rfind("--", 0) == 0 && arg.size() > 2) {
      const size_t eq = arg.find('=');
      f.spelled = arg.substr(0, eq);
      f.name = normalize(f.spelled.substr(2));
      if (eq != std::string::npos) f.value = arg.substr(eq + 1), inlineValue = true;
    } else if (arg.size() >= 2 && arg[0] == '-') {
      f.spelled = arg.substr(0, 2);
      const char* name = longForShort(arg[1]);
      if (!name)
        return makeStatus(Err::InvalidArgument, "unknown flag %s (see gradcomp-bench --help)",
                          f.spelled.c_str());
      f.name = name;
      if (arg.size() > 2) f.value = arg.substr(2), inlineValue = true;  // -b1M
    } else {
      return makeStatus(Err::InvalidArgument,
                        "unexpected argument '%s': flags take the form -b 1M or --minbytes=1M",
                        arg.c_str());
    }
    const int first = i;
    if (!inlineValue) {
      if (i + 1 >= argc)
        return makeStatus(Err::InvalidArgument, "%s needs a value (see gradcomp-bench --help)",
                          f.spelled.c_str());
      f.value = argv[++i];
    }
    if (f.name != "ranks" && f.name != "hosts")
      for (int j = first; j <= i; ++j) out->rankArgs.push_back(argv[j]);
    flags->push_back(f);
  }
  return Status::Ok();
}

// --param NAME=VALUE (NAME with or without the GRADCOMP_ prefix).
Status applyParam(const RawFlag& f, Options* out) {
  const size_t eq = f.value.find('=');
  if (eq == std::string::npos || eq == 0) return bad(f, "NAME=VALUE, e.g. --param DENSITY=0.01");
  std::string name = f.value.substr(0, eq);
  for (char& c : name) c = char(toupper(static_cast<unsigned char>(c)));
  if (name.rfind("GRADCOMP_", 0) == 0) name = name.substr(9);
  const param::Spec* spec = param::find(name);
  if (!spec)
    return makeStatus(Err::InvalidArgument,
                      "%s: unknown parameter '%s' (gradcomp-params --list shows them all)",
                      f.spelled.c_str(), f.value.substr(0, eq).c_str());
  param::Value v;
  GC_CHECK(param::parse(*spec, f.value.substr(eq + 1), f.spelled + " GRADCOMP_" + name, &v));
  out->params.emplace_back(name, f.value.substr(eq + 1));
  return Status::Ok();
}

// A flag that is not one of the bench's own: a parameter of the chosen algorithm.
Status applyAlgorithmParam(const RawFlag& f, const algo::AlgorithmInfo& info, Options* out) {
  std::string theirs;
  for (param::Id id : info.params) {
    const param::Spec& spec = param::spec(id);
    const std::string flag = paramFlag(spec.name);
    if (normalize(flag.substr(2)) == f.name) {
      param::Value v;
      GC_CHECK(param::parse(spec, f.value, f.spelled, &v));
      out->params.emplace_back(spec.name, f.value);
      return Status::Ok();
    }
    theirs += (theirs.empty() ? "" : ", ") + flag;
  }
  for (const param::Spec* spec : param::all())
    if (normalize(spec->name) == f.name)
      return makeStatus(Err::InvalidArgument,
                        "%s is not a parameter of --algo %s (its parameters: %s); use --param "
                        "%s=VALUE to set it anyway",
                        f.spelled.c_str(), info.name.c_str(),
                        theirs.empty() ? "none" : theirs.c_str(), spec->name);
  return makeStatus(Err::InvalidArgument, "unknown flag %s (see gradcomp-bench --help)",
                    f.spelled.c_str());
}

Status apply(const RawFlag& f, const algo::AlgorithmInfo& info, Options* out) {
  int64_t v = 0;
  const std::string& n = f.name;
  if (n == "minbytes") return param::parseSize(f.value, f.spelled, &out->minBytes);
  if (n == "maxbytes") return param::parseSize(f.value, f.spelled, &out->maxBytes);
  if (n == "stepfactor") {
    GC_CHECK(parseInt(f, 2, 1024, &v));
    out->stepFactor = uint64_t(v);
  } else if (n == "iters") {
    GC_CHECK(parseInt(f, 1, 1000000, &v));
    out->iters = int(v);
  } else if (n == "warmup-iters") {
    GC_CHECK(parseInt(f, 0, 1000000, &v));
    out->warmupIters = int(v);
  } else if (n == "check") {
    if (f.value != "0" && f.value != "1") return bad(f, "0 or 1");
    out->check = f.value == "1";
  } else if (n == "datatype") {
    // The inputs and checks are floating point: integer dtypes are refused.
    if (!parseDtype(f.value, f.spelled, &out->dtype).ok() || !isFloating(out->dtype))
      return bad(f, "one of float, half, bfloat16, double");
  } else if (n == "op") {
    return parseRedOp(f.value, f.spelled, &out->op);
  } else if (n == "algo") {
    return Status::Ok();  // applied before the other flags
  } else if (n == "coll") {
    if (f.value != "allreduce" && f.value != "reducescatter" && f.value != "allgather")
      return bad(f, "allreduce, reducescatter or allgather");
    out->coll = f.value == "reducescatter" ? algo::Collective::ReduceScatter
                : f.value == "allgather"   ? algo::Collective::AllGather
                                           : algo::Collective::AllReduce;
    // An allgather's --algo was looked up in the allgather registry.
    GC_REQUIRE(out->coll != algo::Collective::ReduceScatter || info.hasReduceScatter(),
               Err::InvalidArgument,
               "--coll reducescatter: --algo %s has no reduce-scatter form (those with one: %s)",
               info.name.c_str(), reduceScatterAlgos().c_str());
  } else if (n == "ranks") {
    GC_CHECK(parseInt(f, 1, kMaxRanks, &v));
    out->ranks = int(v);
  } else if (n == "hosts") {
    GC_CHECK(parseInt(f, 1, kMaxRanks, &v));
    out->hosts = int(v);
  } else if (n == "hierarchy") {
    if (f.value != "auto" && f.value != "flat" && f.value != "host")
      return bad(f, "auto, flat or host");
    out->hierarchy = f.value;
  } else if (n == "input") {
    return parseInput(f.value, f.spelled, &out->input);
  } else if (n == "seed") {
    char* end = nullptr;
    errno = 0;
    out->seed = strtoull(f.value.c_str(), &end, 10);
    if (f.value.empty() || !isdigit(static_cast<unsigned char>(f.value[0])) || errno || *end)
      return bad(f, "an unsigned 64-bit integer");
  } else if (n == "json") {
    if (f.value.empty()) return bad(f, "a file path");
    out->jsonPath = f.value;
  } else if (n == "backend") {
    if (f.value != "cpu" && f.value != "cpu-device") return bad(f, "cpu or cpu-device");
    out->backend = f.value;
  } else if (n == "param") {
    return applyParam(f, out);
  } else {
    return applyAlgorithmParam(f, info, out);
  }
  return Status::Ok();
}

}  // namespace

std::string paramFlag(const char* paramName) { return "--" + normalize(paramName); }

Status parseOptions(int argc, char** argv, Options* out) {
  std::vector<RawFlag> flags;
  GC_CHECK(scan(argc, argv, &flags, out));
  if (out->help) return Status::Ok();
  // The algorithm decides which parameter flags exist, wherever --algo appears.
  bool allgather = false;
  for (const RawFlag& f : flags) {
    if (f.name == "algo") out->algo = f.value;
    if (f.name == "coll") allgather = f.value == "allgather";
  }
  // --coll allgather: the allgather algorithms (dense, cast, blockq).
  const algo::AlgorithmInfo* info = allgather ? algo::findAllgatherAlgorithm(out->algo)
                                              : algo::findAlgorithm(out->algo);
  GC_REQUIRE(info, Err::InvalidArgument, "unknown --algo '%s'%s: expected one of %s",
             out->algo.c_str(), allgather ? " for --coll allgather" : "",
             allgather ? algo::allgatherNames().c_str() : algo::algorithmNames().c_str());
  for (const RawFlag& f : flags) GC_CHECK(apply(f, *info, out));
  GC_REQUIRE(out->hosts == 0 || (out->ranks > 0 && out->ranks % out->hosts == 0),
             Err::InvalidArgument, "--hosts %d needs --ranks N with N a multiple of it%s",
             out->hosts, out->ranks ? (" (--ranks " + std::to_string(out->ranks) + ")").c_str() : "");
  GC_REQUIRE(out->minBytes <= out->maxBytes, Err::InvalidArgument,
             "-b/--minbytes (%llu) must not exceed -e/--maxbytes (%llu)",
             static_cast<unsigned long long>(out->minBytes),
             static_cast<unsigned long long>(out->maxBytes));
  return Status::Ok();
}

std::vector<uint64_t> benchSizes(const Options& o, int nranks) {
  const uint64_t elem =
      dtypeSize(o.dtype) * (o.coll != algo::Collective::AllReduce ? uint64_t(nranks) : 1);
  std::vector<uint64_t> sizes;
  for (uint64_t size = o.minBytes; size <= o.maxBytes;) {
    const uint64_t rounded = size - size % elem;
    if (sizes.empty() || sizes.back() != rounded) sizes.push_back(rounded);
    const uint64_t next = size == 0 ? elem : size * o.stepFactor;
    if (next <= size || next / o.stepFactor != size) break;  // overflow
    size = next;
  }
  return sizes;
}

std::string usage() {
  std::string params;
  std::vector<const algo::AlgorithmInfo*> infos = algo::listAlgorithms();
  if (const algo::AlgorithmInfo* selector = algo::findAlgorithm("auto")) infos.push_back(selector);
  for (const algo::AlgorithmInfo* info : infos) {
    std::string flags;
    for (param::Id id : info->params) flags += " " + paramFlag(param::spec(id).name) + " V";
    params += "    " + info->name + ":" + (flags.empty() ? " (none)" : flags) + "\n";
  }
  return "NAME\n"
         "  gradcomp-bench - allreduce and reduce-scatter benchmark of every gradcomp algorithm\n"
         "  (nccl-tests flags)\n"
         "\n"
         "SYNOPSIS\n"
         "  gradcomp-bench --ranks N [OPTIONS]\n"
         "  mpirun -n N gradcomp-bench [OPTIONS]   (also srun, torchrun, gradcomp-run -n N --)\n"
         "\n"
         "DESCRIPTION\n"
         "  Times allreduce calls of one gradcomp algorithm between real processes over UCX\n"
         "  for a range of sizes, checks every call against the algorithm's reference and\n"
         "  prints one row per size (time, bus bandwidth, wire bytes, compression ratio,\n"
         "  #wrong). Rank 0 prints the table; -J writes the rows as JSON.\n"
         "\n"
         "OPTIONS\n"
         "  -b, --minbytes SIZE     smallest size, bytes with K/M/G suffix (default 32M)\n"
         "  -e, --maxbytes SIZE     largest size (default 32M)\n"
         "  -f, --stepfactor N      multiply the size by N between rows (default 2)\n"
         "  -n, --iters N           timed calls per size (default 20)\n"
         "  -w, --warmup_iters N    untimed calls before them (default 5)\n"
         "  -c, --check 0|1         check every call against the algorithm's reference (default 1)\n"
         "  -d, --datatype T        float, half, bfloat16, double (default float)\n"
         "  -o, --op OP             sum or avg (default sum)\n"
         "  -J, --json FILE         also write the rows as a JSON array\n"
         "      --algo NAME         " + algo::algorithmNames() + " (default dense)\n"
         "      --coll C            allreduce (default) or reducescatter: size is the whole\n"
         "                          input, count each rank's recvcount (reduce_scatter_perf);\n"
         "                          algorithms with the form: " + reduceScatterAlgos() + "\n"
         "                          or allgather: size is the whole output, count each rank's\n"
         "                          sendcount (all_gather_perf); --algo " + algo::allgatherNames() + "\n"
         "      --algo auto         per call the candidate of --auto-candidates that a model\n"
         "                          calibrated at the first call predicts fastest; the algo\n"
         "                          column names the candidates the timed calls ran\n"
         "      --param NAME=VALUE  any registry parameter for the algorithm (gradcomp-params --list)\n"
         "      --ranks N           start N local ranks of this benchmark; without it, run as one\n"
         "                          rank of a job started by mpirun, srun, torchrun or gradcomp-run\n"
         "                          (rank and rendezvous from their variables; docs/usage.md)\n"
         "      --hosts H           with --ranks N: fake H hosts of N/H consecutive ranks each\n"
         "                          (GRADCOMP_HOSTID per rank); rows report inter-host bytes\n"
         "      --hierarchy M       auto, flat or host: sets GRADCOMP_HIERARCHY (docs/configuration.md)\n"
         "      --input NAME        gradient (default), uniform, integer, onehot, ones\n"
         "      --seed N            input generator seed (default 1)\n"
         "      --backend B         cpu (default) or cpu-device: the CPU reference with a GPU's\n"
         "                          memory discipline; rows then report host<->device bytes\n"
         "  -h, --help              this help\n"
         "  Algorithm parameters (registry variables as flags):\n" + params +
         "\n"
         "EXIT STATUS\n"
         "  0 when every call ran and matched the reference; 1 when a check found wrong\n"
         "  values or a rank failed (its message names the rank); 2 for a usage error or an\n"
         "  invalid GRADCOMP_* value.\n"
         "\n"
         "SEE ALSO\n"
         "  gradcomp-params(1), gradcomp-run(1); docs/usage.md\n";
}

}  // namespace gradcomp::bench
