#include "server/scheduler.h"

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
#include "config/schedule.h"
#include "config/sweep.h"
#include "server/placement.h"

namespace cart::server {
namespace {

// Placement and preemption weigh the first queued runs by priority and work; a bigger queue is
// placed as it shrinks.
constexpr int64_t kMostWeighed = 4000;

// A run asked to stop for other work that has not handed its worker back after this long no
// longer counts as a worker about to be free (an old worker ignores the control).
constexpr int64_t kPreemptPendingUs = 10 * 60 * 1'000'000LL;

// A reason given by a user (cancel) goes into one event per run it touches; its length is bounded
// so that one call cannot write hundreds of megabytes.
constexpr size_t kMaxReasonBytes = 1000;

// Callers are named "admin:<name>" or "user:<name>" (the services build the name from the token).
bool IsAdmin(std::string_view who) { return who.rfind("admin:", 0) == 0; }

absl::Status CheckReason(const std::string& reason) {
  if (reason.size() <= kMaxReasonBytes) return absl::OkStatus();
  return absl::InvalidArgumentError(StrCat("reason: ", reason.size(), " bytes is more than ",
                                           kMaxReasonBytes, "; say it in fewer words"));
}

using store::RunRecord;
using store::RunState;

// What a worker's device is called: its name, or its kind ("cpu") when it reported none. The
// store records workers by it and measured speeds are kept per it.
std::string DeviceLabel(const WorkerInfo& info) {
  return info.device_name.empty() ? info.device_kind : info.device_name;
}

// Moves what it can out of `expanded`: a 10,000-run sweep is tens of MB of params and YAML.
store::NewRun ToNewRun(model::ExpandedRun&& expanded, int64_t max_attempts,
                       const std::map<std::string, store::DataFileIdentity>& data_files) {
  store::NewRun run;
  for (model::DataFile& file : model::DataFiles(expanded.config)) {
    store::RunDataRecord record;
    record.role = std::move(file.role);
    if (auto it = data_files.find(file.path); it != data_files.end()) {
      record.identity = it->second;
      record.recorded_by = "submit";
    }
    record.path = std::move(file.path);
    run.data.push_back(std::move(record));
  }
  // Store run names are plain names; the user-facing "<sweep>/<index>" is rebuilt from them.
  run.name = StrCat(expanded.index);
  run.config_yaml = std::move(expanded.config_yaml);
  run.params = std::move(expanded.params);
  run.kind = expanded.kind;
  run.eval_loops = std::move(expanded.eval_loops);
  run.stored_params = expanded.stored_params;
  run.effective_params = expanded.effective_params;
  run.memory_estimate_bytes = expanded.memory_estimate_bytes;
  run.min_memory_bytes = expanded.min_memory_bytes;
  run.work_hours =
      model::EstimateRunCost(expanded.config, expanded.kind == JobKind::kEval, expanded.eval_loops)
          .rtx3090_hours;
  run.max_attempts = static_cast<int>(max_attempts);
  if (expanded.parent_index >= 0 || expanded.parent_run_id > 0) {
    if (expanded.parent_run_id > 0) {
      run.parent_run_id = expanded.parent_run_id;
    } else {
      run.parent_name = StrCat(expanded.parent_index);
    }
    run.parent_checkpoint = expanded.parent_checkpoint_step < 0
                                ? std::string("final")
                                : StrCat(expanded.parent_checkpoint_step);
  }
  return run;
}

// What a dry run shows for a run that is not stored.
RunRecord PreviewRun(const model::SweepSpec& spec, const store::NewRun& run, int64_t now_us) {
  RunRecord record;
  record.sweep_name = spec.name;
  record.name = run.name;
  record.config_yaml = run.config_yaml;
  record.params = run.params;
  auto int_param = [&](const char* key) -> std::optional<int64_t> {
    auto it = run.params.find(key);
    return it == run.params.end() ? std::nullopt : ParseInt64(it->second);
  };
  record.d = int_param("d").value_or(0);
  record.r = int_param("R");
  record.p = int_param("P");
  record.seed = int_param("seed").value_or(0);
  record.steps = int_param("steps").value_or(0);
  record.stored_params = run.stored_params;
  record.effective_params = run.effective_params;
  record.memory_estimate_bytes = run.memory_estimate_bytes;
  record.min_memory_bytes = run.min_memory_bytes;
  record.state =
      run.parent_name.empty() && !run.parent_run_id ? RunState::kQueued : RunState::kBlocked;
  record.parent_run_id = run.parent_run_id;
  record.priority = spec.priority;
  record.max_attempts = run.max_attempts;
  record.parent_checkpoint = run.parent_checkpoint;
  record.created_us = now_us;
  record.updated_us = now_us;
  return record;
}

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
                                                           : options_.startup_grace))) {
  // Workers registered before a restart may acquire again without re-registering.
  absl::StatusOr<std::vector<store::WorkerRecord>> known = store_->ListWorkers();
  if (known.ok()) {
    absl::MutexLock lock(&mu_);
    for (const store::WorkerRecord& record : *known) {
      Worker& worker = workers_[record.id];
      worker.info.id = record.id;
      worker.info.device_name = record.device;
      worker.info.memory_bytes = record.memory_bytes;
      worker.last_seen_us = record.last_seen_us;
      std::tie(worker.speed, worker.speed_source) = SpeedFor(worker.info, nullptr);
    }
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
  const std::string file = request.file_name.empty() ? "sweep" : request.file_name;
  CART_ASSIGN_OR_RETURN(model::SweepSpec spec, model::ParseSweepYaml(request.spec_yaml, file));
  if (spec.name.empty()) {
    return absl::InvalidArgumentError(StrCat(file, ": name: a sweep needs a name"));
  }
  if (!IsAdmin(request.who) && spec.priority > options_.max_user_priority && !request.dry_run) {
    return absl::PermissionDeniedError(
        StrCat(file, ": priority: ", spec.priority, " is above the highest a user may set (",
               options_.max_user_priority,
               "); an admin may raise a sweep's priority (cart sweep priority NAME N)"));
  }
  // The file's own max_runs may only lower the server's limit.
  spec.max_runs = std::min(spec.max_runs, options_.max_runs_per_sweep);
  // Derived jobs may start from the trained runs of sweeps already in the store.
  std::map<std::string, std::vector<model::ParentRun>> parent_sweeps;
  for (const std::string& name : model::ParentSweeps(spec)) {
    store::RunFilter filter;
    filter.sweeps = {name};
    CART_ASSIGN_OR_RETURN(std::vector<RunRecord> records, store_->ListRuns(filter));
    std::vector<model::ParentRun>& parents = parent_sweeps[name];
    for (const RunRecord& record : records) {
      if (record.kind != JobKind::kTrain) continue;
      absl::StatusOr<model::RunConfig> config =
          model::ParseRunConfigYaml(record.config_yaml, StrCat("run ", record.id));
      if (!config.ok()) return absl::InternalError(Message(config.status()));
      model::ParentRun parent;
      parent.run_id = record.id;
      parent.index = ParseInt64(record.name).value_or(-1);
      parent.name = StrCat(name, "/", record.name);
      parent.config = *std::move(config);
      for (const std::string& k : model::ScalarKeys()) {
        parent.params[k] = model::GetKey(parent.config, k).value();
      }
      parents.push_back(std::move(parent));
    }
    if (records.empty()) parent_sweeps.erase(name);  // reported by ExpandSweep as unknown
  }
  CART_ASSIGN_OR_RETURN(std::vector<model::ExpandedRun> expanded,
                        model::ExpandSweep(spec, file, parent_sweeps));

  store::NewSweep sweep;
  sweep.name = spec.name;
  sweep.spec_text = request.spec_yaml;
  sweep.priority = spec.priority;
  sweep.client_request_id = request.request_id;
  const int64_t now_us = NowMicros();
  if (sweep.client_request_id.empty()) {
    absl::MutexLock lock(&mu_);
    sweep.client_request_id = StrCat("cartd-", now_us, "-", ++request_counter_);
  }
  sweep.runs.reserve(expanded.size());
  for (model::ExpandedRun& run : expanded) {
    sweep.runs.push_back(ToNewRun(std::move(run), spec.max_attempts, request.data_files));
  }
  expanded = {};
  CART_RETURN_IF_ERROR(CheckParentSteps(sweep));

  SubmitResult result;
  if (request.dry_run) {
    result.sweep.name = spec.name;
    result.sweep.spec_text = request.spec_yaml;
    result.sweep.priority = spec.priority;
    result.sweep.created_us = now_us;
    for (const store::NewRun& run : sweep.runs) {
      RunRecord preview = PreviewRun(spec, run, now_us);
      ++result.sweep.run_counts[preview.state];
      if (request.run_limit <= 0 || static_cast<int64_t>(result.runs.size()) < request.run_limit) {
        result.runs.push_back(std::move(preview));
      }
    }
    return result;
  }
  const std::string who = request.who.empty() ? "user" : request.who;
  CART_ASSIGN_OR_RETURN(store::CreatedSweep created,
                        store_->CreateSweep(sweep, store::Audit{now_us, who, "submitted"}));
  sweep = {};  // the runs are read back below; do not hold both copies
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
  if (IsAdmin(who)) return absl::OkStatus();
  CART_ASSIGN_OR_RETURN(store::SweepRecord record, store_->GetSweep(sweep));
  if (record.created_by == who) return absl::OkStatus();
  return absl::PermissionDeniedError(StrCat(who, " may not ", action, " sweep '", sweep,
                                            "': it was submitted by ", record.created_by,
                                            "; only its owner or an admin may"));
}

absl::Status Scheduler::CheckRunOwner(int64_t run_id, const std::string& who,
                                      std::string_view action) {
  if (IsAdmin(who)) return absl::OkStatus();
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
  CART_ASSIGN_OR_RETURN(int64_t changed,
                        store_->ResumeSweep(name, store::Audit{NowMicros(), who, "resumed"}));
  if (changed > 0) WakePollers();
  return changed;
}

absl::StatusOr<store::DeletedSweep> Scheduler::DeleteSweep(const std::string& name,
                                                           const std::string& who) {
  CART_RETURN_IF_ERROR(CheckSweepOwner(name, who, "delete"));
  CART_ASSIGN_OR_RETURN(store::DeletedSweep deleted, store_->DeleteSweep(name));
  if (options_.release_artifact) {
    for (const std::string& sha : deleted.released_artifacts) options_.release_artifact(sha);
  }
  // Followers of the deleted runs wake up, find them gone and end their streams.
  for (int64_t id : deleted.run_ids) BumpRun(id);
  std::fprintf(stderr, "cartd: %s deleted sweep '%s' (%lld runs, %lld metric points, %zu blobs)\n",
               who.c_str(), name.c_str(), static_cast<long long>(deleted.runs()),
               static_cast<long long>(deleted.metric_points), deleted.released_artifacts.size());
  return deleted;
}

absl::StatusOr<int64_t> Scheduler::SetSweepPriority(const std::string& name, int64_t priority,
                                                    const std::string& who) {
  if (!IsAdmin(who)) {
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

// The config keys a resume may change: each changes the trajectory from the checkpoint on, and
// none changes the model's shape, the data order or a column the store keeps apart.
constexpr std::string_view kResumeKeys[] = {"lr", "lr_min", "warmup", "clip", "dtype"};

absl::StatusOr<RunRecord> Scheduler::ResumeRun(int64_t run_id, const std::string& who,
                                               const std::vector<std::string>& set) {
  CART_RETURN_IF_ERROR(CheckRunOwner(run_id, who, "resume"));
  std::optional<store::ConfigChange> change;
  std::string why = "resumed";
  if (!set.empty()) {
    CART_ASSIGN_OR_RETURN(RunRecord current, store_->GetRun(run_id));
    CART_ASSIGN_OR_RETURN(model::RunConfig config,
                          model::ParseRunConfigYaml(current.config_yaml, StrCat("run ", run_id)));
    std::vector<std::string> changed;
    for (const std::string& item : set) {
      const size_t eq = item.find('=');
      const std::string key = item.substr(0, eq);
      if (std::find(std::begin(kResumeKeys), std::end(kResumeKeys), key) == std::end(kResumeKeys)) {
        return absl::InvalidArgumentError(
            StrCat("resume --set ", ValidUtf8(item.substr(0, 200)), ": a resume may change only ",
                   StrJoin(kResumeKeys, ", "),
                   " (keys that change the run from its checkpoint on without changing its "
                   "model or data)"));
      }
      const std::string before = model::GetKey(config, key).value_or("");
      CART_RETURN_IF_ERROR(model::ApplyOverrides(config, {item}));
      const std::string after = model::GetKey(config, key).value_or("");
      if (after != before) changed.push_back(StrCat(key, " ", before, " -> ", after));
    }
    if (changed.empty()) {
      return absl::InvalidArgumentError(
          StrCat("resume --set ", StrJoin(set, " "), ": no value differs from the run's config"));
    }
    CART_RETURN_IF_ERROR(model::Validate(config));
    change = store::ConfigChange{model::ToYaml(config), {}};
    for (const std::string& k : model::ScalarKeys()) {
      change->params[k] = model::GetKey(config, k).value();
    }
    why = StrCat("resumed with ", StrJoin(changed, ", "));
  }
  CART_ASSIGN_OR_RETURN(RunRecord run,
                        store_->ResumeRun(run_id, store::Audit{NowMicros(), who, why}, change));
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
  // The state and the step count are checked once, by the store, inside the write (a check here
  // would read outside it); this re-resolves the config with the new steps and schedule.
  CART_ASSIGN_OR_RETURN(RunRecord run, store_->GetRun(run_id));
  CART_ASSIGN_OR_RETURN(model::RunConfig config,
                        model::ParseRunConfigYaml(run.config_yaml, StrCat("run ", run_id)));
  ExtendOutcome out;
  out.from_step = config.train.steps;
  out.lr_before = model::ScheduledLr(config.train, out.from_step - 1);
  model::RunConfig stretched = config, held = config;
  stretched.train.steps = held.train.steps = total_steps;
  stretched.train.lr_decay_steps = 0;
  if (held.train.lr_decay_steps == 0) held.train.lr_decay_steps = out.from_step;
  const double stretch_lr = model::ScheduledLr(stretched.train, out.from_step);
  const bool extendable = run.state == RunState::kSucceeded && total_steps > out.from_step;
  if (schedule == ExtendSchedule::kAsk) {
    const double ratio = stretch_lr / std::max(out.lr_before, 1e-300);
    if (extendable && (ratio > 2 || ratio < 0.5)) {
      return absl::FailedPreconditionError(StrCat(
          "extending run ", run_id, " from ", out.from_step, " to ", total_steps,
          " steps with the cosine recomputed over the new total would change its learning rate "
          "from ",
          Sci(out.lr_before), " at step ", out.from_step, " to ", Sci(stretch_lr), " at step ",
          out.from_step + 1, " (", Fixed(ratio, 1),
          "x): a warm restart. Say which: --schedule stretch for that, or --schedule hold to go "
          "on at ",
          Sci(model::ScheduledLr(held.train, out.from_step)),
          " (docs/design.md \"Extending a run\")"));
    }
    schedule = ExtendSchedule::kStretch;
  }
  out.schedule = schedule;
  const model::RunConfig& chosen = schedule == ExtendSchedule::kHold ? held : stretched;
  out.lr_after = model::ScheduledLr(chosen.train, out.from_step);
  CART_RETURN_IF_ERROR(model::Validate(chosen));
  const std::string why =
      StrCat("schedule ", ExtendScheduleName(schedule), ": learning rate ", Sci(out.lr_before),
             " at step ", out.from_step, " -> ", Sci(out.lr_after), " at step ", out.from_step + 1);
  CART_ASSIGN_OR_RETURN(out.run, store_->ExtendRun(run_id, total_steps, model::ToYaml(chosen),
                                                   store::Audit{NowMicros(), who, why}));
  BumpRun(run_id);
  WakePollers();
  return out;
}

// ---- Tags and notes

absl::StatusOr<RunRecord> Scheduler::AnnotateRun(int64_t run_id,
                                                 const store::AnnotationChange& change,
                                                 const std::string& who) {
  return store_->AnnotateRun(run_id, change, store::Audit{NowMicros(), who, ""});
}

absl::StatusOr<store::SweepRecord> Scheduler::AnnotateSweep(const std::string& name,
                                                            const store::AnnotationChange& change,
                                                            const std::string& who) {
  return store_->AnnotateSweep(name, change, store::Audit{NowMicros(), who, ""});
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
  // workspace, a desktop: model::DefaultMemoryReserveBytes); the store keeps that figure, so a
  // restarted cartd places by it too.
  WorkerInfo usable = worker;
  usable.memory_bytes = model::UsableMemoryBytes(worker.memory_bytes, worker.memory_reserve_bytes);
  usable.memory_reserve_bytes = 0;
  CART_RETURN_IF_ERROR(store_->RegisterWorker(worker.id, device, usable.memory_bytes, now_us));
  {
    absl::MutexLock lock(&mu_);
    auto known = workers_.find(worker.id);
    auto [speed, source] = SpeedFor(usable, known == workers_.end() ? nullptr : &known->second);
    Worker& w = workers_[worker.id];
    w.info = usable;
    w.draining = false;
    w.last_seen_us = now_us;
    w.speed = speed;
    w.speed_source = std::move(source);
  }
  // A bigger device may fit runs nobody could take; a re-registered one is no longer draining.
  WakePollers();
  return timing();
}

std::pair<double, std::string> Scheduler::SpeedFor(const WorkerInfo& info, const Worker* known) {
  if (info.speed_factor > 0) return {info.speed_factor, "reported"};
  if (known != nullptr && known->measured) return {known->speed, known->speed_source};
  const std::string device = DeviceLabel(info);
  if (auto it = device_speed_.find(device); it != device_speed_.end()) {
    return {it->second, StrCat("measured on ", device)};
  }
  if (std::optional<double> peak = model::PeakSpeedRelativeTo3090(info.device_name);
      peak && info.device_kind != "cpu") {
    return {*peak, "card peak"};
  }
  // No figure for this device (a CPU, an unlisted card): its first run's tokens/s replaces this.
  return {info.device_kind == "cpu" ? 0.01 : 0.5, "guess"};
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
  if (absl::StatusOr<model::RunConfig> config =
          model::ParseRunConfigYaml(job.run.config_yaml, StrCat("run ", job.run.id));
      config.ok()) {
    r.tokens =
        config->train.steps * config->train.batch * config->train.accum * config->train.seq_len;
  }
  absl::MutexLock lock(&mu_);
  progress_.erase(job.run.id);  // this attempt's pace is measured from its own reports
  running_[job.run.id] = std::move(r);
  not_placed_.erase(job.run.id);
}

void Scheduler::RecoverRunning() {
  store::RunPageRequest live;
  live.filter.states = {RunState::kLeased, RunState::kRunning};
  live.limit = 0;
  if (absl::StatusOr<store::RunPage> page = store_->ListRunPage(live); page.ok()) {
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
  auto w = workers_.find(run->second.worker_id);
  if (w == workers_.end() || w->second.info.speed_factor > 0) return;  // reported speeds win
  // What an RTX 3090 would reach on this run (its work estimate), against what this device did.
  const double rtx3090_tokens_per_s =
      static_cast<double>(run->second.tokens) / (run->second.work_hours * 3600.0);
  const double measured = tokens_per_s / rtx3090_tokens_per_s;
  // The first measurement is taken whole; later ones move a moving average, so that one run's
  // warm-up or a throttled spell does not swing the speed.
  Worker& worker = w->second;
  worker.speed = worker.measured ? 0.8 * worker.speed + 0.2 * measured : measured;
  worker.measured = true;
  worker.speed_source = "measured";
  const std::string device = DeviceLabel(worker.info);
  auto [it, fresh] = device_speed_.try_emplace(device, measured);
  if (!fresh) it->second = 0.8 * it->second + 0.2 * measured;
}

absl::StatusOr<std::optional<store::Claim>> Scheduler::Place(const std::string& worker_id,
                                                             int64_t memory) {
  const int64_t now_us = NowMicros();
  if (options_.placement == SchedulerOptions::Placement::kFirstFit) {
    return store_->ClaimNextRun(worker_id, memory, now_us);
  }
  const int64_t largest = std::max(memory, MaxWorkerMemory().value_or(memory));
  CART_ASSIGN_OR_RETURN(std::vector<store::PlaceableRun> queued,
                        store_->ListQueuedWork(kMostWeighed, largest));
  if (queued.empty()) return std::optional<store::Claim>();
  PlacementWorker asker;
  std::vector<PlacementWorker> others;
  {
    absl::MutexLock lock(&mu_);
    for (PlacementWorker& w : FleetLocked(now_us, worker_id, BusyHoursLocked(now_us))) {
      if (w.id == worker_id) {
        asker = std::move(w);
        asker.free_in_hours = 0;
      } else {
        others.push_back(std::move(w));
      }
    }
  }
  std::map<std::string, double> usage;
  if (options_.fair_share_half_life > absl::ZeroDuration()) {
    CART_ASSIGN_OR_RETURN(usage, Usage(now_us));
    for (const store::PlaceableRun& r : queued) usage.try_emplace(r.owner, 0.0);
  }
  PlacementDecision decision = PlaceEarliestFinish(asker, others, std::move(queued), usage);
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

std::map<std::string, double> Scheduler::BusyHoursLocked(int64_t now_us) {
  std::map<std::string, double> busy_hours;
  for (const auto& [run_id, r] : running_) {
    auto w = workers_.find(r.worker_id);
    if (w == workers_.end() || w->second.speed <= 0) continue;
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
      const double estimate = r.remaining_hours_at_claim / w->second.speed;
      left = estimate > elapsed ? estimate - elapsed : estimate;
    }
    busy_hours[r.worker_id] = left;
  }
  return busy_hours;
}

std::vector<PlacementWorker> Scheduler::FleetLocked(
    int64_t now_us, const std::string& asker, const std::map<std::string, double>& busy_hours) {
  const int64_t lost_after_us =
      absl::ToInt64Microseconds(options_.lease_ttl + options_.max_acquire_wait);
  std::vector<PlacementWorker> fleet;
  for (const auto& [id, w] : workers_) {
    const auto busy = busy_hours.find(id);
    // Idle workers count while they poll; draining or silent ones take nothing.
    if (id != asker &&
        (w.draining || (busy == busy_hours.end() && now_us - w.last_seen_us > lost_after_us))) {
      continue;
    }
    PlacementWorker p;
    p.id = id;
    p.device = DeviceLabel(w.info);
    p.memory_bytes = w.info.memory_bytes;
    p.speed = w.speed;
    p.free_in_hours = busy == busy_hours.end() ? 0 : busy->second;
    fleet.push_back(std::move(p));
  }
  return fleet;
}

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
    fleet = FleetLocked(now_us, "", busy_hours);
  }
  std::map<int64_t, int64_t> sweep_of;
  for (const store::PlaceableRun& r : queued) sweep_of[r.id] = r.sweep_id;
  for (const PlannedRun& p : PlanQueue(std::move(fleet), std::move(queued), usage)) {
    note(p.run_id, sweep_of[p.run_id], p.finish_in_hours);
  }
  auto shared = std::make_shared<const Forecast>(std::move(forecast));
  absl::MutexLock lock(&mu_);
  forecast_ = shared;
  forecast_generation_ = generation;
  return shared;
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

void Scheduler::FitToDevice(Job& job, const std::string& worker_id, int64_t memory_bytes) {
  const std::string source = StrCat("run ", job.run.id, " config");
  absl::StatusOr<model::RunConfig> config = model::ParseRunConfigYaml(job.run.config_yaml, source);
  if (!config.ok()) return;  // stored configs parse; if not, the worker reports the error
  const std::optional<model::MicroBatchFit> fit = model::FitMicroBatch(*config, memory_bytes);
  if (!fit || fit->batch == config->train.batch) return;
  const std::string note =
      StrCat("cartd: micro-batch ", config->train.batch, " -> ", fit->batch,
             ", gradient accumulation ", config->train.accum, " -> ", fit->accum, " (global batch ",
             fit->batch * fit->accum, " kept) to fit worker '", worker_id, "' (",
             FormatGiB(memory_bytes), " usable after its reserve; estimate ",
             FormatGiB(job.run.memory_estimate_bytes), " -> ", FormatGiB(fit->bytes), ")");
  config->train.batch = fit->batch;
  config->train.accum = fit->accum;
  job.run.config_yaml = model::ToYaml(*config);
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
    int64_t generation = 0;
    {
      absl::MutexLock lock(&mu_);
      if (shutdown_) return absl::UnavailableError("cartd is shutting down; retry later");
      auto it = workers_.find(worker_id);
      if (it == workers_.end()) {
        return absl::FailedPreconditionError(
            StrCat("worker '", worker_id, "' is not registered; call RegisterWorker first"));
      }
      if (it->second.draining) {
        absl::Status draining = absl::FailedPreconditionError(
            StrCat("worker '", worker_id, "' is draining: take no new job and exit"));
        draining.SetPayload(kDrainingPayload, absl::Cord("1"));
        return draining;
      }
      memory = it->second.info.memory_bytes;
      generation = generation_;
      it->second.last_seen_us = NowMicros();
      // A worker asking for a job holds none: whatever it ran has ended (or was cancelled
      // before it started).
      for (auto r = running_.begin(); r != running_.end();) {
        r = r->second.worker_id == worker_id ? running_.erase(r) : std::next(r);
      }
    }
    absl::StatusOr<std::optional<store::Claim>> claim = Place(worker_id, memory);
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
      if (job.run.memory_estimate_bytes > memory) FitToDevice(job, worker_id, memory);
      NoteClaim(job, worker_id);
      // Workers that waited planned with this one free: they plan again.
      if (options_.placement == SchedulerOptions::Placement::kEarliestFinish) WakePollers();
      BumpRun(job.run.id);
      stats_.AddJobHandedOut();
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

int Scheduler::waiting_acquires() {
  absl::MutexLock lock(&mu_);
  return waiting_acquires_;
}

int Scheduler::submits_in_flight() {
  absl::MutexLock lock(&mu_);
  return submits_in_flight_;
}

absl::Status Scheduler::DrainWorker(const std::string& worker_id, const std::string& who) {
  if (!IsAdmin(who)) {
    return absl::PermissionDeniedError(
        StrCat(who, " may not drain worker '", worker_id, "': draining needs an admin token"));
  }
  {
    absl::MutexLock lock(&mu_);
    auto it = workers_.find(worker_id);
    if (it == workers_.end()) {
      return absl::NotFoundError(StrCat("worker '", worker_id, "' is not registered"));
    }
    it->second.draining = true;
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
  store::RunPageRequest live;
  live.filter.states = {RunState::kLeased, RunState::kRunning};
  live.metrics = {"mfu"};
  live.limit = 0;
  absl::StatusOr<store::RunPage> page = store_->ListRunPage(live);
  if (page.ok()) {
    for (const store::RunRow& row : page->rows) {
      if (!row.worker_id.empty()) busy[row.worker_id] = &row;
    }
  }
  std::map<std::string, int64_t> store_seen;
  if (absl::StatusOr<std::vector<store::WorkerRecord>> known = store_->ListWorkers(); known.ok()) {
    for (const store::WorkerRecord& w : *known) store_seen[w.id] = w.last_seen_us;
  }
  std::map<std::string, FleetWatch::Device> devices = fleet_.Devices(device_history);
  const int64_t now_us = NowMicros();
  const int64_t lost_after_us =
      absl::ToInt64Microseconds(options_.lease_ttl + options_.max_acquire_wait);
  std::vector<WorkerStatus> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, worker] : workers_) {
    WorkerStatus status;
    status.info = worker.info;
    status.speed = worker.speed;
    status.speed_source = worker.speed_source;
    status.last_seen_us = std::max(worker.last_seen_us, store_seen[id]);
    if (auto it = busy.find(id); it != busy.end()) {
      status.run_id = it->second->run.id;
      status.run_name = StrCat(it->second->run.sweep_name, "/", it->second->run.name);
      if (auto mfu = it->second->latest.find("mfu"); mfu != it->second->latest.end()) {
        status.run_mfu = mfu->second;
      }
    }
    if (auto d = devices.find(id); d != devices.end()) {
      status.device = std::move(d->second.history);
      status.idle_while_queued_s = d->second.idle_while_queued_s;
      status.idle_while_queued = d->second.idle_while_queued;
    }
    // A drained worker exits: once it is not seen it is lost, not draining for ever.
    const bool stale = now_us - status.last_seen_us > lost_after_us;
    if (worker.draining && !stale) {
      status.state = "draining";
    } else if (status.run_id != 0) {
      status.state = "busy";
    } else if (stale) {
      status.state = "lost";
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
    auto it = workers_.find(worker_id);
    if (it == workers_.end()) {
      return absl::FailedPreconditionError(
          StrCat("worker '", worker_id, "' is not registered; call RegisterWorker first"));
    }
    it->second.last_seen_us = NowMicros();
    WorkerInfo& info = it->second.info;
    if (!device.kind.empty()) info.device_kind = device.kind;
    if (!device.name.empty()) info.device_name = device.name;
    info.device_index = device.index;
    info.uuid = device.uuid;
  }
  return fleet_.Record(worker_id, samples);
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
  store::RunPageRequest live;
  live.filter.states = {RunState::kLeased, RunState::kRunning};
  live.limit = 0;
  CART_ASSIGN_OR_RETURN(store::RunPage holding, store_->ListRunPage(live));
  store::RunPageRequest queued;
  queued.filter.states = {RunState::kQueued};
  queued.limit = 1;
  CART_ASSIGN_OR_RETURN(store::RunPage waiting, store_->ListRunPage(queued));
  std::set<std::string> holders;
  for (const store::RunRow& row : holding.rows) holders.insert(row.worker_id);
  const int64_t lost_after_us =
      absl::ToInt64Microseconds(options_.lease_ttl + options_.max_acquire_wait);
  std::set<std::string> idle;
  if (waiting.total > 0) {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, w] : workers_) {
      if (!holders.count(id) && now_us - w.last_seen_us <= lost_after_us) idle.insert(id);
    }
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
    auto it = workers_.find(worker_id);
    draining = it != workers_.end() && it->second.draining;
    if (it != workers_.end()) it->second.last_seen_us = NowMicros();
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
                        store_->Heartbeat(run_id, attempt, NowMicros()));
  absl::MutexLock lock(&mu_);
  int64_t& progress = progress_[run_id];
  progress = std::max(progress, step);
  return reply.cancel_requested;
}

absl::Status Scheduler::AppendLog(int64_t run_id, int64_t attempt,
                                  const std::vector<store::LogLine>& lines) {
  CART_RETURN_IF_ERROR(store_->AppendLog(run_id, attempt, lines).status());
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
  CART_ASSIGN_OR_RETURN(int64_t acked, store_->AppendMetrics(run_id, attempt, std::move(points)));
  stats_.AddIngest(count,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  {
    absl::MutexLock lock(&mu_);
    int64_t& progress = progress_[run_id];
    progress = std::max(progress, acked);
    if (tokens_per_s) MeasureSpeed(run_id, *tokens_per_s);
    BumpRunLocked(run_id);
  }
  return acked;
}

absl::StatusOr<store::CheckpointRecord> Scheduler::RecordCheckpoint(
    int64_t run_id, int64_t attempt, const store::NewCheckpoint& checkpoint) {
  CART_ASSIGN_OR_RETURN(store::CheckpointRecord record,
                        store_->RecordCheckpoint(run_id, attempt, checkpoint, NowMicros()));
  if (options_.keep_checkpoints > 0) {
    // The checkpoint is recorded whatever happens here; an artifact whose removal fails now is
    // removed as unknown when cartd next starts.
    absl::StatusOr<std::vector<std::string>> released =
        store_->PruneCheckpoints(run_id, options_.keep_checkpoints);
    if (!released.ok()) {
      std::fprintf(stderr, "cartd: checkpoint retention of run %lld: %s\n",
                   static_cast<long long>(run_id), Message(released.status()).c_str());
    } else if (options_.release_artifact) {
      for (const std::string& sha : *released) options_.release_artifact(sha);
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
  if (outcome == AttemptOutcome::kDrained) {
    absl::MutexLock lock(&mu_);
    if (auto ask = preempt_asked_.find(run_id);
        ask != preempt_asked_.end() && ask->second.attempt == attempt) {
      why = StrCat(why, " (preempted: ", ask->second.reason, ")");
    }
  }
  absl::StatusOr<RunRecord> result;
  switch (outcome) {
    case AttemptOutcome::kSucceeded:
    case AttemptOutcome::kCancelled:
    case AttemptOutcome::kDrained:
      result =
          store_->RecordAttemptOutcome(run_id, attempt, outcome, store::Audit{now_us, who, why});
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
      {
        absl::MutexLock lock(&mu_);
        auto it = workers_.find(worker_id);
        if (it != workers_.end()) memory = it->second.info.memory_bytes;
      }
      if (memory <= 0) {
        // Without the device size the floor cannot be set; retrying as a failure still ends.
        result = store_->RetryAttempt(run_id, attempt, store::RetryRequest{},
                                      store::Audit{now_us, who, why});
        break;
      }
      store::RetryRequest retry;
      retry.counted = false;
      retry.oom_memory_bytes = memory;
      result = store_->RetryAttempt(
          run_id, attempt, retry,
          store::Audit{now_us, who, StrCat(why, " (device ", FormatGiB(memory), ")")});
      break;
    }
  }
  if (!result.ok()) return result.status();
  if (outcome == AttemptOutcome::kFailed || outcome == AttemptOutcome::kOutOfMemory) {
    stats_.AddRetry();
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
  if (queued.empty()) return asked;
  const bool fair = options_.fair_share_half_life > absl::ZeroDuration();
  std::map<std::string, double> usage;
  if (fair) {
    CART_ASSIGN_OR_RETURN(usage, Usage(now_us));
  }
  auto used = [&](const std::string& owner) {
    const auto it = usage.find(owner);
    return it == usage.end() ? 0.0 : it->second;
  };
  // Served first by placement: higher priority, then the owner with less usage, then longest.
  std::sort(queued.begin(), queued.end(),
            [&](const store::PlaceableRun& a, const store::PlaceableRun& b) {
              if (a.priority != b.priority) return a.priority > b.priority;
              if (fair && used(a.owner) != used(b.owner)) return used(a.owner) < used(b.owner);
              if (a.RemainingHours() != b.RemainingHours()) {
                return a.RemainingHours() > b.RemainingHours();
              }
              return a.id < b.id;
            });
  struct Candidate {
    int64_t run_id;
    const Running* run;
    int64_t memory_bytes;
  };
  struct Ask {
    int64_t run_id;
    int64_t attempt;
    Control control;
  };
  std::vector<Ask> controls;  // sent once mu_ is released
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
    const int64_t lost_after_us =
        absl::ToInt64Microseconds(options_.lease_ttl + options_.max_acquire_wait);
    std::map<std::string, int64_t> busy;  // worker -> its run
    for (const auto& [run_id, r] : running_) busy[r.worker_id] = run_id;
    // A free worker that fits waiting work is placement's to use: nothing is preempted.
    for (const auto& [id, w] : workers_) {
      if (w.draining || busy.count(id) || now_us - w.last_seen_us > lost_after_us) continue;
      for (const store::PlaceableRun& q : queued) {
        if (Fits(q, w.info.memory_bytes)) return asked;
      }
    }
    std::map<std::string, int> held;  // owner -> workers their runs hold (asked ones excluded)
    int pending = 0;                  // asked runs still handing back: workers about to be free
    std::vector<Candidate> candidates;
    for (const auto& [run_id, r] : running_) {
      if (auto ask = preempt_asked_.find(run_id); ask != preempt_asked_.end()) {
        if (now_us - ask->second.asked_us < kPreemptPendingUs) ++pending;
        continue;
      }
      ++held[r.owner];
      const auto w = workers_.find(r.worker_id);
      if (!r.trains || !r.has_checkpoint || last_preempted_us_.count(run_id) ||
          w == workers_.end()) {
        continue;
      }
      candidates.push_back(Candidate{run_id, &r, w->second.info.memory_bytes});
    }
    // Whether waiting run `q` outranks running run `r`; Why says so in words, for the one chosen.
    auto outranks = [&](const store::PlaceableRun& q, const Running& r) {
      return q.priority > r.priority ||
             (fair && q.priority == r.priority && q.owner != r.owner &&
              used(q.owner) < used(r.owner) && held[r.owner] - held[q.owner] >= 2);
    };
    auto why = [&](const store::PlaceableRun& q, const Running& r) {
      if (q.priority > r.priority) {
        return StrCat("run ", q.id, " of ", q.owner, " waits at priority ", q.priority, " > ",
                      r.priority);
      }
      return StrCat("fair share: run ", q.id, " of ", q.owner, " waits (", held[q.owner],
                    " workers, ", Fixed(used(q.owner), 1), " decayed GPU-h) while ", r.owner,
                    " holds ", held[r.owner], " (", Fixed(used(r.owner), 1), " GPU-h)");
    };
    for (const store::PlaceableRun& q : queued) {
      if (candidates.empty() && pending == 0) break;
      bool waits_for_any = false;
      for (const auto& [run_id, r] : running_) waits_for_any = waits_for_any || outranks(q, r);
      if (!waits_for_any) continue;
      if (pending > 0) {  // a worker already being handed back serves it
        --pending;
        ++held[q.owner];
        continue;
      }
      // The victim: lowest priority, then the owner holding most, then most used, then the
      // attempt that started last.
      const Candidate* victim = nullptr;
      auto key = [&](const Candidate& x) {
        return std::make_tuple(-x.run->priority, held[x.run->owner], used(x.run->owner),
                               x.run->claimed_us);
      };
      for (const Candidate& c : candidates) {
        if (!Fits(q, c.memory_bytes) || !outranks(q, *c.run)) continue;
        if (victim == nullptr || key(c) > key(*victim)) victim = &c;
      }
      if (victim == nullptr) continue;
      const std::string reason = why(q, *victim->run);  // before the counts move
      --held[victim->run->owner];
      ++held[q.owner];
      preempt_asked_[victim->run_id] = PreemptAsk{victim->run->attempt, now_us, reason};
      last_preempted_us_[victim->run_id] = now_us;
      controls.push_back(
          Ask{victim->run_id, victim->run->attempt, Control{Control::Kind::kPreempt, reason}});
      asked.push_back(victim->run_id);
      candidates.erase(candidates.begin() + (victim - candidates.data()));
    }
  }
  for (const Ask& ask : controls) {
    if (absl::Status kept = store_->RecordPreemption(ask.run_id, now_us); !kept.ok()) {
      std::fprintf(stderr, "cartd: run %lld: preemption time not stored (%s)\n",
                   static_cast<long long>(ask.run_id), Message(kept).c_str());
    }
    store::LogLine line;
    line.wall_time_us = now_us;
    line.text = StrCat("cartd: preempted at a checkpoint for other work: ", ask.control.reason);
    (void)store_->AppendLog(ask.run_id, ask.attempt, {line});  // the control goes out regardless
    PushControl(
        [&](const OpenStream& s) { return s.run_id == ask.run_id && s.attempt == ask.attempt; },
        ask.control);
    stats_.AddPreemption();
    BumpRun(ask.run_id);
  }
  return asked;
}

absl::StatusOr<std::vector<store::ExpiredLease>> Scheduler::ExpireLeases() {
  const int64_t now_us = NowMicros();
  if (now_us < grace_end_us_) return std::vector<store::ExpiredLease>();
  CART_ASSIGN_OR_RETURN(std::vector<store::ExpiredLease> expired, store_->ExpireLeases(now_us));
  if (!expired.empty()) {
    stats_.AddLeaseExpiries(static_cast<int64_t>(expired.size()));
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

// ---- Queries

std::optional<int64_t> Scheduler::MaxWorkerMemory() {
  absl::MutexLock lock(&mu_);
  std::optional<int64_t> max;
  for (const auto& [id, worker] : workers_) {
    if (!max || worker.info.memory_bytes > *max) max = worker.info.memory_bytes;
  }
  return max;
}

absl::StatusOr<std::string> Scheduler::WaitingReason(const RunRecord& run) {
  return Explain(run, MaxWorkerMemory());
}

absl::Status Scheduler::CheckParentSteps(const store::NewSweep& sweep) {
  // Runs only move forward, so a run whose checkpoints already pass step S will never write S
  // again: a derived run naming a step that retention removed (or that was never saved) would
  // wait for ever. Refuse it at submit instead.
  std::map<int64_t, std::vector<store::CheckpointRecord>> checkpoints;  // by parent run
  for (const store::NewRun& run : sweep.runs) {
    if (!run.parent_run_id || run.parent_checkpoint == "final") continue;
    const std::optional<int64_t> step = ParseInt64(run.parent_checkpoint);
    if (!step) continue;
    auto it = checkpoints.find(*run.parent_run_id);
    if (it == checkpoints.end()) {
      CART_ASSIGN_OR_RETURN(std::vector<store::CheckpointRecord> list,
                            store_->ListCheckpoints(*run.parent_run_id));
      it = checkpoints.emplace(*run.parent_run_id, std::move(list)).first;
    }
    const std::vector<store::CheckpointRecord>& have = it->second;
    if (have.empty() || have.back().step < *step) continue;  // it may still get there
    bool found = false;
    std::vector<std::string> steps;
    for (const store::CheckpointRecord& c : have) {
      found |= c.step == *step;
      steps.push_back(StrCat(c.step));
    }
    if (found) continue;
    return absl::FailedPreconditionError(
        StrCat("sweep '", sweep.name, "': run ", run.name, " starts from run ", *run.parent_run_id,
               "'s checkpoint at step ", *step, ", which that run does not have (it has steps ",
               StrJoin(steps, ", "),
               "; cartd keeps the newest keep_checkpoints_per_run of each run and "
               "those derived runs name when submitted): name one of those steps or final"));
  }
  return absl::OkStatus();
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

absl::StatusOr<RunDetails> Scheduler::GetRun(int64_t run_id) {
  CART_ASSIGN_OR_RETURN(RunRecord run, store_->GetRun(run_id));
  RunDetails details;
  CART_ASSIGN_OR_RETURN(details.info, Describe(std::move(run), MaxWorkerMemory()));
  CART_ASSIGN_OR_RETURN(details.events, store_->RunEvents(run_id));
  CART_ASSIGN_OR_RETURN(details.checkpoints, store_->ListCheckpoints(run_id));
  CART_ASSIGN_OR_RETURN(details.summaries, store_->RunSummaries(run_id));
  CART_ASSIGN_OR_RETURN(details.data, store_->RunData(run_id));
  for (const store::MetricSummary& s : details.summaries) {
    details.info.step = std::max(details.info.step, s.latest_step);
  }
  return details;
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

absl::StatusOr<std::vector<RunInfo>> Scheduler::ListRuns(const store::RunFilter& filter,
                                                         int64_t limit, int64_t offset,
                                                         int64_t* total) {
  // One paged read gives the records, workers, steps and latest values; only a blocked run costs
  // one more read (its parent's state, for the waiting reason).
  store::RunPageRequest page;
  page.filter = filter;
  page.limit = limit;
  page.offset = offset;
  page.metrics = {"loss", "rho_max", "tokens_per_s", "mfu"};
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

absl::StatusOr<std::vector<store::SweepRecord>> Scheduler::ListSweeps() {
  return store_->ListSweeps();
}

absl::StatusOr<std::vector<RunRecord>> Scheduler::ListRunRecords(const store::RunFilter& filter) {
  return store_->ListRuns(filter);
}

absl::StatusOr<store::RunPage> Scheduler::ListRunPage(const store::RunPageRequest& request) {
  return store_->ListRunPage(request);
}

absl::StatusOr<std::vector<store::SweepProgress>> Scheduler::ListSweepProgress() {
  return store_->ListSweepProgress();
}

absl::StatusOr<store::SweepKeys> Scheduler::GetSweepKeys(const std::string& sweep) {
  return store_->GetSweepKeys(sweep);
}

absl::StatusOr<store::StoreTotals> Scheduler::Totals() { return store_->Totals(); }

absl::StatusOr<std::vector<store::AttemptRecord>> Scheduler::ListAttempts(int64_t run_id) {
  return store_->ListAttempts(run_id);
}

absl::StatusOr<store::SweepRecord> Scheduler::GetSweep(const std::string& name) {
  return store_->GetSweep(name);
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
