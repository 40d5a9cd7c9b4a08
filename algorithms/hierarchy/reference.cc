// The hierarchical form of a reference (hierarchical.h): the host sums the
// schedule computes, bit for bit, fed to the algorithm's own reference on
// each rail's shard.
#include <cmath>

#include "algorithms/dense/dense.h"
#include "algorithms/hierarchy/hierarchical.h"
#include "device/backend.h"

namespace gradcomp::algo::hierarchy {
namespace {

// Unit roundoff of a float dtype (0 for integers, whose divide truncates).
double unitRoundoff(DataType t) {
  switch (t) {
    case DataType::Float16: return std::ldexp(1.0, -11);
    case DataType::BFloat16: return std::ldexp(1.0, -8);
    case DataType::Float32: return std::ldexp(1.0, -24);
    case DataType::Float64: return std::ldexp(1.0, -53);
    default: return 0;
  }
}

class HierarchicalReference final : public Reference {
 public:
  HierarchicalReference(const AlgorithmInfo& info, std::vector<std::vector<int>> hostRanks)
      : hostRanks_(std::move(hostRanks)) {
    if (info.allgatherReference) {  // an allgather entry: nothing else to build
      size_t P = 0;
      for (const auto& ranks : hostRanks_) P += ranks.size();
      allgather_ = info.allgatherReference(int(P));
      return;
    }
    for (size_t l = 0; l < hostRanks_[0].size(); ++l) {
      rails_.push_back(info.reference(int(hostRanks_.size())));
      if (info.reduceScatterReference)
        rsRails_.push_back(info.reduceScatterReference(int(hostRanks_.size())));
    }
  }

  Status configure(const param::Overrides& config) override {
    if (allgather_) GC_CHECK(allgather_->configure(config));
    for (auto& r : rails_) GC_CHECK(r->configure(config));
    for (auto& r : rsRails_) GC_CHECK(r->configure(config));
    return Status::Ok();
  }

  Status expect(const std::vector<const void*>& inputs, const AllreduceArgs& args,
                std::vector<double>* expected, std::vector<double>* tolerance) override {
    if (args.coll == Collective::ReduceScatter)
      return expectReduceScatter(inputs, args, expected, tolerance);
    // An allgather: the flat result bit for bit (hierarchical.h).
    GC_REQUIRE((args.coll == Collective::AllGather) == bool(allgather_), Err::InvalidArgument,
               "hierarchical reference: a %s call for %s", collectiveName(args.coll),
               allgather_ ? "an allgather algorithm" : "an allreduce algorithm");
    if (allgather_) return allgather_->expect(inputs, args, expected, tolerance);
    device::Backend& cpu = device::cpuBackend();
    const size_t esz = dtypeSize(args.dtype), H = hostRanks_.size(), L = hostRanks_[0].size();
    size_t P = 0;
    for (const auto& ranks : hostRanks_) P += ranks.size();
    GC_REQUIRE(inputs.size() == P, Err::InvalidArgument,
               "hierarchical reference: %zu inputs for %zu ranks", inputs.size(), P);
    expected->assign(args.count, 0.0);
    tolerance->assign(args.count, 0.0);
    std::vector<std::vector<char>> hostSum(H, std::vector<char>(args.count * esz));
    std::vector<double> e, tol;
    for (size_t l = 0; l < L; ++l) {
      const dense::Chunk c = dense::chunkOf(args.count, int(L), int(l));
      const size_t off = c.begin * esz;
      std::vector<const void*> railInputs;
      for (size_t h = 0; h < H; ++h) {
        // x_l first, then the other local ranks ascending (hierarchical.h).
        char* s = hostSum[h].data() + off;
        const auto in = [&](size_t i) {
          return static_cast<const char*>(inputs[size_t(hostRanks_[h][i])]) + off;
        };
        if (c.size) GC_CHECK(cpu.copy(s, in(l), c.size * esz));
        for (size_t j = 0; j < L; ++j)
          if (j != l && c.size) GC_CHECK(cpu.add(s, s, in(j), c.size, args.dtype));
        railInputs.push_back(s);
      }
      GC_CHECK(cpu.sync());
      AllreduceArgs in = args;
      in.sendBuf = in.recvBuf = nullptr;
      in.count = c.size;
      in.op = RedOp::Sum;
      in.bufferKey = shardKey(args.bufferKey, int(l));
      in.localKey = 0;
      GC_CHECK(rails_[l]->expect(railInputs, in, &e, &tol));
      GC_REQUIRE(e.size() == c.size && tol.size() == c.size, Err::Internal,
                 "hierarchical reference: the rail reference returned %zu values for %zu", e.size(),
                 c.size);
      for (size_t i = 0; i < c.size; ++i)
        GC_CHECK(finish(args, P, e[i], tol[i], &(*expected)[c.begin + i],
                        &(*tolerance)[c.begin + i]));
    }
    return Status::Ok();
  }

 private:
  // The reduce-scatter (hierarchical.h): each rail's portions summed per
  // host in the schedule's order, then the algorithm's reduce-scatter
  // reference over the rail; slot h of rail l is shard hostRanks_[h][l].
  Status expectReduceScatter(const std::vector<const void*>& inputs, const AllreduceArgs& args,
                             std::vector<double>* expected, std::vector<double>* tolerance) {
    device::Backend& cpu = device::cpuBackend();
    const size_t esz = dtypeSize(args.dtype), H = hostRanks_.size(), L = hostRanks_[0].size();
    const size_t P = H * L;
    GC_REQUIRE(!rsRails_.empty(), Err::Unsupported,
               "hierarchical reference: the algorithm has no reduce-scatter reference");
    GC_REQUIRE(inputs.size() == P && args.count % P == 0, Err::InvalidArgument,
               "hierarchical reference: %zu inputs, count %zu for %zu ranks", inputs.size(),
               args.count, P);
    const size_t rc = args.count / P, shardBytes = rc * esz;
    expected->assign(args.count, 0.0);
    tolerance->assign(args.count, 0.0);
    std::vector<std::vector<char>> hostSum(H, std::vector<char>(H * shardBytes));
    std::vector<double> e, tol;
    for (size_t l = 0; l < L; ++l) {
      std::vector<const void*> railInputs;
      for (size_t h = 0; h < H; ++h) {
        // Slot s: shard hostRanks_[s][l] of the host's inputs, x_l first.
        const auto in = [&](size_t i, size_t s) {
          return static_cast<const char*>(inputs[size_t(hostRanks_[h][i])]) +
                 size_t(hostRanks_[s][l]) * shardBytes;
        };
        for (size_t s = 0; s < H && rc; ++s) {
          char* slot = hostSum[h].data() + s * shardBytes;
          GC_CHECK(cpu.copy(slot, in(l, s), shardBytes));
          for (size_t j = 0; j < L; ++j)
            if (j != l) GC_CHECK(cpu.add(slot, slot, in(j, s), rc, args.dtype));
        }
        railInputs.push_back(hostSum[h].data());
      }
      GC_CHECK(cpu.sync());
      AllreduceArgs in = args;
      in.sendBuf = in.recvBuf = nullptr;
      in.count = H * rc;
      in.op = RedOp::Sum;
      in.bufferKey = shardKey(args.bufferKey, int(l));
      in.localKey = 0;
      GC_CHECK(rsRails_[l]->expect(railInputs, in, &e, &tol));
      GC_REQUIRE(e.size() == H * rc && tol.size() == H * rc, Err::Internal,
                 "hierarchical reference: the rail reference returned %zu values for %zu",
                 e.size(), H * rc);
      for (size_t s = 0; s < H; ++s) {
        const size_t at = size_t(hostRanks_[s][l]) * rc;
        for (size_t i = 0; i < rc; ++i)
          GC_CHECK(finish(args, P, e[s * rc + i], tol[s * rc + i], &(*expected)[at + i],
                          &(*tolerance)[at + i]));
      }
    }
    return Status::Ok();
  }

  // A rail's expected value and tolerance as the schedule returns them: Avg
  // divides its dtype result by P once (round e to the dtype first).
  static Status finish(const AllreduceArgs& args, size_t P, double v, double t, double* value,
                       double* tolerance) {
    if (args.op == RedOp::Avg) {
      if (t == 0) GC_CHECK(roundToDtype(args.dtype, &v));
      const double result = isFloating(args.dtype) ? v / double(P) : std::trunc(v / double(P));
      t = t == 0 ? 0 : t / double(P) + unitRoundoff(args.dtype) * std::fabs(result);
      v = result;
    }
    *value = v;
    *tolerance = t;
    return Status::Ok();
  }

  static Status roundToDtype(DataType t, double* v) {
    if (t == DataType::Float64) return Status::Ok();
    uint64_t narrow = 0;
    GC_CHECK(device::cpuBackend().convert(&narrow, t, v, DataType::Float64, 1));
    return device::cpuBackend().convert(v, DataType::Float64, &narrow, t, 1);
  }

  std::vector<std::vector<int>> hostRanks_;
  std::vector<std::unique_ptr<Reference>> rails_, rsRails_;
  std::unique_ptr<Reference> allgather_;  // an allgather entry's (flat) reference
};

}  // namespace

std::unique_ptr<Reference> makeHierarchicalReference(const AlgorithmInfo& info,
                                                     std::vector<std::vector<int>> hostRanks) {
  if ((!info.reference && !info.allgatherReference) || hostRanks.empty() ||
      hostRanks[0].empty())
    return nullptr;
  return std::make_unique<HierarchicalReference>(info, std::move(hostRanks));
}

}  // namespace gradcomp::algo::hierarchy
