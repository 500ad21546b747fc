#pragma once

// One attempt of one run on this worker: the trainer or the evaluation, run on the calling
// thread, their metrics, log lines and checkpoints (uploaded here) posted to the attempt's
// channel (worker/attempt_channel.h), which holds the RunJob stream, heartbeats and controls.

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "cart/v1/worker.grpc.pb.h"
#include "rpc/client.h"
#include "worker/energy_meter.h"
#include "worker/system_metrics.h"

namespace cart::data {
class FileHashCache;
}

namespace cart::worker {

struct JobEnvironment {
  rpc::ClientConfig client;
  cart::v1::WorkerService::Stub* stub = nullptr;
  std::string worker_id;
  std::string cache_dir;
  int64_t heartbeat_interval_ms = 5000;
  int64_t threads = 0;
  size_t metric_buffer_points = 1'000'000;
  // The LibTorch device runs train on (train/device.h): "cpu" or "cuda:N". cart-worker sets
  // CUDA_DEVICE_ORDER=PCI_BUS_ID so that N is the NVML index too.
  std::string torch_device = "cpu";
  // Machine metrics logged next to each training loss ("sys/..."); empty: none. cart-worker
  // samples SystemMetrics; tests give their own.
  std::function<std::map<std::string, double>()> sample_system;
  // Makes each attempt's energy meter (worker/energy_meter.h), started as the attempt starts;
  // empty: energy not measured.
  std::function<std::unique_ptr<EnergyMeter>()> energy_meter;
  // After `shutdown` turns true the job has this long to hand its run back (stop after a
  // checkpoint, upload it, deliver metrics and the result). Past it the worker gives up on
  // whatever is still undelivered and returns: cartd's lease lapses and the run resumes from its
  // last acknowledged checkpoint elsewhere, so nothing acknowledged is lost.
  int64_t shutdown_grace_ms = 120'000;
  // Model FLOPs utilisation, logged as "mfu" beside each tokens_per_s (config::Mfu). The device's
  // peak in TFLOP/s: `peak_tflops` when > 0 (cart-worker --peak-tflops, or a CPU's fp32 peak the
  // worker measured at start); else, on a GPU, its card's from `device_name` (config::PeakOf,
  // bf16 or fp32 by the run's precision); else no mfu is logged.
  double peak_tflops = 0;
  std::string python = "python3";  // runs lm-evaluation-harness (WorkerConfig::python)
  std::string device_name;
  // The device as the worker registered it, GPU fields from NVML: its part of each attempt's
  // environment record (worker/environment.h).
  DeviceDescription device;
  // Data lineage (worker/data_lineage.h) hashes each data file once per content through this
  // cache, which lives as long as the worker; null: no cache (every attempt hashes).
  data::FileHashCache* hash_cache = nullptr;
  // Checkpoints are uploaded in the background while training goes on
  // (worker/checkpoint_uploader.h); `upload_inline`: the training thread waits for each upload
  // instead (cart-worker
  // --upload-inline: the behaviour before background uploads, for measuring them).
  bool upload_inline = false;
  // The training loop only serializes each checkpoint into memory and a thread writes it to disk
  // (train::TrainOptions::background_checkpoints); `write_inline`: the loop writes it itself
  // (cart-worker --write-checkpoints-inline, as before, for measuring the difference).
  bool write_inline = false;
  // Training runs record their step as a CUDA graph and replay it (train::TrainOptions::cuda_graph;
  // cart-worker --cuda-graph, off by default).
  bool cuda_graph = false;
  // How long a final checkpoint cartd refuses for space is retried before the attempt fails.
  int64_t space_wait_ms = 600'000;
  // The worker's own disk floor (WorkerConfig::min_free_disk_mib): an attempt that fails while
  // the cache directory has less free is handed back as the disk's fault, not the run's.
  int64_t min_free_disk_mib = 0;
  // Where this box mounts cartd's shared artifact store (worker/shared_store.h; cart-worker
  // --shared-artifacts): empty, at the path cartd names; "off": never write or read it directly.
  std::string shared_store_mount;
};

struct JobEnd {
  cart::v1::JobResult::Outcome outcome = cart::v1::JobResult::OUTCOME_UNSPECIFIED;
  bool fenced = false;   // cartd rejected our attempt number: someone else owns the run
  bool gave_up = false;  // the shutdown grace ran out before the result was delivered
  bool drain_requested = false;
  bool preempted = false;  // stopped at a checkpoint for other work; the worker asks again
  // Handed back (DRAINED) because this worker's disk is full: the worker frees what it can and
  // takes no job until it has room.
  bool no_space = false;
  std::string error;
  // FAILED on a non-finite loss: where (cartd then fails the run without retrying it).
  std::optional<cart::v1::Divergence> diverged;
};

// Runs `job` to its end. `shutdown` (SIGTERM) stops training after a checkpoint (DRAINED), within
// env.shutdown_grace_ms. A report cartd refuses as invalid (INVALID_ARGUMENT: sending it again
// cannot help) ends the attempt FAILED with cartd's reason instead of being resent for ever.
JobEnd RunJob(const JobEnvironment& env, const cart::v1::Job& job,
              const std::atomic<bool>& shutdown);

// Downloads artifact `sha256` into `path` from cartd (verifying the hash), unless `path` already
// holds it.
absl::Status FetchArtifact(cart::v1::WorkerService::Stub& stub, const rpc::ClientConfig& client,
                           const std::string& sha256, const std::string& path);
// Asks cartd to record a blob this worker wrote into its shared store (RecordArtifact), or with
// `check_only` whether one of `size_bytes` would have room before it is written.
absl::Status RecordSharedArtifact(cart::v1::WorkerService::Stub& stub,
                                  const rpc::ClientConfig& client, const std::string& sha256,
                                  int64_t size_bytes, bool check_only);
// Uploads the file at `path`; returns its sha256.
absl::StatusOr<std::string> UploadArtifact(cart::v1::WorkerService::Stub& stub,
                                           const rpc::ClientConfig& client,
                                           const std::string& path);

}  // namespace cart::worker
