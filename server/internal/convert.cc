#include "server/internal/convert.h"

#include <cmath>
#include <map>
#include <tuple>

#include "common/status.h"
#include "common/strings.h"
#include "proto/data_identity.h"
#include "server/notify/events.h"
#include "server/notify/senders.h"

namespace cart::server::internal {

v1::EvalItems ToProto(const store::EvalItems& items) {
  v1::EvalItems out;
  out.set_task(items.task);
  out.set_loops(items.loops);
  out.set_correct(items.correct);
  out.set_correct_norm(items.correct_norm);
  out.mutable_logprob()->Add(items.logprob.begin(), items.logprob.end());
  return out;
}

store::EvalItems FromProto(const v1::EvalItems& items) {
  store::EvalItems out;
  out.task = items.task();
  out.loops = items.loops();
  out.correct = items.correct();
  out.correct_norm = items.correct_norm();
  out.logprob.assign(items.logprob().begin(), items.logprob().end());
  return out;
}

v1::JobKind ToProto(JobKind kind) {
  return kind == JobKind::kEval ? v1::JOB_KIND_EVAL : v1::JOB_KIND_TRAIN;
}

v1::RunState ToProto(store::RunState state) {
  switch (state) {
    case store::RunState::kQueued:
      return v1::RUN_STATE_QUEUED;
    case store::RunState::kBlocked:
      return v1::RUN_STATE_BLOCKED;
    case store::RunState::kLeased:
      return v1::RUN_STATE_LEASED;
    case store::RunState::kRunning:
      return v1::RUN_STATE_RUNNING;
    case store::RunState::kSucceeded:
      return v1::RUN_STATE_SUCCEEDED;
    case store::RunState::kFailed:
      return v1::RUN_STATE_FAILED;
    case store::RunState::kCancelled:
      return v1::RUN_STATE_CANCELLED;
  }
  return v1::RUN_STATE_UNSPECIFIED;
}

std::optional<store::RunState> FromProto(v1::RunState state) {
  switch (state) {
    case v1::RUN_STATE_QUEUED:
      return store::RunState::kQueued;
    case v1::RUN_STATE_BLOCKED:
      return store::RunState::kBlocked;
    case v1::RUN_STATE_LEASED:
      return store::RunState::kLeased;
    case v1::RUN_STATE_RUNNING:
      return store::RunState::kRunning;
    case v1::RUN_STATE_SUCCEEDED:
      return store::RunState::kSucceeded;
    case v1::RUN_STATE_FAILED:
      return store::RunState::kFailed;
    case v1::RUN_STATE_CANCELLED:
      return store::RunState::kCancelled;
    default:
      return std::nullopt;
  }
}

v1::RunView ToRunView(const RunInfo& info, const std::vector<store::MetricSummary>* summaries,
                      bool with_config) {
  const store::RunRecord& run = info.run;
  v1::RunView view;
  view.set_run_id(run.id);
  view.set_name(StrCat(run.sweep_name, "/", run.name));
  view.set_sweep(run.sweep_name);
  view.set_state(ToProto(run.state));
  view.set_attempt(run.attempt);
  view.set_max_attempts(run.max_attempts);
  view.set_priority(run.priority);
  for (const auto& [key, value] : run.params) (*view.mutable_params())[key] = value;
  view.set_stored_params(run.stored_params);
  view.set_effective_params(run.effective_params);
  view.set_memory_estimate_mib((run.memory_estimate_bytes + kMiB - 1) / kMiB);
  view.set_total_steps(run.steps);
  view.set_step(info.step);
  view.set_worker_id(info.worker_id);
  if (summaries != nullptr) {
    for (const store::MetricSummary& s : *summaries)
      (*view.mutable_latest())[s.name] = s.latest_value;
  } else {
    for (const auto& [name, value] : info.latest) (*view.mutable_latest())[name] = value;
  }
  view.set_waiting_reason(info.waiting_reason);
  if (with_config) view.set_config_yaml(run.config_yaml);
  view.set_parent_run_id(run.parent_run_id.value_or(0));
  view.set_kind(ToProto(run.kind));
  view.set_created_us(run.created_us);
  view.set_updated_us(run.updated_us);
  view.set_expected_finish_us(info.expected_finish_us);
  ToAnnotationViews(run.tags, run.note, view.mutable_tags(), view.mutable_note());
  if (run.diverged) {
    view.mutable_diverged()->set_step(run.diverged->step);
    view.mutable_diverged()->set_loss(run.diverged->loss);
  }
  for (const std::string& c : run.device_classes) view.add_device_classes(c);
  view.set_checkpoint_class(run.checkpoint_class);
  view.set_any_device_class(run.any_device_class);
  view.set_balanced(!run.seed_group.empty());
  return view;
}

v1::SweepView ToSweepView(const store::SweepRecord& sweep, const Forecast* forecast) {
  v1::SweepView view;
  if (forecast != nullptr) {
    if (auto at = forecast->sweep_finish_us.find(sweep.id); at != forecast->sweep_finish_us.end()) {
      view.set_expected_finish_us(at->second);
      view.set_runs_estimated(forecast->sweep_estimated_runs.at(sweep.id));
    }
  }
  view.set_name(sweep.name);
  view.set_sweep_id(sweep.id);
  view.set_spec_yaml(sweep.spec_text);
  view.set_created_us(sweep.created_us);
  for (const auto& [state, count] : sweep.run_counts) {
    (*view.mutable_runs_by_state())[std::string(store::RunStateName(state))] = count;
  }
  view.set_priority(sweep.priority);
  ToAnnotationViews(sweep.tags, sweep.note, view.mutable_tags(), view.mutable_note());
  return view;
}

void ToAnnotationViews(const std::vector<store::Tag>& tags, const store::Note& note,
                       google::protobuf::RepeatedPtrField<v1::Tag>* tag_views,
                       v1::Note* note_view) {
  for (const store::Tag& tag : tags) {
    v1::Tag* view = tag_views->Add();
    view->set_name(tag.name);
    view->set_who(tag.who);
    view->set_at_us(tag.at_us);
  }
  note_view->set_text(note.text);
  note_view->set_who(note.who);
  note_view->set_at_us(note.at_us);
}

v1::CheckpointView ToCheckpointView(const store::CheckpointRecord& checkpoint, bool final) {
  v1::CheckpointView view;
  view.set_step(checkpoint.step);
  view.set_sha256(checkpoint.sha256);
  view.set_size_bytes(checkpoint.size_bytes);
  view.set_final(final);
  view.set_created_us(checkpoint.created_us);
  return view;
}

v1::AnnotationHistoryEntry ToProto(const store::AnnotationEvent& event) {
  v1::AnnotationHistoryEntry out;
  out.set_at_us(event.at_us);
  out.set_who(event.who);
  out.set_kind(std::string(store::AnnotationKindName(event.kind)));
  out.set_value(event.value);
  out.set_previous(event.previous);
  return out;
}

v1::AttemptView ToProto(const store::AttemptRecord& attempt) {
  v1::AttemptView out;
  out.set_attempt(attempt.attempt);
  out.set_worker_id(attempt.worker_id);
  out.set_leased_us(attempt.leased_us);
  out.set_ended_us(attempt.ended_us.value_or(0));
  if (attempt.outcome) out.set_outcome(std::string(store::AttemptOutcomeName(*attempt.outcome)));
  out.set_reason(attempt.reason);
  out.set_device_class(attempt.device_class);
  if (attempt.energy_j) {
    out.set_energy_measured(true);
    out.set_energy_j(*attempt.energy_j);
    out.set_energy_source(attempt.energy_source);
  }
  for (const auto& [key, value] : attempt.environment) {
    v1::EnvironmentItem* item = out.add_environment();
    item->set_key(key);
    item->set_value(value);
  }
  return out;
}

v1::RunEvent ToRunEvent(const store::EventRecord& event) {
  v1::RunEvent view;
  view.set_time_us(event.at_us);
  view.set_from_state(event.from_state);
  view.set_to_state(event.to_state);
  view.set_who(event.who);
  view.set_why(event.why);
  return view;
}

v1::WorkerView ToWorkerView(const WorkerStatus& worker) {
  v1::WorkerView view;
  view.set_worker_id(worker.info.id);
  view.set_hostname(worker.info.hostname);
  view.mutable_device()->set_kind(worker.info.device_kind);
  view.mutable_device()->set_name(worker.info.device_name);
  view.mutable_device()->set_memory_mib(worker.info.memory_bytes / kMiB);
  view.set_state(worker.state);
  view.set_run_id(worker.run_id);
  view.set_last_seen_us(worker.last_seen_us);
  view.set_version(worker.info.version);
  view.set_speed(worker.speed);
  view.set_speed_source(worker.speed_source);
  if (!worker.device.empty()) *view.mutable_latest() = ToProto(worker.device.back());
  view.set_idle_while_queued_hours(worker.idle_while_queued_s / 3600);
  view.set_run_mfu(worker.run_mfu.value_or(0.0));
  view.set_run_mfu_6n(worker.run_mfu_6n.value_or(0.0));
  view.set_uuid(worker.info.uuid);
  view.set_free_disk_mib(worker.info.free_disk_bytes / kMiB);
  view.set_disk_floor_mib(worker.info.disk_floor_bytes / kMiB);
  return view;
}

v1::CheckpointRef ToCheckpointRef(const store::CheckpointRecord& checkpoint) {
  v1::CheckpointRef ref;
  ref.set_step(checkpoint.step);
  ref.set_sha256(checkpoint.sha256);
  ref.set_size_bytes(checkpoint.size_bytes);
  return ref;
}

v1::Job ToJob(const Job& job, absl::Duration lease_ttl) {
  v1::Job out;
  out.set_run_id(job.run.id);
  out.set_attempt(job.attempt);
  out.set_run_name(StrCat(job.run.sweep_name, "/", job.run.name));
  out.set_config_yaml(job.run.config_yaml);
  if (job.resume_from) *out.mutable_resume_from() = ToCheckpointRef(*job.resume_from);
  out.set_lease_ttl_ms(absl::ToInt64Milliseconds(lease_ttl));
  out.set_kind(ToProto(job.kind));
  for (int loops : job.eval_loops) out.add_eval_loops(loops);
  if (job.init_from) *out.mutable_init_from() = ToCheckpointRef(*job.init_from);
  out.set_total_steps(job.run.steps);
  for (const store::RunDataRecord& d : job.data) *out.add_data() = ToProto(d);
  return out;
}

v1::DataIdentity ToProto(const store::RunDataRecord& record) {
  v1::DataIdentity out;
  out.set_role(record.role);
  out.set_path(record.path);
  out.set_tokens(-1);
  if (record.identity) data::SetIdentity(*record.identity, &out);
  out.set_recorded_by(record.recorded_by);
  out.set_recorded_us(record.recorded_us);
  return out;
}

store::RunDataRecord FromProto(const v1::DataIdentity& identity) {
  store::RunDataRecord out;
  out.role = identity.role();
  out.path = identity.path();
  if (!identity.sha256().empty()) out.identity = data::IdentityOf(identity);
  return out;
}

store::MetricPoint FromProto(const v1::MetricPoint& point) {
  return store::MetricPoint{point.step(), point.name(), point.value(), point.wall_time_us()};
}

v1::MetricPoint ToProto(const store::MetricPoint& point) {
  v1::MetricPoint out;
  out.set_step(point.step);
  out.set_name(point.name);
  out.set_value(point.value);
  out.set_wall_time_us(point.wall_time_us);
  return out;
}

absl::StatusOr<DeviceSample> FromProto(const v1::DeviceSample& sample, int64_t latest_us) {
  DeviceSample out;
  if (sample.wall_time_us() > latest_us) {
    return absl::InvalidArgumentError(
        StrCat("wall_time_us ", sample.wall_time_us(), " is ahead of cartd's clock by more than ",
               "10 minutes (", latest_us, " at most): is the worker's clock set?"));
  }
  out.at_us = sample.wall_time_us();
  if (!(sample.utilization() >= 0 && sample.utilization() <= 1)) {
    return absl::InvalidArgumentError(
        StrCat("utilization must be between 0 and 1, got ", sample.utilization()));
  }
  out.utilization = sample.utilization();
  constexpr int64_t kMaxMib = int64_t{1} << 40;
  for (const int64_t mib :
       {sample.memory_used_mib(), sample.memory_total_mib(), sample.process_rss_mib()}) {
    if (mib < 0 || mib > kMaxMib) {
      return absl::InvalidArgumentError(
          StrCat("memory_used_mib, memory_total_mib and process_rss_mib must be between 0 and ",
                 kMaxMib, ", got ", mib));
    }
  }
  out.memory_used_bytes = sample.memory_used_mib() * kMiB;
  out.memory_total_bytes = sample.memory_total_mib() * kMiB;
  out.process_rss_bytes = sample.process_rss_mib() * kMiB;
  if (!std::isfinite(sample.process_cpu_percent()) || sample.process_cpu_percent() < 0) {
    return absl::InvalidArgumentError(
        StrCat("process_cpu_percent must be finite and >= 0, got ", sample.process_cpu_percent()));
  }
  out.process_cpu_percent = sample.process_cpu_percent();
  auto finite = [](const char* field, double value) -> absl::Status {
    if (std::isfinite(value)) return absl::OkStatus();
    return absl::InvalidArgumentError(StrCat(field, " must be finite, got ", value));
  };
  if (sample.has_temperature_c()) {
    CART_RETURN_IF_ERROR(finite("temperature_c", sample.temperature_c()));
    out.temperature_c = sample.temperature_c();
  }
  if (sample.has_power_w()) {
    CART_RETURN_IF_ERROR(finite("power_w", sample.power_w()));
    out.power_w = sample.power_w();
  }
  for (const auto& [field, has, mhz] :
       {std::tuple{"sm_clock_mhz", sample.has_sm_clock_mhz(), sample.sm_clock_mhz()},
        std::tuple{"memory_clock_mhz", sample.has_memory_clock_mhz(), sample.memory_clock_mhz()}}) {
    if (has && (mhz < 0 || mhz > 1'000'000)) {
      return absl::InvalidArgumentError(StrCat(field, " must be between 0 and 1000000, got ", mhz));
    }
  }
  if (sample.has_sm_clock_mhz()) out.sm_clock_hz = sample.sm_clock_mhz() * 1e6;
  if (sample.has_memory_clock_mhz()) out.memory_clock_hz = sample.memory_clock_mhz() * 1e6;
  if (sample.has_throttle_reasons()) out.throttle_reasons = sample.throttle_reasons();
  return out;
}

v1::DeviceSample ToProto(const DeviceSample& sample) {
  v1::DeviceSample out;
  out.set_wall_time_us(sample.at_us);
  out.set_utilization(sample.utilization);
  out.set_memory_used_mib(sample.memory_used_bytes / kMiB);
  out.set_memory_total_mib(sample.memory_total_bytes / kMiB);
  if (sample.temperature_c) out.set_temperature_c(*sample.temperature_c);
  if (sample.power_w) out.set_power_w(*sample.power_w);
  if (sample.sm_clock_hz) out.set_sm_clock_mhz(static_cast<int64_t>(*sample.sm_clock_hz / 1e6));
  if (sample.memory_clock_hz) {
    out.set_memory_clock_mhz(static_cast<int64_t>(*sample.memory_clock_hz / 1e6));
  }
  if (sample.throttle_reasons) out.set_throttle_reasons(*sample.throttle_reasons);
  out.set_process_cpu_percent(sample.process_cpu_percent);
  out.set_process_rss_mib(sample.process_rss_bytes / kMiB);
  return out;
}

std::optional<store::AttemptOutcome> FromProto(v1::JobResult::Outcome outcome) {
  switch (outcome) {
    case v1::JobResult::OUTCOME_SUCCEEDED:
      return store::AttemptOutcome::kSucceeded;
    case v1::JobResult::OUTCOME_FAILED:
      return store::AttemptOutcome::kFailed;
    case v1::JobResult::OUTCOME_CANCELLED:
      return store::AttemptOutcome::kCancelled;
    case v1::JobResult::OUTCOME_DRAINED:
      return store::AttemptOutcome::kDrained;
    case v1::JobResult::OUTCOME_OUT_OF_MEMORY:
      return store::AttemptOutcome::kOutOfMemory;
    default:
      return std::nullopt;
  }
}

store::NewCheckpoint FromProto(const v1::CheckpointRef& ref, std::string path) {
  store::NewCheckpoint checkpoint;
  checkpoint.step = ref.step();
  checkpoint.sha256 = ref.sha256();
  checkpoint.size_bytes = ref.size_bytes();
  checkpoint.path = std::move(path);
  return checkpoint;
}

store::LogLine FromProto(const v1::LogLine& line) {
  store::LogLine out;
  out.seq = line.seq();
  out.wall_time_us = line.wall_time_us();
  out.text = line.text();
  return out;
}

v1::RunLogLine ToRunLogLine(const store::LogLine& line) {
  v1::RunLogLine out;
  out.set_id(line.id);
  out.set_attempt(line.attempt);
  out.set_wall_time_us(line.wall_time_us);
  out.set_text(line.text);
  return out;
}

v1::MetricColumns ToMetricColumns(const store::MetricPoint* begin, const store::MetricPoint* end) {
  v1::MetricColumns columns;
  std::map<std::string_view, int32_t> index;
  for (const store::MetricPoint* p = begin; p != end; ++p) {
    auto [it, added] = index.emplace(p->name, static_cast<int32_t>(index.size()));
    if (added) columns.add_names(p->name);
    columns.add_name_index(it->second);
    columns.add_steps(p->step);
    columns.add_values(p->value);
    columns.add_wall_time_us(p->wall_time_us);
  }
  return columns;
}

v1::SubscriptionView ToProto(const store::Subscription& sub) {
  v1::SubscriptionView view;
  view.set_id(sub.id);
  view.set_owner(sub.owner);
  view.set_scope(std::string(store::SubscriptionScopeName(sub.scope)));
  view.set_run_id(sub.run_id);
  view.set_run_name(sub.run_name);
  view.set_sweep(sub.sweep_name);
  for (const std::string& e : sub.events) view.add_events(e);
  view.set_channel(std::string(store::NotifyChannelName(sub.channel)));
  view.set_target(sub.channel == store::NotifyChannel::kEmail ? sub.target
                                                              : notify::RedactUrl(sub.target));
  view.set_lost_after_s(sub.lost_after_us / 1'000'000);
  view.set_stuck_factor(sub.stuck_factor);
  view.set_slip_share(sub.slip_share);
  view.set_created_us(sub.created_us);
  return view;
}

v1::NotificationView ToProto(const store::NotificationRecord& n) {
  v1::NotificationView view;
  view.set_id(n.id);
  view.set_subscription_id(n.notice.subscription_id);
  view.set_event(n.notice.event);
  view.set_key(n.notice.key);
  view.set_run_id(n.notice.run_id.value_or(0));
  view.set_sweep_id(n.notice.sweep_id.value_or(0));
  view.set_happened_us(n.notice.happened_us);
  view.set_summary(n.notice.summary);
  view.set_state(std::string(store::NotificationStateName(n.state)));
  view.set_tries(n.tries);
  view.set_next_try_us(n.next_try_us);
  view.set_done_us(n.done_us.value_or(0));
  for (const store::NotificationTry& t : n.log) {
    v1::NotificationTryView* tv = view.add_log();
    tv->set_number(t.number);
    tv->set_at_us(t.at_us);
    tv->set_ok(t.ok);
    tv->set_detail(t.detail);
  }
  view.set_idempotency_key(notify::IdempotencyKey(n));
  return view;
}

v1::BudgetView ToProto(const BudgetLine& budget) {
  v1::BudgetView out;
  out.set_scope(budget.scope);
  out.set_name(budget.name);
  out.set_limit_device_hours(budget.account.limit);
  out.set_spent_device_hours(budget.account.spent);
  out.set_held_device_hours(budget.account.held);
  out.set_left_device_hours(budget.account.Left());
  out.set_source(budget.account.source);
  return out;
}

v1::SpendingView ToProto(const store::Spending& spending, const store::EnergyPrices& prices) {
  const store::SpendingFigures f = store::FiguresOf(spending, prices);
  v1::SpendingView view;
  view.set_attempts(spending.attempts);
  view.set_measured_attempts(spending.measured_attempts);
  view.set_energy_kwh(f.kwh);
  for (const std::string& source : spending.sources) view.add_sources(source);
  view.set_device_hours(spending.device_hours);
  view.set_cost(f.cost);
  view.set_currency(prices.currency);
  view.set_co2_grams(f.co2_grams);
  view.set_text(store::SpendingLine(spending, prices));
  return view;
}

}  // namespace cart::server::internal
