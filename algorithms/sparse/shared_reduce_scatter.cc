// cltk's reduce-scatter value exchange (see shared_reduce_scatter.h).
#include "algorithms/sparse/shared_reduce_scatter.h"

#include "algorithms/sparse/collectives.h"

namespace gradcomp::algo::sparse {
namespace {
constexpr uint64_t kStepValues = 0x61000;
}

Status reduceScatterSharedValues(Context& ctx, const Coo& sel, const float* vals, size_t n,
                                 float* result, SharedExchangeStage* stage) {
  device::Backend& dev = ctx.dev;
  const int P = ctx.net.size(), me = ctx.net.rank();
  const std::vector<uint64_t> bounds = ownerBounds(n, P);
  const size_t rc = size_t(bounds[1]), m = sel.size();
  std::vector<size_t> starts;
  GC_CHECK(rangesOf(dev, sel, bounds, &starts));  // one sync
  const size_t lo = starts[me], mine = starts[me + 1] - lo;
  const uint64_t* idx = sel.idx.data();
  if (P == 1 || m == 0) {
    GC_CHECK(dev.scatterAdd(result, rc, bounds[me], idx + lo, vals + lo, mine));
    return dev.sync();
  }
  stage->bind(dev);
  stage->out.resize(m);
  stage->in.resize(mine * size_t(P - 1));
  stage->sum.resize(mine);
  GC_CHECK(dev.copy(stage->out.data(), vals, m * sizeof(float)));
  GC_CHECK(dev.copy(stage->sum.data(), vals + lo, mine * sizeof(float)));
  GC_CHECK(dev.sync());  // `out` is sent from host memory

  const uint64_t tag = transport::makeTag(ctx.callSeq, kStepValues);
  std::vector<size_t> got(size_t(P), 0);
  RequestSet req(ctx.net);
  for (int s = 1; s < P; ++s) {
    const int src = (me - s + P) % P, dst = (me + s) % P;
    if (mine) GC_CHECK(req.irecvUpTo(src, tag, stage->in.data() + size_t(s - 1) * mine,
                                mine * sizeof(float), &got[size_t(s)]));
    const size_t first = starts[dst], count = starts[dst + 1] - first;
    if (count) GC_CHECK(req.isend(dst, tag, stage->out.data() + first, count * sizeof(float)));
  }
  GC_CHECK(req.waitAll());
  for (int s = 1; s < P && mine; ++s) {
    GC_REQUIRE(got[size_t(s)] == mine * sizeof(float), Err::RemoteError,
               "cltk reduce-scatter: rank %d sent %zu bytes of values, the shared set implies %zu",
               (me - s + P) % P, got[size_t(s)], mine * sizeof(float));
    GC_CHECK(dev.add(stage->sum.data(), stage->sum.data(),
                     stage->in.data() + size_t(s - 1) * mine, mine, DataType::Float32));
  }
  GC_CHECK(dev.scatterAdd(result, rc, bounds[me], idx + lo, stage->sum.data(), mine));
  return dev.sync();  // the adds read `in`
}

void referenceSharedSums(const std::vector<const float*>& accs, size_t n, const uint64_t* idx,
                         size_t m, std::vector<float>* sum) {
  const int P = int(accs.size());
  const std::vector<uint64_t> bounds = ownerBounds(n, P);
  const uint64_t rc = bounds[1];
  for (size_t e = 0; e < m; ++e) {
    const uint64_t i = idx[e];
    const int j = rc ? int(i / rc) : 0;  // the owner
    float s = accs[size_t(j)][i];
    for (int t = 1; t < P; ++t) s = s + accs[size_t((j - t + P) % P)][i];
    (*sum)[i] += s;
  }
}

}  // namespace gradcomp::algo::sparse
