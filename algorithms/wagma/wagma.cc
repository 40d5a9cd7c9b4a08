#include "algorithms/wagma/wagma.h"

#include <algorithm>

#include "algorithms/wagma/group_sum.h"
#include "algorithms/wagma/reference.h"
#include "common/log.h"

namespace gradcomp::algo::wagma {

struct Wagma::Tensor {
  size_t count = 0;
  DataType dtype = DataType::Float32;
  Topology topo;
  int period = 8;
  bool wait = false;
  Mode mode = Mode::Weights;
  uint64_t calls = 0;                         // blocking mode's call index
  std::unique_ptr<WaitAvoidingStream> stream;  // wait-avoiding mode
  device::DeviceArray<char> shadow, contribution, avg;  // gradient mode
  dense::Staging stage;                                   // blocking mode's exchanges
  CallReport last;
  bool called = false;
};

namespace {

}  // namespace

Wagma::Wagma(ChannelFactory channels) : channels_(std::move(channels)) {
  if (!channels_) channels_ = ucxChannelFactory();
  if (const AlgorithmInfo* dense = findAlgorithm("dense")) dense_ = dense->create();
}

Wagma::~Wagma() {
  for (uint64_t key : order_) tensors_.erase(key);
}

bool Wagma::lastReport(uint64_t key, CallReport* out) const {
  auto it = tensors_.find(key);
  if (it == tensors_.end() || !it->second->called) return false;
  *out = it->second->last;
  return true;
}

std::vector<uint64_t> Wagma::executed(uint64_t key) const {
  auto it = tensors_.find(key);
  if (it == tensors_.end() || !it->second->stream) return {};
  return it->second->stream->executed();
}

Status Wagma::setup(Context& ctx, const AllreduceArgs& args, Tensor* t) {
  int64_t group = 0, period = 8;
  bool wait = false;
  std::string mode;
  GC_CHECK(ctx.config.getInt(param::Id::WAGMA_GROUP, &group));
  GC_CHECK(ctx.config.getInt(param::Id::WAGMA_PERIOD, &period));
  GC_CHECK(ctx.config.getBool(param::Id::WAGMA_WAIT, &wait));
  GC_CHECK(ctx.config.getString(param::Id::WAGMA_MODE, &mode));
  GC_CHECK(makeTopology(ctx.net.size(), group, &t->topo));
  t->count = args.count;
  t->dtype = args.dtype;
  t->period = int(period);
  t->wait = wait;
  t->mode = mode == "gradient" ? Mode::Gradient : Mode::Weights;
  const size_t bytes = args.count * dtypeSize(args.dtype);
  if (t->mode == Mode::Gradient) {
    // All-zero bytes are +0.0 in every float type.
    GC_CHECK(t->shadow.bind(ctx.dev).assignZero(bytes));
    t->contribution.bind(ctx.dev).resize(bytes);
    t->avg.bind(ctx.dev).resize(bytes);
  }
  GC_INFO(ALGO, "wagma: tensor %llu, %zu x %s, P=%d S=%d period=%d, %s, %s mode",
          (unsigned long long)residualKey(args), args.count, dtypeName(args.dtype), t->topo.nranks,
          t->topo.groupSize(), t->period, wait ? "blocking" : "wait-avoiding", mode.c_str());
  return Status::Ok();
}

Status Wagma::runAllreduce(Context& ctx, const AllreduceArgs& args) {
  GC_REQUIRE(isFloating(args.dtype), Err::Unsupported,
             "wagma averages floating-point buffers; dtype %s is not one (use dense)",
             dtypeName(args.dtype));
  GC_REQUIRE(dense_, Err::Internal, "wagma: the 'dense' algorithm is not registered");
  std::unique_ptr<Tensor>& slot = tensors_[residualKey(args)];
  if (!slot) {
    slot.reset(new Tensor());
    order_.push_back(residualKey(args));
    GC_CHECK(setup(ctx, args, slot.get()));
  }
  Tensor& t = *slot;
  GC_REQUIRE(args.count == t.count && args.dtype == t.dtype, Err::InvalidArgument,
             "wagma: buffer key %llu was %zu x %s and is now %zu x %s; a key names one tensor",
             (unsigned long long)residualKey(args), t.count, dtypeName(t.dtype), args.count,
             dtypeName(args.dtype));
  if (args.count == 0) return Status::Ok();
  const size_t bytes = args.count * dtypeSize(args.dtype);

  if (t.mode == Mode::Weights) {
    GC_CHECK(average(ctx, t, args.sendBuf, args.recvBuf));
  } else {
    // Gradient shadow: contribute g + D, return a - D, keep D = a.
    GC_CHECK(ctx.dev.add(t.contribution.data(), args.sendBuf, t.shadow.data(), args.count,
                         args.dtype));
    GC_CHECK(average(ctx, t, t.contribution.data(), t.avg.data()));
    GC_CHECK(ctx.dev.scale(t.shadow.data(), args.count, args.dtype, -1.0));  // D := -D (exact)
    GC_CHECK(ctx.dev.add(args.recvBuf, t.avg.data(), t.shadow.data(), args.count, args.dtype));
    GC_CHECK(ctx.dev.copy(t.shadow.data(), t.avg.data(), bytes));
  }
  // Sum: P times the average, one fp64 multiply (exact when P is a power of two).
  if (args.op == RedOp::Sum)
    GC_CHECK(ctx.dev.scale(args.recvBuf, args.count, args.dtype, double(t.topo.nranks)));
  t.called = true;
  return ctx.dev.sync();
}

Status Wagma::average(Context& ctx, Tensor& t, const void* in, void* out) {
  if (t.wait) return blockingAverage(ctx, t, in, out);
  if (!t.stream) {
    std::unique_ptr<transport::Transport> channel;
    GC_CHECK(channels_(ctx, &channel));
    StreamConfig cfg;
    cfg.topo = t.topo;
    cfg.count = t.count;
    cfg.dtype = t.dtype;
    cfg.period = t.period;
    cfg.denseConfig = ctx.config;
    GC_CHECK(WaitAvoidingStream::create(std::move(channel), cfg, ctx.dev, &t.stream));
  }
  return t.stream->call(in, out, &t.last);
}

// Algorithm 2 with beta = true (normal group allreduce): everybody waits.
Status Wagma::blockingAverage(Context& ctx, Tensor& t, const void* in, void* out) {
  const uint64_t call = t.calls++;
  const size_t bytes = t.count * dtypeSize(t.dtype);
  if (out != in) GC_CHECK(ctx.dev.copy(out, in, bytes));
  CallReport& rep = t.last;
  rep = CallReport();
  rep.call = call;
  rep.contributed = int64_t(call);
  rep.global = (call + 1) % uint64_t(t.period) == 0;
  if (rep.global) {
    AllreduceArgs a;
    a.sendBuf = a.recvBuf = out;
    a.count = t.count;
    a.dtype = t.dtype;
    a.op = RedOp::Sum;
    a.bufferKey = 1;
    GC_CHECK(dense_->allreduce(ctx, a));
    rep.contributors = t.topo.nranks;
  } else {
    const uint64_t seq = ctx.callSeq;
    GC_CHECK(groupSum(ctx.net, ctx.dev, t.topo, call,
                      [seq](uint64_t step) { return transport::makeTag(seq, step); }, out,
                      t.count, t.dtype, &t.stage));
    rep.contributors = groupContributors(t.topo, ctx.net.rank(), call);
  }
  return ctx.dev.divide(out, t.count, t.dtype, rep.contributors);
}

}  // namespace gradcomp::algo::wagma

namespace gradcomp::algo {

GC_REGISTER_ALGORITHM(
    wagma, {"wagma",
            "Wait-avoiding group model averaging (WAGMA-SGD): butterfly group averages, a "
            "global average every GRADCOMP_WAGMA_PERIOD-th call",
            {param::Id::WAGMA_GROUP, param::Id::WAGMA_PERIOD, param::Id::WAGMA_WAIT,
             param::Id::WAGMA_MODE},
            [] { return std::unique_ptr<Algorithm>(new wagma::Wagma()); },
            [](int nranks) {
              return std::unique_ptr<Reference>(new wagma::WagmaReference(nranks));
            }});

}  // namespace gradcomp::algo

namespace gradcomp::algo::wagma {

bool Wagma::waitsForEveryRank(const Context& ctx, const AllreduceArgs& args) const {
  // A tensor keeps the mode of its first call (setup); a new one reads it.
  auto it = tensors_.find(residualKey(args));
  if (it != tensors_.end()) return it->second->wait;
  bool wait = false;
  (void)ctx.config.getBool(param::Id::WAGMA_WAIT, &wait);
  return wait;
}

}  // namespace gradcomp::algo::wagma
