// Launchers' variables -> rank, size and a derived rendezvous (launcher_env.h).
#include "transport/launcher_env.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace gradcomp::transport {
namespace {

constexpr long kMaxRanks = 1048576;
constexpr int kPortBase = 20000, kPortSpan = 12768;  // 20000..32767

struct LauncherPair {
  Launcher launcher;
  const char* rankVar;
  const char* sizeVar;
  const char* onlyIf;  // the pair counts only when this variable is set (nullptr: always)
};
constexpr LauncherPair kLaunchers[] = {
    {Launcher::Torchrun, "RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID"},
    {Launcher::OpenMpi, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", nullptr},
    {Launcher::Pmi, "PMI_RANK", "PMI_SIZE", nullptr},
    {Launcher::Slurm, "SLURM_PROCID", "SLURM_NTASKS", nullptr},
    {Launcher::RankWorldSize, "RANK", "WORLD_SIZE", nullptr},
};

const char* env(const char* name) {
  const char* v = getenv(name);
  return v && v[0] ? v : nullptr;
}

Status parseCount(const char* var, const char* text, long lo, long* out) {
  char* end = nullptr;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (!text[0] || *end || errno || v < lo || v > kMaxRanks)
    return makeStatus(Err::InvalidConfig, "%s='%s' is invalid: expected an integer in %ld..%ld",
                      var, text, lo, kMaxRanks);
  *out = v;
  return Status::Ok();
}

// True when `var` is set to exactly `value` (a count).
bool envEquals(const char* var, long value) {
  const char* text = env(var);
  long v = 0;
  return text && parseCount(var, text, 0, &v).ok() && v == value;
}

bool allRanksLocal(const LauncherRank& who) {
  switch (who.launcher) {
    case Launcher::OpenMpi:
      return envEquals("OMPI_COMM_WORLD_LOCAL_SIZE", who.size);
    case Launcher::Pmi:
      return envEquals("MPI_LOCALNRANKS", who.size) || envEquals("SLURM_STEP_NUM_NODES", 1);
    case Launcher::Slurm:
      return env("SLURM_STEP_NUM_NODES") ? envEquals("SLURM_STEP_NUM_NODES", 1)
                                         : envEquals("SLURM_NNODES", 1);
    default:
      return false;
  }
}

// Job id of the launcher that gave the rank; empty when it has none.
std::string jobKey(const LauncherRank& who, std::string* from) {
  auto slurmStep = [&]() -> std::string {
    const char *job = env("SLURM_JOB_ID"), *step = env("SLURM_STEP_ID");
    if (!job || !step) return "";
    *from = "SLURM_JOB_ID.SLURM_STEP_ID";
    return std::string(job) + "." + step;
  };
  auto one = [&](const char* var) -> std::string {
    if (!env(var)) return "";
    *from = var;
    return env(var);
  };
  std::string key;
  switch (who.launcher) {
    case Launcher::OpenMpi:
      key = one("OMPI_MCA_ess_base_jobid");
      return key.empty() ? one("PMIX_NAMESPACE") : key;
    case Launcher::Slurm:
      return slurmStep();
    case Launcher::Pmi:
      key = slurmStep();
      return key.empty() ? one("PMIX_NAMESPACE") : key;
    default:
      return "";
  }
}

Status allocationFirstHost(std::string* host, std::string* from) {
  for (const char* var : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"}) {
    if (const char* list = env(var)) {
      *from = std::string("first host of ") + var;
      return firstHostOfHostlist(list, var, host);
    }
  }
  if (const char* file = env("PBS_NODEFILE")) {
    std::ifstream f(file);
    std::string line;
    GC_REQUIRE(f && std::getline(f, line), Err::InvalidConfig,
               "PBS_NODEFILE=%s: cannot read its first line (the host of rank 0)", file);
    size_t b = line.find_first_not_of(" \t\r"), e = line.find_last_not_of(" \t\r");
    GC_REQUIRE(b != std::string::npos, Err::InvalidConfig,
               "PBS_NODEFILE=%s: the first line is empty", file);
    *host = line.substr(b, e - b + 1);
    *from = "first line of PBS_NODEFILE";
    return Status::Ok();
  }
  host->clear();
  return Status::Ok();
}

const char* launcherName(Launcher l) {
  switch (l) {
    case Launcher::Torchrun: return "torchrun";
    case Launcher::OpenMpi: return "Open MPI";
    case Launcher::Pmi: return "PMI";
    case Launcher::Slurm: return "Slurm";
    case Launcher::RankWorldSize: return "RANK/WORLD_SIZE";
    case Launcher::None: break;
  }
  return "none";
}

}  // namespace

Status launcherRankAndSize(LauncherRank* out) {
  for (const LauncherPair& l : kLaunchers) {
    if (l.onlyIf && !getenv(l.onlyIf)) continue;
    const char* rankText = getenv(l.rankVar);
    const char* sizeText = getenv(l.sizeVar);
    if (!rankText || !sizeText) continue;  // first complete pair wins
    long rank = 0, size = 0;
    GC_CHECK(parseCount(l.rankVar, rankText, 0, &rank));
    GC_CHECK(parseCount(l.sizeVar, sizeText, 1, &size));
    GC_REQUIRE(rank < size, Err::InvalidConfig, "%s=%ld is invalid: it must be below %s=%ld",
               l.rankVar, rank, l.sizeVar, size);
    out->launcher = l.launcher;
    out->rank = static_cast<int>(rank);
    out->size = static_cast<int>(size);
    out->source = std::string(l.rankVar) + "/" + l.sizeVar;
    if (l.onlyIf) out->source += " (torchrun)";
    return Status::Ok();
  }
  *out = LauncherRank();
  out->source = "default (no rank variables set)";
  return Status::Ok();
}

Status deriveRendezvous(const LauncherRank& who, DerivedRendezvous* out) {
  auto cannot = [&](const std::string& why) {
    return makeStatus(Err::InvalidConfig,
                      "no bootstrap address for rank %d of %d (from %s): %s; set MASTER_ADDR and "
                      "MASTER_PORT (rank 0's host and a free port) or GRADCOMP_BOOTSTRAP=host:port",
                      who.rank, who.size, who.source.c_str(), why.c_str());
  };
  if (who.launcher == Launcher::None)
    return cannot("no launcher's variables to derive one from");
  if (who.launcher != Launcher::OpenMpi && who.launcher != Launcher::Pmi &&
      who.launcher != Launcher::Slurm)
    return cannot(std::string(launcherName(who.launcher)) + " gives no rendezvous of its own");
  std::string keyFrom;
  const std::string key = jobKey(who, &keyFrom);
  if (key.empty())
    return cannot(std::string("no job id from ") + launcherName(who.launcher) +
                  " to derive a port from");
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  DerivedRendezvous r;
  r.port = kPortBase + static_cast<int>(h % kPortSpan);
  std::string hostFrom;
  if (allRanksLocal(who)) {
    r.host = "127.0.0.1";
    hostFrom = "every rank on this host";
  } else {
    GC_CHECK(allocationFirstHost(&r.host, &hostFrom));
    if (r.host.empty())
      return cannot("the ranks span several hosts and no allocation host list was found "
                    "(SLURM_STEP_NODELIST, SLURM_JOB_NODELIST, PBS_NODEFILE)");
    r.listenAny = true;
  }
  r.source = hostFrom + ", port from " + keyFrom + "=" + key;
  *out = r;
  return Status::Ok();
}

Status firstHostOfHostlist(const std::string& hostlist, const std::string& origin, std::string* out) {
  auto bad = [&](const char* why) {
    return makeStatus(Err::InvalidConfig, "%s='%s' is not a Slurm hostlist: %s", origin.c_str(),
                      hostlist.c_str(), why);
  };
  std::string host;
  for (size_t i = 0; i < hostlist.size() && hostlist[i] != ','; ++i) {
    if (hostlist[i] != '[') {
      if (hostlist[i] == ']') return bad("']' without '['");
      host += hostlist[i];
      continue;
    }
    const size_t close = hostlist.find(']', i);
    if (close == std::string::npos) return bad("'[' without ']'");
    const std::string range = hostlist.substr(i + 1, close - i - 1);
    const std::string first = range.substr(0, range.find_first_of(",-"));
    if (first.empty() || first.find_first_not_of("0123456789") != std::string::npos)
      return bad("a bracket range must start with a number");
    host += first;
    i = close;
  }
  if (host.empty()) return bad("no host name before the first ','");
  *out = host;
  return Status::Ok();
}

}  // namespace gradcomp::transport
