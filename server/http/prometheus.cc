#include "server/http/prometheus.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <algorithm>
#include <sstream>

#include "common/status.h"
#include "common/strings.h"
#include "server/scheduler.h"

namespace cart::server::http {

using store::RunState;

namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;

// The device series (one per worker: worker id, device index, name and UUID), each worker's
// liveness and idle-while-queued time, and the map from a device's UUID to the run it holds.
void RenderFleet(prometheus::Registry& registry, const std::vector<WorkerStatus>& fleet,
                 int64_t now_us) {
  auto gauge = [&](const char* name, const char* help) -> prometheus::Family<prometheus::Gauge>& {
    return BuildGauge().Name(name).Help(help).Register(registry);
  };
  auto& util = gauge("cart_device_utilization_ratio",
                     "Share of the last sample period a kernel ran (NVML), or the worker's CPU "
                     "share of its cores on a CPU worker, 0..1");
  auto& mem_used = gauge("cart_device_memory_used_bytes",
                         "Device memory in use (NVML), or the worker's resident set on a CPU");
  auto& mem_total = gauge("cart_device_memory_total_bytes", "Device memory (or RAM on a CPU)");
  auto& temp = gauge("cart_device_temperature_celsius", "GPU temperature (NVML)");
  auto& power = gauge("cart_device_power_watts", "GPU power draw (NVML)");
  auto& sm_clock = gauge("cart_device_sm_clock_hertz", "GPU SM clock (NVML)");
  auto& mem_clock = gauge("cart_device_memory_clock_hertz", "GPU memory clock (NVML)");
  auto& throttled =
      gauge("cart_device_throttled", "1 while NVML reports the clocks held down for this reason");
  auto& age = gauge("cart_device_sample_age_seconds", "Seconds since the device's latest sample");
  auto& rss = gauge("cart_worker_process_resident_bytes", "The cart-worker process's resident set");
  auto& cpu = gauge("cart_worker_process_cpu_ratio",
                    "The cart-worker process's CPU time per second (1 = one core busy)");
  auto& run_info = gauge("cart_device_run_info",
                         "1 for the run a device holds: join a DCGM exporter's series on uuid");
  auto& up =
      gauge("cart_worker_up",
            "1 when the worker was seen within a lease TTL plus the longest poll, 0 when lost");
  auto& idle_now = gauge("cart_worker_idle_while_queued",
                         "1 while the worker holds no run and runs are queued (drained included)");
  auto& idle_s = BuildCounter()
                     .Name("cart_worker_idle_while_queued_seconds_total")
                     .Help("Seconds the worker's device held no run while runs were queued")
                     .Register(registry);
  auto& free_disk = gauge("cart_worker_free_disk_bytes",
                          "Free space in the worker's cache directory at its last ask for a job");
  auto& disk_full = gauge("cart_worker_disk_full",
                          "1 while the worker's free disk is below its own floor "
                          "(cart-worker --min-free-disk-mib): it is handed no job");
  const double now_s = static_cast<double>(now_us) / 1e6;
  for (const WorkerStatus& w : fleet) {
    up.Add({{"worker", w.info.id}}).Set(w.state == "lost" ? 0 : 1);
    free_disk.Add({{"worker", w.info.id}}).Set(static_cast<double>(w.info.free_disk_bytes));
    disk_full.Add({{"worker", w.info.id}}).Set(w.info.DiskFull() ? 1 : 0);
    idle_now.Add({{"worker", w.info.id}}).Set(w.idle_while_queued ? 1 : 0);
    idle_s.Add({{"worker", w.info.id}}).Increment(w.idle_while_queued_s);
    const prometheus::Labels device = {{"worker", w.info.id},
                                       {"device", std::to_string(w.info.device_index)},
                                       {"name", w.info.device_name},
                                       {"uuid", w.info.uuid}};
    if (w.run_id != 0) {
      prometheus::Labels labels = device;
      labels["run_id"] = std::to_string(w.run_id);
      labels["run"] = w.run_name;
      run_info.Add(labels).Set(1);
    }
    if (w.device.empty() || w.state == "lost") continue;
    const DeviceSample& s = w.device.back();
    util.Add(device).Set(s.utilization);
    mem_used.Add(device).Set(static_cast<double>(s.memory_used_bytes));
    mem_total.Add(device).Set(static_cast<double>(s.memory_total_bytes));
    age.Add(device).Set(std::max(0.0, now_s - static_cast<double>(s.at_us) / 1e6));
    if (s.temperature_c) temp.Add(device).Set(*s.temperature_c);
    if (s.power_w) power.Add(device).Set(*s.power_w);
    if (s.sm_clock_hz) sm_clock.Add(device).Set(*s.sm_clock_hz);
    if (s.memory_clock_hz) mem_clock.Add(device).Set(*s.memory_clock_hz);
    if (s.throttle_reasons) {
      for (const ThrottleReason& reason : kThrottleReasons) {
        prometheus::Labels labels = device;
        labels["reason"] = reason.name;
        throttled.Add(labels).Set((*s.throttle_reasons & reason.bit) != 0 ? 1 : 0);
      }
    }
    rss.Add({{"worker", w.info.id}}).Set(static_cast<double>(s.process_rss_bytes));
    cpu.Add({{"worker", w.info.id}}).Set(s.process_cpu_percent / 100);
  }
  auto& idle_hours = BuildCounter()
                         .Name("cart_idle_while_queued_device_hours_total")
                         .Help("Device-hours workers held no run while runs were queued, by kind")
                         .Register(registry);
  std::map<std::string, double> idle_by_kind;  // device-seconds, by the workers' device kind
  for (const WorkerStatus& w : fleet) {
    idle_by_kind[w.info.device_kind.empty() ? "unknown" : w.info.device_kind] +=
        w.idle_while_queued_s;
  }
  for (const auto& [kind, seconds] : idle_by_kind) {
    idle_hours.Add({{"kind", kind}}).Increment(seconds / 3600);
  }
}

// The newest (most recently updated) runs in `state`, at most kMaxRunSeries, with the latest
// values of `metrics`.
absl::StatusOr<store::RunPage> NewestRuns(Scheduler& scheduler, RunState state,
                                          std::vector<std::string> metrics) {
  store::RunPageRequest page;
  page.filter.states = {state};
  page.metrics = std::move(metrics);
  page.sort = "updated";
  page.descending = true;
  page.limit = kMaxRunSeries;
  return scheduler.ListRunPage(page);
}

// What the alerts watch in runs: FAILED runs of the last day (with when), and runs whose loss
// went non-finite or whose validation loss fell below the data's entropy floor.
absl::Status RenderTrouble(prometheus::Registry& registry, Scheduler& scheduler,
                           const store::RunPage& running) {
  CART_ASSIGN_OR_RETURN(store::RunPage failed, NewestRuns(scheduler, RunState::kFailed,
                                                          {"loss_nonfinite", "leak_suspected"}));
  auto& failed_at = BuildGauge()
                        .Name("cart_run_failed_timestamp_seconds")
                        .Help("When a run failed for good (Unix time), for a day after")
                        .Register(registry);
  auto& nonfinite = BuildGauge()
                        .Name("cart_run_loss_nonfinite")
                        .Help("1 for a run whose training loss became NaN or infinite")
                        .Register(registry);
  auto& leak = BuildGauge()
                   .Name("cart_run_leak_suspected")
                   .Help("1 for a run whose validation loss fell below its data's entropy floor")
                   .Register(registry);
  const int64_t since_us = scheduler.NowMicros() - kFailedRunSeriesUs;
  auto flags = [&](const store::RunRow& row, const prometheus::Labels& labels) {
    if (auto it = row.latest.find("loss_nonfinite"); it != row.latest.end() && it->second > 0) {
      nonfinite.Add(labels).Set(1);
    }
    if (auto it = row.latest.find("leak_suspected"); it != row.latest.end() && it->second > 0) {
      leak.Add(labels).Set(1);
    }
  };
  for (const store::RunRow& row : failed.rows) {
    if (row.run.updated_us < since_us) break;  // newest first
    const prometheus::Labels labels = {{"run", StrCat(row.run.sweep_name, "/", row.run.name)},
                                       {"sweep", row.run.sweep_name},
                                       {"run_id", std::to_string(row.run.id)}};
    failed_at.Add(labels).Set(static_cast<double>(row.run.updated_us) / 1e6);
    flags(row, labels);
  }
  for (const store::RunRow& row : running.rows) {
    flags(row, {{"run", StrCat(row.run.sweep_name, "/", row.run.name)},
                {"sweep", row.run.sweep_name},
                {"run_id", std::to_string(row.run.id)}});
  }
  return absl::OkStatus();
}

// The four spending series of a sweep or a claim (cart_<what>_energy_joules, …), one label;
// `whose` names the attempts counted, for the help texts.
class SpendingGauges {
 public:
  SpendingGauges(prometheus::Registry& registry, const std::string& what, const std::string& whose)
      : label_(what),
        energy_(BuildGauge()
                    .Name(StrCat("cart_", what, "_energy_joules"))
                    .Help(StrCat("Energy used by ", whose,
                                 ", from the workers' device counters (NVML, RAPL); "
                                 "attempts not measured add nothing"))
                    .Register(registry)),
        measured_(BuildGauge()
                      .Name(StrCat("cart_", what, "_energy_measured_attempts"))
                      .Help(StrCat("How many of ", whose, " had their energy measured"))
                      .Register(registry)),
        attempts_(BuildGauge()
                      .Name(StrCat("cart_", what, "_attempts"))
                      .Help(StrCat("Count of ", whose, " so far"))
                      .Register(registry)),
        hours_(BuildGauge()
                   .Name(StrCat("cart_", what, "_device_hours"))
                   .Help(StrCat("Device-hours ", whose, " held their workers"))
                   .Register(registry)) {}

  void Set(const std::string& name, const store::Spending& s) {
    const prometheus::Labels labels = {{label_, name}};
    energy_.Add(labels).Set(s.energy_j);
    measured_.Add(labels).Set(static_cast<double>(s.measured_attempts));
    attempts_.Add(labels).Set(static_cast<double>(s.attempts));
    hours_.Add(labels).Set(s.device_hours);
  }

 private:
  std::string label_;
  prometheus::Family<prometheus::Gauge>& energy_;
  prometheus::Family<prometheus::Gauge>& measured_;
  prometheus::Family<prometheus::Gauge>& attempts_;
  prometheus::Family<prometheus::Gauge>& hours_;
};

}  // namespace

absl::StatusOr<std::string> RenderPrometheus(Scheduler& scheduler,
                                             const std::function<StorageFigures()>& storage,
                                             const std::vector<ClaimCost>& claims) {
  using prometheus::BuildHistogram;
  CART_ASSIGN_OR_RETURN(store::StoreTotals totals, scheduler.Totals());
  const SchedulerCounters::Snapshot stats = scheduler.counters().Read();
  prometheus::Registry registry;

  auto& runs = BuildGauge().Name("cart_runs").Help("Runs by state, every sweep").Register(registry);
  for (RunState state :
       {RunState::kQueued, RunState::kBlocked, RunState::kLeased, RunState::kRunning,
        RunState::kSucceeded, RunState::kFailed, RunState::kCancelled}) {
    auto it = totals.runs.find(state);
    runs.Add({{"state", std::string(store::RunStateName(state))}})
        .Set(it == totals.runs.end() ? 0.0 : static_cast<double>(it->second));
  }
  auto queued = totals.runs.find(RunState::kQueued);
  BuildGauge()
      .Name("cart_queue_depth")
      .Help("Runs waiting for a worker (QUEUED)")
      .Register(registry)
      .Add({})
      .Set(queued == totals.runs.end() ? 0.0 : static_cast<double>(queued->second));

  {
    // How long the oldest queued run has waited (since it last became QUEUED).
    store::RunPageRequest oldest;
    oldest.filter.states = {RunState::kQueued};
    oldest.sort = "updated";
    oldest.limit = 1;
    CART_ASSIGN_OR_RETURN(store::RunPage waiting, scheduler.ListRunPage(oldest));
    BuildGauge()
        .Name("cart_queue_oldest_wait_seconds")
        .Help("How long the longest-waiting QUEUED run has waited; 0 when none waits")
        .Register(registry)
        .Add({})
        .Set(waiting.rows.empty()
                 ? 0.0
                 : std::max<double>(
                       0, (scheduler.NowMicros() - waiting.rows[0].run.updated_us) / 1e6));
  }

  std::map<std::string, int> worker_states = {
      {"idle", 0}, {"busy", 0}, {"draining", 0}, {"disk_full", 0}, {"lost", 0}};
  const std::vector<WorkerStatus> fleet = scheduler.ListWorkers();
  for (const WorkerStatus& w : fleet) ++worker_states[w.state];
  auto& workers =
      BuildGauge().Name("cart_workers").Help("Registered workers by state").Register(registry);
  for (const auto& [state, n] : worker_states) workers.Add({{"state", state}}).Set(n);
  BuildGauge()
      .Name("cart_workers_alive")
      .Help("Workers seen within a lease TTL plus the longest poll (not lost)")
      .Register(registry)
      .Add({})
      .Set(worker_states["idle"] + worker_states["busy"] + worker_states["draining"] +
           worker_states["disk_full"]);

  RenderFleet(registry, fleet, scheduler.NowMicros());
  // cartd's own disk (server/store_room.h).
  const StoreRoom::State room = scheduler.store_room();
  BuildGauge()
      .Name("cart_store_disk_full")
      .Help(
          "1 while cartd's disk is full: it answers reads, takes no new change and hands out "
          "no job until there is room")
      .Register(registry)
      .Add({})
      .Set(room.full ? 1 : 0);
  if (room.free_bytes >= 0) {
    BuildGauge()
        .Name("cart_store_free_disk_bytes")
        .Help("Free space on the filesystem of cartd's database at the last look")
        .Register(registry)
        .Add({})
        .Set(static_cast<double>(room.free_bytes));
  }
  BuildGauge()
      .Name("cart_store_needed_disk_bytes")
      .Help(
          "Free space cartd needs for changes and new jobs (min_free_store_bytes, more after a "
          "write failed for room)")
      .Register(registry)
      .Add({})
      .Set(static_cast<double>(room.needed_bytes));

  auto counter = [&](const char* name, const char* help, int64_t value) {
    BuildCounter().Name(name).Help(help).Register(registry).Add({}).Increment(
        static_cast<double>(value));
  };
  counter("cart_lease_expiries_total", "Leases taken back because they lapsed",
          stats.lease_expiries);
  counter("cart_retries_total", "Attempts that failed or ran out of memory and were retried",
          stats.retries);
  counter("cart_jobs_handed_out_total", "Jobs leased to workers", stats.jobs_handed_out);
  counter("cart_preemptions_total", "Runs asked to stop at a checkpoint for other work",
          stats.preemptions);
  counter("cart_metric_batches_ingested_total", "Metric batches stored", stats.metric_batches);
  counter("cart_metric_points_ingested_total", "Metric points stored", stats.metric_points);

  prometheus::Histogram::BucketBoundaries bounds(SchedulerCounters::kLatencyBounds.begin(),
                                                 SchedulerCounters::kLatencyBounds.end());
  std::vector<double> increments(stats.latency_buckets.begin(), stats.latency_buckets.end());
  BuildHistogram()
      .Name("cart_ingest_latency_seconds")
      .Help("Time to store one metric batch (AppendMetrics, commit included)")
      .Register(registry)
      .Add({}, bounds)
      .ObserveMultiple(increments, stats.latency_sum_s);

  BuildGauge()
      .Name("cart_artifact_bytes")
      .Help("Bytes of stored artifacts (checkpoints)")
      .Register(registry)
      .Add({})
      .Set(static_cast<double>(totals.artifact_bytes));
  BuildGauge()
      .Name("cart_artifacts")
      .Help("Stored artifacts")
      .Register(registry)
      .Add({})
      .Set(static_cast<double>(totals.artifacts));
  if (storage) {
    const StorageFigures room = storage();
    auto gauge = [&](const char* name, const char* help, int64_t value) {
      BuildGauge().Name(name).Help(help).Register(registry).Add({}).Set(static_cast<double>(value));
    };
    gauge("cart_artifact_quota_bytes",
          "The artifact store's quota (max_artifact_store_bytes); 0: none", room.quota_bytes);
    gauge("cart_artifact_disk_floor_bytes",
          "Free disk below which uploads are refused (min_free_artifact_bytes)", room.floor_bytes);
    if (room.free_disk_bytes >= 0) {
      gauge("cart_artifact_disk_free_bytes", "Free disk of the artifact store's file system",
            room.free_disk_bytes);
    }
  }

  // The latest values of the running runs, most recently updated first.
  CART_ASSIGN_OR_RETURN(store::RunPage running,
                        NewestRuns(scheduler, RunState::kRunning,
                                   {"loss", "rho_max", "tokens_per_s", "mfu", "mfu_6n",
                                    "leak_suspected", "loss_nonfinite"}));
  auto& loss = BuildGauge()
                   .Name("cart_run_loss")
                   .Help("Latest training loss of a running run")
                   .Register(registry);
  auto& rho = BuildGauge()
                  .Name("cart_run_rho")
                  .Help("Latest learned spectral radius (rho_max) of a running run")
                  .Register(registry);
  auto& speed = BuildGauge()
                    .Name("cart_run_tokens_per_second")
                    .Help("Latest training throughput of a running run")
                    .Register(registry);
  auto& step =
      BuildGauge().Name("cart_run_step").Help("Latest step of a running run").Register(registry);
  auto& mfu = BuildGauge()
                  .Name("cart_run_mfu")
                  .Help(
                      "Latest model FLOPs utilisation of a running run: model FLOPs per token "
                      "(matmuls and attention products, attention in full T x T) x tokens/s / "
                      "the device's peak")
                  .Register(registry);
  auto& mfu_6n = BuildGauge()
                     .Name("cart_run_mfu_6n")
                     .Help(
                         "Latest model FLOPs utilisation of a running run by the CART paper's "
                         "count: 6 x effective parameters per token x tokens/s / the device's "
                         "peak")
                     .Register(registry);
  for (const store::RunRow& row : running.rows) {
    const prometheus::Labels labels = {{"run", StrCat(row.run.sweep_name, "/", row.run.name)},
                                       {"sweep", row.run.sweep_name}};
    step.Add(labels).Set(static_cast<double>(row.step));
    if (auto it = row.latest.find("loss"); it != row.latest.end()) loss.Add(labels).Set(it->second);
    if (auto it = row.latest.find("rho_max"); it != row.latest.end())
      rho.Add(labels).Set(it->second);
    if (auto it = row.latest.find("tokens_per_s"); it != row.latest.end()) {
      speed.Add(labels).Set(it->second);
    }
    if (auto it = row.latest.find("mfu"); it != row.latest.end()) mfu.Add(labels).Set(it->second);
    if (auto it = row.latest.find("mfu_6n"); it != row.latest.end()) {
      mfu_6n.Add(labels).Set(it->second);
    }
  }
  CART_RETURN_IF_ERROR(RenderTrouble(registry, scheduler, running));
  // Expected finishes from the placement plan (Scheduler::ExpectedFinish), as Unix times.
  CART_ASSIGN_OR_RETURN(std::shared_ptr<const Forecast> forecast, scheduler.ExpectedFinish());
  auto& run_finish = BuildGauge()
                         .Name("cart_run_expected_finish_timestamp_seconds")
                         .Help("When a running run is expected to finish (Unix time)")
                         .Register(registry);
  for (const store::RunRow& row : running.rows) {
    if (auto at = forecast->run_finish_us.find(row.run.id); at != forecast->run_finish_us.end()) {
      run_finish
          .Add({{"run", StrCat(row.run.sweep_name, "/", row.run.name)},
                {"sweep", row.run.sweep_name}})
          .Set(static_cast<double>(at->second) / 1e6);
    }
  }
  if (!forecast->sweep_finish_us.empty()) {
    CART_ASSIGN_OR_RETURN(std::vector<store::SweepRecord> sweeps, scheduler.ListSweeps());
    auto& sweep_finish =
        BuildGauge()
            .Name("cart_sweep_expected_finish_timestamp_seconds")
            .Help(
                "When the last estimated run of an unfinished sweep is expected to finish "
                "(Unix time)")
            .Register(registry);
    for (const store::SweepRecord& sweep : sweeps) {
      if (auto at = forecast->sweep_finish_us.find(sweep.id);
          at != forecast->sweep_finish_us.end()) {
        sweep_finish.Add({{"sweep", sweep.name}}).Set(static_cast<double>(at->second) / 1e6);
      }
    }
  }
  // What each sweep's attempts used: measured energy (joules, only attempts whose worker read a
  // device counter; how many of them did) and device-hours.
  CART_ASSIGN_OR_RETURN(auto spending, scheduler.SweepSpending());
  if (!spending.empty()) {
    CART_ASSIGN_OR_RETURN(std::vector<store::SweepRecord> sweeps, scheduler.ListSweeps());
    SpendingGauges gauges(registry, "sweep", "the attempts of a sweep's runs");
    for (const store::SweepRecord& sweep : sweeps) {
      auto it = spending.find(sweep.id);
      if (it != spending.end()) gauges.Set(sweep.name, it->second);
    }
  }
  // What each claim's evidence cost: the runs its tests read, as `cart report` counts them.
  if (!claims.empty()) {
    SpendingGauges gauges(registry, "claim", "the attempts of the runs a claim's tests read");
    for (const ClaimCost& c : claims) gauges.Set(c.claim, c.spending);
  }
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry.Collect());
  return out.str();
}

}  // namespace cart::server::http
