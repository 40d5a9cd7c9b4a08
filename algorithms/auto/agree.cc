#include "algorithms/auto/agree.h"

#include "algorithms/auto/auto_model.h"
#include "device/arrays.h"

namespace gradcomp::algo::autosel {

Status allgatherWords(Context& ctx, Algorithm& dense, const std::vector<double>& mine,
                      std::vector<std::vector<double>>* out) {
  const size_t P = size_t(ctx.net.size()), K = mine.size(), me = size_t(ctx.net.rank());
  device::HostArray<double> host(ctx.dev, P * K);
  for (size_t i = 0; i < P * K; ++i) host[i] = 0.0;
  for (size_t k = 0; k < K; ++k) host[me * K + k] = mine[k];
  device::DeviceArray<double> buf(ctx.dev, P * K);
  if (P * K != 0) {
    GC_CHECK(ctx.dev.copy(buf.data(), host.data(), P * K * sizeof(double)));
    AllreduceArgs args;
    args.sendBuf = args.recvBuf = buf.data();
    args.count = P * K;
    args.dtype = DataType::Float64;
    args.op = RedOp::Sum;
    args.bufferKey = ~uint64_t(0);
    GC_CHECK(dense.allreduce(ctx, args));
    GC_CHECK(ctx.dev.copy(host.data(), buf.data(), P * K * sizeof(double)));
    GC_CHECK(ctx.dev.sync());
  }
  out->assign(P, std::vector<double>(K));
  for (size_t r = 0; r < P; ++r)
    for (size_t k = 0; k < K; ++k) (*out)[r][k] = host[r * K + k];
  return Status::Ok();
}

Status agreeMax(Context& ctx, Algorithm& dense, const std::vector<double>& mine,
                std::vector<double>* out) {
  std::vector<std::vector<double>> all;
  GC_CHECK(allgatherWords(ctx, dense, mine, &all));
  *out = slotMax(all);
  return Status::Ok();
}

}  // namespace gradcomp::algo::autosel
