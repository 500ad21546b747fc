// The Scheduler (server/scheduler.h): the order of each operation and its locking. Decisions are
// made beside it: placement.h, preemption.h, worker_registry.h, submission.h; its reads are in
// scheduler_queries.cc.

#include "server/scheduler.h"

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <tuple>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/cord.h"
#include "common/status.h"
#include "common/strings.h"
#include "config/accounting.h"
#include "config/config.h"
#include "config/devices.h"
#include "config/run_changes.h"
#include "config/sweep.h"
#include "server/placement.h"
#include "server/preemption.h"
#include "server/submission.h"

namespace cart::server {
namespace {

// A run asked to stop for other work that has not handed its worker back after this long no
// longer counts as a worker about to be free (an old worker ignores the control).
constexpr int64_t kPreemptPendingUs = 10 * 60 * 1'000'000LL;

// A reason given by a user (cancel) goes into one event per run it touches; its length is bounded
// so that one call cannot write hundreds of megabytes.
constexpr size_t kMaxReasonBytes = 1000;

absl::Status CheckReason(const std::string& reason) {
  if (reason.size() > kMaxReasonBytes) {
    return absl::InvalidArgumentError(StrCat("reason: ", reason.size(), " bytes is more than ",
                                             kMaxReasonBytes, "; say it in fewer words"));
  }
  // Text a person wrote: UTF-8 without control characters but tab and newline (a NUL byte was
  // stored and cut every view of the event at it).
  if (const std::optional<size_t> bad = FirstInvalidUtf8(reason)) {
    return absl::InvalidArgumentError(StrCat("reason: byte ", *bad, " is not UTF-8"));
  }
  for (size_t i = 0; i < reason.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(reason[i]);
    if ((c < 0x20 && c != '\t' && c != '\n') || c == 0x7f) {
      return absl::InvalidArgumentError(StrCat("reason: byte ", i, " is a control character (",
                                               static_cast<int>(c),
                                               "); a reason is text: letters, tab and newline"));
    }
  }
  return absl::OkStatus();
}

using store::RunRecord;
using store::RunState;

}  // namespace

std::string FormatGiB(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f GiB", static_cast<double>(bytes) / (1 << 30));
  return text;
}

Scheduler::Scheduler(store::RunStore* store, Clock* clock, SchedulerOptions options)
    : store_(store),
      clock_(clock),
      options_(std::move(options)),
      grace_end_us_(absl::ToUnixMicros(clock->Now() + (options_.startup_grace < absl::ZeroDuration()
                                                           ? options_.lease_ttl
                                                           : options_.startup_grace))),
      room_(options_.store_dir, options_.min_free_store_bytes),
      workers_(options_.lease_ttl + options_.max_acquire_wait) {
  // Workers registered before a restart may acquire again without re-registering.
  absl::StatusOr<std::vector<store::WorkerRecord>> known = store_->ListWorkers();
  if (known.ok()) {
    absl::MutexLock lock(&mu_);
    for (const store::WorkerRecord& record : *known) workers_.Restore(record);
  }
  RecoverRunning();
  if (options_.expiry_interval > absl::ZeroDuration()) {
    expiry_thread_ = std::thread([this] { ExpiryLoop(); });
  }
}

Scheduler::~Scheduler() {
  Shutdown();
  if (expiry_thread_.joinable()) expiry_thread_.join();
}

void Scheduler::Shutdown() {
  std::vector<std::shared_ptr<AttemptStream>> open;
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return;
    shutdown_ = true;
    for (const OpenStream& s : streams_) open.push_back(s.stream);
    pollers_cv_.SignalAll();
    for (auto& [id, watch] : run_watches_) watch.changed.SignalAll();
  }
  for (const auto& stream : open) stream->Close();
}

bool Scheduler::shutting_down() {
  absl::MutexLock lock(&mu_);
  return shutdown_;
}

int64_t Scheduler::NowMicros() const { return absl::ToUnixMicros(clock_->Now()); }

void Scheduler::WakePollers() {
  absl::MutexLock lock(&mu_);
  ++generation_;
  pollers_cv_.SignalAll();
}

void Scheduler::BumpRun(int64_t run_id) {
  absl::MutexLock lock(&mu_);
  BumpRunLocked(run_id);
}

void Scheduler::BumpRunLocked(int64_t run_id) {
  RunWatch& watch = run_watches_[run_id];
  ++watch.version;
  if (watch.waiters > 0) watch.changed.SignalAll();
}

WorkerTiming Scheduler::timing() const {
  const absl::Duration heartbeat = options_.heartbeat_interval > absl::ZeroDuration()
                                       ? options_.heartbeat_interval
                                       : options_.lease_ttl / 4;
  return WorkerTiming{options_.lease_ttl, heartbeat};
}

template <typename Select>
void Scheduler::PushControl(Select select, const Control& control) {
  std::vector<std::shared_ptr<AttemptStream>> targets;
  {
    absl::MutexLock lock(&mu_);
    for (const OpenStream& s : streams_) {
      if (select(s)) targets.push_back(s.stream);
    }
  }
  for (const auto& stream : targets) stream->Send(control);
}

void Scheduler::PushCancels(const std::vector<int64_t>& run_ids, const std::string& reason) {
  const Control cancel{Control::Kind::kCancel, reason};
  PushControl(
      [&](const OpenStream& s) {
        return std::find(run_ids.begin(), run_ids.end(), s.run_id) != run_ids.end();
      },
      cancel);
}

// ---- Sweeps

absl::StatusOr<SubmitResult> Scheduler::SubmitSweep(const SubmitRequest& request) {
  CART_RETURN_IF_ERROR(room_.CheckRoom("submitting a sweep"));
  {
    absl::MutexLock lock(&mu_);
    if (submits_in_flight_ >= options_.max_concurrent_submits) {
      return absl::ResourceExhaustedError(
          StrCat(submits_in_flight_, " sweep submissions are being expanded now (cartd takes ",
                 options_.max_concurrent_submits, " at a time); retry in a moment"));
    }
    ++submits_in_flight_;
  }
  absl::Cleanup done = [this] {
    absl::MutexLock lock(&mu_);
    --submits_in_flight_;
  };
  const SubmitLimits limits{options_.max_runs_per_sweep, options_.max_user_priority,
                            options_.max_sweep_bytes};
  // A big expansion's memory goes back to the system when the submit is over, refused or not:
  // glibc keeps freed arenas otherwise (one 100,000-run submit left cartd at gigabytes).
  absl::Cleanup trim = [] { malloc_trim(0); };
  CART_ASSIGN_OR_RETURN(PreparedSweep prepared,
                        PrepareSweep(*store_, request, IsAdminCaller(request.who), limits));
  const int64_t now_us = NowMicros();
  if (request.dry_run) return PreviewSweep(prepared, request.run_limit, now_us);
  store::NewSweep& sweep = prepared.sweep;
  if (sweep.client_request_id.empty()) {
    absl::MutexLock lock(&mu_);
    sweep.client_request_id = StrCat("cartd-", now_us, "-", ++request_counter_);
  }
  const std::string who = request.who.empty() ? "user" : request.who;
  CART_ASSIGN_OR_RETURN(store::CreatedSweep created,
                        store_->CreateSweep(sweep, store::Audit{now_us, who, "submitted"}));
  prepared = {};  // the runs are read back below; do not hold both copies
  SubmitResult result;
  result.sweep = created.sweep;
  result.existing = !created.created;
  store::RunPageRequest page;
  page.filter.sweeps = {created.sweep.name};
  page.limit = std::max<int64_t>(request.run_limit, 0);
  CART_ASSIGN_OR_RETURN(store::RunPage read, store_->ListRunPage(page));
  result.runs.reserve(read.rows.size());
  for (store::RunRow& row : read.rows) result.runs.push_back(std::move(row.run));
  if (created.created) WakePollers();
  return result;
}

absl::Status Scheduler::CheckSweepOwner(const std::string& sweep, const std::string& who,
                                        std::string_view action) {
  if (IsAdminCaller(who)) return absl::OkStatus();
  CART_ASSIGN_OR_RETURN(store::SweepRecord record, store_->GetSweep(sweep));
  if (record.created_by == who) return absl::OkStatus();
  return absl::PermissionDeniedError(StrCat(who, " may not ", action, " sweep '", sweep,
                                            "': it was submitted by ", record.created_by,
                                            "; only its owner or an admin may"));
}

absl::Status Scheduler::CheckRunOwner(int64_t run_id, const std::string& who,
                                      std::string_view action) {
  if (IsAdminCaller(who)) return absl::OkStatus();
  CART_ASSIGN_OR_RETURN(RunRecord run, store_->GetRun(run_id));
  CART_ASSIGN_OR_RETURN(store::SweepRecord record, store_->GetSweep(run.sweep_name));
  if (record.created_by == who) return absl::OkStatus();
  return absl::PermissionDeniedError(StrCat(
      who, " may not ", action, " run ", run_id, " (", run.sweep_name, "/", run.name,
      "): its sweep was submitted by ", record.created_by, "; only its owner or an admin may"));
}

absl::StatusOr<int64_t> Scheduler::CancelSweep(const std::string& name, const std::string& who,
                                               const std::string& reason) {
  CART_RETURN_IF_ERROR(CheckSweepOwner(name, who, "cancel"));
  CART_RETURN_IF_ERROR(CheckReason(reason));
  CART_ASSIGN_OR_RETURN(int64_t changed,
                        store_->CancelSweep(name, store::Audit{NowMicros(), who, reason}));
  store::RunFilter filter;
  filter.sweeps = {name};
  CART_ASSIGN_OR_RETURN(std::vector<RunRecord> runs, store_->ListRuns(filter));
  std::vector<int64_t> ids;
  for (const RunRecord& run : runs) {
    if (run.cancel_requested || run.state == RunState::kCancelled) ids.push_back(run.id);
    BumpRun(run.id);
  }
  PushCancels(ids, reason.empty() ? "sweep cancelled" : reason);
  return changed;
}

absl::StatusOr<int64_t> Scheduler::ResumeSweep(const std::string& name, const std::string& who) {
  CART_RETURN_IF_ERROR(CheckSweepOwner(name, who, "resume"));
  CART_RETURN_IF_ERROR(room_.CheckRoom("resuming a sweep"));
  CART_ASSIGN_OR_RETURN(int64_t changed,
                        store_->ResumeSweep(name, store::Audit{NowMicros(), who, "resumed"}));
  if (changed > 0) WakePollers();
  return changed;
}

absl::StatusOr<store::DeletedSweep> Scheduler::DeleteSweep(const std::string& name,
                                                           const std::string& who) {
  CART_RETURN_IF_ERROR(CheckSweepOwner(name, who, "delete"));
  CART_ASSIGN_OR_RETURN(store::DeletedSweep deleted, store_->DeleteSweep(name));
  ReleaseArtifacts(deleted.released_artifacts);
  // Followers of the deleted runs wake up, find them gone and end their streams.
  for (int64_t id : deleted.run_ids) BumpRun(id);
  std::fprintf(stderr, "cartd: %s deleted sweep '%s' (%lld runs, %lld metric points, %zu blobs)\n",
               who.c_str(), name.c_str(), static_cast<long long>(deleted.runs()),
               static_cast<long long>(deleted.metric_points), deleted.released_artifacts.size());
  return deleted;
}

absl::StatusOr<int64_t> Scheduler::SetSweepPriority(const std::string& name, int64_t priority,
                                                    const std::string& who) {
  if (!IsAdminCaller(who)) {
    return absl::PermissionDeniedError(
        StrCat(who, " may not set the priority of sweep '", name, "': that needs an admin token"));
  }
  if (priority < -1'000'000 || priority > 1'000'000) {
    return absl::InvalidArgumentError(
        StrCat("priority ", priority, " is outside -1000000..1000000"));
  }
  CART_ASSIGN_OR_RETURN(
      int64_t changed,
      store_->SetSweepPriority(
          name, priority, store::Audit{NowMicros(), who, StrCat("priority set to ", priority)}));
  WakePollers();
  return changed;
}

// ---- Runs

absl::StatusOr<RunRecord> Scheduler::CancelRun(int64_t run_id, const std::string& who,
                                               const std::string& reason) {
  CART_RETURN_IF_ERROR(CheckRunOwner(run_id, who, "cancel"));
  CART_RETURN_IF_ERROR(CheckReason(reason));
  CART_ASSIGN_OR_RETURN(RunRecord before, store_->GetRun(run_id));
  // Cancelling twice is idempotent.
  if (before.state == RunState::kCancelled) return before;
  CART_ASSIGN_OR_RETURN(RunRecord after,
                        store_->CancelRun(run_id, store::Audit{NowMicros(), who, reason}));
  BumpRun(run_id);
  PushCancels({run_id}, reason.empty() ? "cancelled" : reason);
  return after;
}

absl::StatusOr<RunRecord> Scheduler::ResumeRun(int64_t run_id, const std::string& who,
                                               const std::vector<std::string>& set) {
  CART_RETURN_IF_ERROR(CheckRunOwner(run_id, who, "resume"));
  CART_RETURN_IF_ERROR(room_.CheckRoom("resuming a run"));
  std::optional<store::ConfigChange> change;
  std::string why = "resumed";
  if (!set.empty()) {
    CART_ASSIGN_OR_RETURN(RunRecord current, store_->GetRun(run_id));
    CART_ASSIGN_OR_RETURN(config::RunConfig config,
                          config::ParseRunConfigYaml(current.config_yaml, StrCat("run ", run_id)));
    CART_ASSIGN_OR_RETURN(config::ResumeChange resumed, config::ApplyResumeSet(config, set));
    change = store::ConfigChange{config::ToYaml(resumed.config), {}};
    change->params = config::RunParams(resumed.config, config::DerivedName(current.params));
    why = StrCat("resumed with ", StrJoin(resumed.changed, ", "));
  }
  CART_ASSIGN_OR_RETURN(RunRecord run,
                        store_->ResumeRun(run_id, store::Audit{NowMicros(), who, why}, change));
  BumpRun(run_id);
  WakePollers();
  return run;
}

absl::StatusOr<RunRecord> Scheduler::SetRunDeviceClass(int64_t run_id, bool any,
                                                       const std::string& who,
                                                       const std::string& reason) {
  CART_RETURN_IF_ERROR(CheckRunOwner(run_id, who, any ? "unpin" : "pin"));
  CART_RETURN_IF_ERROR(CheckReason(reason));
  CART_ASSIGN_OR_RETURN(RunRecord run, store_->SetDeviceClassPolicy(
                                           run_id, any, store::Audit{NowMicros(), who, reason}));
  BumpRun(run_id);
  WakePollers();
  return run;
}

std::string_view ExtendScheduleName(ExtendSchedule schedule) {
  switch (schedule) {
    case ExtendSchedule::kStretch:
      return "stretch";
    case ExtendSchedule::kHold:
      return "hold";
    case ExtendSchedule::kAsk:
      break;
  }
  return "ask";
}

absl::StatusOr<ExtendOutcome> Scheduler::ExtendRun(int64_t run_id, int64_t total_steps,
                                                   ExtendSchedule schedule,
                                                   const std::string& who) {
  CART_RETURN_IF_ERROR(CheckRunOwner(run_id, who, "extend"));
  CART_RETURN_IF_ERROR(room_.CheckRoom("extending a run"));
  // The state and the step count are checked once, by the store, inside the write (a check here
  // would read outside it); this re-resolves the config with the new steps and schedule.
  CART_ASSIGN_OR_RETURN(RunRecord run, store_->GetRun(run_id));
  CART_ASSIGN_OR_RETURN(config::RunConfig config,
                        config::ParseRunConfigYaml(run.config_yaml, StrCat("run ", run_id)));
  const config::Extension plan = config::PlanExtension(config, total_steps);
  ExtendOutcome out;
  out.from_step = plan.from_step;
  out.lr_before = plan.lr_before;
  const bool extendable = run.state == RunState::kSucceeded && total_steps > out.from_step;
  if (schedule == ExtendSchedule::kAsk) {
    if (extendable && !plan.StretchIsGentle()) {
      return absl::FailedPreconditionError(StrCat(
          "extending run ", run_id, " from ", out.from_step, " to ", total_steps,
          " steps with the cosine recomputed over the new total would change its learning rate "
          "from ",
          Sci(out.lr_before), " at step ", out.from_step, " to ", Sci(plan.stretched_lr),
          " at step ", out.from_step + 1, " (", Fixed(plan.StretchRatio(), 1),
          "x): a warm restart. Say which: --schedule stretch for that, or --schedule hold to go "
          "on at ",
          Sci(plan.held_lr), " (docs/design.md \"Extending a run\")"));
    }
    schedule = ExtendSchedule::kStretch;
  }
  out.schedule = schedule;
  const config::RunConfig& chosen = schedule == ExtendSchedule::kHold ? plan.held : plan.stretched;
  out.lr_after = schedule == ExtendSchedule::kHold ? plan.held_lr : plan.stretched_lr;
  CART_RETURN_IF_ERROR(config::Validate(chosen));
  const std::string why =
      StrCat("schedule ", ExtendScheduleName(schedule), ": learning rate ", Sci(out.lr_before),
             " at step ", out.from_step, " -> ", Sci(out.lr_after), " at step ", out.from_step + 1);
  const store::ConfigChange change{config::ToYaml(chosen),
                                   config::RunParams(chosen, config::DerivedName(run.params))};
  CART_ASSIGN_OR_RETURN(
      out.run, store_->ExtendRun(run_id, total_steps, change, store::Audit{NowMicros(), who, why}));
  BumpRun(run_id);
  WakePollers();
  return out;
}

// ---- Tags and notes

absl::StatusOr<RunRecord> Scheduler::AnnotateRun(int64_t run_id,
                                                 const store::AnnotationChange& change,
                                                 const std::string& who) {
  CART_RETURN_IF_ERROR(room_.CheckRoom("changing tags or notes"));
  return Noted(store_->AnnotateRun(run_id, change, store::Audit{NowMicros(), who, ""}));
}

absl::StatusOr<store::SweepRecord> Scheduler::AnnotateSweep(const std::string& name,
                                                            const store::AnnotationChange& change,
                                                            const std::string& who) {
  CART_RETURN_IF_ERROR(room_.CheckRoom("changing tags or notes"));
  return Noted(store_->AnnotateSweep(name, change, store::Audit{NowMicros(), who, ""}));
}

// ---- Workers

absl::StatusOr<WorkerTiming> Scheduler::RegisterWorker(const WorkerInfo& worker) {
  if (worker.id.empty()) return absl::InvalidArgumentError("worker_id is empty");
  if (worker.memory_bytes <= 0) {
    return absl::InvalidArgumentError(StrCat("worker '", worker.id,
                                             "': device memory must be "
                                             "positive, got ",
                                             worker.memory_bytes, " bytes"));
  }
  const int64_t now_us = NowMicros();
  const std::string device = DeviceLabel(worker);
  // Runs are placed and fitted into what the reserve leaves (the CUDA context, cuBLAS's
  // workspace, a desktop: config::DefaultMemoryReserveBytes); the store keeps that figure, so a
  // restarted cartd places by it too.
  WorkerInfo usable = worker;
  usable.memory_bytes = config::UsableMemoryBytes(worker.memory_bytes, worker.memory_reserve_bytes);
  usable.memory_reserve_bytes = 0;
  CART_RETURN_IF_ERROR(store_->RegisterWorker(worker.id, device, usable.memory_bytes, now_us));
  {
    absl::MutexLock lock(&mu_);
    workers_.Register(usable, now_us);
  }
  // A bigger device may fit runs nobody could take; a re-registered one is no longer draining.
  WakePollers();
  return timing();
}

void Scheduler::NoteClaim(const Job& job, const std::string& worker_id,
                          std::optional<int64_t> done_steps) {
  Running r;
  r.worker_id = worker_id;
  r.attempt = job.attempt;
  r.work_hours = job.run.work_hours;
  r.steps = job.run.steps;
  r.claimed_us = NowMicros();
  const int64_t done = done_steps.value_or(job.resume_from ? job.resume_from->step : 0);
  r.done_steps_at_claim = done;
  r.remaining_hours_at_claim = store::RemainingWorkHours(r.work_hours, r.steps, done);
  r.priority = job.run.priority;
  r.sweep_id = job.run.sweep_id;
  r.trains = job.kind == JobKind::kTrain;
  r.has_checkpoint = job.resume_from.has_value();
  if (absl::StatusOr<store::SweepRecord> sweep = store_->GetSweep(job.run.sweep_name); sweep.ok()) {
    r.owner = sweep->created_by;
  }
  if (absl::StatusOr<config::RunConfig> config =
          config::ParseRunConfigYaml(job.run.config_yaml, StrCat("run ", job.run.id));
      config.ok()) {
    r.tokens =
        config->train.steps * config->train.batch * config->train.accum * config->train.seq_len;
  }
  absl::MutexLock lock(&mu_);
  progress_.erase(job.run.id);  // this attempt's pace is measured from its own reports
  progress_at_us_.erase(job.run.id);
  running_[job.run.id] = std::move(r);
  not_placed_.erase(job.run.id);
}

void Scheduler::RecoverRunning() {
  if (absl::StatusOr<store::RunPage> page = LiveRuns(); page.ok()) {
    for (const store::RunRow& row : page->rows) {
      if (row.worker_id.empty()) continue;
      Job job;
      job.run = row.run;
      job.attempt = row.run.attempt;
      job.kind = row.run.kind;
      if (absl::StatusOr<std::optional<store::CheckpointRecord>> latest =
              store_->LatestCheckpoint(row.run.id);
          latest.ok()) {
        job.resume_from = *latest;
      }
      // Its pace is measured from here: the steps it reports from now on, over the time from now.
      NoteClaim(job, row.worker_id, row.step);
    }
  } else {
    std::fprintf(stderr, "cartd: could not read the runs held before this start: %s\n",
                 Message(page.status()).c_str());
  }
  // Runs preempted within the interval before a restart are not preempted again within it.
  if (!options_.preemption) return;
  absl::StatusOr<std::map<int64_t, int64_t>> recent =
      store_->RecentPreemptions(NowMicros() - absl::ToInt64Microseconds(options_.preempt_interval));
  if (!recent.ok()) {
    std::fprintf(stderr, "cartd: could not read recent preemptions: %s\n",
                 Message(recent.status()).c_str());
    return;
  }
  absl::MutexLock lock(&mu_);
  last_preempted_us_ = *std::move(recent);
}

void Scheduler::MeasureSpeed(int64_t run_id, double tokens_per_s) {
  auto run = running_.find(run_id);
  if (run == running_.end() || run->second.tokens <= 0 || run->second.work_hours <= 0 ||
      !(tokens_per_s > 0)) {
    return;
  }
  // What an RTX 3090 would reach on this run (its work estimate), against what this device did.
  const double rtx3090_tokens_per_s =
      static_cast<double>(run->second.tokens) / (run->second.work_hours * 3600.0);
  workers_.MeasureSpeed(run->second.worker_id, tokens_per_s / rtx3090_tokens_per_s);
}

absl::StatusOr<std::optional<store::Claim>> Scheduler::Place(const std::string& worker_id,
                                                             int64_t memory) {
  const int64_t now_us = NowMicros();
  CART_ASSIGN_OR_RETURN(const BudgetLedger ledger, Ledger(now_us));
  const bool first_fit = options_.placement == SchedulerOptions::Placement::kFirstFit;
  if (first_fit && ledger.Empty()) return store_->ClaimNextRun(worker_id, memory, now_us);
  const int64_t largest = std::max(memory, MaxWorkerMemory().value_or(memory));
  CART_ASSIGN_OR_RETURN(std::vector<store::PlaceableRun> queued,
                        store_->ListQueuedWork(kMostWeighed, largest));
  if (queued.empty()) return std::optional<store::Claim>();
  PlacementWorker asker;
  std::vector<PlacementWorker> others;
  {
    absl::MutexLock lock(&mu_);
    for (PlacementWorker& w : workers_.Fleet(now_us, worker_id, BusyHoursLocked(now_us))) {
      if (w.id == worker_id) {
        asker = std::move(w);
        asker.free_in_hours = 0;
      } else {
        others.push_back(std::move(w));
      }
    }
  }
  // Runs that would overrun a budget on this worker wait, saying so (server/budgets.h).
  std::map<int64_t, std::string> over_budget;
  HoldOverBudget(ledger, asker.speed, worker_id, queued, &over_budget);
  NoteOverBudget(over_budget);
  if (first_fit) {
    // The store's order (priority, then oldest) among the runs the budgets let start.
    std::sort(queued.begin(), queued.end(), [](const auto& a, const auto& b) {
      return std::tie(b.priority, a.created_us, a.id) < std::tie(a.priority, b.created_us, b.id);
    });
    for (const store::PlaceableRun& run : queued) {
      if (!Fits(run, memory)) continue;
      CART_ASSIGN_OR_RETURN(std::optional<store::Claim> claim,
                            store_->ClaimRun(worker_id, run.id, memory, now_us));
      if (!claim) WakePollers();
      return claim;
    }
    return std::optional<store::Claim>();
  }
  std::map<std::string, double> usage;
  if (options_.fair_share_half_life > absl::ZeroDuration()) {
    CART_ASSIGN_OR_RETURN(usage, Usage(now_us));
    for (const store::PlaceableRun& r : queued) usage.try_emplace(r.owner, 0.0);
  }
  CART_ASSIGN_OR_RETURN(store::SeedGroupClasses groups, SeedGroups(queued));
  PlacementDecision decision = PlaceEarliestFinish(asker, others, std::move(queued), usage, groups);
  {
    absl::MutexLock lock(&mu_);
    for (auto& [run_id, why] : decision.declined) {
      if (not_placed_.size() < 10'000 || not_placed_.count(run_id)) not_placed_[run_id] = why;
    }
  }
  if (!decision.run_id) return std::optional<store::Claim>();
  CART_ASSIGN_OR_RETURN(std::optional<store::Claim> claim,
                        store_->ClaimRun(worker_id, *decision.run_id, memory, now_us));
  if (!claim) WakePollers();  // taken meanwhile: plan again at once
  return claim;
}

absl::StatusOr<store::SeedGroupClasses> Scheduler::SeedGroups(
    const std::vector<store::PlaceableRun>& queued) {
  // Read only when a queued run is of a balanced sweep: most queues have none.
  if (std::none_of(queued.begin(), queued.end(),
                   [](const store::PlaceableRun& r) { return !r.seed_group.empty(); })) {
    return store::SeedGroupClasses();
  }
  return store_->ListSeedGroupClasses();
}

std::map<int64_t, double> Scheduler::HoursLeftLocked(int64_t now_us) {
  std::map<int64_t, double> hours_left;
  for (const auto& [run_id, r] : running_) {
    const WorkerRegistry::Worker* w = workers_.Find(r.worker_id);
    if (w == nullptr || w->speed <= 0) continue;
    // Hours of wall time left: at the pace its steps have gone so far once it has reported
    // progress (the estimate may be far off: a CPU, a throttled card), else the estimate less
    // the time it has run (the whole estimate again once it has overrun).
    const double elapsed = static_cast<double>(now_us - r.claimed_us) / 3.6e9;
    const auto p = progress_.find(run_id);
    const int64_t done = p == progress_.end() ? 0 : p->second - r.done_steps_at_claim;
    double left;
    if (done > 0 && elapsed > 0 && r.steps > 0) {
      left = elapsed / static_cast<double>(done) *
             static_cast<double>(std::max<int64_t>(r.steps - p->second, 0));
    } else {
      const double estimate = r.remaining_hours_at_claim / w->speed;
      left = estimate > elapsed ? estimate - elapsed : estimate;
    }
    hours_left[run_id] = left;
  }
  return hours_left;
}

std::map<std::string, double> Scheduler::BusyHoursLocked(int64_t now_us) {
  std::map<std::string, double> busy_hours;
  for (const auto& [run_id, left] : HoursLeftLocked(now_us)) {
    busy_hours[running_.at(run_id).worker_id] = left;
  }
  return busy_hours;
}

absl::StatusOr<std::map<std::string, double>> Scheduler::Usage(int64_t now_us) {
  {
    absl::MutexLock lock(&mu_);
    // Read again at most once a minute of clock time: it scans the recent attempts.
    if (usage_at_us_ != 0 && now_us - usage_at_us_ < 60'000'000 && now_us >= usage_at_us_) {
      return usage_;
    }
  }
  using Usage = std::map<std::string, double>;
  CART_ASSIGN_OR_RETURN(
      Usage usage,
      store_->DecayedUsage(now_us, absl::ToInt64Microseconds(options_.fair_share_half_life)));
  absl::MutexLock lock(&mu_);
  usage_ = usage;
  usage_at_us_ = now_us;
  return usage;
}

void Scheduler::FitToDevice(Job& job, const std::string& worker_id, int64_t memory_bytes,
                            const config::MemoryKernels& kernels, bool raise) {
  const std::string source = StrCat("run ", job.run.id, " config");
  absl::StatusOr<config::RunConfig> config =
      config::ParseRunConfigYaml(job.run.config_yaml, source);
  if (!config.ok()) return;  // stored configs parse; if not, the worker reports the error
  bool capped = false;
  const config::MicroBatchFit fit = config::MicroBatchOnDevice(
      *config, memory_bytes, kernels, job.run.micro_batch_cap, &capped, raise);
  if (fit.batch == config->train.batch) return;
  const bool raised = fit.batch > config->train.batch;
  const std::string note = StrCat(
      "cartd: micro-batch ", config->train.batch, " -> ", fit.batch, ", gradient accumulation ",
      config->train.accum, " -> ", fit.accum, " (global batch ", fit.batch * fit.accum, " kept) ",
      capped ? StrCat("as the run ran out of memory at a larger one (cap ", job.run.micro_batch_cap,
                      "), on worker '", worker_id, "'")
             : StrCat(raised ? "to use the memory of worker '" : "to fit worker '", worker_id, "'"),
      " (", FormatGiB(memory_bytes), " usable after its reserve; estimate on ",
      config::DescribeKernels(kernels), " ",
      FormatGiB(config::EstimateTrainingBytes(*config, kernels)), " -> ", FormatGiB(fit.bytes),
      ")");
  config->train.batch = fit.batch;
  config->train.accum = fit.accum;
  job.run.config_yaml = config::ToYaml(*config);
  store::LogLine line;
  line.wall_time_us = NowMicros();
  line.text = note;
  // The note is for `cart runs logs`; the job goes out whether or not it could be stored.
  (void)store_->AppendLog(job.run.id, job.attempt, {line});
}

absl::StatusOr<std::optional<Job>> Scheduler::Acquire(const std::string& worker_id,
                                                      absl::Duration wait) {
  const absl::Time deadline =
      absl::Now() + std::clamp(wait, absl::ZeroDuration(), options_.max_acquire_wait);
  while (true) {
    int64_t memory = 0;
    config::MemoryKernels kernels;
    bool gpu = false;  // its spare memory raises a run's micro-batch (FitToDevice)
    int64_t generation = 0;
    {
      absl::MutexLock lock(&mu_);
      if (shutdown_) return absl::UnavailableError("cartd is shutting down; retry later");
      WorkerRegistry::Worker* worker = workers_.Find(worker_id);
      if (worker == nullptr) {
        return absl::FailedPreconditionError(
            StrCat("worker '", worker_id, "' is not registered; call RegisterWorker first"));
      }
      if (worker->draining) {
        absl::Status draining = absl::FailedPreconditionError(
            StrCat("worker '", worker_id, "' is draining: take no new job and exit"));
        draining.SetPayload(kDrainingPayload, absl::Cord("1"));
        return draining;
      }
      memory = worker->info.memory_bytes;
      kernels = KernelsOf(worker->info);
      gpu = options_.raise_micro_batch && worker->info.device_kind == "cuda";
      generation = generation_;
      worker->last_seen_us = NowMicros();
      // A worker asking for a job holds none: whatever it ran has ended (or was cancelled
      // before it started).
      for (auto r = running_.begin(); r != running_.end();) {
        r = r->second.worker_id == worker_id ? running_.erase(r) : std::next(r);
      }
      if (worker->info.DiskFull() || room_.full()) {
        // No job for a worker below its own disk floor, nor from a cartd whose disk is full (a
        // lease is a write): it waits out its poll (and asks again) and stays alive meanwhile.
        while (!shutdown_ && !pollers_cv_.WaitWithDeadline(&mu_, deadline)) {
        }
        return std::optional<Job>();
      }
    }
    absl::StatusOr<std::optional<store::Claim>> claim = Noted(Place(worker_id, memory));
    if (!claim.ok()) {
      if (claim.status().code() == absl::StatusCode::kNotFound) {
        return absl::FailedPreconditionError(Message(claim.status()));
      }
      return claim.status();
    }
    if (claim->has_value()) {
      store::Claim& c = **claim;
      Job job;
      job.kind = c.run.kind;
      job.eval_loops = c.run.eval_loops;
      job.attempt = c.attempt;
      job.lease_expires_us = c.lease_expires_us;
      job.resume_from = std::move(c.resume_from);
      job.init_from = std::move(c.parent_checkpoint);
      job.data = std::move(c.data);
      job.run = std::move(c.run);
      // A training run is fitted to every worker: the stored estimate is a GPU worker's, and
      // this worker's kernels may keep more (docs/model.md §5 "Training memory").
      if (job.kind == JobKind::kTrain || job.run.memory_estimate_bytes > memory ||
          job.run.micro_batch_cap > 0) {
        FitToDevice(job, worker_id, memory, kernels, gpu && job.kind == JobKind::kTrain);
      }
      NoteClaim(job, worker_id);
      // Workers that waited planned with this one free: they plan again.
      if (options_.placement == SchedulerOptions::Placement::kEarliestFinish) WakePollers();
      BumpRun(job.run.id);
      counters_.AddJobHandedOut();
      return std::optional<Job>(std::move(job));
    }
    absl::MutexLock lock(&mu_);
    ++waiting_acquires_;
    while (!shutdown_ && generation_ == generation) {
      if (pollers_cv_.WaitWithDeadline(&mu_, deadline)) break;
    }
    --waiting_acquires_;
    if (shutdown_ || absl::Now() >= deadline) return std::optional<Job>();
  }
}

void Scheduler::NoteWorkerDisk(const std::string& worker_id, int64_t free_bytes,
                               int64_t floor_bytes) {
  absl::MutexLock lock(&mu_);
  if (WorkerRegistry::Worker* worker = workers_.Find(worker_id); worker != nullptr) {
    worker->info.free_disk_bytes = free_bytes;
    worker->info.disk_floor_bytes = floor_bytes;
  }
}

int Scheduler::waiting_acquires() {
  absl::MutexLock lock(&mu_);
  return waiting_acquires_;
}

int Scheduler::submits_in_flight() {
  absl::MutexLock lock(&mu_);
  return submits_in_flight_;
}

std::optional<int64_t> Scheduler::MaxWorkerMemory() {
  absl::MutexLock lock(&mu_);
  return workers_.MaxMemory();
}

absl::Status Scheduler::DrainWorker(const std::string& worker_id, const std::string& who) {
  if (!IsAdminCaller(who)) {
    return absl::PermissionDeniedError(
        StrCat(who, " may not drain worker '", worker_id, "': draining needs an admin token"));
  }
  {
    absl::MutexLock lock(&mu_);
    WorkerRegistry::Worker* worker = workers_.Find(worker_id);
    if (worker == nullptr) {
      return absl::NotFoundError(StrCat("worker '", worker_id, "' is not registered"));
    }
    worker->draining = true;
    // An idle worker in a long poll hears it now.
    ++generation_;
    pollers_cv_.SignalAll();
  }
  PushControl([&](const OpenStream& s) { return s.worker_id == worker_id; },
              Control{Control::Kind::kDrain, StrCat("drain requested by ", who)});
  return absl::OkStatus();
}

std::vector<WorkerStatus> Scheduler::ListWorkers(bool device_history) {
  // Which worker holds which run, and its MFU, from the store's live attempts (one paged read).
  std::map<std::string, const store::RunRow*> busy;
  absl::StatusOr<store::RunPage> page = LiveRuns({"mfu", "mfu_6n"});
  if (page.ok()) {
    for (const store::RunRow& row : page->rows) {
      if (!row.worker_id.empty()) busy[row.worker_id] = &row;
    }
  }
  std::map<std::string, FleetWatch::Device> devices = fleet_.Devices(device_history);
  const int64_t now_us = NowMicros();
  std::vector<WorkerStatus> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, worker] : workers_.all()) {
    WorkerStatus status;
    status.info = worker.info;
    status.speed = worker.speed;
    status.speed_source = worker.speed_source;
    status.last_seen_us = worker.last_seen_us;
    if (auto it = busy.find(id); it != busy.end()) {
      status.run_id = it->second->run.id;
      status.run_name = StrCat(it->second->run.sweep_name, "/", it->second->run.name);
      if (auto mfu = it->second->latest.find("mfu"); mfu != it->second->latest.end()) {
        status.run_mfu = mfu->second;
      }
      if (auto mfu = it->second->latest.find("mfu_6n"); mfu != it->second->latest.end()) {
        status.run_mfu_6n = mfu->second;
      }
    }
    if (auto d = devices.find(id); d != devices.end()) {
      status.device = std::move(d->second.history);
      status.idle_while_queued_s = d->second.idle_while_queued_s;
      status.idle_while_queued = d->second.idle_while_queued;
    }
    // A drained worker exits: once it is not seen it is lost, not draining for ever.
    const bool stale = workers_.Lost(status.last_seen_us, now_us);
    if (worker.draining && !stale) {
      status.state = "draining";
    } else if (status.run_id != 0) {
      status.state = "busy";
    } else if (stale) {
      status.state = "lost";
    } else if (worker.info.DiskFull()) {
      status.state = "disk_full";
    } else {
      status.state = "idle";
    }
    out.push_back(std::move(status));
  }
  return out;
}

absl::StatusOr<int> Scheduler::RecordDeviceSamples(const std::string& worker_id,
                                                   const DeviceIdentity& device,
                                                   const std::vector<DeviceSample>& samples) {
  {
    absl::MutexLock lock(&mu_);
    WorkerRegistry::Worker* worker = workers_.Find(worker_id);
    if (worker == nullptr) {
      return absl::FailedPreconditionError(
          StrCat("worker '", worker_id, "' is not registered; call RegisterWorker first"));
    }
    worker->last_seen_us = NowMicros();
    WorkerInfo& info = worker->info;
    if (!device.kind.empty()) info.device_kind = device.kind;
    if (!device.name.empty()) info.device_name = device.name;
    info.device_index = device.index;
    info.uuid = device.uuid;
  }
  // A reading stamped ahead of cartd's clock (a worker's clock set wrong) would hide every real
  // one until that time: readings stamped more than a minute ahead are dropped.
  const int64_t latest_us = NowMicros() + 60'000'000;
  std::vector<DeviceSample> kept;
  kept.reserve(samples.size());
  for (const DeviceSample& s : samples) {
    if (s.at_us <= latest_us) kept.push_back(s);
  }
  return fleet_.Record(worker_id, kept);
}

absl::Status Scheduler::AccountIdle() {
  const int64_t now_us = NowMicros();
  int64_t dt_us = 0;
  {
    absl::MutexLock lock(&mu_);
    if (last_idle_tick_us_ > 0) {
      dt_us = std::clamp<int64_t>(now_us - last_idle_tick_us_, 0, 5'000'000);
    }
    last_idle_tick_us_ = now_us;
    if (workers_.empty()) return absl::OkStatus();
  }
  // Who holds a run, from the store (a restarted cartd's running_ knows only new claims), and
  // whether any run waits: two small reads, the live runs being at most one per worker.
  CART_ASSIGN_OR_RETURN(store::RunPage holding, LiveRuns());
  store::RunPageRequest queued;
  queued.filter.states = {RunState::kQueued};
  queued.limit = 1;
  CART_ASSIGN_OR_RETURN(store::RunPage waiting, store_->ListRunPage(queued));
  std::set<std::string> holders;
  for (const store::RunRow& row : holding.rows) holders.insert(row.worker_id);
  std::set<std::string> idle;
  if (waiting.total > 0) {
    absl::MutexLock lock(&mu_);
    idle = workers_.Idle(now_us, holders);
  }
  fleet_.AccountIdle(idle, dt_us);
  return absl::OkStatus();
}

// ---- Attempt reports

absl::StatusOr<std::string> Scheduler::WorkerOfAttempt(int64_t run_id, int64_t attempt) {
  CART_ASSIGN_OR_RETURN(std::vector<store::AttemptRecord> attempts, store_->ListAttempts(run_id));
  for (const store::AttemptRecord& a : attempts) {
    if (a.attempt == attempt) return a.worker_id;
  }
  return absl::FailedPreconditionError(StrCat("run ", run_id, " has no attempt ", attempt));
}

absl::StatusOr<std::vector<store::RunDataRecord>> Scheduler::RecordRunData(
    int64_t run_id, int64_t attempt, const std::string& worker_id,
    std::vector<store::RunDataRecord> files) {
  const int64_t now_us = NowMicros();
  for (store::RunDataRecord& f : files) {
    f.recorded_by = StrCat("worker ", worker_id, " (attempt ", attempt, ")");
    f.recorded_us = now_us;
  }
  return store_->RecordRunData(run_id, attempt, files, now_us);
}

absl::Status Scheduler::RecordEnvironment(
    int64_t run_id, int64_t attempt,
    const std::vector<std::pair<std::string, std::string>>& items) {
  return Noted(store_->RecordEnvironment(run_id, attempt, items));
}

absl::Status Scheduler::AttachStream(int64_t run_id, int64_t attempt,
                                     std::shared_ptr<AttemptStream> stream) {
  CART_RETURN_IF_ERROR(store_->MarkRunning(run_id, attempt, NowMicros()));
  CART_ASSIGN_OR_RETURN(std::string worker_id, WorkerOfAttempt(run_id, attempt));
  CART_ASSIGN_OR_RETURN(RunRecord run, store_->GetRun(run_id));
  bool draining = false;
  std::optional<std::string> preempted;  // asked before this stream opened (a reconnect)
  {
    absl::MutexLock lock(&mu_);
    if (shutdown_) return absl::UnavailableError("cartd is shutting down; reconnect later");
    WorkerRegistry::Worker* worker = workers_.Find(worker_id);
    draining = worker != nullptr && worker->draining;
    if (worker != nullptr) worker->last_seen_us = NowMicros();
    streams_.push_back(OpenStream{run_id, attempt, worker_id, stream});
    if (auto ask = preempt_asked_.find(run_id);
        ask != preempt_asked_.end() && ask->second.attempt == attempt) {
      preempted = ask->second.reason;
    }
  }
  BumpRun(run_id);
  if (run.cancel_requested) stream->Send(Control{Control::Kind::kCancel, "cancel requested"});
  if (draining) stream->Send(Control{Control::Kind::kDrain, "drain requested"});
  if (preempted) stream->Send(Control{Control::Kind::kPreempt, *preempted});
  return absl::OkStatus();
}

void Scheduler::DetachStream(int64_t run_id, const AttemptStream* stream) {
  absl::MutexLock lock(&mu_);
  streams_.erase(std::remove_if(streams_.begin(), streams_.end(),
                                [&](const OpenStream& s) {
                                  return s.run_id == run_id && s.stream.get() == stream;
                                }),
                 streams_.end());
}

absl::StatusOr<bool> Scheduler::Heartbeat(int64_t run_id, int64_t attempt, int64_t step) {
  CART_ASSIGN_OR_RETURN(store::HeartbeatReply reply,
                        Noted(store_->Heartbeat(run_id, attempt, NowMicros())));
  absl::MutexLock lock(&mu_);
  NoteProgressLocked(run_id, step);
  // The store saw the run's worker; liveness reads the registry, so it sees it too.
  if (auto it = running_.find(run_id); it != running_.end() && it->second.attempt == attempt) {
    workers_.Seen(it->second.worker_id, NowMicros());
  }
  return reply.cancel_requested;
}

absl::Status Scheduler::AppendLog(int64_t run_id, int64_t attempt,
                                  const std::vector<store::LogLine>& lines) {
  CART_RETURN_IF_ERROR(Noted(store_->AppendLog(run_id, attempt, lines).status()));
  BumpRun(run_id);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Scheduler::AppendMetrics(int64_t run_id, int64_t attempt,
                                                 std::vector<store::MetricPoint> points) {
  const auto start = std::chrono::steady_clock::now();
  const int64_t count = static_cast<int64_t>(points.size());
  // The batch's latest tokens/s measures the worker's speed (placement).
  std::optional<double> tokens_per_s;
  int64_t tokens_step = -1;
  for (const store::MetricPoint& p : points) {
    if (p.name == "tokens_per_s" && p.step > tokens_step) {
      tokens_per_s = p.value;
      tokens_step = p.step;
    }
  }
  CART_ASSIGN_OR_RETURN(int64_t acked,
                        Noted(store_->AppendMetrics(run_id, attempt, std::move(points))));
  counters_.AddIngest(
      count, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  {
    absl::MutexLock lock(&mu_);
    NoteProgressLocked(run_id, acked);
    if (tokens_per_s) MeasureSpeed(run_id, *tokens_per_s);
    BumpRunLocked(run_id);
  }
  return acked;
}

void Scheduler::NoteProgressLocked(int64_t run_id, int64_t step) {
  int64_t& progress = progress_[run_id];
  if (step > progress) {
    progress = step;
    progress_at_us_[run_id] = NowMicros();
  }
}

absl::Status Scheduler::Noted(absl::Status status) {
  if (std::optional<std::string> changed = room_.NoteWrite(status, NowMicros())) {
    std::fprintf(stderr, "cartd: %s\n", changed->c_str());
  }
  return status;
}

void Scheduler::ReleaseArtifacts(const std::vector<std::string>& shas) {
  if (!options_.release_artifact || shas.empty()) return;
  // Deleted only while no checkpoint names them, checked in the same write as the deletion:
  // blobs are shared by content, and another run may have recorded the same one since.
  if (absl::Status removed = store_->RemoveUnnamedArtifacts(shas, options_.release_artifact);
      !removed.ok()) {
    // What is left on disk is removed as unknown when cartd next starts.
    std::fprintf(stderr, "cartd: releasing %zu blobs: %s\n", shas.size(), Message(removed).c_str());
  }
}

absl::StatusOr<store::CheckpointRecord> Scheduler::RecordCheckpoint(
    int64_t run_id, int64_t attempt, const store::NewCheckpoint& checkpoint,
    const std::function<absl::Status()>& blob_present) {
  CART_ASSIGN_OR_RETURN(
      store::CheckpointRecord record,
      Noted(store_->RecordCheckpoint(run_id, attempt, checkpoint, NowMicros(), blob_present)));
  if (options_.keep_checkpoints > 0) {
    // The checkpoint is recorded whatever happens here; an artifact whose removal fails now is
    // removed as unknown when cartd next starts.
    absl::StatusOr<std::vector<std::string>> released =
        store_->PruneCheckpoints(run_id, options_.keep_checkpoints);
    if (!released.ok()) {
      std::fprintf(stderr, "cartd: checkpoint retention of run %lld: %s\n",
                   static_cast<long long>(run_id), Message(released.status()).c_str());
    } else {
      ReleaseArtifacts(*released);
    }
  }
  {
    absl::MutexLock lock(&mu_);
    if (auto it = running_.find(run_id); it != running_.end() && it->second.attempt == attempt) {
      it->second.has_checkpoint = true;  // preemption may now stop it
    }
  }
  BumpRun(run_id);
  // Derived runs waiting for this step may have become QUEUED.
  WakePollers();
  return record;
}

absl::StatusOr<RunRecord> Scheduler::ReportOutcome(int64_t run_id, int64_t attempt,
                                                   store::AttemptOutcome outcome,
                                                   const std::string& error,
                                                   std::optional<store::Divergence> diverged) {
  using store::AttemptOutcome;
  if (outcome == AttemptOutcome::kLost) {
    return absl::InvalidArgumentError(
        StrCat("run ", run_id, ": LOST is set by lease expiry, not reported by a worker"));
  }
  const int64_t now_us = NowMicros();
  std::string worker_id = "unknown";
  if (absl::StatusOr<std::string> w = WorkerOfAttempt(run_id, attempt); w.ok()) worker_id = *w;
  const std::string who = StrCat("worker:", worker_id);
  std::string why = StrCat("attempt ", attempt, " reported ", store::AttemptOutcomeName(outcome));
  // A worker's error text is kept whole up to kMaxReasonBytes × 4, then cut: the report itself
  // must never be refused for its length (the attempt would never end).
  if (!error.empty()) {
    constexpr size_t kMaxError = kMaxReasonBytes * 4;
    why = StrCat(
        why, ": ",
        error.size() > kMaxError ? StrCat(ValidUtf8(error.substr(0, kMaxError)), "…") : error);
  }
  store::EventCause cause = store::EventCause::kNone;
  if (outcome == AttemptOutcome::kDrained) {
    absl::MutexLock lock(&mu_);
    if (auto ask = preempt_asked_.find(run_id);
        ask != preempt_asked_.end() && ask->second.attempt == attempt) {
      why = StrCat(why, " (preempted: ", ask->second.reason, ")");
      cause = store::EventCause::kPreempted;
    }
  }
  absl::StatusOr<RunRecord> result;
  switch (outcome) {
    case AttemptOutcome::kSucceeded:
    case AttemptOutcome::kCancelled:
    case AttemptOutcome::kDrained:
      result = store_->RecordAttemptOutcome(run_id, attempt, outcome,
                                            store::Audit{now_us, who, why, cause});
      break;
    case AttemptOutcome::kFailed:
    case AttemptOutcome::kLost:  // refused above
      if (diverged) {
        // Resume is exact: a retry would replay the same steps to the same loss.
        why = StrCat(why, "; not retried: resuming it unchanged would diverge at step ",
                     diverged->step, " again (cart runs resume ", run_id, " --set lr=...)");
        result = store_->RecordAttemptOutcome(run_id, attempt, AttemptOutcome::kFailed,
                                              store::Audit{now_us, who, why}, diverged);
        break;
      }
      result = store_->RetryAttempt(run_id, attempt, store::RetryRequest{},
                                    store::Audit{now_us, who, why});
      break;
    case AttemptOutcome::kOutOfMemory: {
      int64_t memory = 0;
      config::MemoryKernels kernels;
      bool gpu = false;  // as Acquire fitted it: raised on a GPU
      {
        absl::MutexLock lock(&mu_);
        if (const WorkerRegistry::Worker* worker = workers_.Find(worker_id); worker != nullptr) {
          memory = worker->info.memory_bytes;
          kernels = KernelsOf(worker->info);
          gpu = options_.raise_micro_batch && worker->info.device_kind == "cuda";
        }
      }
      if (memory <= 0) {
        // Without the device size the floor cannot be set; retrying as a failure still ends.
        result = store_->RetryAttempt(run_id, attempt, store::RetryRequest{},
                                      store::Audit{now_us, who, why});
        break;
      }
      store::RetryRequest retry;
      retry.counted = false;
      // A smaller micro-batch first (the global batch kept by accumulation), at the same device
      // size: on a lab whose cards are all one size a memory floor would strand the run for
      // ever. Only at micro-batch 1 does it wait for a device with more memory.
      std::optional<int64_t> smaller;
      int64_t micro = 0;
      // (Training only: an evaluation does not train in micro-batches.)
      if (absl::StatusOr<RunRecord> run = store_->GetRun(run_id);
          run.ok() && run->kind == JobKind::kTrain) {
        if (absl::StatusOr<config::RunConfig> config =
                config::ParseRunConfigYaml(run->config_yaml, StrCat("run ", run_id));
            config.ok()) {
          micro = config::MicroBatchOnDevice(*config, memory, kernels, run->micro_batch_cap,
                                             nullptr, gpu)
                      .batch;
          smaller = config::SmallerMicroBatch(config->train.batch * config->train.accum, micro);
        }
      }
      if (smaller) {
        retry.micro_batch_cap = *smaller;
        why = StrCat(why, " (device ", FormatGiB(memory), ", micro-batch ", micro,
                     "): retried at micro-batch ", *smaller,
                     " with more accumulation, the global batch kept");
      } else {
        retry.oom_memory_bytes = memory;
        why = StrCat(why, " (device ", FormatGiB(memory),
                     micro == 1 ? ", already at micro-batch 1" : "",
                     "): waits for a device with more memory");
      }
      if (smaller) {  // logged while the attempt is current (the log is fenced as reports are)
        store::LogLine line;
        line.wall_time_us = now_us;
        line.text = StrCat("cartd: out of memory at micro-batch ", micro, " on worker '", worker_id,
                           "' (", FormatGiB(memory), "): the next attempt trains at ",
                           "micro-batch ", *smaller, ", the global batch kept by accumulation");
        (void)store_->AppendLog(run_id, attempt, {line});  // the run's event says it too
      }
      result = store_->RetryAttempt(run_id, attempt, retry, store::Audit{now_us, who, why});
      break;
    }
  }
  if (!result.ok()) return Noted(result.status());
  if (outcome == AttemptOutcome::kFailed || outcome == AttemptOutcome::kOutOfMemory) {
    counters_.AddRetry();
  }
  {
    // Only this attempt's entry: the run may be requeued and claimed again already.
    absl::MutexLock lock(&mu_);
    if (auto it = running_.find(run_id); it != running_.end() && it->second.attempt == attempt) {
      running_.erase(it);
    }
  }
  BumpRun(run_id);
  // A requeued run, or derived runs unblocked by a success, may now be claimable.
  WakePollers();
  return result;
}

absl::StatusOr<std::vector<int64_t>> Scheduler::Preempt() {
  std::vector<int64_t> asked;
  if (!options_.preemption) return asked;
  const int64_t now_us = NowMicros();
  const std::optional<int64_t> largest = MaxWorkerMemory();
  if (!largest) return asked;
  CART_ASSIGN_OR_RETURN(std::vector<store::PlaceableRun> queued,
                        store_->ListQueuedWork(kMostWeighed, *largest));
  // A run its budget holds back would not take a freed worker: it preempts nothing. Weighed on
  // the fastest live worker, where it would cost least.
  CART_ASSIGN_OR_RETURN(const BudgetLedger ledger, Ledger(now_us));
  if (!ledger.Empty()) {
    double fastest = 0;
    {
      absl::MutexLock lock(&mu_);
      for (const PlacementWorker& w : workers_.Fleet(now_us, "", {})) {
        fastest = std::max(fastest, w.speed);
      }
    }
    HoldOverBudget(ledger, fastest, "any", queued, nullptr);
  }
  if (queued.empty()) return asked;
  const bool fair = options_.fair_share_half_life > absl::ZeroDuration();
  std::map<std::string, double> usage;
  if (fair) {
    CART_ASSIGN_OR_RETURN(usage, Usage(now_us));
  }
  std::vector<PreemptionAsk> asks;  // their controls are sent once mu_ is released
  {
    absl::MutexLock lock(&mu_);
    // Asks that are over: the run handed its worker back, or its attempt changed.
    for (auto it = preempt_asked_.begin(); it != preempt_asked_.end();) {
      const auto r = running_.find(it->first);
      const bool open = r != running_.end() && r->second.attempt == it->second.attempt;
      it = open ? std::next(it) : preempt_asked_.erase(it);
    }
    const int64_t interval_us = absl::ToInt64Microseconds(options_.preempt_interval);
    for (auto it = last_preempted_us_.begin(); it != last_preempted_us_.end();) {
      it = now_us - it->second >= interval_us ? last_preempted_us_.erase(it) : std::next(it);
    }
    std::set<std::string> holding;
    std::vector<PreemptionCandidate> running;
    for (const auto& [run_id, r] : running_) {
      holding.insert(r.worker_id);
      PreemptionCandidate c;
      c.run_id = run_id;
      c.attempt = r.attempt;
      c.owner = r.owner;
      c.priority = r.priority;
      c.claimed_us = r.claimed_us;
      const WorkerRegistry::Worker* worker = workers_.Find(r.worker_id);
      if (worker != nullptr) {
        c.memory_bytes = worker->info.memory_bytes;
        c.speed = worker->speed;
      }
      if (auto ask = preempt_asked_.find(run_id); ask != preempt_asked_.end()) {
        c.asked = now_us - ask->second.asked_us < kPreemptPendingUs
                      ? PreemptionCandidate::Asked::kHandingBack
                      : PreemptionCandidate::Asked::kOverdue;
      }
      c.preemptible =
          r.trains && r.has_checkpoint && !last_preempted_us_.count(run_id) && worker != nullptr;
      running.push_back(std::move(c));
    }
    asks = ChoosePreemptions(std::move(queued), workers_.FreeMemory(now_us, holding), running,
                             usage, fair);
    for (const PreemptionAsk& ask : asks) {
      preempt_asked_[ask.run_id] = PreemptAsk{ask.attempt, now_us, ask.reason};
      last_preempted_us_[ask.run_id] = now_us;
    }
  }
  for (const PreemptionAsk& ask : asks) {
    if (absl::Status kept = store_->RecordPreemption(ask.run_id, now_us); !kept.ok()) {
      std::fprintf(stderr, "cartd: run %lld: preemption time not stored (%s)\n",
                   static_cast<long long>(ask.run_id), Message(kept).c_str());
    }
    store::LogLine line;
    line.wall_time_us = now_us;
    line.text = StrCat("cartd: preempted at a checkpoint for other work: ", ask.reason);
    (void)store_->AppendLog(ask.run_id, ask.attempt, {line});  // the control goes out regardless
    PushControl(
        [&](const OpenStream& s) { return s.run_id == ask.run_id && s.attempt == ask.attempt; },
        Control{Control::Kind::kPreempt, ask.reason});
    counters_.AddPreemption();
    BumpRun(ask.run_id);
    asked.push_back(ask.run_id);
  }
  return asked;
}

absl::StatusOr<std::vector<store::ExpiredLease>> Scheduler::ExpireLeases() {
  const int64_t now_us = NowMicros();
  if (now_us < grace_end_us_.load()) return std::vector<store::ExpiredLease>();
  CART_ASSIGN_OR_RETURN(std::vector<store::ExpiredLease> expired,
                        Noted(store_->ExpireLeases(now_us)));
  if (!expired.empty()) {
    counters_.AddLeaseExpiries(static_cast<int64_t>(expired.size()));
    {
      absl::MutexLock lock(&mu_);
      for (const store::ExpiredLease& lease : expired) {
        if (auto it = running_.find(lease.run_id);
            it != running_.end() && it->second.attempt == lease.attempt) {
          running_.erase(it);
        }
      }
    }
    for (const store::ExpiredLease& lease : expired) BumpRun(lease.run_id);
    WakePollers();
  }
  return expired;
}

void Scheduler::ExpiryLoop() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithDeadline(absl::Condition(&shutdown_), absl::Now() + options_.expiry_interval);
      if (shutdown_) return;
    }
    if (std::optional<std::string> changed = room_.Look(NowMicros())) {
      std::fprintf(stderr, "cartd: %s\n", changed->c_str());
      // Heartbeats failed while the disk was full: a lease TTL for them to come through again
      // before any lease is taken back (a run is not charged for cartd's disk).
      if (!room_.full()) {
        grace_end_us_.store(NowMicros() + absl::ToInt64Microseconds(options_.lease_ttl));
      }
    }
    if (room_.full()) continue;  // every step below writes; said once, when it became full
    absl::StatusOr<std::vector<store::ExpiredLease>> expired = ExpireLeases();
    if (!expired.ok()) {
      std::fprintf(stderr, "cartd: lease expiry failed: %s\n", Message(expired.status()).c_str());
    }
    if (absl::StatusOr<std::vector<int64_t>> preempted = Preempt(); !preempted.ok()) {
      std::fprintf(stderr, "cartd: preemption failed: %s\n", Message(preempted.status()).c_str());
    }
    if (absl::Status idle = AccountIdle(); !idle.ok()) {
      std::fprintf(stderr, "cartd: idle accounting failed: %s\n", Message(idle).c_str());
    }
  }
}

// ---- Following runs

int64_t Scheduler::RunVersion(int64_t run_id) {
  absl::MutexLock lock(&mu_);
  auto it = run_watches_.find(run_id);
  return it == run_watches_.end() ? 0 : it->second.version;
}

int64_t Scheduler::WaitForRunChange(int64_t run_id, int64_t seen, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  RunWatch& watch = run_watches_[run_id];  // map nodes stay put while others are added
  ++watch.waiters;
  while (!shutdown_ && watch.version == seen) {
    if (watch.changed.WaitWithDeadline(&mu_, deadline)) break;
  }
  --watch.waiters;
  return watch.version;
}

absl::Status Scheduler::FollowRun(
    int64_t run_id, bool follow, absl::Duration poll, const std::function<bool()>& cancelled,
    const std::function<absl::StatusOr<bool>(const RunRecord& run, bool last)>& read) {
  while (true) {
    // Read the counter before the data: a change after this point wakes the wait below.
    const int64_t version = RunVersion(run_id);
    CART_ASSIGN_OR_RETURN(RunRecord run, store_->GetRun(run_id));
    const bool last = !follow || store::IsTerminal(run.state);
    CART_ASSIGN_OR_RETURN(bool more, read(run, last));
    if (!more || last || cancelled()) return absl::OkStatus();
    WaitForRunChange(run_id, version, absl::Now() + poll);
    if (cancelled()) return absl::OkStatus();
    if (shutting_down()) {
      return absl::UnavailableError("cartd is shutting down; follow again later");
    }
  }
}

}  // namespace cart::server
