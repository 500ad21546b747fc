#include "server/fleet.h"

namespace cart::server {

int FleetWatch::Record(const std::string& worker_id, const std::vector<DeviceSample>& samples) {
  absl::MutexLock lock(&mu_);
  State& state = devices_[worker_id];
  int added = 0;
  for (const DeviceSample& s : samples) {
    if (!state.history.empty() && s.at_us <= state.history.back().at_us) continue;
    state.history.push_back(s);
    ++added;
  }
  if (!state.history.empty()) {
    const int64_t oldest = state.history.back().at_us - kHistoryUs;
    while (state.history.size() > kMaxHistory ||
           (state.history.size() > 1 && state.history.front().at_us < oldest)) {
      state.history.pop_front();
    }
  }
  return added;
}

void FleetWatch::AccountIdle(const std::set<std::string>& idle, int64_t dt_us) {
  absl::MutexLock lock(&mu_);
  for (const std::string& id : idle) devices_[id];  // a worker idle before its first reading
  for (auto& [id, state] : devices_) {
    state.idle_while_queued = idle.count(id) > 0;
    if (state.idle_while_queued && dt_us > 0) state.idle_while_queued_s += dt_us / 1e6;
  }
}

std::map<std::string, FleetWatch::Device> FleetWatch::Devices(bool with_history) const {
  absl::MutexLock lock(&mu_);
  std::map<std::string, Device> out;
  for (const auto& [id, state] : devices_) {
    Device& d = out[id];
    d.idle_while_queued_s = state.idle_while_queued_s;
    d.idle_while_queued = state.idle_while_queued;
    if (with_history) {
      d.history.assign(state.history.begin(), state.history.end());
    } else if (!state.history.empty()) {
      d.history.push_back(state.history.back());
    }
  }
  return out;
}

}  // namespace cart::server
