// The allgather codecs (allgather.h): dense, cast (bfloat16) and blockq.
#include <string>

#include "algorithms/allgather/allgather.h"

namespace gradcomp::algo::allgather {
namespace {

class DenseCodec final : public ShardCodec {
 public:
  size_t payloadBytes(size_t m, DataType t) const override { return m * dtypeSize(t); }
  Status encode(device::Backend& dev, const void* shard, size_t m, DataType t,
                uint8_t* payload) override {
    return dev.copy(payload, shard, m * dtypeSize(t));
  }
  Status decode(device::Backend& dev, const uint8_t* payload, size_t m, DataType t, void* dst,
                int source) override {
    (void)source;
    return dev.copy(dst, payload, m * dtypeSize(t));
  }
};

// fp32 (or any float) -> bfloat16 -> the dtype, rounding to nearest even.
class CastCodec final : public ShardCodec {
 public:
  size_t payloadBytes(size_t m, DataType t) const override {
    (void)t;
    return m * 2;
  }
  Status encode(device::Backend& dev, const void* shard, size_t m, DataType t,
                uint8_t* payload) override {
    return dev.convert(payload, DataType::BFloat16, shard, t, m);
  }
  Status decode(device::Backend& dev, const uint8_t* payload, size_t m, DataType t, void* dst,
                int source) override {
    (void)source;
    return dev.convert(dst, t, payload, DataType::BFloat16, m);
  }
};

// Block quantization (device/quant_types.h) of the shard's fp32 values;
// other dtypes go through an fp32 scratch in device memory.
class BlockqCodec final : public ShardCodec {
 public:
  explicit BlockqCodec(device::BlockQuantSpec spec) : spec_(spec) {}
  size_t payloadBytes(size_t m, DataType t) const override {
    (void)t;
    return device::blockqBytes(m, spec_);
  }
  Status encode(device::Backend& dev, const void* shard, size_t m, DataType t,
                uint8_t* payload) override {
    const float* src = static_cast<const float*>(shard);
    if (t != DataType::Float32) {
      scratch_.bind(dev).resize(m);
      GC_CHECK(dev.convert(scratch_.data(), DataType::Float32, shard, t, m));
      src = scratch_.data();
    }
    return dev.blockqEncode(src, m, spec_, payload);
  }
  Status decode(device::Backend& dev, const uint8_t* payload, size_t m, DataType t, void* dst,
                int source) override {
    if (t == DataType::Float32)
      return dev.blockqDecode(payload, m, spec_, static_cast<float*>(dst), source);
    scratch_.bind(dev).resize(m);
    GC_CHECK(dev.blockqDecode(payload, m, spec_, scratch_.data(), source));
    return dev.convert(dst, t, scratch_.data(), DataType::Float32, m);
  }

 private:
  device::BlockQuantSpec spec_;
  device::DeviceArray<float> scratch_;  // reused in stream order
};

}  // namespace

Status makeCodec(const std::string& name, const param::Overrides& config,
                 std::unique_ptr<ShardCodec>* out) {
  if (name == "dense") {
    *out = std::make_unique<DenseCodec>();
    return Status::Ok();
  }
  GC_REQUIRE(name == "blockq" || name == "cast", Err::InvalidArgument,
             "allgather: unknown algorithm '%s' (known: %s)", name.c_str(),
             allgatherNames().c_str());
  param::Value bits, block, cast;
  GC_CHECK(config.get(param::Id::AG_BLOCK, &block));
  device::BlockQuantSpec spec;
  spec.block = size_t(block.i);
  if (name == "cast") {
    GC_CHECK(config.get(param::Id::AG_CAST, &cast));
    if (cast.s == "fp8") {
      spec.fp8 = true;  // e4m3 codes over a per-block scale (device/quant_types.h)
      *out = std::make_unique<BlockqCodec>(spec);
    } else {
      *out = std::make_unique<CastCodec>();
    }
    return Status::Ok();
  }
  GC_CHECK(config.get(param::Id::BITS, &bits));
  spec.bits = bits.set ? int(bits.i) : 8;
  GC_REQUIRE(spec.bits == 8 || spec.bits == 4, Err::InvalidConfig,
             "blockq: GRADCOMP_BITS=%d is not supported (accepted: 8 or 4; default 8)",
             spec.bits);
  *out = std::make_unique<BlockqCodec>(spec);
  return Status::Ok();
}

Status wireBytes(const std::string& name, const param::Overrides& config, size_t count,
                 DataType t, int nranks, uint64_t* bytes) {
  std::unique_ptr<ShardCodec> codec;
  GC_CHECK(makeCodec(name, config, &codec));
  const size_t m = nranks > 0 ? count / size_t(nranks) : 0;
  *bytes = uint64_t(nranks > 0 ? nranks - 1 : 0) * codec->payloadBytes(m, t);
  return Status::Ok();
}

Status hierarchicalWireBytes(const std::string& name, const param::Overrides& config,
                             size_t count, DataType t, int hosts, int perHost,
                             uint64_t* interHost, uint64_t* intraHost) {
  GC_REQUIRE(hosts > 0 && perHost > 0, Err::InvalidArgument,
             "allgather wire bytes: %d hosts of %d ranks", hosts, perHost);
  const size_t m = count / (size_t(hosts) * size_t(perHost));
  GC_CHECK(wireBytes(name, config, m * size_t(hosts), t, hosts, interHost));
  *intraHost = uint64_t(perHost - 1) * uint64_t(hosts) * m * dtypeSize(t);
  return Status::Ok();
}

}  // namespace gradcomp::algo::allgather
