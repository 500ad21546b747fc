// cart-worker (worker/): registers with cartd, leases one job at a time, runs it through the
// attempt channel and says how each ended; job.cc trains or evaluates one attempt.

#include "worker/worker.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <optional>
#include <thread>

#include "cart/v1/worker.grpc.pb.h"
#include "common/status.h"
#include "common/strings.h"
#include "common/version.h"
#include "data/identity.h"
#include "train/device.h"
#include "train/trainer.h"
#include "worker/device_choice.h"
#include "worker/device_watch.h"
#include "worker/job.h"
#include "worker/system_metrics.h"

namespace cart::worker {
namespace {

std::string Hostname() {
  char buf[256] = {0};
  gethostname(buf, sizeof buf - 1);
  return buf;
}

void Say(const std::string& worker_id, const std::string& text) {
  std::cerr << "cart-worker[" << worker_id << "]: " << text << std::endl;
}

// How long cartd has not answered, said where it can be read (the worker's log: a batch job's
// output file) and bounded: every failed call reports here, every answered one resets it.
class Unreachable {
 public:
  Unreachable(std::string worker_id, std::string address, int64_t limit_s)
      : worker_id_(std::move(worker_id)), address_(std::move(address)), limit_s_(limit_s) {}

  // A call failed because cartd did not answer. Unavailable, naming the address, once the limit
  // has passed since the first of these failures.
  absl::Status Failed(const std::string& error) {
    const auto now = std::chrono::steady_clock::now();
    if (!since_) {
      since_ = now;
      said_ = now;
      Say(worker_id_, StrCat("cartd at ", address_, " does not answer (", error, "); retrying",
                             limit_s_ > 0 ? StrCat(" for up to ", limit_s_, " s") : std::string(),
                             " (--connect-timeout-s)"));
    }
    const int64_t waited = std::chrono::duration_cast<std::chrono::seconds>(now - *since_).count();
    if (limit_s_ > 0 && waited >= limit_s_) {
      return absl::UnavailableError(StrCat("cartd at ", address_, " did not answer for ", waited,
                                           " s (", error, "); giving up (--connect-timeout-s ",
                                           limit_s_, "). Is cartd running, and is ", address_,
                                           " its address as seen from ", Hostname(), "?"));
    }
    if (now - said_ >= std::chrono::seconds(30)) {
      said_ = now;
      Say(worker_id_, StrCat("cartd at ", address_, " still does not answer after ", waited, " s (",
                             error, ")"));
    }
    return absl::OkStatus();
  }

  // A call was answered.
  void Reached() {
    if (since_) {
      Say(worker_id_, StrCat("cartd at ", address_, " answers again"));
      since_.reset();
    }
  }

 private:
  const std::string worker_id_, address_;
  const int64_t limit_s_;
  std::optional<std::chrono::steady_clock::time_point> since_;
  std::chrono::steady_clock::time_point said_;
};

cart::v1::DeviceSample ToProto(const DeviceReading& r) {
  cart::v1::DeviceSample s;
  s.set_wall_time_us(r.wall_time_us);
  s.set_utilization(r.utilization);
  s.set_memory_used_mib(r.memory_used_mib);
  s.set_memory_total_mib(r.memory_total_mib);
  if (r.temperature_c) s.set_temperature_c(*r.temperature_c);
  if (r.power_w) s.set_power_w(*r.power_w);
  if (r.sm_clock_mhz) s.set_sm_clock_mhz(*r.sm_clock_mhz);
  if (r.memory_clock_mhz) s.set_memory_clock_mhz(*r.memory_clock_mhz);
  if (r.throttle_reasons) s.set_throttle_reasons(*r.throttle_reasons);
  s.set_process_cpu_percent(r.process_cpu_percent);
  s.set_process_rss_mib(r.process_rss_mib);
  return s;
}

const char* OutcomeName(cart::v1::JobResult::Outcome o) {
  return cart::v1::JobResult::Outcome_Name(o).c_str() + 8;  // without "OUTCOME_"
}

// Frees what the cache directory holds that cartd also keeps, while no job runs: the directories
// of ended attempts (every checkpoint in them was stored by cartd or belongs to an attempt that
// is over) and downloaded checkpoints (fetched again when needed). Returns a line saying what
// went, empty when nothing did. Only done below the disk floor: otherwise the last attempt's
// directory stays for `cart export <dir>`.
std::string Reclaim(const std::string& cache_dir) {
  namespace fs = std::filesystem;
  int64_t bytes = 0;
  int dirs = 0, files = 0;
  std::error_code ec;
  for (const char* sub : {"runs", "artifacts"}) {
    const fs::path root = fs::path(cache_dir) / sub;
    if (!fs::is_directory(root, ec)) continue;
    for (const fs::directory_entry& entry : fs::directory_iterator(root, ec)) {
      const bool dir = entry.is_directory(ec);
      if (!dir && entry.is_regular_file(ec)) bytes += static_cast<int64_t>(entry.file_size(ec));
      for (const fs::directory_entry& f : dir ? fs::recursive_directory_iterator(entry.path(), ec)
                                              : fs::recursive_directory_iterator()) {
        if (f.is_regular_file(ec)) bytes += static_cast<int64_t>(f.file_size(ec));
      }
      if (fs::remove_all(entry.path(), ec) > 0) ++(dir ? dirs : files);
    }
  }
  if (dirs == 0 && files == 0) return "";
  return StrCat("freed ", Fixed(bytes / 1048576.0, 1), " MiB: ", dirs,
                " run directories of ended attempts and ", files,
                " downloaded checkpoints (cartd keeps every checkpoint)");
}

}  // namespace

absl::Status RunWorker(const WorkerConfig& config, const std::atomic<bool>& shutdown) {
  SystemMetrics system;
  CART_ASSIGN_OR_RETURN(DeviceChoice choice, ChooseDevice(config.device, ProbeMachine(system)));
  DeviceDescription device = choice.description;
  const int gpu_index = choice.nvml_index;
  if (config.memory_mib > 0) device.memory_mib = config.memory_mib;
  device.stands_in_for = config.stand_in_for;
  const std::string& registered_name =
      config.stand_in_for.empty() ? device.name : config.stand_in_for;
  const std::string worker_id =
      config.worker_id.empty() ? StrCat(Hostname(), "-", device.kind,
                                        device.kind == "cuda" ? std::to_string(device.index) : "")
                               : config.worker_id;
  if (!choice.note.empty()) Say(worker_id, choice.note);
  std::error_code ec;
  std::filesystem::create_directories(config.cache_dir, ec);

  CART_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, rpc::MakeChannel(config.client));
  auto stub = cart::v1::WorkerService::NewStub(channel);

  cart::v1::RegisterWorkerRequest reg;
  reg.set_worker_id(worker_id);
  reg.set_hostname(Hostname());
  reg.mutable_device()->set_kind(device.kind);
  reg.mutable_device()->set_name(registered_name);
  reg.mutable_device()->set_index(device.index);
  reg.mutable_device()->set_memory_mib(device.memory_mib);
  if (config.memory_reserve_mib >= 0) {
    reg.mutable_device()->set_memory_reserve_mib(config.memory_reserve_mib);
  }
  reg.mutable_device()->set_speed_factor(config.speed_factor);
  reg.mutable_device()->set_uuid(device.uuid);
  const config::MemoryKernels kernels = train::KernelsOn(
      device.kind == "cuda" ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(device.index))
                            : c10::Device(c10::kCPU));
  reg.mutable_device()->set_libtorch_major(kernels.libtorch_major);
  reg.mutable_device()->set_merged_projections(kernels.merged_projections);
  reg.set_version(kVersion);
  reg.set_protocol(kWorkerProtocol);
  cart::v1::RegisterWorkerResponse timing;
  int64_t backoff_ms = 200;
  Unreachable unreachable(worker_id, config.client.server, config.connect_timeout_s);
  // Register, retrying while cartd is unreachable; a refusal (bad token, bad request) is final.
  while (true) {
    if (shutdown) return absl::OkStatus();
    reg.set_free_disk_mib(SystemMetrics::FreeDiskMib(config.cache_dir));
    grpc::ClientContext ctx;
    rpc::PrepareContext(ctx, config.client, 10'000);
    grpc::Status s = stub->RegisterWorker(&ctx, reg, &timing);
    if (s.ok()) break;
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE &&
        s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
      return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                          StrCat("cartd refused registration: ", s.error_message()));
    }
    CART_RETURN_IF_ERROR(unreachable.Failed(s.error_message()));
    std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
    backoff_ms = std::min<int64_t>(backoff_ms * 2, 5000);
  }
  unreachable.Reached();
  Say(worker_id,
      StrCat("registered ", device.kind, " '", registered_name, "'",
             config.stand_in_for.empty()
                 ? std::string()
                 : StrCat(" (standing in for it: trains on '", device.name, "')"),
             " with ", device.memory_mib, " MiB (reserve ",
             config.memory_reserve_mib >= 0 ? StrCat(config.memory_reserve_mib, " MiB")
                                            : std::string("cartd's default"),
             ") at ", config.client.server, " (",
             timing.protocol() > 0
                 ? StrCat("cartd ", timing.cartd_version(), ", worker protocol ", timing.protocol())
                 : std::string("a cartd of a release before worker protocol 2"),
             "; this worker speaks ", kWorkerProtocol, ")"));

  JobEnvironment env;
  env.client = config.client;
  env.stub = stub.get();
  env.worker_id = worker_id;
  env.cache_dir = config.cache_dir;
  data::FileHashCache hash_cache;
  env.hash_cache = &hash_cache;
  env.heartbeat_interval_ms =
      timing.heartbeat_interval_ms() > 0 ? timing.heartbeat_interval_ms() : 5000;
  env.threads = config.threads;
  env.metric_buffer_points = config.metric_buffer_points;
  env.torch_device = choice.torch_device;
  env.device_name = device.name;
  env.device = device;
  env.peak_tflops = config.peak_tflops;
  env.python = config.python;
  if (env.peak_tflops <= 0 && device.kind == "cpu") {
    // A CPU has no datasheet peak: its fp32 matmul rate at the thread count runs will use.
    train::UseThreads(config.threads > 0 ? static_cast<int>(config.threads)
                                         : static_cast<int>(std::thread::hardware_concurrency()));
    env.peak_tflops = train::MeasureCpuMatmulTflops();
    Say(worker_id, StrCat("CPU fp32 matmul peak ", Fixed(env.peak_tflops, 3),
                          " TFLOP/s measured (the MFU of its runs divides by it)"));
  }
  env.sample_system = [&system, gpu_index] { return system.Sample(gpu_index); };
  // Each attempt's energy from its device's counter: the card's (NVML) or the CPU packages'
  // (RAPL); a CPU worker on a GPU box (gpu_index < 0) reads RAPL.
  env.energy_meter = [&system, gpu_index] {
    return std::make_unique<EnergyMeter>(&system, gpu_index);
  };
  std::unique_ptr<DeviceWatch> watch;
  if (config.sample_interval_s > 0) {
    const int cores = config.threads > 0 ? static_cast<int>(config.threads)
                                         : static_cast<int>(std::thread::hardware_concurrency());
    watch = std::make_unique<DeviceWatch>(
        config.client, stub.get(), worker_id, reg.device(),
        static_cast<int64_t>(config.sample_interval_s * 1000),
        [&system, gpu_index, cores] { return ToProto(system.ReadDevice(gpu_index, cores)); });
    watch->Start();
  }
  env.shutdown_grace_ms = config.shutdown_grace_s * 1000;
  env.space_wait_ms = config.space_wait_s * 1000;
  env.upload_inline = config.upload_inline;
  env.write_inline = config.write_inline;
  env.cuda_graph = config.cuda_graph;
  env.shared_store_mount = config.shared_artifacts;

  env.min_free_disk_mib = config.min_free_disk_mib;

  int64_t jobs = 0;
  backoff_ms = 200;
  bool disk_full = false;  // below `needed_mib` at the last look (said once per change)
  // The free space this worker needs before it takes a job: its floor, or, after an attempt
  // that ran out of room, more than it had then by a floor's worth (at least 64 MiB), so that
  // a run needing more than the floor leaves is not taken and handed back over and over.
  int64_t needed_mib = config.min_free_disk_mib;
  while (!shutdown && (config.max_jobs == 0 || jobs < config.max_jobs)) {
    // Below it the worker still asks (cartd sees it alive and shows it as disk_full) but cartd
    // hands it nothing; it looks again before each ask.
    int64_t free_mib = SystemMetrics::FreeDiskMib(config.cache_dir);
    if (needed_mib > 0 && free_mib < needed_mib && !disk_full) {
      if (std::string freed = Reclaim(config.cache_dir); !freed.empty()) {
        Say(worker_id, freed);
        free_mib = SystemMetrics::FreeDiskMib(config.cache_dir);
      }
    }
    if ((needed_mib > 0 && free_mib < needed_mib) != disk_full) {
      disk_full = !disk_full;
      Say(worker_id, disk_full
                         ? StrCat("disk full: ", free_mib, " MiB free in ", config.cache_dir,
                                  ", below the ", needed_mib, " MiB this worker needs (its floor, ",
                                  config.min_free_disk_mib, " MiB by --min-free-disk-mib",
                                  needed_mib > config.min_free_disk_mib
                                      ? ", raised after a run ran out of room"
                                      : "",
                                  "); taking no job until there is room")
                         : StrCat("disk has room again: ", free_mib, " MiB free in ",
                                  config.cache_dir, "; taking jobs"));
      if (!disk_full) needed_mib = config.min_free_disk_mib;
    }
    cart::v1::AcquireJobRequest req;
    req.set_worker_id(worker_id);
    req.set_wait_ms(config.acquire_wait_ms);
    req.set_free_disk_mib(std::max<int64_t>(0, free_mib));
    req.set_disk_floor_mib(needed_mib);
    cart::v1::AcquireJobResponse resp;
    grpc::ClientContext ctx;
    rpc::PrepareContext(ctx, config.client, config.acquire_wait_ms + 10'000);
    grpc::Status s = stub->AcquireJob(&ctx, req, &resp);
    if (s.ok() && resp.drain()) {
      Say(worker_id, "drained; exiting");
      return absl::OkStatus();
    }
    if (!s.ok()) {
      if (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
          s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
        CART_RETURN_IF_ERROR(unreachable.Failed(s.error_message()));
      }
      if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
        // cartd forgot us (a fresh database): register again.
        grpc::ClientContext rctx;
        rpc::PrepareContext(rctx, config.client, 10'000);
        stub->RegisterWorker(&rctx, reg, &timing);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
      backoff_ms = std::min<int64_t>(backoff_ms * 2, 5000);
      continue;
    }
    backoff_ms = 200;
    unreachable.Reached();
    if (!resp.has_job()) {
      if (config.exit_when_idle) break;
      continue;
    }
    const cart::v1::Job& job = resp.job();
    Say(worker_id,
        StrCat("run ", job.run_name(), " (id ", job.run_id(), ", attempt ", job.attempt(),
               job.has_resume_from() ? StrCat(", from step ", job.resume_from().step())
                                     : std::string(),
               ")"));
    JobEnd end = RunJob(env, job, shutdown);
    ++jobs;
    Say(worker_id,
        StrCat("run ", job.run_name(), ": ",
               end.fenced    ? "FENCED"
               : end.gave_up ? "not handed back within the shutdown grace (cartd will resume it)"
               : end.preempted && end.outcome == cart::v1::JobResult::OUTCOME_DRAINED
                   ? "DRAINED (preempted at a checkpoint for other work; it resumes later)"
                   : OutcomeName(end.outcome),
               end.error.empty() ? "" : ": " + end.error));
    if (end.no_space) {
      // Whatever the attempt left is of no further use: its checkpoints are cartd's. Then the
      // worker waits for room beyond what it had.
      if (std::string freed = Reclaim(config.cache_dir); !freed.empty()) Say(worker_id, freed);
      const int64_t free_mib = SystemMetrics::FreeDiskMib(config.cache_dir);
      needed_mib = free_mib + std::max<int64_t>(config.min_free_disk_mib, 64);
      disk_full = false;  // said afresh at the next look
    }
    if (end.drain_requested) {
      Say(worker_id, "drain requested; exiting");
      break;
    }
  }
  return absl::OkStatus();
}

}  // namespace cart::worker
