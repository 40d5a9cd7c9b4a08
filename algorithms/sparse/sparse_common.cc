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
  return Status::Ok();
}

size_t topkCount(double density, size_t n) {
  const double k = std::floor(density * double(n));
  if (k < 1) return 1;
  return k >= double(n) ? n : size_t(k);
}

Status selectTopk(device::Backend& dev, const float* x, size_t n, size_t k, uint64_t base,
                  Coo* out, float* threshold) {
  out->clear();
  if (n == 0 || k == 0) {
    if (threshold) *threshold = 0;
    return Status::Ok();
  }
  if (k > n) k = n;
  float th = 0;
  size_t above = 0, got = 0;
  GC_CHECK(dev.kthLargestAbs(x, n, k, &th));
  GC_CHECK(dev.countAbove(x, n, th, &above));
  out->idx.resize(k);
  out->val.resize(k);
  GC_CHECK(dev.compactAbove(x, n, th, k - above, base, out->idx.data(), out->val.data(), k, &got));
  out->idx.resize(got);
  out->val.resize(got);
  if (threshold) *threshold = th;
  return Status::Ok();
}

Status selectTopkCoo(device::Backend& dev, const Coo& in, size_t k, Coo* out, float* threshold) {
  Coo pos(dev);  // positions into `in`
  GC_CHECK(selectTopk(dev, in.val.data(), in.size(), k, 0, &pos, threshold));
  out->idx.resize(pos.size());
  out->val = pos.val;
  for (size_t i = 0; i < pos.size(); ++i) out->idx[i] = in.idx[pos.idx[i]];
  return Status::Ok();
}

bool allFinite(const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return false;
  return true;
}

Status loadFp32(const void* input, const AllreduceArgs& args, std::vector<float>* out) {
  out->resize(args.count);
  return device::cpuBackend().convert(out->data(), DataType::Float32, input, args.dtype,
                                      args.count);
}

Status SparseFrame::runDense(Context& ctx, const AllreduceArgs& args) {
  if (!dense_) {
    const AlgorithmInfo* info = findAlgorithm("dense");
    GC_REQUIRE(info, Err::Internal, "sparse algorithms need the 'dense' algorithm (registered: %s)",
               algorithmNames().c_str());
    dense_ = info->create();
  }
  return dense_->allreduce(ctx, args);
}

Status SparseFrame::begin(Context& ctx, const AllreduceArgs& args, int64_t warmupCalls,
                          bool* compress) {
  *compress = false;
  if (args.count == 0 || !isFloating(args.dtype)) return runDense(ctx, args);
  const uint64_t key = tensorKey(args);
  KeyCalls& kc = calls_[key];
  if (kc.count != args.count) kc = KeyCalls{args.count, 0};
  if (kc.calls++ < uint64_t(warmupCalls)) return runDense(ctx, args);

  ErrorFeedbackStore* ef = ctx.errorFeedback;
  efActive_ = ef && ef->enabled();
  device::bound(acc_, ctx.dev).resize(args.count);
  GC_CHECK(ctx.dev.convert(acc_.data(), DataType::Float32, args.sendBuf, args.dtype, args.count));
  if (efActive_) {
    ef->retireStale(ctx.callSeq);
    GC_CHECK(ef->addResidual(key, ctx.callSeq, acc_.data(), args.count));
  }
  bool nonFinite = false;
  GC_CHECK(anyRank(ctx, kStepFiniteFlag, !allFinite(acc_.data(), acc_.size()), &nonFinite));
  if (nonFinite) {
    GC_INFO(ALGO, "sparse: a rank's input holds NaN/Inf; this call runs dense, residuals kept");
    return runDense(ctx, args);
  }
  *compress = true;
  return Status::Ok();
}

Status SparseFrame::finish(Context& ctx, const AllreduceArgs& args, const float* result) {
  if (efActive_)
    GC_CHECK(ctx.errorFeedback->storeResidual(tensorKey(args), acc_.data(), nullptr, args.count));
  GC_CHECK(ctx.dev.convert(args.recvBuf, args.dtype, result, DataType::Float32, args.count));
  if (args.op == RedOp::Avg) GC_CHECK(ctx.dev.divide(args.recvBuf, args.count, args.dtype,
                                                     ctx.net.size()));
  return Status::Ok();
}

Status SparseAlgorithm::allreduce(Context& ctx, const AllreduceArgs& args) {
  SparseParams params;
  GC_CHECK(params.read(ctx.config));
  bool compress = false;
  GC_CHECK(frame_.begin(ctx, args, params.warmupCalls, &compress));
  if (!compress) return Status::Ok();
  // fp32: the result is summed straight into recvBuf (the input already sits
  // in acc), which saves a pass over the buffer; finish() then converts
  // nothing. recvBuf is host-addressable in every executor (host memory, or
  // the CUDA executor's pinned staging).
  float* result = nullptr;
  if (args.dtype == DataType::Float32) {
    result = static_cast<float*>(args.recvBuf);
    std::fill_n(result, args.count, 0.0f);
  } else {
    device::bound(result_, ctx.dev).assign(args.count, 0.0f);
    result = result_.data();
  }
  GC_CHECK(schedule(ctx, args, params, topkCount(params.density, args.count), frame_.acc(),
                    result));
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
