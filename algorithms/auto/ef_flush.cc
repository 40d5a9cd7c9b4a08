#include "algorithms/auto/ef_flush.h"

#include "algorithms/error_feedback.h"

namespace gradcomp::algo::autosel {

Status FlushDense::runAllreduce(Context& ctx, const AllreduceArgs& args) {
  ErrorFeedbackStore* ef = ctx.errorFeedback;
  if (ef == nullptr || !ef->enabled() || !isFloating(args.dtype) || args.count == 0)
    return dense_->allreduce(ctx, args);
  const uint64_t key = residualKey(args);  // this rank's residual, as the compressors keep it
  ef->retireStale(ctx.callSeq);
  float* acc = nullptr;
  bool fresh = true;
  GC_CHECK(ef->begin(ctx.dev, key, args.count, ctx.callSeq, &scratch_, &acc, &fresh));
  device::AccumulateStats stats;
  GC_CHECK(ctx.dev.accumulate(acc, args.sendBuf, args.dtype, args.count, !fresh, -1.0f, &stats));
  // Summed in fp32 like the compressors' accumulators (a float64 tensor's
  // flush call is rounded through fp32 once).
  AllreduceArgs sum = args;
  sum.sendBuf = sum.recvBuf = acc;
  sum.dtype = DataType::Float32;
  sum.op = RedOp::Sum;
  GC_CHECK(dense_->allreduce(ctx, sum));
  GC_CHECK(ctx.dev.convert(args.recvBuf, args.dtype, acc, DataType::Float32, args.count));
  if (args.op == RedOp::Avg)
    GC_CHECK(ctx.dev.divide(args.recvBuf, args.count, args.dtype, ctx.net.size()));
  // acc held the residual (fp32 mode) and now the sum: the residual restarts at zero.
  GC_CHECK(ef->clear(ctx.dev, key));
  return ctx.dev.sync();
}

}  // namespace gradcomp::algo::autosel
