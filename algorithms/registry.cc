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

}  // namespace

void registerAlgorithm(AlgorithmInfo info) {
  // A duplicate name is a build mistake (two files claim one name); keep the
  // first so behaviour does not depend on link order, and say so.
  const std::string name = info.name;
  if (!registry().emplace(name, std::move(info)).second)
    GC_WARN("algorithm '%s' registered twice; keeping the first registration", name.c_str());
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

const char* collectiveName(Collective c) {
  return c == Collective::ReduceScatter ? "reducescatter" : "allreduce";
}

Status Algorithm::reduceScatter(Context& ctx, const AllreduceArgs& args) {
  (void)ctx, (void)args;
  return makeStatus(Err::Unsupported, "this algorithm has no reduce-scatter form");
}

Status checkReduceScatterArgs(const AllreduceArgs& a, int nranks, int rank) {
  GC_REQUIRE(nranks > 0 && rank >= 0 && rank < nranks, Err::InvalidArgument,
             "reduce-scatter: rank %d of %d ranks", rank, nranks);
  GC_REQUIRE(a.count % size_t(nranks) == 0, Err::InvalidArgument,
             "reduce-scatter: count %zu is not recvcount x %d ranks", a.count, nranks);
  const size_t esz = dtypeSize(a.dtype);
  const size_t recv = a.count / size_t(nranks);
  if (a.count == 0) return Status::Ok();
  GC_REQUIRE(a.sendBuf && a.recvBuf, Err::InvalidArgument, "reduce-scatter: %s is null",
             a.sendBuf ? "recvbuff" : "sendbuff");
  const uintptr_t s = reinterpret_cast<uintptr_t>(a.sendBuf);
  const uintptr_t r = reinterpret_cast<uintptr_t>(a.recvBuf);
  const uintptr_t inPlace = s + uintptr_t(rank) * recv * esz;
  const bool overlap = r < s + a.count * esz && s < r + recv * esz;
  GC_REQUIRE(!overlap || r == inPlace, Err::InvalidArgument,
             "reduce-scatter: recvbuff overlaps sendbuff other than in NCCL's in-place layout "
             "(recvbuff = sendbuff + rank x recvcount elements; it is %+lld bytes from sendbuff, "
             "rank %d expects %zu)", (long long)(r - s), rank, size_t(rank) * recv * esz);
  return Status::Ok();
}

Status runCollective(Algorithm& alg, Context& ctx, const AllreduceArgs& args) {
  if (args.coll == Collective::AllReduce) return alg.allreduce(ctx, args);
  GC_REQUIRE(alg.hasReduceScatter(), Err::Unsupported,
             "the algorithm has no reduce-scatter form");
  GC_CHECK(checkReduceScatterArgs(args, ctx.net.size(), ctx.net.rank()));
  return alg.reduceScatter(ctx, args);
}

Status Reference::shareResiduals(const std::shared_ptr<CentralResiduals>& residuals) {
  (void)residuals;
  return makeStatus(Err::Unsupported,
                    "this algorithm's reference cannot share error-feedback residuals");
}

}  // namespace gradcomp::algo
