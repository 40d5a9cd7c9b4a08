// The algorithm registry: a name -> AlgorithmInfo map filled by the static
// registrars of algorithm files (GC_REGISTER_ALGORITHM) during static
// initialization. The map is a function-local static so registration works
// whatever order the translation units are initialized in. Registration is
// single-threaded (static init); lookups afterwards only read.
#include <map>

#include "algorithms/algorithm.h"
#include "common/log.h"

namespace gradcomp::algo {
namespace {

std::map<std::string, AlgorithmInfo>& registry() {
  static std::map<std::string, AlgorithmInfo> algorithms;
  return algorithms;
}

std::map<std::string, AlgorithmInfo>& allgatherRegistry() {
  static std::map<std::string, AlgorithmInfo> algorithms;
  return algorithms;
}

void registerIn(std::map<std::string, AlgorithmInfo>& map, AlgorithmInfo info) {
  // A duplicate name is a build mistake (two files claim one name); keep the
  // first so behaviour does not depend on link order, and say so.
  const std::string name = info.name;
  auto [it, added] = map.emplace(name, std::move(info));
  if (!added) {
    GC_WARN("algorithm '%s' registered twice; keeping the first registration", name.c_str());
    return;
  }
  // What it creates knows its entry (Algorithm::info: its name and its
  // reduce-scatter capability). Map nodes never move.
  AlgorithmInfo* entry = &it->second;
  if (entry->create)
    entry->create = [make = std::move(entry->create), entry] {
      std::unique_ptr<Algorithm> a = make();
      if (a) a->setInfo(entry);
      return a;
    };
}

}  // namespace

void registerAlgorithm(AlgorithmInfo info) { registerIn(registry(), std::move(info)); }
void registerAllgatherAlgorithm(AlgorithmInfo info) {
  registerIn(allgatherRegistry(), std::move(info));
}

const AlgorithmInfo* findAllgatherAlgorithm(const std::string& name) {
  auto it = allgatherRegistry().find(name);
  return it == allgatherRegistry().end() ? nullptr : &it->second;
}

std::vector<const AlgorithmInfo*> listAllgatherAlgorithms() {
  std::vector<const AlgorithmInfo*> out;
  for (const auto& entry : allgatherRegistry()) out.push_back(&entry.second);
  return out;
}

std::string allgatherNames() {
  std::string names;
  for (const auto& entry : allgatherRegistry()) names += (names.empty() ? "" : ", ") + entry.first;
  return names;
}

const AlgorithmInfo* findAlgorithm(const std::string& name) {
  auto it = registry().find(name);
  return it == registry().end() ? nullptr : &it->second;
}

std::vector<const AlgorithmInfo*> listAlgorithms() {
  std::vector<const AlgorithmInfo*> out;
  for (const auto& entry : registry())  // std::map: sorted
    if (!entry.second.selector) out.push_back(&entry.second);
  return out;
}

namespace {

std::string namesWhere(bool selector) {
  std::string names;
  for (const auto& entry : registry()) {
    if (entry.second.selector != selector) continue;
    if (!names.empty()) names += ", ";
    names += entry.first;
  }
  return names;
}

}  // namespace

std::string algorithmNames() { return namesWhere(false); }
std::string selectorNames() { return namesWhere(true); }

std::string reduceScatterNames() {
  std::string names;
  for (const AlgorithmInfo* info : listAlgorithms())
    if (info->hasReduceScatter()) names += (names.empty() ? "" : ", ") + info->name;
  return names;
}

}  // namespace gradcomp::algo
