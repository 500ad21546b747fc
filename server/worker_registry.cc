// The workers cartd knows, their speeds and the one liveness rule (server/worker_registry.h).

#include "server/worker_registry.h"

#include <algorithm>

#include "common/strings.h"
#include "config/devices.h"

namespace cart::server {

std::string DeviceLabel(const WorkerInfo& info) {
  return info.device_name.empty() ? info.device_kind : info.device_name;
}

config::MemoryKernels KernelsOf(const WorkerInfo& info) {
  config::MemoryKernels k;
  k.libtorch_major = info.libtorch_major > 0 ? info.libtorch_major : 1;
  k.cuda = info.device_kind == "cuda";
  k.merged_projections = info.merged_projections;
  return k;
}

WorkerRegistry::WorkerRegistry(absl::Duration lost_after)
    : lost_after_us_(absl::ToInt64Microseconds(lost_after)) {}

void WorkerRegistry::Restore(const store::WorkerRecord& record) {
  Worker& worker = workers_[record.id];
  worker.info.id = record.id;
  worker.info.device_name = record.device;
  worker.info.memory_bytes = record.memory_bytes;
  worker.last_seen_us = record.last_seen_us;
  std::tie(worker.speed, worker.speed_source) = SpeedFor(worker.info, nullptr);
}

void WorkerRegistry::Register(const WorkerInfo& usable, int64_t now_us) {
  auto [speed, source] = SpeedFor(usable, Find(usable.id));
  Worker& w = workers_[usable.id];
  w.info = usable;
  w.draining = false;
  w.last_seen_us = now_us;
  w.speed = speed;
  w.speed_source = std::move(source);
}

WorkerRegistry::Worker* WorkerRegistry::Find(const std::string& id) {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : &it->second;
}

const WorkerRegistry::Worker* WorkerRegistry::Find(const std::string& id) const {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : &it->second;
}

void WorkerRegistry::Seen(const std::string& id, int64_t now_us) {
  if (Worker* w = Find(id); w != nullptr) w->last_seen_us = std::max(w->last_seen_us, now_us);
}

bool WorkerRegistry::Lost(int64_t last_seen_us, int64_t now_us) const {
  return now_us - last_seen_us > lost_after_us_;
}

std::optional<int64_t> WorkerRegistry::MaxMemory() const {
  std::optional<int64_t> max;
  for (const auto& [id, worker] : workers_) {
    if (!max || worker.info.memory_bytes > *max) max = worker.info.memory_bytes;
  }
  return max;
}

std::vector<PlacementWorker> WorkerRegistry::Fleet(
    int64_t now_us, const std::string& asker,
    const std::map<std::string, double>& busy_hours) const {
  std::vector<PlacementWorker> fleet;
  for (const auto& [id, w] : workers_) {
    const auto busy = busy_hours.find(id);
    // Idle workers count while they poll; draining or silent ones take nothing, nor does an
    // idle one whose disk is full (it polls, but is handed nothing until it has room).
    const bool idle = busy == busy_hours.end();
    if (id != asker &&
        (w.draining || (idle && (Lost(w.last_seen_us, now_us) || w.info.DiskFull())))) {
      continue;
    }
    PlacementWorker p;
    p.id = id;
    p.device = DeviceLabel(w.info);
    p.memory_bytes = w.info.memory_bytes;
    p.speed = w.speed;
    p.free_in_hours = busy == busy_hours.end() ? 0 : busy->second;
    fleet.push_back(std::move(p));
  }
  return fleet;
}

bool WorkerRegistry::HasLiveOfClass(const std::string& device_class, int64_t now_us) const {
  for (const auto& [id, w] : workers_) {
    if (DeviceLabel(w.info) == device_class && !w.draining && !Lost(w.last_seen_us, now_us)) {
      return true;
    }
  }
  return false;
}

std::vector<int64_t> WorkerRegistry::FreeMemory(int64_t now_us,
                                                const std::set<std::string>& holding) const {
  std::vector<int64_t> free;
  for (const auto& [id, w] : workers_) {
    if (w.draining || holding.count(id) || Lost(w.last_seen_us, now_us)) continue;
    free.push_back(w.info.memory_bytes);
  }
  return free;
}

std::set<std::string> WorkerRegistry::Idle(int64_t now_us,
                                           const std::set<std::string>& holding) const {
  std::set<std::string> idle;
  for (const auto& [id, w] : workers_) {
    if (!holding.count(id) && !Lost(w.last_seen_us, now_us)) idle.insert(id);
  }
  return idle;
}

void WorkerRegistry::MeasureSpeed(const std::string& worker_id, double measured) {
  Worker* worker = Find(worker_id);
  if (worker == nullptr || worker->info.speed_factor > 0) return;  // reported speeds win
  worker->speed = worker->measured ? 0.8 * worker->speed + 0.2 * measured : measured;
  worker->measured = true;
  worker->speed_source = "measured";
  auto [it, fresh] = device_speed_.try_emplace(DeviceLabel(worker->info), measured);
  if (!fresh) it->second = 0.8 * it->second + 0.2 * measured;
}

std::pair<double, std::string> WorkerRegistry::SpeedFor(const WorkerInfo& info,
                                                        const Worker* known) const {
  if (info.speed_factor > 0) return {info.speed_factor, "reported"};
  if (known != nullptr && known->measured) return {known->speed, known->speed_source};
  const std::string device = DeviceLabel(info);
  if (auto it = device_speed_.find(device); it != device_speed_.end()) {
    return {it->second, StrCat("measured on ", device)};
  }
  if (std::optional<double> peak = config::PeakSpeedRelativeTo3090(info.device_name);
      peak && info.device_kind != "cpu") {
    return {*peak, "card peak"};
  }
  // No figure for this device (a CPU, an unlisted card): its first run's tokens/s replaces this.
  return {info.device_kind == "cpu" ? 0.01 : 0.5, "guess"};
}

}  // namespace cart::server
