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

}  // namespace gradcomp::train
