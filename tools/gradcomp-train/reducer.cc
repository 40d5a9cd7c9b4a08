#include "tools/gradcomp-train/reducer.h"

#include <chrono>

namespace gradcomp::train {

std::vector<Bucket> planBuckets(const std::vector<TensorSlice>& tensors, size_t capBytes) {
  std::vector<Bucket> buckets;
  Bucket open;
  for (size_t i = tensors.size(); i-- > 0;) {
    const TensorSlice& t = tensors[i];
    // Reverse walk of contiguous tensors: the bucket grows downwards.
    open.offset = t.offset;
    open.count += t.count;
    if (open.count * sizeof(float) >= capBytes) {
      open.key = buckets.size() + 1;
      buckets.push_back(open);
      open = Bucket();
    }
  }
  if (open.count > 0) {
    open.key = buckets.size() + 1;
    buckets.push_back(open);
  }
  return buckets;
}

Status BucketReducer::reduce(float* flat) {
  const auto start = std::chrono::steady_clock::now();
  for (const Bucket& b : buckets_) GC_CHECK(comm_.average(flat + b.offset, b.count, b.key));
  commSeconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return Status::Ok();
}

namespace {
double secondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

// ZeRO-3: params[b.offset, + b.count) = the allgather of the master shards.
Status ShardedStepper::gather(const Bucket& b, size_t s, float* params) {
  gathered_.resize(s * size_t(comm_.size()));
  const auto start = std::chrono::steady_clock::now();
  GC_CHECK(comm_.paramAllgather(master_[&b - buckets_.data()].data(), s, gathered_.data()));
  paramSeconds_ += secondsSince(start);
  std::copy(gathered_.begin(), gathered_.begin() + b.count, params + b.offset);
  return Status::Ok();
}

Status ShardedStepper::start(float* params) {
  if (!zero3_) return Status::Ok();
  const size_t P = size_t(comm_.size()), r = size_t(comm_.rank());
  master_.assign(buckets_.size(), {});
  for (const Bucket& b : buckets_) {
    const size_t s = (b.count + P - 1) / P;
    const size_t first = std::min(r * s, b.count), last = std::min(first + s, b.count);
    std::vector<float>& m = master_[&b - buckets_.data()];
    m.assign(s, 0.0f);
    std::copy(params + b.offset + first, params + b.offset + last, m.begin());
    GC_CHECK(gather(b, s, params));
  }
  return Status::Ok();
}

Status ShardedStepper::gatherMasters(float* out) {
  GC_REQUIRE(zero3_ && !master_.empty(), Err::Internal, "gatherMasters: not ZeRO-3, or before start()");
  for (const Bucket& b : buckets_) {
    const std::vector<float>& m = master_[&b - buckets_.data()];
    gathered_.resize(m.size() * size_t(comm_.size()));
    GC_CHECK(comm_.allGather(m.data(), m.size(), gathered_.data()));
    std::copy(gathered_.begin(), gathered_.begin() + b.count, out + b.offset);
  }
  return Status::Ok();
}

Status ShardedStepper::step(const float* grads, float* params, float* velocity, float lr,
                            float momentum, bool momentumCorrection) {
  GC_REQUIRE(!zero3_ || !master_.empty(), Err::Internal, "ZeRO-3 step before start()");
  GC_REQUIRE(!zero3_ || !momentumCorrection, Err::InvalidArgument,
             "ZeRO-3 has no momentum correction (its mask needs exact parameters)");
  const size_t P = size_t(comm_.size()), r = size_t(comm_.rank());
  for (const Bucket& b : buckets_) {
    const size_t s = (b.count + P - 1) / P, padded = s * P;
    padded_.assign(padded, 0.0f);
    std::copy(grads + b.offset, grads + b.offset + b.count, padded_.begin());
    shard_.resize(s);
    const auto start = std::chrono::steady_clock::now();
    GC_CHECK(comm_.reduceScatterAverage(padded_.data(), padded, shard_.data(), b.key));
    commSeconds_ += secondsSince(start);
    // The owned range of this bucket, clipped to its real elements.
    const size_t first = std::min(r * s, b.count), last = std::min(first + s, b.count);
    // The parameters stepped: element i of the bucket is owned[i - first],
    // in the master shard (ZeRO-3) or in params itself (ZeRO-2).
    float* w = params + b.offset;
    float* owned = zero3_ ? master_[&b - buckets_.data()].data() : w + first;
    if (momentumCorrection) before_.assign(w, w + b.count);
    for (size_t i = first; i < last; ++i) {
      float g = shard_[i - first];
      if (momentum != 0.0f && !momentumCorrection)
        g = velocity[b.offset + i] = momentum * velocity[b.offset + i] + g;
      owned[i - first] -= lr * g;
    }
    if (zero3_) {
      GC_CHECK(gather(b, s, params));
      continue;
    }
    // Every rank's owned parameters to every rank.
    std::fill(shard_.begin(), shard_.end(), 0.0f);
    std::copy(w + first, w + last, shard_.begin());
    gathered_.resize(padded);
    GC_CHECK(comm_.allGather(shard_.data(), s, gathered_.data()));
    std::copy(gathered_.begin(), gathered_.begin() + b.count, w);
    if (momentumCorrection)
      for (size_t i = 0; i < b.count; ++i)
        if (w[i] != before_[i]) velocity[b.offset + i] = 0.0f;
  }
  return Status::Ok();
}

}  // namespace gradcomp::train
