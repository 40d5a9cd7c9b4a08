#include "tools/gradcomp-bench/check.h"

#include "algorithms/hierarchy/hierarchical.h"

#include <algorithm>
#include <cmath>

#include "device/backend.h"

namespace gradcomp::bench {
namespace {

constexpr size_t kChunk = 4096;

// Widens n elements of `type` at `src` to fp64 (exact for every float type).
Status widen(const void* src, DataType type, size_t offset, size_t n, double* dst) {
  const char* p = static_cast<const char*>(src) + offset * dtypeSize(type);
  return device::cpuBackend().convert(dst, DataType::Float64, p, type, n);
}

// Rounds fp64 values to `type` and back, in place: what an exact result looks
// like after it is stored in the output dtype.
Status roundTo(DataType type, double* values, size_t n) {
  if (type == DataType::Float64) return Status::Ok();
  uint64_t narrow[kChunk];  // large enough for n <= kChunk elements of any dtype
  GC_CHECK(device::cpuBackend().convert(narrow, type, values, DataType::Float64, n));
  return device::cpuBackend().convert(values, DataType::Float64, narrow, type, n);
}

}  // namespace

Checker::Checker(const algo::AlgorithmInfo& info, int nranks,
                 std::vector<std::vector<int>> hostRanks, algo::Collective coll)
    : nranks_(nranks) {
  if (coll == algo::Collective::AllGather && !hostRanks.empty()) {
    reference_ = algo::hierarchy::makeHierarchicalReference(info, std::move(hostRanks));
  } else if (coll == algo::Collective::AllGather) {
    if (info.hasAllgather()) reference_ = info.allgatherReference(nranks);
  } else if (coll == algo::Collective::ReduceScatter && !info.hasReduceScatter()) {
    // no reference: #wrong is N/A
  } else if (!hostRanks.empty()) {  // either collective (args.coll tells the reference)
    reference_ = algo::hierarchy::makeHierarchicalReference(info, std::move(hostRanks));
  } else if (coll == algo::Collective::ReduceScatter) {
    reference_ = info.reduceScatterReference(nranks);
  }
  else if (info.reference)
    reference_ = info.reference(nranks);
}

Status Checker::configure(const param::Overrides& config) {
  if (!reference_) return Status::Ok();
  return reference_->configure(config);
}

Status Checker::checkCall(const std::vector<const void*>& inputs, const algo::AllreduceArgs& args,
                          const void* out, int rank, CallCheck* result) {
  GC_REQUIRE(int(inputs.size()) == nranks_, Err::Internal, "checker got %zu inputs for %d ranks",
             inputs.size(), nranks_);
  if (reference_) {
    GC_CHECK(reference_->expect(inputs, args, &expected_, &tolerance_));
    GC_REQUIRE(expected_.size() == args.count && tolerance_.size() == args.count, Err::Internal,
               "reference returned %zu expected / %zu tolerance values for count %zu",
               expected_.size(), tolerance_.size(), args.count);
  }
  double outChunk[kChunk], exact[kChunk], term[kChunk], rounded[kChunk];
  double errNorm2 = 0, exactNorm2 = 0;
  uint64_t wrong = 0;
  // This rank's part of the reduction: all of it, or a reduce-scatter's shard.
  const bool rs = args.coll == algo::Collective::ReduceScatter;
  const bool ag = args.coll == algo::Collective::AllGather;
  const size_t outCount = rs ? args.count / size_t(nranks_) : args.count;
  const size_t first = rs ? size_t(rank) * outCount : 0;
  const size_t shard = args.count / size_t(nranks_);  // an allgather's sendcount
  for (size_t base = 0, n = 0; base < outCount; base += n) {
    // An allgather's chunks stay inside one rank's shard.
    n = ag ? std::min({kChunk, outCount - base, shard - base % shard})
                        : std::min(kChunk, outCount - base);
    GC_CHECK(widen(out, args.dtype, base, n, outChunk));
    // Exact result in fp64 from the dtype-rounded inputs, summed in rank
    // order; an allgather's: the shards laid end to end.
    std::fill(exact, exact + n, 0.0);
    if (ag) {
      GC_CHECK(widen(inputs[base / shard], args.dtype, base % shard, n, exact));
    } else {
      for (const void* in : inputs) {
        GC_CHECK(widen(in, args.dtype, first + base, n, term));
        for (size_t j = 0; j < n; ++j) exact[j] += term[j];
      }
    }
    if (!ag && args.op == RedOp::Avg)
      for (size_t j = 0; j < n; ++j) exact[j] /= nranks_;
    for (size_t j = 0; j < n; ++j) {
      const double d = outChunk[j] - exact[j];
      errNorm2 += d * d;
      exactNorm2 += exact[j] * exact[j];
    }
    if (!reference_) continue;
    // Right when within the tolerance, or equal to the expected value rounded
    // to the dtype (tolerance 0 means bit-exact after that rounding).
    const size_t at = first + base;
    std::copy(expected_.begin() + at, expected_.begin() + at + n, rounded);
    GC_CHECK(roundTo(args.dtype, rounded, n));
    for (size_t j = 0; j < n; ++j) {
      const double o = outChunk[j], e = expected_[at + j];
      const bool right = o == rounded[j] || std::fabs(o - e) <= tolerance_[at + j] ||
                         (std::isnan(o) && std::isnan(e));
      wrong += right ? 0 : 1;
    }
  }
  result->wrong = wrong;
  result->relErr = exactNorm2 > 0 ? std::sqrt(errNorm2 / exactNorm2) : std::sqrt(errNorm2);
  return Status::Ok();
}

}  // namespace gradcomp::bench
