// How the trainer's flat vectors cross the network: DDP-style gradient buckets
// over an abstract collective (the C API in gc_collective.h, or a single-process
// stand-in for tests).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "common/status.h"
#include "tools/gradcomp-train/layers.h"

namespace gradcomp::train {

// What the training loop needs from the communicator.
class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Collective, in place: data[0..count) becomes the average over the ranks as
  // the configured algorithm computes it (lossy algorithms return their
  // approximation). key: the same on all ranks and stable across calls for the
  // same logical tensor (error-feedback state is kept per key); key > 0.
  virtual Status average(float* data, size_t count, uint64_t key) = 0;
  // Bytes this rank has sent for average() so far, including traffic an
  // asynchronous algorithm sends between calls; sumMetrics() traffic excluded.
  virtual Status bytesSent(uint64_t* out) = 0;
  // Collective, exact: values[i] becomes the sum over ranks. For epoch metrics;
  // not counted in bytesSent() or any timing.
  virtual Status sumMetrics(double* values, size_t n) = 0;
  // Collective (sharded training): data[0..count), count a multiple of
  // size(), is reduce-scattered: shard[0..count / size()) becomes the
  // average over the ranks of elements [rank * count / size(), ...), as the
  // configured algorithm computes it. key as for average().
  virtual Status reduceScatterAverage(const float* data, size_t count, float* shard,
                                      uint64_t key) = 0;
  // Collective, exact: out[r * shardCount ...] = rank r's shard (the dense
  // parameter allgather of sharded training; not counted in bytesSent()).
  virtual Status allGather(const float* shard, size_t shardCount, float* out) = 0;
  // Collective (ZeRO-3): out[r * shardCount ...] = rank r's shard as the
  // configured parameter allgather delivers it (a lossy one: decode(encode(
  // shard)) on every rank, the owner included, so all ranks get the same
  // bytes). Its traffic counts in paramBytesSent(), not in bytesSent().
  virtual Status paramAllgather(const float* shard, size_t shardCount, float* out) = 0;
  virtual Status paramBytesSent(uint64_t* out) = 0;
};

// A contiguous range of the flat vector reduced in one call.
struct Bucket {
  size_t offset = 0, count = 0;
  uint64_t key = 0;  // bucket index + 1: stable, equal on all ranks
};

// DDP's scheme: walk the tensors in reverse order (backward produces the last
// layer's gradients first) and close a bucket once it holds >= capBytes;
// tensors are never split, so a tensor larger than the cap is a bucket of its
// own. Tensors must be contiguous and offset-ascending (Network::tensors()).
std::vector<Bucket> planBuckets(const std::vector<TensorSlice>& tensors, size_t capBytes);

// Averages a flat float vector bucket by bucket and keeps the time spent.
class BucketReducer {
 public:
  BucketReducer(Collective& comm, std::vector<Bucket> buckets)
      : comm_(comm), buckets_(std::move(buckets)) {}
  Status reduce(float* flat);
  const std::vector<Bucket>& buckets() const { return buckets_; }
  double commSeconds() const { return commSeconds_; }

 private:
  Collective& comm_;
  std::vector<Bucket> buckets_;
  double commSeconds_ = 0;
};

// One process, no network: average() is the identity. For model tests.
class SingleProcessCollective final : public Collective {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Status average(float*, size_t, uint64_t key) override {
    GC_REQUIRE(key > 0, Err::InvalidArgument, "bucket key must be > 0");
    return Status::Ok();
  }
  Status bytesSent(uint64_t* out) override {
    *out = 0;
    return Status::Ok();
  }
  Status sumMetrics(double*, size_t) override { return Status::Ok(); }
  Status reduceScatterAverage(const float* data, size_t count, float* shard,
                              uint64_t key) override {
    GC_REQUIRE(key > 0, Err::InvalidArgument, "bucket key must be > 0");
    std::copy(data, data + count, shard);
    return Status::Ok();
  }
  Status allGather(const float* shard, size_t shardCount, float* out) override {
    std::copy(shard, shard + shardCount, out);
    return Status::Ok();
  }
  Status paramAllgather(const float* shard, size_t shardCount, float* out) override {
    return allGather(shard, shardCount, out);
  }
  Status paramBytesSent(uint64_t* out) override {
    *out = 0;
    return Status::Ok();
  }
};

// ZeRO-2 over the same buckets: each bucket, zero-padded to a multiple of
// the ranks, is reduce-scattered (rank r owns elements [r * s, (r+1) * s)
// of it, s = padded / ranks); each rank steps the parameters it owns with
// SGD (+momentum, its velocity kept for those entries only) and the
// parameters are allgathered dense, so every rank ends the step with the
// same weights.
//
// ZeRO-3 (zero3): the optimizer's parameters are each rank's fp32 master
// shards, kept here and stepped exactly; the full parameters the network
// computes with are only what paramAllgather() delivers from them (lossy
// for blockq/cast), so an allgather's quantization error is never written
// back into a master shard and does not accumulate over steps.
class ShardedStepper {
 public:
  ShardedStepper(Collective& comm, std::vector<Bucket> buckets, bool zero3 = false)
      : comm_(comm), buckets_(std::move(buckets)), zero3_(zero3) {}
  // Collective, once before the first step. ZeRO-3: every rank's master
  // shards are its owned slices of params (equal on all ranks at start) and
  // params becomes their allgather, as before every later forward pass.
  // ZeRO-2: nothing.
  Status start(float* params);
  // grads and params: the flat vectors; velocity: the flat momentum buffer
  // (only owned entries are used), may be null when momentum is 0.
  // momentumCorrection (DGC, as the allreduce path does it; ZeRO-2 only):
  // grads already are the velocity u; owned parameters step by -lr x result
  // (no momentum on top), and after the allgather u is cleared wherever a
  // parameter changed, i.e. where the reduce-scattered result was non-zero
  // on any rank's shard (what the allreduce path reads from its whole result).
  Status step(const float* grads, float* params, float* velocity, float lr, float momentum,
              bool momentumCorrection);
  // Collective (ZeRO-3): out[0, n) = the master shards gathered exactly
  // (Collective::allGather, not counted): the fp32 model a checkpoint of the
  // shards holds, as opposed to the compressed one the steps compute with.
  Status gatherMasters(float* out);
  double commSeconds() const { return commSeconds_; }
  double paramSeconds() const { return paramSeconds_; }

 private:
  Status gather(const Bucket& b, size_t s, float* params);

  Collective& comm_;
  std::vector<Bucket> buckets_;
  bool zero3_;
  std::vector<std::vector<float>> master_;  // ZeRO-3: per bucket, s entries (zero padding)
  std::vector<float> padded_, shard_, gathered_, before_;
  double commSeconds_ = 0;   // the gradient reduce-scatters
  double paramSeconds_ = 0;  // ZeRO-3's parameter allgathers (ZeRO-2's is not timed)
};

}  // namespace gradcomp::train
