// launchInfoFromEnvironment: who am I, how many are we, where is rank 0.
// GRADCOMP_* values come through the parameter registry; the launchers' own
// variables (Open MPI, PMI, Slurm, torchrun) are read with getenv and
// validated here, each error naming the variable.
#include <cerrno>
#include <cstdlib>
#include <string>

#include "common/log.h"
#include "common/param.h"
#include "transport/bootstrap.h"

namespace gradcomp::transport {
namespace {

// A launcher's (rank, size) variable names, in precedence order.
struct LauncherPair {
  const char* rankVar;
  const char* sizeVar;
};
constexpr LauncherPair kLaunchers[] = {
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
    {"PMI_RANK", "PMI_SIZE"},
    {"SLURM_PROCID", "SLURM_NTASKS"},
    {"RANK", "WORLD_SIZE"},
};
constexpr long kMaxRanks = 1048576;

Status parseNonNegative(const char* var, const char* text, long lo, long* out) {
  char* end = nullptr;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (!text[0] || *end || errno || v < lo || v > kMaxRanks)
    return makeStatus(Err::InvalidConfig, "%s='%s' is invalid: expected an integer in %ld..%ld",
                      var, text, lo, kMaxRanks);
  *out = v;
  return Status::Ok();
}

Status checkRankBelowSize(const char* rankVar, long rank, const char* sizeVar, long size) {
  GC_REQUIRE(rank < size, Err::InvalidConfig, "%s=%ld is invalid: it must be below %s=%ld",
             rankVar, rank, sizeVar, size);
  return Status::Ok();
}

Status rankAndSize(LaunchInfo* out) {
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
    out->rank = static_cast<int>(rank);
    out->size = static_cast<int>(size);
    out->source = "GRADCOMP_RANK/GRADCOMP_NRANKS";
    return Status::Ok();
  }
  for (const LauncherPair& l : kLaunchers) {
    const char* rankText = getenv(l.rankVar);
    const char* sizeText = getenv(l.sizeVar);
    if (!rankText || !sizeText) continue;  // first complete pair wins
    long rank = 0, size = 0;
    GC_CHECK(parseNonNegative(l.rankVar, rankText, 0, &rank));
    GC_CHECK(parseNonNegative(l.sizeVar, sizeText, 1, &size));
    GC_CHECK(checkRankBelowSize(l.rankVar, rank, l.sizeVar, size));
    out->rank = static_cast<int>(rank);
    out->size = static_cast<int>(size);
    out->source = std::string(l.rankVar) + "/" + l.sizeVar;
    return Status::Ok();
  }
  // No launcher: a single standalone process.
  out->rank = 0;
  out->size = 1;
  out->source = "default (no rank variables set)";
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
  GC_CHECK(rankAndSize(&info));
  std::string bootstrap;
  if (param::isSet(param::Id::BOOTSTRAP)) {
    GC_CHECK(param::getString(param::Id::BOOTSTRAP, &bootstrap));
    GC_CHECK(parseHostPort(bootstrap, "GRADCOMP_BOOTSTRAP", &info.host, &info.port));
  } else {
    const char* addr = getenv("MASTER_ADDR");
    const char* port = getenv("MASTER_PORT");
    if (addr || port) {
      GC_REQUIRE(addr && addr[0], Err::InvalidConfig,
                 "MASTER_PORT is set but MASTER_ADDR is not: set both, or GRADCOMP_BOOTSTRAP=host:port");
      GC_REQUIRE(port, Err::InvalidConfig,
                 "MASTER_ADDR is set but MASTER_PORT is not: set both, or GRADCOMP_BOOTSTRAP=host:port");
      info.host = addr;
      GC_CHECK(parsePort(port, "MASTER_PORT", &info.port));
    }
  }
  GC_REQUIRE(info.size == 1 || !info.host.empty(), Err::InvalidConfig,
             "no bootstrap address: set GRADCOMP_BOOTSTRAP=host:port or MASTER_ADDR and "
             "MASTER_PORT (rank %d of %d from %s)",
             info.rank, info.size, info.source.c_str());
  GC_INFO(BOOTSTRAP, "rank %d of %d (from %s), rendezvous %s:%d", info.rank, info.size,
          info.source.c_str(), info.host.empty() ? "-" : info.host.c_str(), info.port);
  *out = info;
  return Status::Ok();
}

}  // namespace gradcomp::transport
