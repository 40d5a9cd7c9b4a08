// See faulty_transport.h.
#include "support/faulty_transport.h"

#include <signal.h>

#include <algorithm>

namespace gradcomp::test {

const char* faultKindName(FaultKind kind) {
  switch (kind) {
    case FaultKind::Kill: return "sigkill";
    case FaultKind::Stop: return "sigstop";
    case FaultKind::GarbageLength: return "garbage-length";
    case FaultKind::GarbagePayload: return "garbage-payload";
  }
  return "?";
}

FaultyTransport::FaultyTransport(std::unique_ptr<transport::Transport> inner, FaultKind kind,
                                 uint64_t seed)
    : inner_(std::move(inner)), kind_(kind), rng_(seed) {}

void FaultyTransport::fireNow() {
  if ((kind_ == FaultKind::Kill || kind_ == FaultKind::Stop) && onFire_) onFire_();
  if (kind_ == FaultKind::Kill) raise(SIGKILL);
  if (kind_ == FaultKind::Stop) raise(SIGSTOP);
}

void FaultyTransport::afterPost() {
  const bool fire = armed_ && ops_ == atOp_;
  ++ops_;
  if (fire) fireNow();
}

std::vector<uint8_t> FaultyTransport::garbageFor(const void* buf, size_t bytes) {
  std::vector<uint8_t> out;
  if (kind_ == FaultKind::GarbageLength) {
    // A length the receiver did not expect: empty, one short, a random
    // shorter one, or longer (by a little or by a lot).
    size_t len = bytes + 1 + rng_() % 64;
    switch (rng_() % 5) {
      case 0: len = 0; break;
      case 1: len = bytes > 0 ? bytes - 1 : 1; break;
      case 2: len = bytes > 1 ? rng_() % bytes : 2; break;
      case 3: len = 2 * bytes + 8; break;
      default: break;
    }
    if (len == bytes) ++len;
    out.resize(len);
    for (auto& b : out) b = static_cast<uint8_t>(rng_());
    return out;
  }
  // GarbagePayload: same length; all bytes random, or a few flipped.
  const auto* src = static_cast<const uint8_t*>(buf);
  out.assign(src, src + bytes);
  if (bytes == 0) return out;
  if (rng_() % 2) {
    for (auto& b : out) b = static_cast<uint8_t>(rng_());
  } else {
    const size_t flips = 1 + rng_() % 4;
    for (size_t i = 0; i < flips; ++i) out[rng_() % bytes] ^= static_cast<uint8_t>(1 + rng_() % 255);
  }
  return out;
}

Status FaultyTransport::isend(int peer, uint64_t tag, const void* buf, size_t bytes,
                              transport::Handle* out) {
  const bool corrupt = firing() && peer != rank() &&
                       (kind_ == FaultKind::GarbageLength || kind_ == FaultKind::GarbagePayload);
  Status s;
  if (corrupt) {
    std::vector<uint8_t> junk = garbageFor(buf, bytes);
    s = inner_->isend(peer, tag, junk.data(), junk.size(), out);
    if (s.ok()) garbage_[*out] = std::move(junk);  // the vector's heap block does not move
  } else {
    s = inner_->isend(peer, tag, buf, bytes, out);
  }
  afterPost();
  return s;
}

Status FaultyTransport::irecv(int peer, uint64_t tag, void* buf, size_t capacity,
                              transport::Handle* out) {
  Status s = inner_->irecv(peer, tag, buf, capacity, out);
  afterPost();
  return s;
}

Status FaultyTransport::test(transport::Handle h, bool* done, size_t* bytes) {
  Status s = inner_->test(h, done, bytes);
  if (!s.ok() || (done && *done)) garbage_.erase(h);  // released by the inner transport either way
  return s;
}

Status FaultyTransport::waitAll(const transport::Handle* handles, size_t n, size_t* bytes) {
  Status s = inner_->waitAll(handles, n, bytes);
  for (size_t i = 0; i < n; ++i) garbage_.erase(handles[i]);  // released on success and error
  return s;
}

void FaultyTransport::cancel(transport::Handle h) {
  inner_->cancel(h);
  garbage_.erase(h);
}

}  // namespace gradcomp::test
