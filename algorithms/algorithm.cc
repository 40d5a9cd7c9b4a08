// The entry points every call of an algorithm goes through (algorithm.h):
// the one check of a call's arguments, the one dispatch by collective, and
// the capability the registry states.
#include <cstdint>
#include <limits>

#include "algorithms/algorithm.h"

namespace gradcomp::algo {

const char* collectiveName(Collective c) {
  return c == Collective::ReduceScatter ? "reducescatter"
         : c == Collective::AllGather   ? "allgather"
                                        : "allreduce";
}

Status checkCallArgs(const AllreduceArgs& a, int nranks, int rank) {
  GC_REQUIRE(a.coll == Collective::AllReduce || a.coll == Collective::ReduceScatter ||
                 a.coll == Collective::AllGather,
             Err::InvalidArgument, "collective value %d is invalid: expected allreduce (0), "
             "reduce-scatter (1) or allgather (2)", int(a.coll));
  const bool rs = a.coll == Collective::ReduceScatter;
  const bool ag = a.coll == Collective::AllGather;
  const char* what = rs ? "reduce-scatter" : ag ? "allgather" : "allreduce";
  const size_t esz = dtypeSize(a.dtype);
  GC_REQUIRE(esz != 0, Err::InvalidArgument, "%s: dtype value %d is not a DataType", what,
             int(a.dtype));
  GC_REQUIRE(ag || a.op == RedOp::Sum || a.op == RedOp::Avg, Err::InvalidArgument,
             "%s: op value %d is invalid: expected sum (0) or avg (4)", what, int(a.op));
  GC_REQUIRE(a.count <= std::numeric_limits<size_t>::max() / esz, Err::InvalidArgument,
             "%s: count %zu of %s overflows the byte size", what, a.count, dtypeName(a.dtype));
  GC_REQUIRE(nranks > 0 && rank >= 0 && rank < nranks, Err::InvalidArgument,
             "%s: rank %d of %d ranks", what, rank, nranks);
  GC_REQUIRE(!rs || a.count % size_t(nranks) == 0, Err::InvalidArgument,
             "reduce-scatter: count %zu is not recvcount x %d ranks", a.count, nranks);
  GC_REQUIRE(!ag || a.count % size_t(nranks) == 0, Err::InvalidArgument,
             "allgather: count %zu is not sendcount x %d ranks", a.count, nranks);
  if (a.count == 0) return Status::Ok();  // nothing is read or written
  GC_REQUIRE(a.sendBuf && a.recvBuf, Err::InvalidArgument, "%s: %s is null with count %zu", what,
             a.sendBuf ? "recvBuf" : "sendBuf", a.count);
  const uintptr_t s = reinterpret_cast<uintptr_t>(a.sendBuf);
  const uintptr_t r = reinterpret_cast<uintptr_t>(a.recvBuf);
  const size_t sendBytes = a.count * esz;
  if (!rs && !ag) {
    const bool overlap = r < s + sendBytes && s < r + sendBytes;
    GC_REQUIRE(!overlap || r == s, Err::InvalidArgument,
               "allreduce: recvBuf overlaps sendBuf without being equal (%+lld bytes from it, "
               "%zu bytes each)", (long long)(r - s), sendBytes);
    return Status::Ok();
  }
  if (ag) {
    // sendBuf holds count / P elements, recvBuf count.
    const size_t shardBytes = sendBytes / size_t(nranks);
    const uintptr_t inPlace = r + uintptr_t(rank) * shardBytes;
    const bool overlap = s < r + sendBytes && r < s + shardBytes;
    GC_REQUIRE(!overlap || s == inPlace, Err::InvalidArgument,
               "allgather: sendBuf overlaps recvBuf other than in NCCL's in-place layout "
               "(sendBuf = recvBuf + rank x sendcount elements; it is %+lld bytes from recvBuf, "
               "rank %d expects %zu)", (long long)(s - r), rank, size_t(rank) * shardBytes);
    return Status::Ok();
  }
  const size_t recvBytes = a.count / size_t(nranks) * esz;
  const uintptr_t inPlace = s + uintptr_t(rank) * recvBytes;
  const bool overlap = r < s + sendBytes && s < r + recvBytes;
  GC_REQUIRE(!overlap || r == inPlace, Err::InvalidArgument,
             "reduce-scatter: recvBuf overlaps sendBuf other than in NCCL's in-place layout "
             "(recvBuf = sendBuf + rank x recvcount elements; it is %+lld bytes from sendBuf, "
             "rank %d expects %zu)", (long long)(r - s), rank, size_t(rank) * recvBytes);
  return Status::Ok();
}

bool Algorithm::hasReduceScatter() const { return info_ && info_->hasReduceScatter(); }
bool Algorithm::hasAllgather() const { return info_ && info_->hasAllgather(); }

std::string Algorithm::name() const {
  return info_ ? "'" + info_->name + "'" : std::string("an unregistered algorithm");
}

Status Algorithm::allreduce(Context& ctx, const AllreduceArgs& args) {
  GC_REQUIRE(args.coll == Collective::AllReduce, Err::InvalidArgument,
             "algorithm %s: allreduce() was handed a %s call (runCollective dispatches by "
             "args.coll)", name().c_str(),
             args.coll == Collective::ReduceScatter ? "reduce-scatter" : "non-allreduce");
  GC_CHECK(checkCallArgs(args, ctx.net.size(), ctx.net.rank()));
  return runAllreduce(ctx, args);
}

Status Algorithm::reduceScatter(Context& ctx, const AllreduceArgs& args) {
  GC_REQUIRE(hasReduceScatter(), Err::Unsupported,
             "algorithm %s has no reduce-scatter form (those with one: %s)", name().c_str(),
             reduceScatterNames().c_str());
  GC_REQUIRE(args.coll == Collective::ReduceScatter, Err::InvalidArgument,
             "algorithm %s: reduceScatter() was handed an allreduce call (runCollective "
             "dispatches by args.coll)", name().c_str());
  GC_CHECK(checkCallArgs(args, ctx.net.size(), ctx.net.rank()));
  return runReduceScatter(ctx, args);
}

Status Algorithm::allgather(Context& ctx, const AllreduceArgs& args) {
  GC_REQUIRE(hasAllgather(), Err::Unsupported,
             "algorithm %s has no allgather form (GRADCOMP_AG_ALGO takes: %s)", name().c_str(),
             allgatherNames().c_str());
  GC_REQUIRE(args.coll == Collective::AllGather, Err::InvalidArgument,
             "algorithm %s: allgather() was handed a %s call (runCollective dispatches by "
             "args.coll)", name().c_str(), collectiveName(args.coll));
  GC_CHECK(checkCallArgs(args, ctx.net.size(), ctx.net.rank()));
  return runAllgather(ctx, args);
}

Status Algorithm::runAllgather(Context& ctx, const AllreduceArgs& args) {
  (void)ctx, (void)args;
  return makeStatus(Err::Internal,
                    "algorithm %s: its registry entry has an allgather reference but the "
                    "algorithm implements no allgather form", name().c_str());
}

Status Algorithm::runAllreduce(Context& ctx, const AllreduceArgs& args) {
  (void)ctx, (void)args;
  return makeStatus(Err::Internal, "algorithm %s implements no allreduce (runAllreduce)",
                    name().c_str());
}

Status Algorithm::runReduceScatter(Context& ctx, const AllreduceArgs& args) {
  (void)ctx, (void)args;
  return makeStatus(Err::Internal,
                    "algorithm %s: its registry entry has a reduce-scatter reference but the "
                    "algorithm implements no reduce-scatter form", name().c_str());
}

Status runCollective(Algorithm& alg, Context& ctx, const AllreduceArgs& args) {
  if (args.coll == Collective::AllGather) return alg.allgather(ctx, args);
  return args.coll == Collective::ReduceScatter ? alg.reduceScatter(ctx, args)
                                                : alg.allreduce(ctx, args);
}

Status Reference::shareResiduals(const std::shared_ptr<CentralResiduals>& residuals) {
  (void)residuals;
  return makeStatus(Err::Unsupported,
                    "this algorithm's reference cannot share error-feedback residuals");
}

}  // namespace gradcomp::algo
