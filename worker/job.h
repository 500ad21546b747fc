#pragma once

// One attempt of one run on this worker: the RunJob stream, the trainer thread, metric and
// checkpoint upload, heartbeats and controls.

#include <atomic>
#include <memory>
#include <string>

#include "cart/v1/worker.grpc.pb.h"
#include "rpc/client.h"
#include "worker/system_metrics.h"

namespace cart::worker {

struct JobEnvironment {
  rpc::ClientConfig client;
  cart::v1::WorkerService::Stub* stub = nullptr;
  std::string worker_id;
  std::string cache_dir;
  int64_t heartbeat_interval_ms = 5000;
  int64_t threads = 0;
  size_t metric_buffer_points = 1'000'000;
  int gpu_index = -1;  // NVML index for system metrics; -1: CPU only
  // The LibTorch device runs train on (train/device.h): "cpu" or "cuda:N". cart-worker sets
  // CUDA_DEVICE_ORDER=PCI_BUS_ID so that N is the NVML index too.
  std::string torch_device = "cpu";
  SystemMetrics* system = nullptr;
};

struct JobEnd {
  cart::v1::JobResult::Outcome outcome = cart::v1::JobResult::OUTCOME_UNSPECIFIED;
  bool fenced = false;  // cartd rejected our attempt number: someone else owns the run
  bool drain_requested = false;
  std::string error;
};

// Runs `job` to its end. `shutdown` (SIGTERM) stops training after a checkpoint (DRAINED).
JobEnd RunJob(const JobEnvironment& env, const cart::v1::Job& job,
              const std::atomic<bool>& shutdown);

// Downloads artifact `sha256` into `path` (verifying the hash), unless `path` already holds it.
absl::Status FetchArtifact(cart::v1::WorkerService::Stub& stub, const rpc::ClientConfig& client,
                           const std::string& sha256, const std::string& path);
// Uploads the file at `path`; returns its sha256.
absl::StatusOr<std::string> UploadArtifact(cart::v1::WorkerService::Stub& stub,
                                           const rpc::ClientConfig& client,
                                           const std::string& path);

}  // namespace cart::worker
