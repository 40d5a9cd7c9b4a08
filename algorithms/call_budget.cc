#include "algorithms/call_budget.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <new>

#include "common/log.h"
#include "common/param.h"

namespace gradcomp::algo {
namespace {

void takeMax(device::Backend::Reservation* into, const device::Backend::Reservation& r) {
  into->deviceBytes = std::max(into->deviceBytes, r.deviceBytes);
  into->hostBytes = std::max(into->hostBytes, r.hostBytes);
}

}  // namespace

bool proxyCheckStrict(const device::Backend& dev) {
  std::string mode = "auto";
  (void)param::getString(param::Id::PROXY_CHECK, &mode);
  if (mode == "auto") return std::string(dev.name()) == "cpu-device";
  return mode == "error";
}

CallBudget::Reservation CallBudget::firstCallBound(size_t fp32Bytes) {
  constexpr size_t kSlack = size_t(8) << 20;
  return Reservation{4 * fp32Bytes + kSlack, 2 * fp32Bytes + kSlack};
}

CallBudget::Plan CallBudget::plan(const Algorithm& algorithm, const std::string& name,
                                  const device::Backend& dev, const AllreduceArgs& args) {
  Plan p;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const Shape shape = shapeOf(algorithm, name, args);
    p.newShape = prepared_.count(shape) == 0;
    auto it = drawn_.find(shape);
    if (it != drawn_.end()) p.reservation = it->second;
    if (it == drawn_.end() || algorithm.choosesPerCall()) {
      Reservation bound = firstCallBound(args.count * std::max<size_t>(4, dtypeSize(args.dtype)));
      const Reservation extra = algorithm.extraFirstCall(args);
      bound.deviceBytes += extra.deviceBytes;
      bound.hostBytes += extra.hostBytes;
      takeMax(&p.reservation, bound);
    }
    // A schedule chosen per call may be one that drew more elsewhere.
    if (algorithm.choosesPerCall()) takeMax(&p.reservation, largest_);
  }
  p.wouldGrow = dev.reserveWouldGrow(p.reservation);
  p.needsIdle = p.newShape || p.wouldGrow;
  return p;
}

Status CallBudget::prepare(Algorithm& algorithm, const std::string& name, Context& ctx,
                           const AllreduceArgs& args, const Plan& plan) {
  GC_CHECK(algorithm.prepare(ctx, args));
  {
    std::lock_guard<std::mutex> lock(mu_);
    prepared_.insert(shapeOf(algorithm, name, args));
  }
  return ctx.dev.reserve(plan.reservation);
}

Status CallBudget::prepare(Algorithm& algorithm, const std::string& name, Context& ctx,
                           const AllreduceArgs& args, Reservation* promise) {
  const Plan p = plan(algorithm, name, ctx.dev, args);
  GC_CHECK(prepare(algorithm, name, ctx, args, p));
  *promise = p.reservation;
  return Status::Ok();
}

Status CallBudget::run(Algorithm& algorithm, const std::string& name, Context& ctx,
                       const AllreduceArgs& args, const Reservation& promise,
                       const CallSignature* signature) {
  char what[160];
  std::snprintf(what, sizeof what, "%s %s #%llu (%zu x %s %s)", name.c_str(),
                collectiveName(args.coll), (unsigned long long)ctx.callSeq, args.count,
                dtypeName(args.dtype),
                redOpName(args.op));
  const bool strict = proxyCheckStrict(ctx.dev);
  ctx.dev.park(what, strict);
  // No exception may leave a proxy thread: a refused allocation (strict) is
  // a bad_alloc out of a device array, reported with the violation below.
  Status ran;
  try {
    ran = signature ? checker_.run(algorithm, ctx, args, *signature)
                    : runCollective(algorithm, ctx, args);
  } catch (const device::BackendRefused& refused) {
    ran = refused.status();
  } catch (const std::bad_alloc&) {
    ran = makeStatus(Err::SystemError, "%s: out of memory (an allocation failed)", what);
  } catch (const std::exception& e) {
    ran = makeStatus(Err::Internal, "%s: unexpected exception: %s", what, e.what());
  }
  Reservation drawn;
  const Status contract = ctx.dev.unpark(promise, &drawn);
  {
    std::lock_guard<std::mutex> lock(mu_);
    takeMax(&drawn_[shapeOf(algorithm, name, args)], drawn);
    takeMax(&largest_, drawn);
  }
  GC_TRACE(DEVICE, "%s drew %zu device and %zu host bytes beyond free blocks (reserved %zu, %zu)",
           what, drawn.deviceBytes, drawn.hostBytes, promise.deviceBytes, promise.hostBytes);
  if (!contract.ok()) {
    if (strict) return contract;  // the cause, also when allreduce failed from it
    GC_WARN("%s (GRADCOMP_PROXY_CHECK=warn: the call goes on; a later call of this shape "
            "reserves what it drew)", contract.toString().c_str());
  }
  return ran;
}

}  // namespace gradcomp::algo
