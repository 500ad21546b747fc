#pragma once

// cart-worker: registers one device with cartd, leases jobs that fit it, trains them with
// train::Train, streams metrics and checkpoints back, and obeys cancel and drain.

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "rpc/client.h"

namespace cart::worker {

struct WorkerConfig {
  rpc::ClientConfig client;
  std::string worker_id;                 // default "<hostname>-<device>", e.g. "labbox3-cuda0"
  std::string device = "auto";           // auto | cpu | cuda:N
  std::string cache_dir = "var/worker";  // run directories and downloaded checkpoints
  int64_t threads = 0;     // CPU threads for training; 0: the run config's / all cores
  int64_t memory_mib = 0;  // report this much device memory instead of the real amount
  // Memory cartd keeps free of runs on this device (config::DefaultMemoryReserveBytes); negative:
  // cartd's default, max(1 GiB, 10 %).
  int64_t memory_reserve_mib = -1;
  // Report this training speed (× an RTX 3090) instead of letting cartd measure it; 0: measure.
  double speed_factor = 0;
  // Register under this device name instead of the device's own, standing in for another card
  // (tests of device classes, docs/architecture.md "Device classes"); training still runs on the
  // real device, and each attempt's environment record says so. Empty: the device's name.
  std::string stand_in_for;
  // The device's peak TFLOP/s that runs' MFU divides by; 0: the card's from its name (config/
  // devices.h), or on a CPU the fp32 matmul rate measured at start.
  double peak_tflops = 0;
  // The Python that runs lm-evaluation-harness for eval jobs naming lm_eval tasks (hf/harness.h):
  // one with torch, transformers and lm-eval, as deploy/install-torch2.sh installs them.
  std::string python = "python3";
  // How long the worker keeps trying to reach cartd, at start or after losing it, before it exits
  // with an error naming the address (a batch job then ends instead of holding its allocation
  // idle); it says what it is waiting for every 30 s meanwhile. 0: for ever.
  int64_t connect_timeout_s = 0;
  int64_t max_jobs = 0;                     // exit after this many jobs; 0: no limit
  bool exit_when_idle = false;              // exit when an acquire returns no job (scripts, tests)
  int64_t acquire_wait_ms = 10'000;         // long-poll length
  size_t metric_buffer_points = 1'000'000;  // unacknowledged points held before training waits
  int64_t shutdown_grace_s = 120;           // after SIGTERM, time to hand the current run back
  // A final checkpoint cartd refuses for space is retried this long, then the attempt fails.
  int64_t space_wait_s = 600;
  // Free space (MiB) the cache directory must keep: below it the worker takes no job (cartd is
  // told, and shows the worker as disk_full) until there is room again; an attempt that fails
  // for want of room is handed back without counting (docs/design.md "A worker's disk fills").
  int64_t min_free_disk_mib = 1024;
  bool upload_inline = false;  // wait for each checkpoint's upload (JobEnvironment)
  bool write_inline = false;   // the training loop writes each checkpoint itself (JobEnvironment)
  bool cuda_graph = false;     // record each training step as a CUDA graph (JobEnvironment)
  // Where this box mounts cartd's shared artifact store; empty: at cartd's path; "off": never.
  std::string shared_artifacts;
  // How often the device is read and reported to cartd, running or idle (worker/device_watch.h);
  // 0: never.
  double sample_interval_s = 5;
};

// Runs until `shutdown` becomes true (SIGTERM: the current job stops after a checkpoint and is
// requeued as DRAINED), a drain request is served, max_jobs is reached or (exit_when_idle) no job
// comes. Connection failures are retried with backoff; they are not errors. Returns an error only
// for bad configuration (unreadable TLS CA, a device spec or a device LibTorch, the CUDA runtime
// and NVML do not agree on: worker/device_choice.h) or a registration refused by cartd.
absl::Status RunWorker(const WorkerConfig& config, const std::atomic<bool>& shutdown);

}  // namespace cart::worker
