// launchInfoFromEnvironment: who am I, how many are we, where is rank 0.
// GRADCOMP_* values come through the parameter registry; the launchers' own
// variables (Open MPI, PMI, Slurm, torchrun) are read in launcher_env.cc, each
// error naming the variable.
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <strings.h>
#include <string>

#include "common/log.h"
#include "common/param.h"
#include "transport/bootstrap.h"
#include "transport/launcher_env.h"

namespace gradcomp::transport {
namespace {

Status checkRankBelowSize(const char* rankVar, long rank, const char* sizeVar, long size) {
  GC_REQUIRE(rank < size, Err::InvalidConfig, "%s=%ld is invalid: it must be below %s=%ld",
             rankVar, rank, sizeVar, size);
  return Status::Ok();
}

Status rankAndSize(LaunchInfo* info, LauncherRank* who) {
  const bool haveRank = param::isSet(param::Id::RANK);
  const bool haveSize = param::isSet(param::Id::NRANKS);
  if (haveRank || haveSize) {
    GC_REQUIRE(haveRank && haveSize, Err::InvalidConfig,
               "GRADCOMP_%s is set but GRADCOMP_%s is not: set both (or neither)",
               haveRank ? "RANK" : "NRANKS", haveRank ? "NRANKS" : "RANK");
    int64_t rank = 0, size = 0;
    GC_CHECK(param::getInt(param::Id::RANK, &rank));
    GC_CHECK(param::getInt(param::Id::NRANKS, &size));
    GC_CHECK(checkRankBelowSize("GRADCOMP_RANK", rank, "GRADCOMP_NRANKS", size));
    info->rank = static_cast<int>(rank);
    info->size = static_cast<int>(size);
    info->source = "GRADCOMP_RANK/GRADCOMP_NRANKS";
    *who = LauncherRank();  // Launcher::None: no rendezvous to derive
    who->rank = info->rank;
    who->size = info->size;
    who->source = info->source;
    return Status::Ok();
  }
  GC_CHECK(launcherRankAndSize(who));
  info->rank = who->rank;
  info->size = who->size;
  info->source = who->source;
  return Status::Ok();
}

Status parsePort(const std::string& text, const std::string& origin, int* out) {
  char* end = nullptr;
  errno = 0;
  long v = strtol(text.c_str(), &end, 10);
  GC_REQUIRE(!text.empty() && !*end && !errno && v >= 1 && v <= 65535, Err::InvalidConfig,
             "%s: port '%s' is invalid: expected an integer in 1..65535", origin.c_str(),
             text.c_str());
  *out = static_cast<int>(v);
  return Status::Ok();
}

// "host:port" or "[v6addr]:port".
Status parseHostPort(const std::string& text, const std::string& origin, std::string* host,
                     int* port) {
  auto bad = [&]() {
    return makeStatus(Err::InvalidConfig,
                      "%s='%s' is invalid: expected host:port (e.g. 10.0.0.1:29500) with a port "
                      "in 1..65535",
                      origin.c_str(), text.c_str());
  };
  std::string h, p;
  if (!text.empty() && text[0] == '[') {
    const size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') return bad();
    h = text.substr(1, close - 1);
    p = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string::npos) return bad();
    h = text.substr(0, colon);
    p = text.substr(colon + 1);
    if (h.find(':') != std::string::npos) return bad();  // bare IPv6 needs brackets
  }
  if (h.empty() || !parsePort(p, origin, port).ok()) return bad();
  *host = h;
  return Status::Ok();
}

}  // namespace

Status launchInfoFromEnvironment(LaunchInfo* out) {
  LaunchInfo info;
  LauncherRank who;
  GC_CHECK(rankAndSize(&info, &who));
  std::string bootstrap;
  const char* addr = getenv("MASTER_ADDR");
  const char* port = getenv("MASTER_PORT");
  std::string where;
  if (param::isSet(param::Id::BOOTSTRAP)) {
    GC_CHECK(param::getString(param::Id::BOOTSTRAP, &bootstrap));
    GC_CHECK(parseHostPort(bootstrap, "GRADCOMP_BOOTSTRAP", &info.host, &info.port));
    where = "GRADCOMP_BOOTSTRAP";
  } else if (addr || port) {
    GC_REQUIRE(addr && addr[0], Err::InvalidConfig,
               "MASTER_PORT is set but MASTER_ADDR is not: set both, or GRADCOMP_BOOTSTRAP=host:port");
    GC_REQUIRE(port, Err::InvalidConfig,
               "MASTER_ADDR is set but MASTER_PORT is not: set both, or GRADCOMP_BOOTSTRAP=host:port");
    info.host = addr;
    GC_CHECK(parsePort(port, "MASTER_PORT", &info.port));
    where = "MASTER_ADDR:MASTER_PORT";
    // torchrun's agent serves its own store on MASTER_PORT (its workers get
    // TORCHELASTIC_USE_AGENT_STORE=True): take the next port.
    const char* agentStore = getenv("TORCHELASTIC_USE_AGENT_STORE");
    if (agentStore && (strcasecmp(agentStore, "true") == 0 || strcmp(agentStore, "1") == 0)) {
      GC_REQUIRE(info.port < 65535, Err::InvalidConfig,
                 "MASTER_PORT=65535 is torchrun's store and gradcomp needs the next port: set "
                 "GRADCOMP_BOOTSTRAP=host:port");
      info.port += 1;
      where = "MASTER_ADDR:MASTER_PORT+1 (MASTER_PORT is torchrun's agent store)";
    }
  } else if (info.size > 1) {
    DerivedRendezvous derived;
    GC_CHECK(deriveRendezvous(who, &derived));
    info.host = derived.host;
    info.port = derived.port;
    info.listenAny = derived.listenAny;
    where = derived.source;
  }
  GC_INFO(BOOTSTRAP, "rank %d of %d (from %s), rendezvous %s:%d%s%s", info.rank, info.size,
          info.source.c_str(), info.host.empty() ? "-" : info.host.c_str(), info.port,
          where.empty() ? "" : " from ", where.c_str());
  *out = info;
  return Status::Ok();
}

}  // namespace gradcomp::transport
