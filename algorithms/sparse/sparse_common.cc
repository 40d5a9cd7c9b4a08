// Shared frame of the sparse algorithms (see sparse_common.h).
#include "algorithms/sparse/sparse_common.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "algorithms/error_feedback.h"
#include "algorithms/sparse/collectives.h"
#include "common/log.h"

namespace gradcomp::algo::sparse {

namespace {
constexpr uint64_t kStepFiniteFlag = 0xF0000;  // anyRank steps [0xF0000, 0xF0020)
}

Status SparseParams::read(const param::Overrides& config) {
  GC_CHECK(config.getDouble(param::Id::DENSITY, &density));
  GC_CHECK(config.getInt(param::Id::TOPK_TAU, &tau));
  GC_CHECK(config.getInt(param::Id::TOPK_TAU_PRIME, &tauPrime));
  GC_CHECK(config.getInt(param::Id::WARMUP_CALLS, &warmupCalls));
  GC_CHECK(config.getInt(param::Id::CLTK_LEADERS, &cltkLeaders));
  return Status::Ok();
}

size_t topkCount(double density, size_t n) {
  const double k = std::floor(density * double(n));
  if (k < 1) return 1;
  return k >= double(n) ? n : size_t(k);
}

std::vector<uint64_t> ownerBounds(size_t count, int nranks) {
  std::vector<uint64_t> b(size_t(nranks) + 1);
  const uint64_t rc = uint64_t(count) / uint64_t(nranks);
  for (int j = 0; j <= nranks; ++j) b[size_t(j)] = rc * uint64_t(j);
  return b;
}

Status Coo::assign(const Coo& o) {
  if (idx.backend() == nullptr && o.idx.backend()) bind(*o.idx.backend());
  GC_CHECK(idx.assign(o.idx));
  return val.assign(o.val);
}

Status selectTopk(device::Backend& dev, float* x, size_t n, size_t k, uint64_t base, Coo* out,
                  float* threshold, bool zeroSelected) {
  out->bind(dev);
  out->clear();
  if (n == 0 || k == 0) {
    if (threshold) *threshold = 0;
    return Status::Ok();
  }
  if (k > n) k = n;
  float th = 0;
  size_t above = 0;
  GC_CHECK(dev.kthLargestAbs(x, n, k, &th, &above));
  GC_CHECK(dev.sync());
  // kthLargestAbs' contract: exactly k when th > 0, else the `above` non-zeros.
  const size_t count = th > 0 ? k : above;
  out->resize(count);
  GC_CHECK(dev.compactAbove(x, n, th, k - above, base, out->idx.data(), out->val.data(), count,
                            nullptr, zeroSelected));
  if (threshold) *threshold = th;
  return Status::Ok();
}

Status selectTopkCoo(device::Backend& dev, const Coo& in, size_t k, Coo* out, float* threshold) {
  Coo pos(dev);  // positions into `in`, and the selected values
  // Compaction reads the values only (zeroSelected = false).
  GC_CHECK(selectTopk(dev, const_cast<float*>(in.val.data()), in.size(), k, 0, &pos, threshold));
  out->bind(dev);
  out->resize(pos.size());
  GC_CHECK(dev.gather(out->idx.data(), in.idx.data(), in.size(), pos.idx.data(), pos.size()));
  return dev.copy(out->val.data(), pos.val.data(), pos.size() * sizeof(float));
}

Status rangesOf(device::Backend& dev, const Coo& sel, const std::vector<uint64_t>& bounds,
                std::vector<size_t>* starts) {
  device::HostArray<uint64_t> keys(dev), pos(dev);
  keys.assign(bounds.data(), bounds.size());
  pos.resize(bounds.size());
  GC_CHECK(dev.lowerBound(sel.idx.data(), sel.size(), keys.data(), keys.size(), pos.data()));
  GC_CHECK(dev.sync());
  starts->assign(pos.begin(), pos.end());
  return Status::Ok();
}

Status SparseFrame::runDense(Context& ctx, const AllreduceArgs& args) {
  if (!dense_) {
    const AlgorithmInfo* info = findAlgorithm("dense");
    GC_REQUIRE(info, Err::Internal, "sparse algorithms need the 'dense' algorithm (registered: %s)",
               algorithmNames().c_str());
    dense_ = info->create();
  }
  return runCollective(*dense_, ctx, args);  // a reduce-scatter runs dense's
}

Status SparseFrame::begin(Context& ctx, const AllreduceArgs& args, int64_t warmupCalls,
                          float countThreshold, size_t candidateCapacity, bool* compress,
                          FrameStats* stats) {
  *compress = false;
  *stats = FrameStats{};
  if (args.count == 0 || !isFloating(args.dtype)) return runDense(ctx, args);
  const uint64_t key = residualKey(args);
  KeyCalls& kc = calls_[scheduleKey(args)];
  if (kc.count != args.count) kc = KeyCalls{args.count, 0};
  if (kc.calls++ < uint64_t(warmupCalls)) return runDense(ctx, args);

  ErrorFeedbackStore* ef = ctx.errorFeedback;
  efActive_ = ef && ef->enabled();
  bool fresh = true;
  if (efActive_) {
    ef->retireStale(ctx.callSeq);
    GC_CHECK(ef->begin(ctx.dev, key, args.count, ctx.callSeq, &scratch_, &acc_, &fresh));
  } else {
    scratch_.bind(ctx.dev).resize(args.count);
    acc_ = scratch_.data();
  }
  // The one O(n) pass: acc (+)= input, non-finite count, threshold count
  // and, where the backend compacts in it, the entries above the threshold.
  device::AccumulateStats st;
  size_t compacted = device::Backend::kNotCompacted;
  if (countThreshold >= 0 && candidateCapacity > 0 && ctx.dev.compactsInAccumulate()) {
    candidates_.bind(ctx.dev);
    candidates_.resize(candidateCapacity);
    GC_CHECK(ctx.dev.accumulateCompact(acc_, args.sendBuf, args.dtype, args.count, !fresh,
                                       countThreshold, candidates_.idx.data(),
                                       candidates_.val.data(), candidateCapacity, &st,
                                       &compacted));
  } else {
    GC_CHECK(ctx.dev.accumulate(acc_, args.sendBuf, args.dtype, args.count, !fresh,
                                countThreshold, &st));
  }
  GC_CHECK(ctx.dev.sync());
  bool nonFinite = false;
  GC_CHECK(anyRank(ctx, kStepFiniteFlag, st.nonFinite != 0, &nonFinite));
  if (nonFinite) {
    GC_INFO(ALGO, "sparse: a rank's input holds NaN/Inf; this call runs dense, residuals cleared");
    if (efActive_) GC_CHECK(ef->clear(ctx.dev, key));
    return runDense(ctx, args);
  }
  stats->above = st.above;
  if (compacted != device::Backend::kNotCompacted) {
    candidates_.resize(compacted);
    stats->candidates = &candidates_;
  }
  *compress = true;
  return Status::Ok();
}

Status SparseFrame::finish(Context& ctx, const AllreduceArgs& args, const float* result) {
  if (efActive_) GC_CHECK(ctx.errorFeedback->end(ctx.dev, residualKey(args), acc_));
  const size_t out = outputCount(args, ctx.net.size());
  if (result != args.recvBuf)
    GC_CHECK(ctx.dev.convert(args.recvBuf, args.dtype, result, DataType::Float32, out));
  if (args.op == RedOp::Avg) GC_CHECK(ctx.dev.divide(args.recvBuf, out, args.dtype,
                                                     ctx.net.size()));
  return ctx.dev.sync();
}

Status SparseAlgorithm::runAllreduce(Context& ctx, const AllreduceArgs& args) {
  return run(ctx, args);
}

Status SparseAlgorithm::runReduceScatter(Context& ctx, const AllreduceArgs& args) {
  return run(ctx, args);
}

Status SparseAlgorithm::scheduleReduceScatter(Context&, const AllreduceArgs&, const SparseParams&,
                                              size_t, float*, const FrameStats&, float*) {
  return makeStatus(Err::Unsupported, "this sparse algorithm has no reduce-scatter form");
}

Status SparseAlgorithm::run(Context& ctx, const AllreduceArgs& args) {
  SparseParams params;
  GC_CHECK(params.read(ctx.config));
  bool compress = false;
  FrameStats stats;
  const size_t k = topkCount(params.density, args.count);
  // Room for twice k candidates: a reused threshold admits about k (oktopk
  // re-selects exactly above k and below k / 2).
  GC_CHECK(frame_.begin(ctx, args, params.warmupCalls, fusedThreshold(args, params),
                        std::min(args.count, 2 * k), &compress, &stats));
  if (!compress) return Status::Ok();
  // fp32: the result is summed straight into recvBuf (the input already sits
  // in acc, also in NCCL's in-place reduce-scatter layout), which saves a
  // pass over the buffer; finish() then converts nothing.
  const size_t out = outputCount(args, ctx.net.size());
  float* result = nullptr;
  if (args.dtype == DataType::Float32) {
    result = static_cast<float*>(args.recvBuf);
  } else {
    result_.bind(ctx.dev).resize(out);
    result = result_.data();
  }
  GC_CHECK(ctx.dev.zero(result, out * sizeof(float)));
  if (args.coll == Collective::ReduceScatter)
    GC_CHECK(scheduleReduceScatter(ctx, args, params, k, frame_.acc(), stats, result));
  else
    GC_CHECK(schedule(ctx, args, params, k, frame_.acc(), stats, result));
  return frame_.finish(ctx, args, result);
}

Status expectedFromFp32(const std::vector<float>& sum, const AllreduceArgs& args, int nranks,
                        std::vector<double>* expected) {
  device::Backend& cpu = device::cpuBackend();
  std::vector<uint8_t> out(sum.size() * dtypeSize(args.dtype));
  GC_CHECK(cpu.convert(out.data(), args.dtype, sum.data(), DataType::Float32, sum.size()));
  if (args.op == RedOp::Avg) GC_CHECK(cpu.divide(out.data(), sum.size(), args.dtype, nranks));
  expected->resize(sum.size());
  return cpu.convert(expected->data(), DataType::Float64, out.data(), args.dtype, sum.size());
}

Status expectedDense(const std::vector<const void*>& inputs, const AllreduceArgs& args,
                     std::vector<double>* expected, std::vector<double>* tolerance) {
  device::Backend& cpu = device::cpuBackend();
  const size_t n = args.count;
  const int P = int(inputs.size());
  expected->assign(n, 0.0);
  std::vector<double> absSum(n, 0.0), term(n);
  for (const void* in : inputs) {
    GC_CHECK(cpu.convert(term.data(), DataType::Float64, in, args.dtype, n));
    for (size_t i = 0; i < n; ++i) (*expected)[i] += term[i], absSum[i] += std::fabs(term[i]);
  }
  // Any order of P-1 additions in the dtype: |err| <= (P-1) * u * sum|x|, plus
  // the final rounding; u = 2^-24 (fp32 and wider are exact enough here),
  // 2^-11 half, 2^-8 bfloat16.
  const double u = args.dtype == DataType::Float16 ? 0x1p-11
                 : args.dtype == DataType::BFloat16 ? 0x1p-8 : 0x1p-24;
  tolerance->resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (args.op == RedOp::Avg) (*expected)[i] /= P, absSum[i] /= P;
    (*tolerance)[i] = double(P + 1) * u * absSum[i];
  }
  return Status::Ok();
}

}  // namespace gradcomp::algo::sparse
