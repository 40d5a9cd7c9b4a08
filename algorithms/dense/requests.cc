#include <cstdint>

#include "algorithms/dense/dense.h"

namespace gradcomp::algo::dense {

Requests::~Requests() {
  for (const Slot& s : slots_)
    if (s.handle) net_.cancel(s.handle);
}

Status Requests::isend(int peer, uint64_t tag, const void* data, size_t bytes, size_t* slot) {
  transport::Handle h = 0;
  GC_CHECK(net_.isend(peer, tag, data, bytes, &h));
  slots_.push_back({h, peer, SIZE_MAX});
  if (slot) *slot = slots_.size() - 1;
  return Status::Ok();
}

Status Requests::irecv(int peer, uint64_t tag, void* data, size_t bytes, size_t* slot) {
  transport::Handle h = 0;
  GC_CHECK(net_.irecv(peer, tag, data, bytes, &h));
  slots_.push_back({h, peer, bytes});
  if (slot) *slot = slots_.size() - 1;
  return Status::Ok();
}

Status Requests::check(const Slot& slot, size_t got) const {
  GC_REQUIRE(slot.expectBytes == SIZE_MAX || got == slot.expectBytes, Err::RemoteError,
             "dense allreduce: rank %d sent %zu bytes where %zu were expected (peers disagree "
             "on count or dtype?)",
             slot.peer, got, slot.expectBytes);
  return Status::Ok();
}

Status Requests::wait(size_t slot) {
  Slot& s = slots_.at(slot);
  if (!s.handle) return Status::Ok();
  const transport::Handle h = s.handle;
  s.handle = 0;  // wait releases the handle on success and on error
  size_t got = 0;
  GC_CHECK(net_.wait(h, &got));
  return check(s, got);
}

Status Requests::waitAll() {
  std::vector<transport::Handle> pending;
  std::vector<size_t> index;
  for (size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].handle) {
      pending.push_back(slots_[i].handle);
      index.push_back(i);
      slots_[i].handle = 0;  // waitAll releases every handle, also on error
    }
  if (pending.empty()) return Status::Ok();
  std::vector<size_t> got(pending.size(), 0);
  GC_CHECK(net_.waitAll(pending.data(), pending.size(), got.data()));
  for (size_t k = 0; k < pending.size(); ++k) GC_CHECK(check(slots_[index[k]], got[k]));
  return Status::Ok();
}

}  // namespace gradcomp::algo::dense
