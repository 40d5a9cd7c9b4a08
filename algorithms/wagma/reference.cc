#include "algorithms/wagma/reference.h"

#include <algorithm>
#include <cmath>

namespace gradcomp::algo::wagma {
namespace {

// Unit roundoff of the element type.
double unitRoundoff(DataType t) {
  switch (t) {
    case DataType::Float16: return std::ldexp(1.0, -11);
    case DataType::BFloat16: return std::ldexp(1.0, -8);
    case DataType::Float64: return std::ldexp(1.0, -53);
    default: return std::ldexp(1.0, -24);
  }
}

}  // namespace

Status WagmaReference::configure(const param::Overrides& config) {
  int64_t group = 0, period = 8;
  std::string mode;
  GC_CHECK(config.getInt(param::Id::WAGMA_GROUP, &group));
  GC_CHECK(config.getInt(param::Id::WAGMA_PERIOD, &period));
  GC_CHECK(config.getBool(param::Id::WAGMA_WAIT, &wait_));
  GC_CHECK(config.getString(param::Id::WAGMA_MODE, &mode));
  GC_CHECK(makeTopology(nranks_, group, &topo_));
  period_ = int(period);
  gradient_ = mode == "gradient";
  configured_ = true;
  return Status::Ok();
}

Status WagmaReference::expect(const std::vector<const void*>& inputs, const AllreduceArgs& args,
                              std::vector<double>* expected, std::vector<double>* tolerance) {
  if (!configured_) GC_CHECK(configure(param::Overrides()));  // registry values
  GC_REQUIRE(int(inputs.size()) == nranks_, Err::InvalidArgument,
             "wagma reference: %zu inputs for %d ranks", inputs.size(), nranks_);
  GC_REQUIRE(isFloating(args.dtype), Err::Unsupported, "wagma reference: dtype %s",
             dtypeName(args.dtype));
  const size_t n = args.count;
  const int P = nranks_;
  KeyState& k = keys_[residualKey(args)];
  const uint64_t t = k.calls++;
  const bool global = (t + 1) % uint64_t(period_) == 0;
  if (k.shadow.empty()) k.shadow.assign(P, std::vector<double>(n, 0.0));

  std::vector<std::vector<double>> x(P, std::vector<double>(n));
  for (int r = 0; r < P; ++r) {
    GC_CHECK(device::cpuBackend().convert(x[r].data(), DataType::Float64, inputs[r], args.dtype,
                                          n));
    if (gradient_)
      for (size_t i = 0; i < n; ++i) x[r][i] += k.shadow[r][i];
  }
  const bool boxed = !wait_ && !gradient_ && !global;
  if (k.lo.empty()) {
    k.lo.assign(n, INFINITY);
    k.hi.assign(n, -INFINITY);
  }
  for (int r = 0; r < P; ++r)
    for (size_t i = 0; i < n; ++i) {
      k.lo[i] = std::min(k.lo[i], x[r][i]);
      k.hi[i] = std::max(k.hi[i], x[r][i]);
    }

  const double scale = args.op == RedOp::Sum ? P : 1;
  std::vector<double> lo(n, INFINITY), hi(n, -INFINITY), mag(n, 0.0), avg(n);
  for (int r = 0; r < P; ++r) {
    const std::vector<int> members =
        global ? std::vector<int>() : groupMembers(topo_, r, t);
    std::fill(avg.begin(), avg.end(), 0.0);
    if (global) {
      for (int q = 0; q < P; ++q)
        for (size_t i = 0; i < n; ++i) avg[i] += x[q][i] / P;
    } else {
      for (int q : members)
        for (size_t i = 0; i < n; ++i) avg[i] += x[q][i] / double(members.size());
    }
    for (size_t i = 0; i < n; ++i) {
      double out = avg[i];
      if (gradient_) {
        out -= k.shadow[r][i];
        mag[i] = std::max(mag[i], std::fabs(k.shadow[r][i]) * scale);
        k.shadow[r][i] = avg[i];
      }
      out *= scale;
      lo[i] = std::min(lo[i], out);
      hi[i] = std::max(hi[i], out);
      mag[i] = std::max({mag[i], std::fabs(out), std::fabs(x[r][i]) * scale});
    }
  }
  if (boxed)
    for (size_t i = 0; i < n; ++i) {
      lo[i] = std::min(lo[i], k.lo[i] * scale);
      hi[i] = std::max(hi[i], k.hi[i] * scale);
    }
  // Rounding: the butterfly and fold adds, the divide, the Sum scaling and the
  // gradient shadow's adds, each within one unit roundoff of the magnitude.
  const double u = unitRoundoff(args.dtype);
  const double steps = 2.0 * (topo_.logCore + 6 + (gradient_ ? 4 : 0) + 2 * std::log2(scale + 1));
  expected->assign(n, 0.0);
  tolerance->assign(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    (*expected)[i] = 0.5 * (lo[i] + hi[i]);
    (*tolerance)[i] = 0.5 * (hi[i] - lo[i]) + steps * u * mag[i];
  }
  if (global)
    for (size_t i = 0; i < n; ++i) {
      k.lo[i] = INFINITY;
      k.hi[i] = -INFINITY;
      for (int r = 0; r < P; ++r) {
        k.lo[i] = std::min(k.lo[i], x[r][i]);
        k.hi[i] = std::max(k.hi[i], x[r][i]);
      }
    }
  return Status::Ok();
}

}  // namespace gradcomp::algo::wagma
