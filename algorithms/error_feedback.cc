// Error-feedback residual store: see error_feedback.h for the contract.
#include "algorithms/error_feedback.h"

#include <algorithm>
#include <cmath>
#include <vector>

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

Status ErrorFeedbackStore::acquire(device::Backend& dev, uint64_t key, size_t count,
                                   uint64_t callSeq, Entry** out, bool* fresh) {
  *out = nullptr;
  *fresh = false;
  auto it = entries_.find(key);
  if (it != entries_.end() && it->second.count != count) {
    GC_INFO(ALGO, "error feedback: tensor key %#llx changed from %zu to %zu elements; "
            "its residual is retired and restarts at zero",
            (unsigned long long)key, it->second.count, count);
    retire(key);
    it = entries_.end();
  }
  if (it != entries_.end() &&
      (bf16_ ? it->second.bf16.backend() : it->second.f32.backend()) != &dev) {
    GC_INFO(ALGO, "error feedback: tensor key %#llx moved to the %s backend; its residual "
            "restarts at zero", (unsigned long long)key, dev.name());
    retire(key);
    it = entries_.end();
  }
  if (it == entries_.end()) {
    const size_t bytes = entryBytes(count);
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
    // All-zero bytes are +0.0 in fp32 and bf16.
    if (bf16_) {
      e.bf16.bind(dev);
      GC_CHECK(e.bf16.assignZero(count));
    } else {
      e.f32.bind(dev);
      GC_CHECK(e.f32.assignZero(count));
    }
    lru_.push_front(key);
    e.lru = lru_.begin();
    bytesUsed_ += bytes;
    it = entries_.emplace(key, std::move(e)).first;
    *fresh = true;
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
  bytesUsed_ -= entryBytes(it->second.count);
  lru_.erase(it->second.lru);
  entries_.erase(it);
}

Status ErrorFeedbackStore::begin(device::Backend& dev, uint64_t key, size_t count,
                                 uint64_t callSeq, device::DeviceArray<float>* scratch,
                                 float** acc, bool* fresh) {
  GC_REQUIRE(enabled_, Err::Internal, "error feedback: begin() on a disabled store");
  Entry* e = nullptr;
  GC_CHECK(acquire(dev, key, count, callSeq, &e, fresh));
  if (!bf16_) {
    *acc = e->f32.data();
    return Status::Ok();
  }
  scratch->bind(dev).resize(count);
  GC_CHECK(dev.convert(scratch->data(), DataType::Float32, e->bf16.data(), DataType::BFloat16,
                       count));
  *acc = scratch->data();
  return Status::Ok();
}

Status ErrorFeedbackStore::end(device::Backend& dev, uint64_t key, const float* acc) {
  auto it = entries_.find(key);
  GC_REQUIRE(it != entries_.end(), Err::Internal,
             "error feedback: end() for key %#llx without begin() in the same call",
             (unsigned long long)key);
  if (!bf16_) {
    GC_REQUIRE(acc == it->second.f32.data(), Err::Internal,
               "error feedback: end() for key %#llx with another accumulator",
               (unsigned long long)key);
    return Status::Ok();
  }
  return dev.convert(it->second.bf16.data(), DataType::BFloat16, acc, DataType::Float32,
                     it->second.count);
}

Status ErrorFeedbackStore::clear(device::Backend& dev, uint64_t key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return Status::Ok();
  Entry& e = it->second;
  return bf16_ ? dev.zero(e.bf16.data(), e.count * 2) : dev.zero(e.f32.data(), e.count * 4);
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

Status ErrorFeedbackStore::readResidual(uint64_t key, size_t count, float* out) const {
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.count != count) {
    std::fill(out, out + count, 0.0f);
    return Status::Ok();
  }
  const Entry& e = it->second;
  device::Backend& dev = *(bf16_ ? e.bf16.backend() : e.f32.backend());
  GC_CHECK(bf16_ ? dev.convert(out, DataType::Float32, e.bf16.data(), DataType::BFloat16, count)
                 : dev.copy(out, e.f32.data(), count * sizeof(float)));
  return dev.sync();
}

double ErrorFeedbackStore::residualNorm(uint64_t key) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) return 0.0;
  const Entry& e = it->second;
  const float* f = e.f32.hostView();
  const uint16_t* h = e.bf16.hostView();
  if (bf16_ ? h == nullptr : f == nullptr) return -1.0;
  double sum = 0;
  for (size_t i = 0; i < e.count; ++i) {
    const double v = bf16_ ? double(device::bf16ToFloat(h[i])) : double(f[i]);
    sum += v * v;
  }
  return std::sqrt(sum);
}

Status CentralResiduals::create(int nranks, const param::Overrides& config,
                                std::shared_ptr<CentralResiduals>* out) {
  auto c = std::make_shared<CentralResiduals>();
  c->stores.resize(size_t(nranks));
  for (auto& s : c->stores) GC_CHECK(ErrorFeedbackStore::create(config, &s));
  *out = std::move(c);
  return Status::Ok();
}

}  // namespace gradcomp::algo
