// Host topology: identity, the record exchange and the pure derivation
// (host_topology.h).
#include "transport/host_topology.h"

#include <unistd.h>

#include <cstdio>
#include <map>

#include "common/log.h"
#include "common/param.h"
#include "transport/placement.h"

namespace gradcomp::transport {
namespace {

std::string bootId() {
  std::string id;
  if (FILE* f = fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char buf[64] = {0};
    if (fgets(buf, sizeof(buf), f)) id = buf;
    fclose(f);
  }
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  return id;
}

// Keeps a record printable and on one line (it is joined with '\n').
std::string printable(const std::string& s) {
  std::string out;
  for (char c : s) out += (c >= 0x21 && c < 0x7f && c != '|') ? c : '_';
  return out.substr(0, 128);
}

bool parseRecord(const std::string& rec, std::string* mode, std::string* kind, std::string* id) {
  const size_t a = rec.find('|'), b = a == std::string::npos ? a : rec.find('|', a + 1),
               c = b == std::string::npos ? b : rec.find('|', b + 1);
  if (c == std::string::npos || rec.compare(0, a, "v1") != 0) return false;
  *mode = rec.substr(a + 1, b - a - 1);
  *kind = rec.substr(b + 1, c - b - 1);
  *id = rec.substr(c + 1);
  return (*kind == "env" || *kind == "auto" || *kind == "bad") && !id->empty();
}

HierarchyMode modeOf(const std::string& s) {
  return s == "flat" ? HierarchyMode::Flat : s == "host" ? HierarchyMode::Host : HierarchyMode::Auto;
}

// The first problem that keeps the records from a hierarchical schedule.
std::string findProblem(const std::vector<std::string>& modes, const std::vector<std::string>& kinds,
                        const std::vector<std::string>& ids, const HostTopology& t) {
  const int P = int(modes.size());
  for (int r = 1; r < P; ++r)
    if (modes[r] != modes[0])
      return "ranks disagree on GRADCOMP_HIERARCHY: rank 0 has " + modes[0] + ", rank " +
             std::to_string(r) + " has " + modes[r];
  for (int r = 0; r < P; ++r)
    if (kinds[r] == "bad") return "rank " + std::to_string(r) + ": " + ids[r];
  for (int r = 1; r < P; ++r)
    if (kinds[r] != kinds[0]) {
      const int set = kinds[0] == "env" ? 0 : r, unset = set == 0 ? r : 0;
      return "GRADCOMP_HOSTID differs in format across ranks: set on rank " + std::to_string(set) +
             " ('" + ids[set] + "') but not on rank " + std::to_string(unset) +
             " (hostname/boot id); set it on every rank or none";
    }
  for (int h = 1; h < t.hosts(); ++h)
    if (t.hostRanks[h].size() != t.hostRanks[0].size())
      return "uneven ranks per host: host 0 ('" + t.hostIds[0] + "') has " +
             std::to_string(t.hostRanks[0].size()) + " ranks, host " + std::to_string(h) + " ('" +
             t.hostIds[h] + "') has " + std::to_string(t.hostRanks[h].size());
  return "";
}

}  // namespace

const char* hierarchyModeName(HierarchyMode m) {
  return m == HierarchyMode::Flat ? "flat" : m == HierarchyMode::Host ? "host" : "auto";
}

std::string hostIdProblem(const std::string& id) {
  if (id.empty() || id.size() > 128)
    return "GRADCOMP_HOSTID must have 1..128 characters (has " + std::to_string(id.size()) + ")";
  for (char c : id)
    if (c < 0x21 || c >= 0x7f || c == '|')
      return "GRADCOMP_HOSTID='" + printable(id) +
             "' is invalid: only printable ASCII without spaces or '|' is accepted";
  return "";
}

HostIdentity localHostIdentity() {
  std::string env;
  if (param::isSet(param::Id::HOSTID) && param::getString(param::Id::HOSTID, &env).ok()) {
    const std::string why = hostIdProblem(env);
    return why.empty() ? HostIdentity{"env", env} : HostIdentity{"bad", why};
  }
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0 || !host[0]) snprintf(host, sizeof(host), "?");
  return {"auto", printable(std::string(host)) + "/" + printable(bootId())};
}

std::string encodeTopologyRecord(const HostIdentity& me, HierarchyMode mode) {
  std::string rec = std::string("v1|") + hierarchyModeName(mode) + "|" + me.kind + "|" + me.id;
  for (char& c : rec)
    if (c == '\n') c = '_';
  return rec.substr(0, kMaxTopologyRecord);
}

std::vector<int> HostTopology::rail(int l) const {
  std::vector<int> out;
  for (const auto& ranks : hostRanks)
    if (l < int(ranks.size())) out.push_back(ranks[size_t(l)]);
  return out;
}

bool HostTopology::uniform() const {
  for (const auto& ranks : hostRanks)
    if (ranks.size() != hostRanks[0].size()) return false;
  return true;
}

std::string HostTopology::describe() const {
  char buf[512];
  snprintf(buf, sizeof(buf), "rank %d: host %d of %d ('%s'), local rank %d of %d, schedule %s", rank,
           host, hosts(), hostIds[size_t(host)].c_str(), localRank, localSize,
           hierarchical ? "host" : "flat");
  return buf;
}

HostTopology buildTopology(int rank, const std::vector<std::string>& records) {
  HostTopology t;
  t.rank = rank;
  t.size = int(records.size());
  std::vector<std::string> modes(records.size()), kinds(records.size()), ids(records.size());
  std::string malformed;
  std::map<std::string, int> index;
  for (size_t r = 0; r < records.size(); ++r) {
    if (!parseRecord(records[r], &modes[r], &kinds[r], &ids[r])) {
      if (malformed.empty())
        malformed = "rank " + std::to_string(r) + " sent a malformed topology record";
      modes[r] = "flat", kinds[r] = "bad", ids[r] = "malformed-" + std::to_string(r);
    }
    // A rank whose identity is bad is a host of its own (traffic to it counts
    // as inter-host); the problem sends the job flat anyway.
    const std::string key = kinds[r] == "bad" ? "!" + std::to_string(r) : ids[r];
    auto [it, fresh] = index.emplace(key, t.hosts());
    if (fresh) {
      t.hostIds.push_back(kinds[r] == "bad" ? "?" : ids[r]);
      t.hostRanks.emplace_back();
    }
    t.hostOf.push_back(it->second);
    t.hostRanks[size_t(it->second)].push_back(int(r));
  }
  t.host = t.hostOf[size_t(rank)];
  const auto& mine = t.hostRanks[size_t(t.host)];
  t.localSize = int(mine.size());
  for (size_t i = 0; i < mine.size(); ++i)
    if (mine[i] == rank) t.localRank = int(i);
  t.mode = modeOf(modes[0]);
  t.problem = malformed.empty() ? findProblem(modes, kinds, ids, t) : malformed;
  // Flat asked for by every rank is no problem; otherwise a problem is.
  const bool allFlat = t.problem.empty() && t.mode == HierarchyMode::Flat;
  if (allFlat) return t;
  if (!t.problem.empty()) return t;
  t.hierarchical = t.mode == HierarchyMode::Host || (t.hosts() > 1 && t.localSize > 1);
  return t;
}

Status agreeTopology(Transport& net, const HostIdentity& me, HierarchyMode mode,
                     HostTopology* out) {
  const int P = net.size(), rank = net.rank();
  const std::string mine = encodeTopologyRecord(me, mode);
  std::vector<std::string> records(static_cast<size_t>(P));
  records[size_t(rank)] = mine;
  std::string table;
  if (rank == 0) {
    std::vector<std::string> bufs(size_t(P), std::string(kMaxTopologyRecord, '\0'));
    std::vector<Handle> hs;
    for (int p = 1; p < P; ++p) {
      Handle h = 0;
      Status s = net.irecv(p, kTopologyGatherTag, &bufs[size_t(p)][0], kMaxTopologyRecord, &h);
      if (!s.ok()) {
        for (Handle posted : hs) net.cancel(posted);
        return s;
      }
      hs.push_back(h);
    }
    std::vector<size_t> lens(hs.size());
    GC_CHECK(net.waitAll(hs.data(), hs.size(), lens.data()));
    for (int p = 1; p < P; ++p) records[size_t(p)] = bufs[size_t(p)].substr(0, lens[size_t(p - 1)]);
    for (const auto& r : records) table += r + '\n';
    hs.clear();
    for (int p = 1; p < P; ++p) {
      Handle h = 0;
      Status s = net.isend(p, kTopologyTableTag, table.data(), table.size(), &h);
      if (!s.ok()) {
        for (Handle posted : hs) net.cancel(posted);
        return s;
      }
      hs.push_back(h);
    }
    GC_CHECK(net.waitAll(hs.data(), hs.size(), nullptr));
  } else {
    Handle h = 0;
    GC_CHECK(net.isend(0, kTopologyGatherTag, mine.data(), mine.size(), &h));
    GC_CHECK(net.wait(h));
    std::string buf(size_t(P) * (kMaxTopologyRecord + 1), '\0');
    size_t len = 0;
    GC_CHECK(net.irecv(0, kTopologyTableTag, &buf[0], buf.size(), &h));
    GC_CHECK(net.wait(h, &len));
    table = buf.substr(0, len);
    size_t pos = 0;
    for (int p = 0; p < P; ++p) {
      const size_t nl = table.find('\n', pos);
      GC_REQUIRE(nl != std::string::npos, Err::RemoteError,
                 "rank 0 sent a topology table with %d records for %d ranks", p, P);
      records[size_t(p)] = table.substr(pos, nl - pos);
      pos = nl + 1;
    }
  }
  *out = buildTopology(rank, records);
  return Status::Ok();
}

Status discoverTopology(Transport& net, HostTopology* out) {
  std::string modeText;
  GC_CHECK(param::getString(param::Id::HIERARCHY, &modeText));
  GC_CHECK(agreeTopology(net, localHostIdentity(), modeOf(modeText), out));
  if (!out->problem.empty()) {
    bool strict = false;
    GC_CHECK(param::getBool(param::Id::STRICT, &strict));
    GC_REQUIRE(!strict, Err::InvalidConfig, "host topology: %s (GRADCOMP_STRICT=1)",
               out->problem.c_str());
    if (net.rank() == 0)
      GC_WARN("host topology: %s; running every algorithm flat over all %d ranks "
              "(GRADCOMP_HIERARCHY, GRADCOMP_HOSTID)", out->problem.c_str(), net.size());
  }
  if (log::enabled(log::Level::Info, log::INIT))
    GC_INFO(INIT, "topology %s (%d hosts, GRADCOMP_HIERARCHY=%s); %s", out->describe().c_str(),
            out->hosts(), hierarchyModeName(out->mode),
            describePlacement(discoverPlacement()).c_str());
  return Status::Ok();
}

}  // namespace gradcomp::transport
