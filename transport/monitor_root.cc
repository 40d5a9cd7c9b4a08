#include "transport/monitor_root.h"

#include <algorithm>
#include <cstdio>

#include "common/log.h"

namespace gradcomp::transport::monitor {
namespace {

// printf with one double and one int (in that order in the format, or the
// int unused).
std::string format(const char* fmt, double a, int b) {
  char text[200];
  snprintf(text, sizeof text, fmt, a, b);
  return text;
}

}  // namespace

void RootEngine::decide(int rank, Err code, const std::string& cause) {
  if (decided_) return;
  decided_ = true;
  probes_.clear();
  hooks_.decide(rank, code, cause);
}

void RootEngine::onClosed(int rank) { decide(rank, Err::RemoteError, "connection closed"); }

void RootEngine::onLeft(int rank) {
  if (rank < 0 || rank >= size_) return;
  left_[size_t(rank)] = true;
  auto it = probes_.find(rank);
  if (it == probes_.end()) return;
  decide(rank, Err::RemoteError,
         cause(it->second, "; it destroyed its communicator meanwhile (did the ranks make "
                           "different calls?)"));
}

std::string RootEngine::origin(const Probe& p) const {
  const Origin& o = p.origin;
  return o.kind == SuspectKind::Link
             ? "the link from rank " + std::to_string(o.reporter) + " failed (" + o.detail + ")"
             : format("no progress for %.1f s (GRADCOMP_TIMEOUT_S)", o.seconds, 0);
}

std::string RootEngine::reportedBy(const Probe& p) const {
  std::string text = " (reported by rank " + std::to_string(p.chain[0]);
  for (size_t i = 1; p.chain.size() > 2 && i < p.chain.size(); ++i)
    text += std::string(i == 1 ? ", which waited for rank " : ", which waits for rank ") +
            std::to_string(p.chain[i]);
  return text + ")";
}

std::string RootEngine::cause(const Probe& p, const std::string& finding) const {
  return origin(p) + finding + reportedBy(p);
}

void RootEngine::onSuspect(int reporter, const Message& m) {
  if (decided_ || reporter < 0 || reporter >= size_) return;
  const SuspectKind kind = SuspectKind(m.kind);
  if (kind == SuspectKind::Self) {
    const Err code = m.token > 0 && m.token <= uint64_t(Err::Internal) ? Err(m.token) : Err::Internal;
    decide(reporter, code, m.text);
    return;
  }
  if (m.rank < 0 || m.rank >= size_ || m.rank == reporter ||
      (kind != SuspectKind::Silent && kind != SuspectKind::Link))
    return;
  Probe p;
  p.origin = Origin{reporter, kind, m.seconds, m.text};
  p.chain = {reporter};
  probe(m.rank, std::move(p));
}

void RootEngine::probe(int target, Probe p) {
  if (decided_ || probes_.count(target)) return;  // already under investigation
  if (std::find(p.chain.begin(), p.chain.end(), target) != p.chain.end()) {
    std::string cycle;
    for (int r : p.chain) cycle += std::to_string(r) + " -> ";
    GC_INFO(TRANSPORT, "failure monitor: ranks wait on each other in a cycle (%s%d); no verdict",
            cycle.c_str(), target);
    return;
  }
  p.chain.push_back(target);
  if (left_[size_t(target)]) {
    decide(target, Err::RemoteError,
           cause(p, "; it had destroyed its communicator (did the ranks make different calls?)"));
    return;
  }
  if (target == 0) {  // the root answers for itself
    probes_[target] = std::move(p);
    answer(0, hooks_.rootWaitingOn());
    return;
  }
  Probe& slot = probes_[target] = std::move(p);
  send(target, slot);
}

void RootEngine::send(int target, Probe& p) {
  p.nonce = ++nonce_;
  p.sent = Clock::now();
  p.answered = false;
  if (!hooks_.ping(target, p.nonce))
    decide(target, Err::Timeout, cause(p, "; it has no failure monitor connection to confirm"));
}

void RootEngine::onPong(int rank, const Message& m) {
  auto it = probes_.find(rank);
  if (decided_ || it == probes_.end() || it->second.answered || m.token != it->second.nonce) return;
  answer(rank, m.rank);
}

void RootEngine::answer(int target, int waitingOn) {
  Probe& p = probes_[target];
  if (waitingOn >= 0 && waitingOn < size_ && waitingOn != target) {
    Probe next = std::move(p);
    probes_.erase(target);
    probe(waitingOn, std::move(next));
    return;
  }
  if (++p.idleAnswers >= kIdleAnswers) {
    decide(target, Err::Timeout,
           cause(p, "; its process answers but is not waiting in a gradcomp collective: it made "
                    "a different call, or is stuck outside gradcomp"));
    return;
  }
  p.answered = true;
  p.recheckAt = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(kRecheckS));
}

void RootEngine::tick(Clock::time_point now) {
  const auto probeWindow =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kProbeS));
  for (auto it = probes_.begin(); !decided_ && it != probes_.end();) {
    const int target = it->first;
    Probe& p = it->second;
    ++it;  // decide() or answer() may erase the current entry
    if (p.answered && now >= p.recheckAt) {
      if (target == 0) {
        answer(0, hooks_.rootWaitingOn());
      } else {
        send(target, p);
      }
    } else if (!p.answered && target != 0 && now - p.sent >= probeWindow) {
      decide(target, Err::Timeout,
             cause(p, format(" and no answer to the failure monitor within %.1f s: stopped or hung",
                             kProbeS, 0)));
    }
  }
}

RootEngine::Clock::time_point RootEngine::nextDeadline() const {
  auto next = Clock::time_point::max();
  const auto probeWindow =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kProbeS));
  for (const auto& [target, p] : probes_)
    next = std::min(next, p.answered ? p.recheckAt : p.sent + probeWindow);
  return next;
}

}  // namespace gradcomp::transport::monitor
