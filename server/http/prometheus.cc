#include "server/http/prometheus.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <sstream>

#include "common/status.h"
#include "common/strings.h"
#include "server/scheduler.h"

namespace cart::server::http {

using store::RunState;

absl::StatusOr<std::string> RenderPrometheus(Scheduler& scheduler) {
  using prometheus::BuildCounter;
  using prometheus::BuildGauge;
  using prometheus::BuildHistogram;
  CART_ASSIGN_OR_RETURN(store::StoreTotals totals, scheduler.Totals());
  const SchedulerStats::Snapshot stats = scheduler.stats().Read();
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

  std::map<std::string, int> worker_states = {
      {"idle", 0}, {"busy", 0}, {"draining", 0}, {"lost", 0}};
  for (const WorkerStatus& w : scheduler.ListWorkers()) ++worker_states[w.state];
  auto& workers =
      BuildGauge().Name("cart_workers").Help("Registered workers by state").Register(registry);
  for (const auto& [state, n] : worker_states) workers.Add({{"state", state}}).Set(n);
  BuildGauge()
      .Name("cart_workers_alive")
      .Help("Workers seen within a lease TTL (not lost)")
      .Register(registry)
      .Add({})
      .Set(worker_states["idle"] + worker_states["busy"] + worker_states["draining"]);

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

  prometheus::Histogram::BucketBoundaries bounds(SchedulerStats::kLatencyBounds.begin(),
                                                 SchedulerStats::kLatencyBounds.end());
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

  // The latest values of the running runs, most recently updated first.
  store::RunPageRequest page;
  page.filter.states = {RunState::kRunning};
  page.metrics = {"loss", "rho_max", "tokens_per_s", "mfu"};
  page.sort = "updated";
  page.descending = true;
  page.limit = kMaxRunSeries;
  CART_ASSIGN_OR_RETURN(store::RunPage running, scheduler.ListRunPage(page));
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
                      "Latest model FLOPs utilisation of a running run (model FLOPs per token "
                      "x tokens/s / the device's peak)")
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
  }
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
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry.Collect());
  return out.str();
}

}  // namespace cart::server::http
