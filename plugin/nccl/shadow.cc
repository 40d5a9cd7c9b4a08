#include "plugin/nccl/shadow.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <vector>

#include "algorithms/auto/auto_algorithm.h"
#include "common/log.h"
#include "device/cpu/float16.h"
#include "plugin/nccl/nccl_exchange.h"

namespace gradcomp::nccl {
namespace {

double valueAt(const void* p, DataType dt, size_t i) {
  switch (dt) {
    case DataType::Float32: return static_cast<const float*>(p)[i];
    case DataType::Float64: return static_cast<const double*>(p)[i];
    case DataType::Float16: return device::halfToFloat(static_cast<const uint16_t*>(p)[i]);
    case DataType::BFloat16: return device::bf16ToFloat(static_cast<const uint16_t*>(p)[i]);
    case DataType::Int32: return static_cast<const int32_t*>(p)[i];
    case DataType::Int64: return double(static_cast<const int64_t*>(p)[i]);
  }
  return 0;
}

// |got - want|_2 / |want|_2 (|got - want|_2 when want is all zero).
double relativeError(const void* got, const void* want, DataType dt, size_t n) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < n; ++i) {
    const double w = valueAt(want, dt, i), d = valueAt(got, dt, i) - w;
    diff += d * d, norm += w * w;
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

uint64_t hashBytes(const void* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

void noteOnce(CommState& st, const std::string& why) {
  if (st.shadowNoted) return;
  st.shadowNoted = true;
  GC_INFO(PLUGIN, "communicator #%llu: shadow mode: %s", (unsigned long long)st.id.index,
          why.c_str());
}

}  // namespace

ncclResult_t runShadow(CommState& st, Executor& exec, RuleRuntime& rt,
                       const algo::AllreduceArgs& args, size_t bytes, cudaStream_t stream,
                       const std::function<ncclResult_t()>& passThrough) {
  const bool rs = args.coll == algo::Collective::ReduceScatter;
  const int P = st.id.nranks;
  const size_t esz = dtypeSize(args.dtype);
  const size_t outCount = rs ? args.count / size_t(P) : args.count;
  const bool isAuto = algo::autosel::tunerOf(rt.algorithm.get()) != nullptr;
  const bool shadowed = !st.shadowStopped && exec.synchronous() && st.net && !isAuto;
  if (!exec.synchronous())
    noteOnce(st, "calls on device memory are not shadowed yet (host executor only)");
  else if (isAuto)
    noteOnce(st, "GRADCOMP_ALGO=auto is not shadowed yet: its calls pass through unmeasured");
  // The input before NCCL runs (in place, NCCL overwrites it).
  std::vector<unsigned char> in, out;
  if (shadowed) {
    in.assign(static_cast<const unsigned char*>(args.sendBuf),
              static_cast<const unsigned char*>(args.sendBuf) + args.count * esz);
    out.assign(outCount * esz, 0);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const ncclResult_t rc = passThrough();
  const double ncclSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  st.stats.passedCalls++;
  st.stats.passedBytes += bytes;
  st.stats.passReasons["shadow"]++;
  if (rc != ncclSuccess || !shadowed) return rc;

  CompressedCall call;
  call.args = args;
  call.args.sendBuf = in.data();
  call.args.recvBuf = out.data();
  call.algorithm = rt.algorithm.get();
  call.algorithmName = rt.algoName.c_str();
  call.net = st.net.get();
  call.config = &rt.config;
  call.callSeq = st.callSeq++;
  call.errorFeedback = st.errorFeedback.get();
  call.asked = algo::findAlgorithm(rt.algoName);
  call.askedConfig = &rt.config;
  call.budget = &st.budget;
  call.ownsNet = st.net;
  call.ownsRuntime = rt.shared_from_this();
  call.ownsResiduals = st.errorFeedback;
  const uint64_t sentBefore = st.net->totalCounters().bytesSent;
  const auto t1 = std::chrono::steady_clock::now();
  const Status s = exec.submit(call, stream);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  ShadowBucket& b = st.stats.shadow[algo::residualKey(args)];
  b.count = args.count;
  b.reduceScatter = rs;
  if (!s.ok()) {
    // The user's call has NCCL's result; shadowing stops here (every rank's
    // call failed alike: the call check agreed on it).
    b.failed++;
    b.lastError = s.toString();
    st.shadowStopped = true;
    GC_WARN("communicator #%llu: shadow mode: the compressed %s failed: %s; the job goes on with "
            "NCCL's results, shadowing stops on this communicator",
            (unsigned long long)st.id.index, algo::collectiveName(args.coll),
            s.toString().c_str());
    return rc;
  }
  b.calls++;
  b.logicalBytes += bytes;
  b.wireBytes += st.net->totalCounters().bytesSent - sentBefore;
  b.denseWireBytes += uint64_t(double(bytes) * (rs ? 1.0 : 2.0) * double(P - 1) / double(P));
  b.compressedSeconds += seconds;
  b.ncclSeconds += ncclSeconds;
  // NCCL's result for this rank: recvbuff (a reduce-scatter's shard).
  b.relErrors.push_back(relativeError(out.data(), args.recvBuf, args.dtype, outCount));
  if (!rs && rt.algoName != "wagma") {
    const uint64_t mine = hashBytes(out.data(), out.size());
    std::vector<uint64_t> all(size_t(P), 0);
    NcclExchange exchange(st.comm, st.rank, P);
    const Status g = exchange.gatherBytes(&mine, sizeof mine, all.data());
    if (g.ok()) {
      b.agreeChecked++;
      bool same = true;
      for (uint64_t h : all) same = same && h == mine;
      b.agreed += same;
    }
  }
  return rc;
}

}  // namespace gradcomp::nccl
