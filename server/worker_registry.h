#pragma once

// The workers cartd knows (docs/design.md "Placement"): what each registered, whether it was
// asked to drain, when it was last seen, and how fast it trains. It owns the two rules every
// view of the fleet shares:
// - liveness: a worker is lost once it has not been seen for a lease TTL plus the longest long
//   poll (a worker in a long poll is seen when it asks, and asks again within that);
// - speed, as a multiple of an RTX 3090: the one the worker reports; else the one measured from
//   its own runs' tokens/s; else the one measured on another worker of its device; else its
//   card's peak relative to a 3090; else a guess that its first run's measurement replaces.
//
// Thread-safety: none of its own. The Scheduler owns one and calls it under its mutex, as
// LevelDB's DBImpl does its VersionSet.

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "config/accounting.h"
#include "server/placement.h"
#include "store/types.h"

namespace cart::server {

// A worker as it registers (Scheduler::RegisterWorker). Memory in bytes.
struct WorkerInfo {
  std::string id;  // stable per box and device, e.g. "labbox3-gpu0"
  std::string hostname;
  std::string version;       // cart-worker version
  std::string device_kind;   // "cuda" or "cpu"
  std::string device_name;   // e.g. "NVIDIA GeForce RTX 3090"
  int device_index = 0;      // CUDA's index of the card on its box; 0 for the CPU
  int64_t memory_bytes = 0;  // the device's
  // Kept back from memory_bytes (config::UsableMemoryBytes); negative: the default reserve. Runs
  // are placed and fitted into memory_bytes minus the reserve, which is also what the store
  // records as the worker's memory.
  int64_t memory_reserve_bytes = -1;
  int64_t free_disk_bytes = 0;  // in its cache directory, at registration and at each ask
  // The worker's own floor (cart-worker --min-free-disk-mib), from its asks; 0: none. Below it
  // the worker is disk_full: cartd hands it no job until its free space is back above.
  int64_t disk_floor_bytes = 0;
  bool DiskFull() const { return disk_floor_bytes > 0 && free_disk_bytes < disk_floor_bytes; }
  // Training speed as a multiple of an RTX 3090, as the worker reports it (cart-worker
  // --speed-factor: tests and replays); 0: not reported, cartd measures it.
  double speed_factor = 0;
  std::string uuid;  // the device's NVML UUID; empty for a CPU
  // Its training step's kernels, as the memory estimate counts them (config::MemoryKernels): the
  // LibTorch major version it reported (0: not said) and whether it merges projections.
  int libtorch_major = 0;
  bool merged_projections = false;
};

// The kernels cartd fits a worker's micro-batches with: what it reported, LibTorch 1.x's (the
// larger estimate) when it said nothing (a release before the field, or a worker known only from
// the store after a restart, until it registers again).
config::MemoryKernels KernelsOf(const WorkerInfo& info);

// What a worker's device is called: its name, or its kind ("cpu") when it reported none. The
// store records workers by it and measured speeds are kept per it.
std::string DeviceLabel(const WorkerInfo& info);

class WorkerRegistry {
 public:
  struct Worker {
    WorkerInfo info;  // memory_bytes usable (the reserve taken off)
    bool draining = false;
    int64_t last_seen_us = 0;
    double speed = 0;          // × an RTX 3090, what placement uses
    std::string speed_source;  // "reported", "measured", "measured on <device>", "card peak",
                               // "guess"
    bool measured = false;     // speed comes from its own runs' tokens/s
  };

  // `lost_after`: how long unseen before a worker counts as lost (lease TTL + longest poll).
  explicit WorkerRegistry(absl::Duration lost_after);

  // A worker the store knew before a restart: it may acquire again without re-registering.
  void Restore(const store::WorkerRecord& record);
  // Registers `usable` (memory already less its reserve), or registers it again: no longer
  // draining, seen at `now_us`, its speed chosen afresh unless measured.
  void Register(const WorkerInfo& usable, int64_t now_us);

  // nullptr for an unregistered worker. Valid until the next Register or Restore.
  Worker* Find(const std::string& id);
  const Worker* Find(const std::string& id) const;
  bool empty() const { return workers_.empty(); }
  const std::map<std::string, Worker>& all() const { return workers_; }

  // The worker `id` was heard from at `now_us` (an ask, a stream, a heartbeat of its run); no-op
  // for an unregistered one. The registry's time is the one every view of liveness reads.
  void Seen(const std::string& id, int64_t now_us);
  // Whether a worker last seen at `last_seen_us` is lost at `now_us`.
  bool Lost(int64_t last_seen_us, int64_t now_us) const;
  // Whether a live worker that is not draining registered as `device_class` (DeviceLabel).
  bool HasLiveOfClass(const std::string& device_class, int64_t now_us) const;
  // The largest registered device's usable memory; nullopt with no worker.
  std::optional<int64_t> MaxMemory() const;

  // The live workers placement plans onto (not draining, not lost, not idle with a full disk),
  // each free after its
  // `busy_hours` (by worker id; a worker listed there counts as live however long unseen);
  // `asker` is included whatever its state.
  std::vector<PlacementWorker> Fleet(int64_t now_us, const std::string& asker,
                                     const std::map<std::string, double>& busy_hours) const;
  // The usable memory of each live worker that drains not and holds none of `holding`.
  std::vector<int64_t> FreeMemory(int64_t now_us, const std::set<std::string>& holding) const;
  // The live workers holding none of `holding` (idle-time accounting).
  std::set<std::string> Idle(int64_t now_us, const std::set<std::string>& holding) const;

  // Folds one run's measured speed (× an RTX 3090) into its worker's and its device's: the
  // first measurement whole, later ones as a moving average, so that one run's warm-up or a
  // throttled spell does not swing it. A speed the worker reports wins and is left alone.
  void MeasureSpeed(const std::string& worker_id, double measured);

 private:
  std::pair<double, std::string> SpeedFor(const WorkerInfo& info, const Worker* known) const;

  const int64_t lost_after_us_;
  std::map<std::string, Worker> workers_;
  // Measured speed per device label: a new worker of a known kind starts there.
  std::map<std::string, double> device_speed_;
};

}  // namespace cart::server
