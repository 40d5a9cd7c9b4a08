// The sub-group view of group_view.h: rank remapping over the parent.
#include "transport/group_view.h"

#include <algorithm>

namespace gradcomp::transport {
namespace {

class GroupView final : public Transport {
 public:
  GroupView(Transport& parent, std::vector<int> members, int rank)
      : parent_(parent), members_(std::move(members)), rank_(rank) {
    Transport::setActivity(parent.activity());
  }
  // Failures are reported by the parent: it names what runs.
  void setActivity(const char* what) override {
    Transport::setActivity(what);
    parent_.setActivity(what);
  }

  int rank() const override { return rank_; }
  int size() const override { return int(members_.size()); }

  Status isend(int peer, uint64_t tag, const void* buf, size_t bytes, Handle* out) override {
    GC_CHECK(check(peer, "isend"));
    return parent_.isend(members_[size_t(peer)], tag, buf, bytes, out);
  }
  Status irecv(int peer, uint64_t tag, void* buf, size_t capacity, Handle* out) override {
    GC_CHECK(check(peer, "irecv"));
    return parent_.irecv(members_[size_t(peer)], tag, buf, capacity, out);
  }
  Status test(Handle h, bool* done, size_t* bytes) override { return parent_.test(h, done, bytes); }
  void progress() override { parent_.progress(); }
  Status waitAll(const Handle* handles, size_t n, size_t* bytes) override {
    WaitClock clock(*this);
    return parent_.waitAll(handles, n, bytes);
  }
  void cancel(Handle h) override { parent_.cancel(h); }

  PeerCounters counters(int peer) const override {
    return peer >= 0 && peer < size() ? parent_.counters(members_[size_t(peer)]) : PeerCounters{};
  }
  void resetCounters() override {}
  std::shared_ptr<FailureMonitor> failureMonitor() const override {
    return parent_.failureMonitor();
  }
  std::string route(int peer) const override {
    return peer >= 0 && peer < size() ? parent_.route(members_[size_t(peer)]) : "";
  }

 private:
  Status check(int peer, const char* op) const {
    GC_REQUIRE(peer >= 0 && peer < size(), Err::InvalidArgument,
               "%s: peer %d outside the group of %d ranks", op, peer, size());
    return Status::Ok();
  }
  Transport& parent_;
  std::vector<int> members_;
  int rank_;
};

}  // namespace

Status makeGroupView(Transport& parent, std::vector<int> members, std::unique_ptr<Transport>* out) {
  const auto me = std::find(members.begin(), members.end(), parent.rank());
  GC_REQUIRE(me != members.end(), Err::InvalidArgument,
             "group view: rank %d is not among the %zu members", parent.rank(), members.size());
  std::vector<int> sorted = members;
  std::sort(sorted.begin(), sorted.end());
  GC_REQUIRE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end() &&
                 (sorted.empty() || (sorted.front() >= 0 && sorted.back() < parent.size())),
             Err::InvalidArgument, "group view: members must be distinct ranks < %d",
             parent.size());
  const int rank = int(me - members.begin());
  *out = std::make_unique<GroupView>(parent, std::move(members), rank);
  return Status::Ok();
}

}  // namespace gradcomp::transport
