// The Scheduler's queries (server/scheduler.h "Queries"): what the services and the dashboard
// read, each from the store, with what the scheduler knows beyond it (why a run waits, the step
// its worker last reported, the expected finish). Nothing here writes.

#include <algorithm>
#include <set>
#include <utility>

#include "common/status.h"
#include "common/strings.h"
#include "server/scheduler.h"

namespace cart::server {

using store::RunRecord;
using store::RunState;

absl::StatusOr<std::shared_ptr<const Forecast>> Scheduler::ExpectedFinish() {
  const int64_t now_us = NowMicros();
  int64_t generation = 0;
  {
    absl::MutexLock lock(&mu_);
    // Planned again after any claim, submit, outcome or new worker (they bump generation_), and
    // at least every 10 s as the running runs' pace moves.
    if (forecast_ && forecast_generation_ == generation_ && now_us >= forecast_->at_us &&
        now_us - forecast_->at_us < 10'000'000) {
      return forecast_;
    }
    generation = generation_;
  }
  const std::optional<int64_t> largest = MaxWorkerMemory();
  std::vector<store::PlaceableRun> queued;
  if (largest) {
    CART_ASSIGN_OR_RETURN(queued, store_->ListQueuedWork(kMostWeighed, *largest));
  }
  std::map<std::string, double> usage;
  if (options_.fair_share_half_life > absl::ZeroDuration() && !queued.empty()) {
    CART_ASSIGN_OR_RETURN(usage, Usage(now_us));
    for (const store::PlaceableRun& r : queued) usage.try_emplace(r.owner, 0.0);
  }
  Forecast forecast;
  forecast.at_us = now_us;
  auto note = [&](int64_t run_id, int64_t sweep_id, double hours) {
    // A finish more than a century away is no estimate: the run has none (and hours × 3.6e9 past
    // 2^63 µs once wrapped to a time in the past, so an impossible plan read as "now").
    constexpr double kMostHours = 24.0 * 365 * 100;
    if (!(hours >= 0 && hours <= kMostHours)) return;
    const int64_t at = now_us + static_cast<int64_t>(hours * 3.6e9);
    forecast.run_finish_us[run_id] = at;
    int64_t& sweep = forecast.sweep_finish_us[sweep_id];
    sweep = std::max(sweep, at);
    ++forecast.sweep_estimated_runs[sweep_id];
  };
  std::vector<PlacementWorker> fleet;
  {
    absl::MutexLock lock(&mu_);
    const std::map<std::string, double> busy_hours = BusyHoursLocked(now_us);
    for (const auto& [run_id, r] : running_) {
      const auto left = busy_hours.find(r.worker_id);
      if (left != busy_hours.end() && r.work_hours > 0) note(run_id, r.sweep_id, left->second);
    }
    fleet = workers_.Fleet(now_us, "", busy_hours);
  }
  // Runs their budgets hold back have no expected finish (weighed on the fastest worker).
  if (!queued.empty()) {
    CART_ASSIGN_OR_RETURN(const BudgetLedger ledger, Ledger(now_us));
    double fastest = 0;
    for (const PlacementWorker& w : fleet) fastest = std::max(fastest, w.speed);
    HoldOverBudget(ledger, fastest, "any", queued, nullptr);
  }
  std::map<int64_t, int64_t> sweep_of;
  for (const store::PlaceableRun& r : queued) sweep_of[r.id] = r.sweep_id;
  CART_ASSIGN_OR_RETURN(store::SeedGroupClasses groups, SeedGroups(queued));
  for (const PlannedRun& p : PlanQueue(std::move(fleet), std::move(queued), usage, groups)) {
    note(p.run_id, sweep_of[p.run_id], p.finish_in_hours);
  }
  auto shared = std::make_shared<const Forecast>(std::move(forecast));
  absl::MutexLock lock(&mu_);
  forecast_ = shared;
  forecast_generation_ = generation;
  return shared;
}

absl::StatusOr<std::vector<int64_t>> Scheduler::ForecastRuns(
    std::vector<store::PlaceableRun> extra) {
  const int64_t now_us = NowMicros();
  std::vector<int64_t> out(extra.size(), 0);
  const std::optional<int64_t> largest = MaxWorkerMemory();
  if (!largest || extra.empty()) return out;
  CART_ASSIGN_OR_RETURN(std::vector<store::PlaceableRun> queued,
                        store_->ListQueuedWork(kMostWeighed, *largest));
  // The new runs take ids no stored run has (stored ids are positive), as if submitted now.
  for (size_t i = 0; i < extra.size(); ++i) {
    store::PlaceableRun r = extra[i];
    r.id = -static_cast<int64_t>(i) - 1;
    r.created_us = now_us;
    r.steps = 0;
    r.done_steps = 0;
    queued.push_back(std::move(r));
  }
  std::map<std::string, double> usage;
  if (options_.fair_share_half_life > absl::ZeroDuration()) {
    CART_ASSIGN_OR_RETURN(usage, Usage(now_us));
    for (const store::PlaceableRun& r : queued) usage.try_emplace(r.owner, 0.0);
  }
  CART_ASSIGN_OR_RETURN(store::SeedGroupClasses groups, SeedGroups(queued));
  std::vector<PlacementWorker> fleet;
  {
    absl::MutexLock lock(&mu_);
    fleet = workers_.Fleet(now_us, "", BusyHoursLocked(now_us));
  }
  for (const PlannedRun& p : PlanQueue(std::move(fleet), std::move(queued), usage, groups)) {
    if (p.run_id >= 0) continue;
    constexpr double kMostHours = 24.0 * 365 * 100;
    if (p.finish_in_hours >= 0 && p.finish_in_hours <= kMostHours) {
      out[static_cast<size_t>(-p.run_id - 1)] =
          now_us + static_cast<int64_t>(p.finish_in_hours * 3.6e9);
    }
  }
  return out;
}

absl::StatusOr<std::string> Scheduler::WaitingReason(const RunRecord& run) {
  return Explain(run, MaxWorkerMemory());
}

int64_t Scheduler::ReportedStep(int64_t run_id) {
  absl::MutexLock lock(&mu_);
  auto it = progress_.find(run_id);
  return it == progress_.end() ? 0 : it->second;
}

std::string Scheduler::Explain(const RunRecord& run, std::optional<int64_t> max_memory) {
  std::string reason;
  if (run.state == RunState::kBlocked && run.parent_run_id) {
    const std::string what = run.parent_checkpoint == "final"
                                 ? std::string("its final checkpoint")
                                 : StrCat("a checkpoint at step ", run.parent_checkpoint);
    std::string parent_state = "unknown";
    if (absl::StatusOr<RunRecord> parent = store_->GetRun(*run.parent_run_id); parent.ok()) {
      parent_state = std::string(RunStateName(parent->state));
    }
    reason = StrCat("waiting for parent run ", *run.parent_run_id, " (", parent_state, ") to have ",
                    what);
  } else if (run.state == RunState::kQueued) {
    // The least it can train in: micro-batch lowered to fit (FitToDevice).
    const int64_t least =
        run.min_memory_bytes > 0 ? run.min_memory_bytes : run.memory_estimate_bytes;
    const int64_t need = std::max(least, run.oom_memory_bytes + 1);
    if (!max_memory) {
      reason = "no worker is registered";
    } else if (run.oom_memory_bytes > 0 && *max_memory <= run.oom_memory_bytes) {
      reason = StrCat("ran out of memory on a ", FormatGiB(run.oom_memory_bytes),
                      " device; waits for a device with more (largest registered ",
                      FormatGiB(*max_memory), ")");
    } else if (least > *max_memory) {
      reason = StrCat("memory estimate ", FormatGiB(run.memory_estimate_bytes),
                      " exceeds every registered worker (largest ", FormatGiB(*max_memory), ")",
                      least < run.memory_estimate_bytes
                          ? StrCat("; even at micro-batch 1 it needs ", FormatGiB(least))
                          : std::string());
    } else if (run.oom_memory_bytes > 0) {
      reason = StrCat("waiting for a free worker with more than ", FormatGiB(run.oom_memory_bytes),
                      " (ran out of memory on one that size)");
    } else {
      reason = StrCat("waiting for a free worker with at least ", FormatGiB(need), " of memory");
    }
    absl::MutexLock lock(&mu_);
    if (const std::string pin = run.DeviceClassPin(); !pin.empty() && max_memory) {
      const bool live = workers_.HasLiveOfClass(pin, NowMicros());
      reason = StrCat(live ? StrCat(reason, " of device class '", pin, "'")
                           : StrCat("no live worker is of device class '", pin, "'"),
                      " (its latest checkpoint was written on one, and its attempts stay on that "
                      "class: `cart runs unpin ",
                      run.id, "` lets them go to any)");
    }
    if (auto it = not_placed_.find(run.id); it != not_placed_.end()) {
      reason = StrCat(reason, "; last ", it->second);
    }
  }
  return reason;
}

absl::StatusOr<RunInfo> Scheduler::Describe(RunRecord record, std::optional<int64_t> max_memory) {
  RunInfo info;
  info.run = std::move(record);
  info.step = ReportedStep(info.run.id);
  if (info.run.attempt > 0) {
    if (absl::StatusOr<std::string> w = WorkerOfAttempt(info.run.id, info.run.attempt); w.ok()) {
      info.worker_id = *w;
    }
  }
  info.waiting_reason = Explain(info.run, max_memory);
  if (!store::IsTerminal(info.run.state)) {
    CART_ASSIGN_OR_RETURN(std::shared_ptr<const Forecast> forecast, ExpectedFinish());
    const auto at = forecast->run_finish_us.find(info.run.id);
    if (at != forecast->run_finish_us.end()) info.expected_finish_us = at->second;
  }
  return info;
}

absl::StatusOr<RunRecord> Scheduler::GetRunRecord(int64_t run_id) { return store_->GetRun(run_id); }

absl::StatusOr<RunDetails> Scheduler::GetRun(int64_t run_id) {
  CART_ASSIGN_OR_RETURN(RunRecord run, store_->GetRun(run_id));
  RunDetails details;
  CART_ASSIGN_OR_RETURN(details.info, Describe(std::move(run), MaxWorkerMemory()));
  CART_ASSIGN_OR_RETURN(details.events, store_->RunEvents(run_id));
  CART_ASSIGN_OR_RETURN(details.checkpoints, store_->ListCheckpoints(run_id));
  CART_ASSIGN_OR_RETURN(details.summaries, store_->RunSummaries(run_id));
  CART_ASSIGN_OR_RETURN(details.data, store_->RunData(run_id));
  CART_ASSIGN_OR_RETURN(details.annotation_history, store_->RunAnnotationHistory(run_id));
  CART_ASSIGN_OR_RETURN(details.attempts, store_->ListAttempts(run_id));
  for (const store::MetricSummary& s : details.summaries) {
    details.info.step = std::max(details.info.step, s.latest_step);
  }
  return details;
}

absl::StatusOr<std::vector<RunInfo>> Scheduler::ListRuns(const store::RunFilter& filter,
                                                         int64_t limit, int64_t offset,
                                                         int64_t* total) {
  // One paged read gives the records, workers, steps and latest values; only a blocked run costs
  // one more read (its parent's state, for the waiting reason).
  store::RunPageRequest page;
  page.filter = filter;
  page.limit = limit;
  page.offset = offset;
  page.metrics = {"loss", "rho_max", "tokens_per_s", "mfu", "mfu_6n"};
  CART_ASSIGN_OR_RETURN(store::RunPage rows, store_->ListRunPage(page));
  if (total != nullptr) *total = rows.total;
  const std::optional<int64_t> max_memory = MaxWorkerMemory();
  CART_ASSIGN_OR_RETURN(std::shared_ptr<const Forecast> forecast, ExpectedFinish());
  std::vector<RunInfo> out;
  out.reserve(rows.rows.size());
  for (store::RunRow& row : rows.rows) {
    RunInfo info;
    info.run = std::move(row.run);
    info.worker_id = std::move(row.worker_id);
    info.step = std::max(ReportedStep(info.run.id), row.step);
    // The last step may come after the last metric record (log_every need not divide steps).
    if (info.run.state == RunState::kSucceeded) info.step = std::max(info.step, info.run.steps);
    info.waiting_reason = Explain(info.run, max_memory);
    info.latest = std::move(row.latest);
    if (auto at = forecast->run_finish_us.find(info.run.id); at != forecast->run_finish_us.end()) {
      info.expected_finish_us = at->second;
    }
    out.push_back(std::move(info));
  }
  return out;
}

absl::StatusOr<std::vector<store::SweepRecord>> Scheduler::ListSweeps() {
  return store_->ListSweeps();
}

absl::StatusOr<std::vector<RunRecord>> Scheduler::ListRunRecords(const store::RunFilter& filter) {
  return store_->ListRuns(filter);
}

absl::StatusOr<store::RunPage> Scheduler::ListRunPage(const store::RunPageRequest& request) {
  return store_->ListRunPage(request);
}

absl::StatusOr<store::RunPage> Scheduler::LiveRuns(std::vector<std::string> metrics) {
  store::RunPageRequest live;
  live.filter.states = {RunState::kLeased, RunState::kRunning};
  live.metrics = std::move(metrics);
  live.limit = 0;
  return store_->ListRunPage(live);
}

absl::StatusOr<std::vector<store::SweepProgress>> Scheduler::ListSweepProgress() {
  return store_->ListSweepProgress();
}

absl::StatusOr<store::SweepKeys> Scheduler::GetSweepKeys(const std::string& sweep) {
  return store_->GetSweepKeys(sweep);
}

absl::StatusOr<std::vector<store::AttemptRecord>> Scheduler::ListAttempts(int64_t run_id) {
  return store_->ListAttempts(run_id);
}

absl::StatusOr<store::StoreTotals> Scheduler::Totals() { return store_->Totals(); }

absl::StatusOr<store::SweepRecord> Scheduler::GetSweep(const std::string& name) {
  return store_->GetSweep(name);
}

std::vector<std::string> Scheduler::WorkerIds() {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> ids;
  for (const auto& [id, worker] : workers_.all()) ids.push_back(id);
  return ids;
}

absl::StatusOr<std::vector<store::AnnotationEvent>> Scheduler::RunAnnotationHistory(
    int64_t run_id) {
  return store_->RunAnnotationHistory(run_id);
}

absl::StatusOr<std::optional<store::SweepProvenance>> Scheduler::GetSweepProvenance(
    const std::string& name) {
  return store_->GetSweepProvenance(name);
}

absl::StatusOr<std::vector<store::AnnotationEvent>> Scheduler::SweepAnnotationHistory(
    const std::string& name) {
  return store_->SweepAnnotationHistory(name);
}

absl::StatusOr<int64_t> Scheduler::FindRun(const std::string& name) {
  const size_t slash = name.rfind('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == name.size()) {
    return absl::InvalidArgumentError(StrCat("run name '", name, "' is not '<sweep>/<index>'"));
  }
  CART_ASSIGN_OR_RETURN(RunRecord run,
                        store_->FindRun(name.substr(0, slash), name.substr(slash + 1)));
  return run.id;
}

absl::StatusOr<std::vector<store::MetricSummary>> Scheduler::RunSummaries(int64_t run_id) {
  return store_->RunSummaries(run_id);
}

absl::StatusOr<store::Series> Scheduler::MetricSeries(const store::SeriesRequest& request) {
  return store_->MetricSeries(request);
}

absl::StatusOr<std::vector<store::LogLine>> Scheduler::RunLog(int64_t run_id, int64_t after_id,
                                                              int64_t limit) {
  return store_->RunLog(run_id, after_id, limit);
}

std::vector<RunPace> Scheduler::RunPaces() {
  absl::MutexLock lock(&mu_);
  std::vector<RunPace> out;
  for (const auto& [run_id, r] : running_) {
    RunPace pace;
    pace.run_id = run_id;
    pace.attempt = r.attempt;
    pace.since_us = r.claimed_us;
    const auto p = progress_.find(run_id);
    const auto at = progress_at_us_.find(run_id);
    if (p != progress_.end() && at != progress_at_us_.end()) {
      pace.step = p->second;
      pace.since_us = at->second;
    }
    const int64_t done = pace.step - r.done_steps_at_claim;
    if (pace.step > 0 && done > 0 && pace.since_us > r.claimed_us) {
      pace.expected_step_us =
          static_cast<double>(pace.since_us - r.claimed_us) / static_cast<double>(done);
    } else if (const WorkerRegistry::Worker* w = workers_.Find(r.worker_id);
               w != nullptr && w->speed > 0 && r.steps > r.done_steps_at_claim &&
               r.remaining_hours_at_claim > 0) {
      pace.expected_step_us = r.remaining_hours_at_claim / w->speed * 3.6e9 /
                              static_cast<double>(r.steps - r.done_steps_at_claim);
    }
    out.push_back(pace);
  }
  return out;
}

absl::StatusOr<store::CheckpointRecord> Scheduler::Checkpoint(int64_t run_id, int64_t step) {
  CART_ASSIGN_OR_RETURN(std::vector<store::CheckpointRecord> all, store_->ListCheckpoints(run_id));
  const store::CheckpointRecord* chosen = nullptr;
  for (const store::CheckpointRecord& c : all) {  // by step
    if (step == 0 || c.step == step) chosen = &c;
  }
  if (chosen != nullptr) return *chosen;
  std::vector<std::string> steps;
  for (const store::CheckpointRecord& c : all) steps.push_back(StrCat(c.step));
  return absl::NotFoundError(StrCat(
      "run ", run_id, " has no checkpoint", step == 0 ? std::string() : StrCat(" at step ", step),
      steps.empty() ? std::string(" yet") : StrCat("; it has steps ", StrJoin(steps, ", "))));
}

absl::StatusOr<store::PivotTable> Scheduler::Pivot(const store::PivotRequest& request) {
  return store_->Pivot(request);
}

absl::StatusOr<std::vector<store::AblationRow>> Scheduler::Ablation(
    const store::AblationRequest& request) {
  return store_->Ablation(request);
}

absl::StatusOr<store::StageComparison> Scheduler::CompareStages(
    const store::StageComparisonRequest& request) {
  return store_->CompareStages(request);
}

}  // namespace cart::server
