// A sub-group view of a Transport: the ranks `members` of the parent (in the
// view's rank order) as a communicator of their own, for schedules that run
// an algorithm among some ranks (the hierarchy's host groups and rails).
//
// Contract:
// - rank() is the index of parent.rank() in members; peers are view ranks,
//   mapped to parent ranks on every call. Handles are the parent's.
// - Tags pass through unchanged: views used side by side must have disjoint
//   peer sets (a host group and a rail share only the calling rank, and no
//   schedule sends to itself), so (peer, tag) never matches across views.
// - counters(peer) are the parent's counters of that peer (views with
//   disjoint peers see disjoint counts); resetCounters() leaves them (the
//   parent's owner resets). waitSeconds() counts waits through the view only.
// - The parent must outlive the view; both are driven by one thread.
#pragma once

#include <memory>
#include <vector>

#include "transport/transport.h"

namespace gradcomp::transport {

// members: distinct parent ranks, containing parent.rank().
Status makeGroupView(Transport& parent, std::vector<int> members, std::unique_ptr<Transport>* out);

}  // namespace gradcomp::transport
