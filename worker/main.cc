// cart-worker: one per GPU (or CPU). See worker/worker.h.

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdlib>
#include <iostream>

#include "common/process.h"
#include "common/strings.h"
#include "common/version.h"
#include "rpc/client.h"
#include "train/device.h"
#include "worker/worker.h"

namespace {
std::atomic<bool> g_shutdown{false};
// The first SIGTERM/SIGINT hands the current run back (bounded by --shutdown-grace-s); a second
// one exits at once, as a person pressing Ctrl-C twice expects. Nothing acknowledged is lost
// either way: cartd resumes the run from its last acknowledged checkpoint.
void OnSignal(int) {
  if (g_shutdown.exchange(true)) std::_Exit(130);
}
}  // namespace

int main(int argc, char** argv) {
  // CUDA numbers devices fastest-first by default, NVML by PCI bus: make --device cuda:N mean the
  // same GPU to both (unless the user set an order).
  setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", /*overwrite=*/0);
  // Before any CUDA allocation: expandable segments, unless the user configured the allocator.
  cart::train::ConfigureCudaAllocator();
  CLI::App app{"cart-worker: trains the runs cartd hands it, one device per process",
               "cart-worker"};
  app.set_version_flag("--version", std::string("cart-worker ") + cart::kVersion);
  cart::worker::WorkerConfig config;
  cart::rpc::ClientConfig flags = cart::rpc::ClientFlags();
  std::string config_file = cart::rpc::DefaultConfigPath();
  app.add_option("--server", flags.server, "cartd address host:port (env CART_SERVER)");
  app.add_option("--token", flags.token, "Bearer token with the worker role (env CART_TOKEN)");
  app.add_option("--tls-ca", flags.tls_ca,
                 "CA certificate (PEM) to verify cartd (env CART_TLS_CA)");
  app.add_option("--tls-server-name", flags.tls_server_name,
                 "Expected name in cartd's certificate");
  app.add_option("--client-config", config_file, "Client config file (written by `cart up`)");
  app.add_option("--worker-id", config.worker_id,
                 "Stable id of this worker (default host-device); $(NAME) is replaced by "
                 "environment variable NAME, as Kubernetes does, for runtimes that do not "
                 "(podman kube play)");
  app.add_option("--device", config.device,
                 "auto | cpu | cuda | cuda:N (auto: cuda:0 when LibTorch can use CUDA, else cpu)")
      ->capture_default_str();
  app.add_option("--cache-dir", config.cache_dir, "Run directories and downloaded checkpoints")
      ->capture_default_str();
  app.add_option("--threads", config.threads, "CPU threads for training (0: the run's setting)");
  app.add_option("--memory-mib", config.memory_mib,
                 "Report this much device memory (MiB) instead of the real amount");
  app.add_option("--memory-reserve-mib", config.memory_reserve_mib,
                 "Device memory (MiB) cartd keeps free of runs: CUDA context, cuBLAS workspace, a "
                 "desktop (default: cartd's, max(1 GiB, 10 %); 0: none)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  app.add_option("--speed-factor", config.speed_factor,
                 "Report this training speed (a multiple of an RTX 3090) to cartd's placement "
                 "instead of letting it measure the runs (0: measure; for tests and replays)")
      ->check(CLI::Range(0.0, 1000.0));
  app.add_option("--stand-in-for", config.stand_in_for,
                 "Register under this device name, standing in for another card, while training "
                 "on the real device (tests of device classes; the environment record says so)");
  app.add_option("--peak-tflops", config.peak_tflops,
                 "The device's peak TFLOP/s that runs' MFU divides by (0: the card's from its "
                 "name, bf16 or fp32 by the run's precision; on a CPU, measured at start)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option(
         "--python", config.python,
         "Python with torch, transformers and lm-eval, which runs the lm-evaluation-harness "
         "tasks of eval jobs (env CART_PYTHON; docs/huggingface.md)")
      ->envname("CART_PYTHON")
      ->capture_default_str();
  app.add_option(
         "--connect-timeout-s", config.connect_timeout_s,
         "Seconds to keep trying to reach cartd (at start, or after losing it) before "
         "exiting with an error naming its address; 0: for ever (env CART_CONNECT_TIMEOUT_S)")
      ->envname("CART_CONNECT_TIMEOUT_S")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-jobs", config.max_jobs, "Exit after this many jobs (0: no limit)");
  app.add_flag("--exit-when-idle", config.exit_when_idle, "Exit when no job is waiting");
  app.add_option("--acquire-wait-ms", config.acquire_wait_ms, "Long-poll length, ms")
      ->capture_default_str();
  app.add_option("--shutdown-grace-s", config.shutdown_grace_s,
                 "After SIGTERM, seconds to hand the current run back before giving up on "
                 "what is undelivered (cartd then resumes it from its last checkpoint)")
      ->capture_default_str()
      ->check(CLI::Range(0, 86'400));
  app.add_option("--space-wait-s", config.space_wait_s,
                 "Seconds a final checkpoint that cartd refuses for space (its disk floor or "
                 "quota) is retried before the attempt fails with cartd's reason")
      ->capture_default_str()
      ->check(CLI::Range(0, 86'400));
  app.add_option("--min-free-disk-mib", config.min_free_disk_mib,
                 "Free space (MiB) the cache directory must keep: below it the worker takes no "
                 "job until there is room, and a run that fails for want of room is handed back "
                 "without counting an attempt (0: no floor)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  app.add_option("--shared-artifacts", config.shared_artifacts,
                 "Where this box mounts cartd's shared artifact store (artifact_store: kind "
                 "shared_fs), when not at the path cartd names; 'off': always upload and "
                 "download through cartd (docs/design.md \"Storage\")");
  app.add_flag("--upload-inline", config.upload_inline,
               "Make training wait for each checkpoint's upload instead of uploading in the "
               "background (for measuring the difference: bench/checkpoint_upload.sh)");
  app.add_flag("--write-checkpoints-inline", config.write_inline,
               "Make the training loop write each checkpoint to local disk itself instead of "
               "serializing it into memory for a thread to write (for measuring the difference: "
               "bench/checkpoint_upload.sh)");
  app.add_flag("--cuda-graph", config.cuda_graph,
               "Record each training run's step as a CUDA graph after its first steps and replay "
               "it (one launch instead of thousands; needs a CUDA LibTorch 2.4+). Off by default: "
               "no GPU has measured it yet (docs/gpu.md \"CUDA graphs\")");
  app.add_option("--sample-interval", config.sample_interval_s,
                 "Seconds between two readings of the device (utilisation, memory, temperature, "
                 "power, clocks; CPU use on a CPU) sent to cartd, running or idle (0: none)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 3600.0));
  CLI11_PARSE(app, argc, argv);

  absl::StatusOr<cart::rpc::ClientConfig> client =
      cart::rpc::ResolveClientConfig(flags, config_file);
  if (!client.ok()) {
    std::cerr << "cart-worker: " << cart::Message(client.status()) << "\n";
    return 2;
  }
  config.client = *client;
  // Left for us where the runtime did not expand it (podman kube play leaves "k8s-$(POD_NAME)").
  absl::StatusOr<std::string> worker_id = cart::ExpandEnvReferences(config.worker_id);
  if (!worker_id.ok()) {
    std::cerr << "cart-worker: --worker-id " << cart::Message(worker_id.status()) << "\n";
    return 2;
  }
  config.worker_id = *worker_id;
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  absl::Status s = cart::worker::RunWorker(config, g_shutdown);
  if (!s.ok()) {
    std::cerr << "cart-worker: " << cart::Message(s) << "\n";
    return s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  return 0;
}
