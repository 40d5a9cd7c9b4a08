// The allgather ring over encoded shards (allgather.h), the algorithms that
// run it, and their references.
//
// Data path: the owner encodes its shard into its slot of a host buffer of P
// payloads (one primitive, one sync), then P-1 ring steps: at step s rank r
// sends slot (r - s) mod P to r+1 and receives slot (r - s - 1) mod P from
// r-1 into that slot. Step s+1 is posted as soon as step s completes (it
// forwards the slot just received), then that slot is decoded into recvBuf
// while step s+1 is on the wire: decodes only read the slots, and each step
// receives into a slot no decode has read yet. Its own slot is decoded like
// the others.
#include <string>
#include <vector>

#include "algorithms/allgather/allgather.h"
#include "algorithms/shared/requests.h"
#include "common/log.h"

namespace gradcomp::algo::allgather {
namespace {

int mod(int a, int P) { return ((a % P) + P) % P; }

class RingAllgather final : public Algorithm {
 protected:
  Status runAllgather(Context& ctx, const AllreduceArgs& args) override {
    const std::string algo = info() ? info()->name : std::string("dense");
    std::unique_ptr<ShardCodec> codec;
    GC_CHECK(makeCodec(algo, ctx.config, &codec));
    GC_REQUIRE(isFloating(args.dtype) || algo == "dense", Err::Unsupported,
               "allgather %s: dtype %s is not supported (floating dtypes only; integers need "
               "dense)", algo.c_str(), dtypeName(args.dtype));
    transport::Transport& net = ctx.net;
    device::Backend& dev = ctx.dev;
    const int P = net.size(), r = net.rank();
    const size_t m = args.count / size_t(P), esz = dtypeSize(args.dtype);
    if (m == 0) return Status::Ok();
    const size_t bytes = codec->payloadBytes(m, args.dtype);
    slots_.bind(dev).resize(size_t(P) * bytes);
    char* out = static_cast<char*>(args.recvBuf);
    auto slot = [&](int j) { return slots_.data() + size_t(j) * bytes; };
    GC_CHECK(codec->encode(dev, args.sendBuf, m, args.dtype, slot(r)));
    GC_CHECK(dev.sync());  // the payload is sent from host memory
    const int right = mod(r + 1, P), left = mod(r - 1, P);
    shared::RequestSet req(net, "allgather");
    auto post = [&](int s) -> Status {  // ring step s: slot r-s out, slot r-s-1 in
      const uint64_t tag = transport::makeTag(ctx.callSeq, uint64_t(s));
      GC_CHECK(req.irecv(left, tag, slot(mod(r - s - 1, P)), bytes));
      return req.isend(right, tag, slot(mod(r - s, P)), bytes);
    };
    GC_CHECK(post(0));
    for (int s = 0; s < P - 1; ++s) {
      GC_CHECK(req.waitAll());
      // The next step forwards the slot just received and fills another, so
      // it goes on the wire before this decode (which only reads the slot).
      if (s + 1 < P - 1) GC_CHECK(post(s + 1));
      const int inSlot = mod(r - s - 1, P);
      GC_CHECK(codec->decode(dev, slot(inSlot), m, args.dtype, out + size_t(inSlot) * m * esz,
                             inSlot));
    }
    // The owner's shard last: in place, it is sendBuf, which encode read.
    GC_CHECK(codec->decode(dev, slot(r), m, args.dtype, out + size_t(r) * m * esz, r));
    GC_TRACE(ALGO, "allgather %s: %zu x %s per rank, %zu payload bytes, %d ranks", algo.c_str(),
             m, dtypeName(args.dtype), bytes, P);
    return dev.sync();
  }

 private:
  device::HostArray<uint8_t> slots_;  // P payloads
};

// decode(encode(shard r)) at slot r, computed on the CPU reference with the
// schedule's codec: the schedule must match it bit for bit (tolerance 0).
class RingReference final : public Reference {
 public:
  explicit RingReference(std::string name) : name_(std::move(name)) {}
  Status configure(const param::Overrides& config) override {
    config_ = config;
    return Status::Ok();
  }
  Status shareResiduals(const std::shared_ptr<CentralResiduals>& residuals) override {
    (void)residuals;  // no error feedback
    return Status::Ok();
  }
  Status expect(const std::vector<const void*>& inputs, const AllreduceArgs& args,
                std::vector<double>* expected, std::vector<double>* tolerance) override {
    GC_REQUIRE(args.coll == Collective::AllGather, Err::InvalidArgument,
               "allgather reference: handed a %s call", collectiveName(args.coll));
    std::unique_ptr<ShardCodec> codec;
    GC_CHECK(makeCodec(name_, config_, &codec));
    device::Backend& dev = device::cpuBackend();
    const size_t P = inputs.size(), m = P ? args.count / P : 0, esz = dtypeSize(args.dtype);
    expected->assign(args.count, 0.0);
    tolerance->assign(args.count, 0.0);
    std::vector<uint8_t> payload(codec->payloadBytes(m, args.dtype));
    std::vector<char> shard(m * esz);
    std::vector<double> asDouble(m);
    for (size_t r = 0; r < P && m; ++r) {
      GC_CHECK(codec->encode(dev, inputs[r], m, args.dtype, payload.data()));
      GC_CHECK(codec->decode(dev, payload.data(), m, args.dtype, shard.data(), int(r)));
      GC_CHECK(dev.convert(asDouble.data(), DataType::Float64, shard.data(), args.dtype, m));
      std::copy(asDouble.begin(), asDouble.end(), expected->begin() + long(r * m));
    }
    return dev.sync();
  }

 private:
  std::string name_;
  param::Overrides config_;
};

AlgorithmInfo entry(const char* name, const char* summary, std::vector<param::Id> params) {
  AlgorithmInfo info;
  info.name = name;
  info.summary = summary;
  info.params = std::move(params);
  info.create = [] { return std::make_unique<RingAllgather>(); };
  const std::string n = name;
  info.allgatherReference = [n](int) { return std::make_unique<RingReference>(n); };
  return info;
}

const AllgatherRegistrar kDense(entry(
    "dense", "ring allgather of the raw shards: (P-1) x shard bytes per rank", {}));
const AllgatherRegistrar kCast(entry(
    "cast", "ring allgather of bfloat16 shards (round to nearest even): (P-1) x 2 bytes per "
    "element; GRADCOMP_AG_CAST=fp8: e4m3 bytes over an fp32 scale per GRADCOMP_AG_BLOCK "
    "elements", {param::Id::AG_CAST, param::Id::AG_BLOCK}));
const AllgatherRegistrar kBlockq(entry(
    "blockq", "ring allgather of block-quantized shards (ZeRO++ qwZ): int8 or int4 codes "
    "(GRADCOMP_BITS) and an fp32 scale per GRADCOMP_AG_BLOCK elements, rounded to nearest",
    {param::Id::BITS, param::Id::AG_BLOCK}));

}  // namespace
}  // namespace gradcomp::algo::allgather
