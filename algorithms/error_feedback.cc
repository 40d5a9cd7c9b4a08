// Error-feedback residual store: see error_feedback.h for the contract.
#include "algorithms/error_feedback.h"

#include <cmath>
#include <cstring>

#include "common/log.h"
#include "device/cpu/float16.h"

namespace gradcomp::algo {

Status ErrorFeedbackStore::create(const param::Overrides& config,
                                  std::unique_ptr<ErrorFeedbackStore>* out) {
  std::unique_ptr<ErrorFeedbackStore> store(new ErrorFeedbackStore());
  std::string dtype;
  int64_t maxMb = 0, retireCalls = 0;
  GC_CHECK(config.getBool(param::Id::EF, &store->enabled_));
  GC_CHECK(config.getString(param::Id::EF_DTYPE, &dtype));
  GC_CHECK(config.getInt(param::Id::EF_MAX_MB, &maxMb));
  GC_CHECK(config.getInt(param::Id::EF_RETIRE_CALLS, &retireCalls));
  store->bf16_ = dtype == "bfloat16";
  store->capBytes_ = size_t(maxMb) << 20;
  store->retireCalls_ = uint64_t(retireCalls);
  *out = std::move(store);
  return Status::Ok();
}

Status ErrorFeedbackStore::createForCommunicator(std::unique_ptr<ErrorFeedbackStore>* out) {
  param::Overrides on;
  GC_CHECK(on.set("EF", "1", "communicator error-feedback store"));
  return create(on, out);
}

Status ErrorFeedbackStore::forCall(ErrorFeedbackStore* store, const param::Overrides& config,
                                   ErrorFeedbackStore** out) {
  bool on = false;
  GC_CHECK(config.getBool(param::Id::EF, &on));
  *out = on ? store : nullptr;
  return Status::Ok();
}

Status ErrorFeedbackStore::acquire(uint64_t key, size_t count, uint64_t callSeq, Entry** out) {
  *out = nullptr;
  auto it = entries_.find(key);
  if (it != entries_.end() && it->second.count != count) {
    GC_INFO(ALGO, "error feedback: tensor key %#llx changed from %zu to %zu elements; "
            "its residual is retired and restarts at zero",
            (unsigned long long)key, it->second.count, count);
    retire(key);
    it = entries_.end();
  }
  if (it == entries_.end()) {
    const size_t bytes = count * (bf16_ ? sizeof(uint16_t) : sizeof(float));
    GC_REQUIRE(bytes <= capBytes_, Err::InvalidConfig,
               "error feedback: a residual of %zu elements needs %zu bytes, more than "
               "GRADCOMP_EF_MAX_MB=%zu allows; raise GRADCOMP_EF_MAX_MB or set GRADCOMP_EF=off",
               count, bytes, capBytes_ >> 20);
    while (bytesUsed_ + bytes > capBytes_ && !lru_.empty()) {
      GC_INFO(ALGO, "error feedback: GRADCOMP_EF_MAX_MB reached; retiring the least recently "
              "used residual (key %#llx)", (unsigned long long)lru_.back());
      retire(lru_.back());
    }
    Entry e;
    e.count = count;
    if (bf16_) e.bf16.assign(count, 0);  // bf16 0x0000 is +0.0
    else e.f32.assign(count, 0.0f);
    lru_.push_front(key);
    e.lru = lru_.begin();
    bytesUsed_ += bytes;
    it = entries_.emplace(key, std::move(e)).first;
  } else {
    lru_.splice(lru_.begin(), lru_, it->second.lru);
  }
  it->second.lastUsed = callSeq;
  *out = &it->second;
  return Status::Ok();
}

void ErrorFeedbackStore::retire(uint64_t key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  bytesUsed_ -= it->second.count * (bf16_ ? sizeof(uint16_t) : sizeof(float));
  lru_.erase(it->second.lru);
  entries_.erase(it);
}

Status ErrorFeedbackStore::addResidual(uint64_t key, uint64_t callSeq, float* acc, size_t count) {
  if (!enabled_) return Status::Ok();
  Entry* e = nullptr;
  GC_CHECK(acquire(key, count, callSeq, &e));
  if (bf16_) {
    for (size_t i = 0; i < count; ++i) acc[i] += device::bf16ToFloat(e->bf16[i]);
  } else {
    for (size_t i = 0; i < count; ++i) acc[i] += e->f32[i];
  }
  return Status::Ok();
}

Status ErrorFeedbackStore::storeResidual(uint64_t key, const float* acc, const float* contribution,
                                         size_t count) {
  if (!enabled_) return Status::Ok();
  auto it = entries_.find(key);
  GC_REQUIRE(it != entries_.end() && it->second.count == count, Err::Internal,
             "error feedback: storeResidual for key %#llx (%zu elements) without a matching "
             "addResidual in the same call", (unsigned long long)key, count);
  Entry& e = it->second;
  for (size_t i = 0; i < count; ++i) {
    const float r = contribution ? acc[i] - contribution[i] : acc[i];
    if (bf16_) e.bf16[i] = device::floatToBf16(r);
    else e.f32[i] = r;
  }
  return Status::Ok();
}

void ErrorFeedbackStore::retireStale(uint64_t callSeq) {
  // Collect first: retire() edits the map being walked.
  std::vector<uint64_t> stale;
  for (const auto& kv : entries_)
    if (callSeq > kv.second.lastUsed && callSeq - kv.second.lastUsed > retireCalls_)
      stale.push_back(kv.first);
  for (uint64_t key : stale) {
    GC_INFO(ALGO, "error feedback: retiring residual of key %#llx, unused for more than "
            "GRADCOMP_EF_RETIRE_CALLS=%llu collectives",
            (unsigned long long)key, (unsigned long long)retireCalls_);
    retire(key);
  }
}

double ErrorFeedbackStore::residualNorm(uint64_t key) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) return 0.0;
  double sum = 0;
  const Entry& e = it->second;
  for (size_t i = 0; i < e.count; ++i) {
    const double v = bf16_ ? double(device::bf16ToFloat(e.bf16[i])) : double(e.f32[i]);
    sum += v * v;
  }
  return std::sqrt(sum);
}

}  // namespace gradcomp::algo
