#pragma once

// What cartd knows of each worker's device between runs and during them: the readings its
// heartbeat sends (worker.proto ReportDevice), a short history of them for the dashboard's
// sparklines, and how long the device sat idle while runs were queued (docs/design.md "Watching
// the fleet"). Kept in memory only: a restarted cartd starts the history and the idle counters
// afresh, which Prometheus's counters and the dashboard's sparklines both take in their stride.
//
// Thread-safety: every method may be called from any thread (its own mutex).

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace cart::server {

// One reading of a device (worker.proto DeviceSample, in bytes and hertz).
struct DeviceSample {
  int64_t at_us = 0;       // Unix time
  double utilization = 0;  // 0..1
  int64_t memory_used_bytes = 0;
  int64_t memory_total_bytes = 0;
  std::optional<double> temperature_c;
  std::optional<double> power_w;
  std::optional<double> sm_clock_hz;
  std::optional<double> memory_clock_hz;
  std::optional<uint64_t> throttle_reasons;  // NVML's bit mask
  double process_cpu_percent = 0;
  int64_t process_rss_bytes = 0;
};

// NVML's clock throttle reasons that slow a card down, by the names /metrics labels them with
// (the idle and application-clock bits are left out: they are not slowdowns).
struct ThrottleReason {
  uint64_t bit;
  const char* name;
};
inline constexpr ThrottleReason kThrottleReasons[] = {
    {0x4, "sw_power_cap"}, {0x8, "hw_slowdown"},     {0x20, "sw_thermal"},
    {0x40, "hw_thermal"},  {0x80, "hw_power_brake"},
};

class FleetWatch {
 public:
  // History kept per device: this long, and at most this many readings.
  static constexpr int64_t kHistoryUs = int64_t{15} * 60 * 1'000'000;
  static constexpr size_t kMaxHistory = 1000;

  struct Device {
    std::vector<DeviceSample> history;  // oldest first; the last is the latest
    double idle_while_queued_s = 0;
    bool idle_while_queued = false;  // at the last accounting tick
  };

  // Adds a worker's readings (oldest first); ones not newer than its latest are skipped (a
  // resend). Returns how many were added.
  int Record(const std::string& worker_id, const std::vector<DeviceSample>& samples);
  // One accounting tick: each worker in `idle` held no run while runs were queued for the last
  // `dt_us`; every other worker's idle flag clears.
  void AccountIdle(const std::set<std::string>& idle, int64_t dt_us);
  // Every device seen, by worker id; with the history or only its latest reading.
  std::map<std::string, Device> Devices(bool with_history) const;

 private:
  struct State {
    std::deque<DeviceSample> history;
    double idle_while_queued_s = 0;
    bool idle_while_queued = false;
  };
  mutable absl::Mutex mu_;
  std::map<std::string, State> devices_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cart::server
