// The shared request set (requests.h).
#include "algorithms/shared/requests.h"

namespace gradcomp::algo::shared {

Status RequestSet::post(bool recv, int peer, uint64_t tag, void* data, size_t bytes,
                        size_t expect, size_t* length, size_t* slot) {
  transport::Handle h = 0;
  GC_CHECK(recv ? net_.irecv(peer, tag, data, bytes, &h) : net_.isend(peer, tag, data, bytes, &h));
  Slot s;
  s.handle = h;
  s.peer = peer;
  s.recv = recv;
  s.expect = expect;
  s.length = length;
  slots_.push_back(s);
  if (slot) *slot = slots_.size() - 1;
  return Status::Ok();
}

Status RequestSet::isend(int peer, uint64_t tag, const void* data, size_t bytes, size_t* slot) {
  return post(false, peer, tag, const_cast<void*>(data), bytes, kAny, nullptr, slot);
}

Status RequestSet::irecv(int peer, uint64_t tag, void* data, size_t bytes, size_t* slot) {
  return post(true, peer, tag, data, bytes, bytes, nullptr, slot);
}

Status RequestSet::irecvUpTo(int peer, uint64_t tag, void* data, size_t capacity, size_t* length,
                             size_t* slot) {
  return post(true, peer, tag, data, capacity, kAny, length, slot);
}

Status RequestSet::complete(Slot& s, size_t got) {
  s.got = got;
  if (s.length) *s.length = got;
  GC_REQUIRE(!s.recv || s.expect == kAny || got == s.expect, Err::RemoteError,
             "%s: rank %d sent %zu bytes where %zu were expected (peers disagree on count, "
             "dtype or algorithm parameters?)",
             what_, s.peer, got, s.expect);
  return Status::Ok();
}

Status RequestSet::wait(size_t slot) {
  Slot& s = slots_.at(slot);
  if (!s.handle) return Status::Ok();
  const transport::Handle h = s.handle;
  s.handle = 0;  // the wait releases it, on success and on error
  size_t got = 0;
  GC_CHECK(net_.wait(h, &got));
  return complete(s, got);
}

Status RequestSet::waitAll() {
  std::vector<transport::Handle> handles;
  std::vector<size_t> index;
  for (size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].handle) {
      handles.push_back(slots_[i].handle);
      index.push_back(i);
      slots_[i].handle = 0;  // waitAll releases every handle, also on error
    }
  if (handles.empty()) return Status::Ok();
  std::vector<size_t> got(handles.size(), 0);
  GC_CHECK(net_.waitAll(handles.data(), handles.size(), got.data()));
  Status first;
  for (size_t k = 0; k < handles.size(); ++k) {
    Status c = complete(slots_[index[k]], got[k]);
    if (first.ok() && !c.ok()) first = c;
  }
  return first;
}

Status RequestSet::test(size_t slot, bool* done) {
  Slot& s = slots_.at(slot);
  *done = true;
  if (!s.handle) return Status::Ok();
  bool finished = false;
  size_t got = 0;
  Status st = net_.test(s.handle, &finished, &got);
  if (!st.ok()) {
    s.handle = 0;  // released by the failed test (the transport is broken)
    return st;
  }
  if (!finished) {
    *done = false;
    return Status::Ok();
  }
  s.handle = 0;
  return complete(s, got);
}

Status RequestSet::testAll(bool* done) {
  *done = true;
  for (size_t i = 0; i < slots_.size(); ++i) {
    bool one = true;
    GC_CHECK(test(i, &one));
    *done = *done && one;
  }
  return Status::Ok();
}

void RequestSet::cancel(size_t slot) {
  Slot& s = slots_.at(slot);
  if (s.handle) net_.cancel(s.handle);
  s.handle = 0;
}

void RequestSet::cancel() {
  for (size_t i = 0; i < slots_.size(); ++i) cancel(i);
}

transport::Handle RequestSet::release(size_t slot) {
  Slot& s = slots_.at(slot);
  const transport::Handle h = s.handle;
  s.handle = 0;
  return h;
}

bool RequestSet::anyPending() const {
  for (const Slot& s : slots_)
    if (s.handle) return true;
  return false;
}

}  // namespace gradcomp::algo::shared
