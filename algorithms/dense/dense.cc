// "dense": the uncompressed allreduce every compressed algorithm is measured
// against. Recursive doubling when a rank's buffer is at most
// GRADCOMP_DENSE_RD_MAX_BYTES (latency-bound), the ring above (bandwidth-
// optimal: 2(P-1)/P of the buffer sent per rank). Avg = sum, then divide by P
// on the device (fp64 division, one rounding; integers truncate).
#include <cmath>
#include <limits>
#include <memory>

#include "algorithms/dense/dense.h"
#include "common/log.h"
#include "device/cpu/element_traits.h"

namespace gradcomp::algo {
namespace {

Status validateArgs(const char* who, const AllreduceArgs& a) {
  const size_t esz = dtypeSize(a.dtype);
  GC_REQUIRE(esz != 0, Err::InvalidArgument, "%s: dtype value %d is not a DataType", who,
             int(a.dtype));
  GC_REQUIRE(a.op == RedOp::Sum || a.op == RedOp::Avg, Err::InvalidArgument,
             "%s: op value %d is invalid: expected sum (0) or avg (4)", who, int(a.op));
  GC_REQUIRE(a.count <= std::numeric_limits<size_t>::max() / esz, Err::InvalidArgument,
             "%s: count %zu of %s overflows the byte size", who, a.count, dtypeName(a.dtype));
  return Status::Ok();
}

class DenseAllreduce final : public Algorithm {
 public:
  // Arguments checked by Algorithm::allreduce / reduceScatter (checkCallArgs).
  Status runAllreduce(Context& ctx, const AllreduceArgs& a) override {
    if (a.count == 0) return Status::Ok();  // nothing to move; every rank agrees
    const size_t bytes = a.count * dtypeSize(a.dtype);
    if (a.sendBuf != a.recvBuf) GC_CHECK(ctx.dev.copy(a.recvBuf, a.sendBuf, bytes));
    const int P = ctx.net.size();
    if (P == 1) return ctx.dev.sync();  // x / 1 == x: avg needs no divide either

    int64_t rdMax = 0;
    GC_CHECK(ctx.config.getInt(param::Id::DENSE_RD_MAX_BYTES, &rdMax));
    if (bytes <= uint64_t(rdMax))
      GC_CHECK(dense::recursiveDoublingAllreduce(ctx, a.recvBuf, a.count, a.dtype, &stage_));
    else
      GC_CHECK(dense::ringAllreduce(ctx, a.recvBuf, a.count, a.dtype, &stage_));
    if (a.op == RedOp::Avg) GC_CHECK(ctx.dev.divide(a.recvBuf, a.count, a.dtype, P));
    // Complete before returning: the staging buffers are reused by the next
    // call, and an error a primitive found belongs to this call.
    return ctx.dev.sync();
  }

  // The ring's first half in NCCL's layout; avg divides the received chunk.
  Status runReduceScatter(Context& ctx, const AllreduceArgs& a) override {
    const int P = ctx.net.size();
    const size_t recvCount = recvCountOf(a, P);
    if (recvCount == 0) return Status::Ok();
    GC_CHECK(dense::ringReduceScatter(ctx, a.sendBuf, a.recvBuf, recvCount, a.dtype, &stage_));
    if (a.op == RedOp::Avg && P > 1) GC_CHECK(ctx.dev.divide(a.recvBuf, recvCount, a.dtype, P));
    return ctx.dev.sync();
  }

 private:
  dense::Staging stage_;  // host staging, kept across calls (grown, never shrunk)
};

// Unit roundoff u and half the smallest subnormal (the absolute rounding error
// bound below the normal range) of each floating dtype.
void roundoff(DataType t, double* u, double* eta) {
  switch (t) {
    case DataType::Float16: *u = std::ldexp(1.0, -11); *eta = std::ldexp(1.0, -25); break;
    case DataType::BFloat16: *u = std::ldexp(1.0, -8); *eta = std::ldexp(1.0, -134); break;
    case DataType::Float32: *u = std::ldexp(1.0, -24); *eta = std::ldexp(1.0, -150); break;
    default: *u = std::ldexp(1.0, -53); *eta = std::numeric_limits<double>::denorm_min(); break;
  }
}

// Expected result: the exact sum (avg: sum / P) computed in double.
// Tolerance: every partial sum is rounded to the dtype at each of the P-1
// additions (ring hop or recursive-doubling level), each partial sum is at
// most S = sum_i |x_i| in magnitude, and each rounding errs by at most
// u * |value| (+ eta in the subnormal range). Hence
//   sum: |out - exact| <= (P-1) * (u*S + eta) + u*|result| + eta
//   avg: the sum's bound / P, plus the divide's own rounding u*|result| + eta.
// (The u*|result| + eta term also covers rounding `expected` to the dtype;
// the reference's own float64 error is added on top, see refErr.)
// Integer-valued inputs whose partial sums are all representable give
// bit-exact results; integer dtypes are exact (wrapping sum, truncating avg).
class DenseReference final : public Reference {
 public:
  explicit DenseReference(int nranks) : nranks_(nranks) {}
  // No residuals: a selector's dense candidate runs without error feedback.
  Status shareResiduals(const std::shared_ptr<CentralResiduals>&) override { return Status::Ok(); }

  Status expect(const std::vector<const void*>& inputs, const AllreduceArgs& args,
                std::vector<double>* expected, std::vector<double>* tolerance) override {
    GC_CHECK(validateArgs("dense reference", args));
    GC_REQUIRE(int(inputs.size()) == nranks_, Err::InvalidArgument,
               "dense reference: %zu inputs for %d ranks", inputs.size(), nranks_);
    expected->assign(args.count, 0.0);
    tolerance->assign(args.count, 0.0);
    const double P = nranks_;
    device::cpu::dispatchType(args.dtype, [&](auto traits) {
      using T = decltype(traits);
      using S = typename T::Storage;
      for (size_t i = 0; i < args.count; ++i) {
        if constexpr (T::kFloating) {
          // Neumaier-compensated sum: within 2^-53 |sum| + O(P 2^-106 S) of
          // exact, which matters only for float64 inputs (kept in `refErr`).
          double sum = 0, carry = 0, mag = 0;
          for (const void* in : inputs) {
            const double x = T::toDouble(static_cast<const S*>(in)[i]);
            const double t = sum + x;
            carry += std::fabs(sum) >= std::fabs(x) ? (sum - t) + x : (x - t) + sum;
            sum = t;
            mag += std::fabs(x);
          }
          sum += carry;
          double u = 0, eta = 0;
          roundoff(args.dtype, &u, &eta);
          const double result = args.op == RedOp::Avg ? sum / P : sum;
          const double hops = (P - 1) * (u * mag + eta);
          const double refErr = std::ldexp(std::fabs(result), -52) + std::ldexp(P * mag, -100);
          (*expected)[i] = result;
          (*tolerance)[i] =
              (args.op == RedOp::Avg ? hops / P : hops) + u * std::fabs(result) + eta + refErr;
          if (!std::isfinite(result)) (*tolerance)[i] = 0;
        } else {
          S sum = 0;
          for (const void* in : inputs) sum = T::add(sum, static_cast<const S*>(in)[i]);
          if (args.op == RedOp::Avg) sum = S(sum / S(nranks_));
          (*expected)[i] = double(sum);
        }
      }
    });
    return Status::Ok();
  }

 private:
  int nranks_;
};

}  // namespace

GC_REGISTER_ALGORITHM(
    dense, {"dense",
            "Uncompressed allreduce: ring reduce-scatter + allgather, recursive doubling for "
            "small buffers; reduce-scatter: the ring's first half",
            {param::Id::DENSE_RD_MAX_BYTES},
            [] { return std::unique_ptr<Algorithm>(new DenseAllreduce()); },
            [](int nranks) { return std::unique_ptr<Reference>(new DenseReference(nranks)); },
            false,
            // The ring reduce-scatter adds each element P-1 times, as the
            // allreduce's ring: the same reference and bound hold per shard.
            [](int nranks) { return std::unique_ptr<Reference>(new DenseReference(nranks)); }});

}  // namespace gradcomp::algo
