#include "plugin/nccl/comm_state.h"

#include "algorithms/auto/auto_algorithm.h"

namespace gradcomp::nccl {

std::vector<std::pair<int, algo::autosel::TunerReport>> autoReports(const CommState& state) {
  std::vector<std::pair<int, algo::autosel::TunerReport>> out;
  for (const auto& [rule, rt] : state.runtimes)
    if (const auto* t = algo::autosel::tunerOf(static_cast<const algo::Algorithm*>(rt->algorithm.get())))
      out.emplace_back(rule, t->report());
  return out;
}

CommRegistry& CommRegistry::instance() {
  // Leaked on purpose: NCCL calls may arrive from atexit handlers and other
  // threads after static destructors ran.
  static CommRegistry* registry = new CommRegistry();
  return *registry;
}

void CommRegistry::add(std::shared_ptr<CommState> state) {
  std::lock_guard<std::mutex> lock(mu_);
  live_[state->comm] = state;
  history_.push_back(std::move(state));
}

std::shared_ptr<CommState> CommRegistry::find(ncclComm_t comm) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(comm);
  return it == live_.end() ? nullptr : it->second;
}

std::shared_ptr<CommState> CommRegistry::remove(ncclComm_t comm) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(comm);
  if (it == live_.end()) return nullptr;
  auto state = it->second;
  live_.erase(it);
  return state;
}

std::vector<std::shared_ptr<CommState>> CommRegistry::history() const {
  std::lock_guard<std::mutex> lock(mu_);
  return history_;
}

}  // namespace gradcomp::nccl
