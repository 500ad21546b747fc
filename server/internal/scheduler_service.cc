// SchedulerService: the researcher API. Every handler starts with the token check (user or admin).

#include <algorithm>
#include <optional>

#include "common/status.h"
#include "common/strings.h"
#include "server/internal/convert.h"
#include "server/internal/services.h"
#include "server/internal/tables.h"
#include "server/run_cursor.h"

namespace cart::server::internal {
namespace {

// At most this many points per MetricBatchView message (and log lines per RunLogView).
constexpr size_t kPointsPerView = 10'000;
// A follower re-reads at least this often even when nothing signals a change.
constexpr absl::Duration kFollowPoll = absl::Seconds(1);

// The most runs one answer carries (ListRuns, GetSweep, SubmitSweep): a limit of 0 ("every run")
// or a larger one gets this many, fewer when their views pass ServiceContext::max_answer_bytes,
// and the caller pages with offset (docs/architecture.md, "No answer is unbounded"). Before, one
// ListRuns of a 10,000-run sweep with 20 KB paths answered 211 MB.
constexpr int64_t kMaxRunsPerAnswer = 1000;

int64_t AnswerLimit(int64_t asked) {
  return asked <= 0 || asked > kMaxRunsPerAnswer ? kMaxRunsPerAnswer : asked;
}

// Adds the views of `runs` to `out` in order until the next would pass `max_bytes` (the first
// always goes in).
template <typename Runs, typename ToView>
void AddRunViews(const Runs& runs, size_t max_bytes,
                 google::protobuf::RepeatedPtrField<v1::RunView>* out, ToView to_view) {
  size_t bytes = 0;
  for (const auto& run : runs) {
    v1::RunView view = to_view(run);
    bytes += view.ByteSizeLong();
    if (!out->empty() && bytes > max_bytes) return;
    *out->Add() = std::move(view);
  }
}

// A view with only the run's state, ending a stream that had nothing new to send.
template <typename View>
void WriteStateOnly(grpc::ServerWriter<View>& writer, store::RunState state) {
  View view;
  view.set_state(ToProto(state));
  writer.Write(view);
}

}  // namespace

absl::StatusOr<std::string> SchedulerServiceImpl::Caller(grpc::ServerContext* context,
                                                         const char* method) const {
  CART_ASSIGN_OR_RETURN(Principal who,
                        ctx_.tokens->Check(AuthorizationOf(*context), Api::kScheduler,
                                           StrCat("SchedulerService.", method)));
  return CallerName(who);  // a worker's token may not call this API
}

// A large-read slot for `who` when `big`, held until the handler returns; the macro returns
// RESOURCE_EXHAUSTED when `who` or everyone holds the most allowed. A page of at most
// kSmallAnswer runs is not a large read (`cart up` polls with such).
constexpr int64_t kSmallAnswer = 100;
#define CART_BIG_READ(big, who)                                               \
  std::shared_ptr<void> big_read_slot_;                                       \
  if ((big) && ctx_.big_reads != nullptr) {                                   \
    absl::StatusOr<std::shared_ptr<void>> taken_ = ctx_.big_reads->Take(who); \
    if (!taken_.ok()) return ToGrpc(taken_.status());                         \
    big_read_slot_ = *std::move(taken_);                                      \
  }

#define CART_CALLER(var, method)                                   \
  std::string var;                                                 \
  {                                                                \
    absl::StatusOr<std::string> caller_ = Caller(context, method); \
    if (!caller_.ok()) return ToGrpc(caller_.status());            \
    var = *std::move(caller_);                                     \
  }

grpc::Status SchedulerServiceImpl::SubmitSweep(grpc::ServerContext* context,
                                               const v1::SubmitSweepRequest* request,
                                               v1::SubmitSweepResponse* response) {
  CART_CALLER(who, "SubmitSweep");
  if (request->spec_yaml().empty()) {
    return ToGrpc(absl::InvalidArgumentError("SubmitSweep: spec_yaml is empty"));
  }
  SubmitRequest submit;
  submit.spec_yaml = request->spec_yaml();
  submit.file_name = request->file_name();
  submit.request_id = request->request_id();
  submit.dry_run = request->dry_run();
  submit.who = who;
  if (request->run_limit() < 0) {
    return ToGrpc(absl::InvalidArgumentError("SubmitSweep: run_limit must not be negative"));
  }
  submit.run_limit = AnswerLimit(request->run_limit());
  if (request->data_files_size() > static_cast<int>(store::kMaxDataFiles)) {
    return ToGrpc(
        absl::InvalidArgumentError(StrCat("SubmitSweep: ", request->data_files_size(),
                                          " data_files; at most ", store::kMaxDataFiles)));
  }
  for (const v1::DataIdentity& file : request->data_files()) {
    store::RunDataRecord record = FromProto(file);
    if (!record.identity) {
      return ToGrpc(absl::InvalidArgumentError(StrCat(
          "SubmitSweep: data_files: '", ValidUtf8(file.path().substr(0, 200)), "' has no sha256")));
    }
    submit.data_files[record.path] = *std::move(record.identity);
  }
  if (request->has_provenance()) {
    store::SweepProvenance provenance;
    for (const v1::EnvironmentItem& item : request->provenance().items()) {
      provenance.items.emplace_back(item.key(), item.value());
    }
    provenance.git_diff = request->provenance().git_diff();
    submit.provenance = std::move(provenance);
  }
  absl::StatusOr<SubmitResult> result = ctx_.scheduler->SubmitSweep(submit);
  if (!result.ok()) return ToGrpc(result.status());
  *response->mutable_sweep() = ToSweepView(result->sweep);
  AddRunViews(result->runs, ctx_.max_answer_bytes, response->mutable_runs(),
              [](const store::RunRecord& run) {
                RunInfo info;
                info.run = run;
                return ToRunView(info, nullptr, /*with_config=*/false);
              });
  response->set_existing(result->existing);
  return grpc::Status::OK;
}

grpc::Status SchedulerServiceImpl::ListSweeps(grpc::ServerContext* context,
                                              const v1::ListSweepsRequest* request,
                                              v1::ListSweepsResponse* response) {
  CART_CALLER(who, "ListSweeps");
  absl::StatusOr<std::vector<store::SweepRecord>> sweeps = ctx_.scheduler->ListSweeps();
  if (!sweeps.ok()) return ToGrpc(sweeps.status());
  absl::StatusOr<std::shared_ptr<const Forecast>> forecast = ctx_.scheduler->ExpectedFinish();
  if (!forecast.ok()) return ToGrpc(forecast.status());
  absl::StatusOr<std::map<int64_t, store::Spending>> spending = ctx_.scheduler->SweepSpending();
  if (!spending.ok()) return ToGrpc(spending.status());
  absl::StatusOr<BudgetLedger> budgets = ctx_.scheduler->BudgetsNow();
  if (!budgets.ok()) return ToGrpc(budgets.status());
  // Newest first.
  for (auto it = sweeps->rbegin(); it != sweeps->rend(); ++it) {
    v1::SweepView view = ToSweepView(*it, forecast->get());
    view.clear_spec_yaml();
    if (auto s = spending->find(it->id); s != spending->end()) {
      *view.mutable_spending() = ToProto(s->second, ctx_.prices);
    }
    if (auto b = budgets->sweeps.find(it->id); b != budgets->sweeps.end()) {
      *view.mutable_budget() = ToProto(BudgetLine{"sweep", it->name, it->id, b->second});
    }
    *response->add_sweeps() = std::move(view);
  }
  response->mutable_prices()->set_per_kwh(ctx_.prices.per_kwh);
  response->mutable_prices()->set_currency(ctx_.prices.currency);
  response->mutable_prices()->set_co2_grams_per_kwh(ctx_.prices.co2_grams_per_kwh);
  return grpc::Status::OK;
}

grpc::Status SchedulerServiceImpl::GetSweep(grpc::ServerContext* context,
                                            const v1::GetSweepRequest* request,
                                            v1::GetSweepResponse* response) {
  CART_CALLER(who, "GetSweep");
  CART_BIG_READ(AnswerLimit(request->run_limit()) > kSmallAnswer, who);
  absl::StatusOr<store::SweepRecord> sweep = ctx_.scheduler->GetSweep(request->name());
  if (!sweep.ok()) return ToGrpc(sweep.status());
  store::RunFilter filter;
  filter.sweeps = {request->name()};
  if (request->run_limit() < 0) {
    return ToGrpc(absl::InvalidArgumentError("GetSweep: run_limit must not be negative"));
  }
  int64_t total = 0;
  absl::StatusOr<std::vector<RunInfo>> runs =
      ctx_.scheduler->ListRuns(filter, AnswerLimit(request->run_limit()), 0, &total);
  if (!runs.ok()) return ToGrpc(runs.status());
  absl::StatusOr<std::shared_ptr<const Forecast>> forecast = ctx_.scheduler->ExpectedFinish();
  if (!forecast.ok()) return ToGrpc(forecast.status());
  *response->mutable_sweep() = ToSweepView(*sweep, forecast->get());
  {
    absl::StatusOr<std::map<int64_t, store::Spending>> spending = ctx_.scheduler->SweepSpending();
    if (!spending.ok()) return ToGrpc(spending.status());
    if (auto s = spending->find(sweep->id); s != spending->end()) {
      *response->mutable_sweep()->mutable_spending() = ToProto(s->second, ctx_.prices);
    }
    absl::StatusOr<BudgetLedger> budgets = ctx_.scheduler->BudgetsNow();
    if (!budgets.ok()) return ToGrpc(budgets.status());
    if (auto b = budgets->sweeps.find(sweep->id); b != budgets->sweeps.end()) {
      *response->mutable_sweep()->mutable_budget() =
          ToProto(BudgetLine{"sweep", sweep->name, sweep->id, b->second});
    }
  }
  response->set_run_total(total);
  absl::StatusOr<std::vector<store::AnnotationEvent>> history =
      ctx_.scheduler->SweepAnnotationHistory(request->name());
  if (!history.ok()) return ToGrpc(history.status());
  for (const store::AnnotationEvent& e : *history) *response->add_annotation_history() = ToProto(e);
  absl::StatusOr<std::optional<store::SweepProvenance>> provenance =
      ctx_.scheduler->GetSweepProvenance(request->name());
  if (!provenance.ok()) return ToGrpc(provenance.status());
  if (provenance->has_value()) {
    v1::SweepProvenance* out = response->mutable_provenance();
    for (const auto& [key, value] : (*provenance)->items) {
      v1::EnvironmentItem* item = out->add_items();
      item->set_key(key);
      item->set_value(value);
    }
    out->set_git_diff((*provenance)->git_diff);
  }
  AddRunViews(*runs, ctx_.max_answer_bytes, response->mutable_runs(),
              [](const RunInfo& info) { return ToRunView(info, nullptr, false); });
  return grpc::Status::OK;
}

grpc::Status SchedulerServiceImpl::CancelSweep(grpc::ServerContext* context,
                                               const v1::CancelSweepRequest* request,
                                               v1::CancelSweepResponse* response) {
  CART_CALLER(who, "CancelSweep");
  absl::StatusOr<int64_t> changed =
      ctx_.scheduler->CancelSweep(request->name(), who, request->reason());
  if (!changed.ok()) return ToGrpc(changed.status());
  response->set_runs_affected(*changed);
  return grpc::Status::OK;
}

grpc::Status SchedulerServiceImpl::ResumeSweep(grpc::ServerContext* context,
                                               const v1::ResumeSweepRequest* request,
                                               v1::ResumeSweepResponse* response) {
  CART_CALLER(who, "ResumeSweep");
  absl::StatusOr<int64_t> changed = ctx_.scheduler->ResumeSweep(request->name(), who);
  if (!changed.ok()) return ToGrpc(changed.status());
  response->set_runs_affected(*changed);
  return grpc::Status::OK;
}

grpc::Status SchedulerServiceImpl::DeleteSweep(grpc::ServerContext* context,
                                               const v1::DeleteSweepRequest* request,
                                               v1::DeleteSweepResponse* response) {
  CART_CALLER(who, "DeleteSweep");
  absl::StatusOr<store::DeletedSweep> deleted = ctx_.scheduler->DeleteSweep(request->name(), who);
  if (!deleted.ok()) return ToGrpc(deleted.status());
  response->set_runs_deleted(deleted->runs());
  response->set_metric_points_deleted(deleted->metric_points);
  response->set_checkpoints_deleted(deleted->checkpoints);
  response->set_artifacts_removed(static_cast<int64_t>(deleted->released_artifacts.size()));
  return grpc::Status::OK;
}

grpc::Status SchedulerServiceImpl::SetSweepPriority(grpc::ServerContext* context,
                                                    const v1::SetSweepPriorityRequest* request,
                                                    v1::SetSweepPriorityResponse* response) {
  CART_CALLER(who, "SetSweepPriority");
  absl::StatusOr<int64_t> changed =
      ctx_.scheduler->SetSweepPriority(request->name(), request->priority(), who);
  if (!changed.ok()) return ToGrpc(changed.status());
  response->set_runs_affected(*changed);
  return grpc::Status::OK;
}

grpc::Status SchedulerServiceImpl::ListBudgets(grpc::ServerContext* context,
                                               const v1::ListBudgetsRequest* request,
                                               v1::ListBudgetsResponse* response) {
  CART_CALLER(who, "ListBudgets");
  absl::StatusOr<std::vector<BudgetLine>> budgets = ctx_.scheduler->Budgets(who);
  if (!budgets.ok()) return ToGrpc(budgets.status());
  for (const BudgetLine& b : *budgets) *response->add_budgets() = ToProto(b);
  response->set_caller(std::string(store::OwnerName(who)));
  return grpc::Status::OK;
}

grpc::Status SchedulerServiceImpl::SetBudget(grpc::ServerContext* context,
                                             const v1::SetBudgetRequest* request,
                                             v1::BudgetView* response) {
  CART_CALLER(who, "SetBudget");
  if (request->sweep().empty() == request->user().empty()) {
    return ToGrpc(absl::InvalidArgumentError("SetBudget: give one of sweep and user"));
  }
  const bool sweep = !request->sweep().empty();
  absl::StatusOr<BudgetLine> set = ctx_.scheduler->SetBudget(
      sweep ? "sweep" : "user", sweep ? request->sweep() : request->user(), request->device_hours(),
      who);
  if (!set.ok()) return ToGrpc(set.status());
  *response = ToProto(*set);
  return grpc::Status::OK;
}

grpc::Status SchedulerServiceImpl::ListRuns(grpc::ServerContext* context,
                                            const v1::ListRunsRequest* request,
                                            v1::ListRunsResponse* response) {
  CART_CALLER(who, "ListRuns");
  CART_BIG_READ(AnswerLimit(request->limit()) > kSmallAnswer, who);
  store::RunFilter filter;
  if (!request->sweep().empty()) filter.sweeps = {request->sweep()};
  for (int state : request->states()) {
    std::optional<store::RunState> parsed = FromProto(static_cast<v1::RunState>(state));
    if (!parsed) {
      return ToGrpc(
          absl::InvalidArgumentError(StrCat("ListRuns: state ", state, " is not a run state")));
    }
    filter.states.push_back(*parsed);
  }
  if (request->limit() < 0 || request->offset() < 0) {
    return ToGrpc(absl::InvalidArgumentError("ListRuns: limit and offset must not be negative"));
  }
  filter.tags.assign(request->tags().begin(), request->tags().end());
  int64_t total = 0;
  absl::StatusOr<std::vector<RunInfo>> runs =
      ctx_.scheduler->ListRuns(filter, AnswerLimit(request->limit()), request->offset(), &total);
  if (!runs.ok()) return ToGrpc(runs.status());
  response->set_total(total);
  AddRunViews(*runs, ctx_.max_answer_bytes, response->mutable_runs(),
              [](const RunInfo& info) { return ToRunView(info, nullptr, false); });
  return grpc::Status::OK;
}

grpc::Status SchedulerServiceImpl::GetRun(grpc::ServerContext* context,
                                          const v1::GetRunRequest* request,
                                          v1::GetRunResponse* response) {
  CART_CALLER(who, "GetRun");
  int64_t run_id = request->run_id();
  if (run_id == 0 && !request->name().empty()) {
    absl::StatusOr<int64_t> found = ctx_.scheduler->FindRun(request->name());
    if (!found.ok()) return ToGrpc(found.status());
    run_id = *found;
  }
  if (run_id <= 0) return ToGrpc(absl::InvalidArgumentError("GetRun: give run_id or name"));
  absl::StatusOr<RunDetails> details = ctx_.scheduler->GetRun(run_id);
  if (!details.ok()) return ToGrpc(details.status());
  *response->mutable_run() = ToRunView(details->info, &details->summaries, /*with_config=*/true);
  for (const store::EventRecord& event : details->events)
    *response->add_events() = ToRunEvent(event);
  const bool succeeded = details->info.run.state == store::RunState::kSucceeded;
  for (size_t i = 0; i < details->checkpoints.size(); ++i) {
    const bool final = succeeded && i + 1 == details->checkpoints.size();
    *response->add_checkpoints() = ToCheckpointView(details->checkpoints[i], final);
  }
  for (const store::RunDataRecord& d : details->data) *response->add_data() = ToProto(d);
  for (const store::AnnotationEvent& e : details->annotation_history) {
    *response->add_annotation_history() = ToProto(e);
  }
  for (const store::AttemptRecord& a : details->attempts) *response->add_attempts() = ToProto(a);
  *response->mutable_spending() =
      ToProto(store::SpendingOf(details->attempts, ctx_.scheduler->NowMicros()), ctx_.prices);
  return grpc::Status::OK;
}

grpc::Status SchedulerServiceImpl::RunView(int64_t run_id, v1::RunResponse* response) {
  absl::StatusOr<RunDetails> details = ctx_.scheduler->GetRun(run_id);
  if (!details.ok()) return ToGrpc(details.status());
  *response->mutable_run() = ToRunView(details->info, &details->summaries, false);
  return grpc::Status::OK;
}

grpc::Status SchedulerServiceImpl::CancelRun(grpc::ServerContext* context,
                                             const v1::CancelRunRequest* request,
                                             v1::RunResponse* response) {
  CART_CALLER(who, "CancelRun");
  absl::StatusOr<store::RunRecord> run =
      ctx_.scheduler->CancelRun(request->run_id(), who, request->reason());
  if (!run.ok()) return ToGrpc(run.status());
  return RunView(run->id, response);
}

grpc::Status SchedulerServiceImpl::ResumeRun(grpc::ServerContext* context,
                                             const v1::ResumeRunRequest* request,
                                             v1::RunResponse* response) {
  CART_CALLER(who, "ResumeRun");
  if (request->set_size() > 64) {
    return ToGrpc(absl::InvalidArgumentError("ResumeRun: at most 64 set entries"));
  }
  absl::StatusOr<store::RunRecord> run = ctx_.scheduler->ResumeRun(
      request->run_id(), who, {request->set().begin(), request->set().end()});
  if (!run.ok()) return ToGrpc(run.status());
  return RunView(run->id, response);
}

grpc::Status SchedulerServiceImpl::ForecastRuns(grpc::ServerContext* context,
                                                const v1::ForecastRunsRequest* request,
                                                v1::ForecastRunsResponse* response) {
  CART_CALLER(who, "ForecastRuns");
  if (request->runs_size() > 10'000) {
    return ToGrpc(absl::InvalidArgumentError(
        StrCat("ForecastRuns: ", request->runs_size(), " runs; at most 10000")));
  }
  std::vector<store::PlaceableRun> runs;
  for (int i = 0; i < request->runs_size(); ++i) {
    const v1::ForecastRun& r = request->runs(i);
    if (!(r.rtx3090_hours() > 0 && r.rtx3090_hours() < 1e9) || r.memory_bytes() < 0) {
      return ToGrpc(absl::InvalidArgumentError(StrCat(
          "ForecastRuns: run ", i, " has rtx3090_hours ", r.rtx3090_hours(), " and memory_bytes ",
          r.memory_bytes(), "; the hours must be in (0, 1e9) and the memory not negative")));
    }
    store::PlaceableRun p;
    p.work_hours = r.rtx3090_hours();
    p.min_memory_bytes = r.memory_bytes();
    p.priority = r.priority();
    p.owner = who;
    runs.push_back(std::move(p));
  }
  absl::StatusOr<std::vector<int64_t>> finish = ctx_.scheduler->ForecastRuns(std::move(runs));
  if (!finish.ok()) return ToGrpc(finish.status());
  for (int64_t at : *finish) response->add_expected_finish_us(at);
  return grpc::Status::OK;
}

grpc::Status SchedulerServiceImpl::ApplyPlan(grpc::ServerContext* context,
                                             const v1::ApplyPlanRequest* request,
                                             v1::ApplyPlanResponse* response) {
  CART_CALLER(who, "ApplyPlan");
  if (request->sides_size() > 10'000 || request->claims_size() > 10'000) {
    return ToGrpc(absl::InvalidArgumentError("ApplyPlan: at most 10000 sides and claims"));
  }
  PlanRequest plan;
  plan.who = who;
  for (const v1::PlanSide& side : request->sides()) {
    plan.sides.push_back({side.sweep(),
                          {side.config().begin(), side.config().end()},
                          side.runs(),
                          side.template_run_id()});
  }
  for (const v1::PlanClaimLook& c : request->claims()) {
    plan.plan.claims.push_back(
        {c.claim(), c.seeds_now(), c.seeds_target(), c.runs(), c.rtx3090_hours()});
  }
  plan.plan.power = request->power();
  plan.plan.alpha = request->alpha();
  if (request->has_budget()) plan.plan.budget_hours = request->budget_hours();
  if (!request->spending().empty()) plan.plan.spending = request->spending();
  plan.plan.text = request->text();
  absl::StatusOr<PlanApplied> applied = ctx_.scheduler->ApplyPlan(std::move(plan));
  if (!applied.ok()) return ToGrpc(applied.status());
  response->set_plan_id(applied->plan_id);
  for (const store::RunRecord& run : applied->runs) {
    v1::PlannedRun* out = response->add_runs();
    out->set_run_id(run.id);
    out->set_sweep(run.sweep_name);
    out->set_name(run.name);
    out->set_seed(run.seed);
    out->set_kind(ToProto(run.kind));
    out->set_parent_run_id(run.parent_run_id.value_or(0));
  }
  return grpc::Status::OK;
}

grpc::Status SchedulerServiceImpl::GetEvalItems(grpc::ServerContext* context,
                                                const v1::GetEvalItemsRequest* request,
                                                v1::GetEvalItemsResponse* response) {
  CART_CALLER(who, "GetEvalItems");
  absl::StatusOr<std::vector<store::EvalItems>> items =
      ctx_.scheduler->ListEvalItems(request->run_id());
  if (!items.ok()) return ToGrpc(items.status());
  for (const store::EvalItems& e : *items) *response->add_tasks() = ToProto(e);
  return grpc::Status::OK;
}

grpc::Status SchedulerServiceImpl::ListPlans(grpc::ServerContext* context,
                                             const v1::ListPlansRequest* request,
                                             v1::ListPlansResponse* response) {
  CART_CALLER(who, "ListPlans");
  absl::StatusOr<std::vector<store::PlanRecord>> plans = ctx_.scheduler->ListPlans();
  if (!plans.ok()) return ToGrpc(plans.status());
  for (const store::PlanRecord& p : *plans) {
    v1::PlanView* out = response->add_plans();
    out->set_plan_id(p.id);
    out->set_created_us(p.created_us);
    out->set_created_by(p.created_by);
    out->set_power(p.power);
    out->set_alpha(p.alpha);
    out->set_has_budget(p.budget_hours.has_value());
    out->set_budget_hours(p.budget_hours.value_or(0));
    out->set_spending(p.spending);
    for (const store::PlanClaim& c : p.claims) {
      v1::PlanClaimLook* look = out->add_claims();
      look->set_claim(c.claim);
      look->set_seeds_now(c.seeds_now);
      look->set_seeds_target(c.seeds_target);
      look->set_runs(c.runs);
      look->set_rtx3090_hours(c.hours);
    }
    for (int64_t id : p.run_ids) out->add_run_ids(id);
  }
  return grpc::Status::OK;
}

grpc::Status SchedulerServiceImpl::SetRunDeviceClass(grpc::ServerContext* context,
                                                     const v1::SetRunDeviceClassRequest* request,
                                                     v1::RunResponse* response) {
  CART_CALLER(who, "SetRunDeviceClass");
  absl::StatusOr<store::RunRecord> run =
      ctx_.scheduler->SetRunDeviceClass(request->run_id(), request->any(), who, request->reason());
  if (!run.ok()) return ToGrpc(run.status());
  return RunView(run->id, response);
}

grpc::Status SchedulerServiceImpl::ExtendRun(grpc::ServerContext* context,
                                             const v1::ExtendRunRequest* request,
                                             v1::RunResponse* response) {
  CART_CALLER(who, "ExtendRun");
  ExtendSchedule schedule = ExtendSchedule::kAsk;
  switch (request->schedule()) {
    case v1::EXTEND_SCHEDULE_STRETCH:
      schedule = ExtendSchedule::kStretch;
      break;
    case v1::EXTEND_SCHEDULE_HOLD:
      schedule = ExtendSchedule::kHold;
      break;
    case v1::EXTEND_SCHEDULE_UNSPECIFIED:
      break;
    default:
      return ToGrpc(absl::InvalidArgumentError(
          StrCat("ExtendRun: schedule ", request->schedule(), " is not stretch (1) or hold (2)")));
  }
  absl::StatusOr<ExtendOutcome> out =
      ctx_.scheduler->ExtendRun(request->run_id(), request->total_steps(), schedule, who);
  if (!out.ok()) return ToGrpc(out.status());
  response->set_schedule(out->schedule == ExtendSchedule::kHold ? v1::EXTEND_SCHEDULE_HOLD
                                                                : v1::EXTEND_SCHEDULE_STRETCH);
  response->set_lr_before(out->lr_before);
  response->set_lr_after(out->lr_after);
  return RunView(out->run.id, response);
}

grpc::Status SchedulerServiceImpl::StreamMetrics(grpc::ServerContext* context,
                                                 const v1::StreamMetricsRequest* request,
                                                 grpc::ServerWriter<v1::MetricBatchView>* writer) {
  CART_CALLER(who, "StreamMetrics");
  std::shared_ptr<void> slot;  // held while the stream follows
  if (request->follow() && ctx_.followers != nullptr) {
    absl::StatusOr<std::shared_ptr<void>> taken = ctx_.followers->Take(who);
    if (!taken.ok()) return ToGrpc(taken.status());
    slot = *std::move(taken);
  }
  const int64_t run_id = request->run_id();
  MetricCursor cursor(*ctx_.scheduler, run_id, request->from_step(),
                      {request->names().begin(), request->names().end()});
  auto read = [&](const store::RunRecord& run, bool last) -> absl::StatusOr<bool> {
    CART_ASSIGN_OR_RETURN(std::vector<store::Series> news, cursor.Next(/*max_points=*/0));
    std::vector<store::MetricPoint> points;
    for (const store::Series& series : news) {
      for (const store::SeriesPoint& p : series.points) {
        points.push_back(store::MetricPoint{p.step, series.metric, p.value, p.wall_time_us});
      }
    }
    std::stable_sort(points.begin(), points.end(),
                     [](const auto& a, const auto& b) { return a.step < b.step; });
    for (size_t first = 0; first < points.size(); first += kPointsPerView) {
      v1::MetricBatchView view;
      view.set_state(ToProto(run.state));
      const size_t end = std::min(points.size(), first + kPointsPerView);
      if (request->columnar()) {
        *view.mutable_columns() = ToMetricColumns(&points[first], &points[first] + (end - first));
      } else {
        for (size_t i = first; i < end; ++i) *view.add_points() = ToProto(points[i]);
      }
      if (!writer->Write(view)) return false;  // the client went away
    }
    // The last message always tells the final state, even with no new points.
    if (last && points.empty()) WriteStateOnly(*writer, run.state);
    return true;
  };
  return ToGrpc(ctx_.scheduler->FollowRun(
      run_id, request->follow(), kFollowPoll, [context] { return context->IsCancelled(); }, read));
}

grpc::Status SchedulerServiceImpl::StreamRunLog(grpc::ServerContext* context,
                                                const v1::StreamRunLogRequest* request,
                                                grpc::ServerWriter<v1::RunLogView>* writer) {
  CART_CALLER(who, "StreamRunLog");
  std::shared_ptr<void> slot;  // held while the stream follows
  if (request->follow() && ctx_.followers != nullptr) {
    absl::StatusOr<std::shared_ptr<void>> taken = ctx_.followers->Take(who);
    if (!taken.ok()) return ToGrpc(taken.status());
    slot = *std::move(taken);
  }
  const int64_t run_id = request->run_id();
  if (request->tail() < 0 || request->after_id() < 0) {
    return ToGrpc(absl::InvalidArgumentError(StrCat("StreamRunLog: tail (", request->tail(),
                                                    ") and after_id (", request->after_id(),
                                                    ") must not be negative")));
  }
  LogCursor cursor(*ctx_.scheduler, run_id, request->after_id());
  bool first = true;
  auto read = [&](const store::RunRecord& run, bool last) -> absl::StatusOr<bool> {
    CART_ASSIGN_OR_RETURN(std::vector<store::LogLine> lines, cursor.Next(/*limit=*/0));
    size_t begin = 0;
    if (first && request->tail() > 0 && lines.size() > static_cast<size_t>(request->tail())) {
      begin = lines.size() - static_cast<size_t>(request->tail());
    }
    first = false;
    for (size_t at = begin; at < lines.size(); at += kPointsPerView) {
      v1::RunLogView view;
      view.set_state(ToProto(run.state));
      for (size_t i = at; i < std::min(lines.size(), at + kPointsPerView); ++i) {
        *view.add_lines() = ToRunLogLine(lines[i]);
      }
      if (!writer->Write(view)) return false;  // the client went away
    }
    if (last && begin == lines.size()) WriteStateOnly(*writer, run.state);  // the final state
    return true;
  };
  return ToGrpc(ctx_.scheduler->FollowRun(
      run_id, request->follow(), kFollowPoll, [context] { return context->IsCancelled(); }, read));
}

grpc::Status SchedulerServiceImpl::GetCheckpoint(grpc::ServerContext* context,
                                                 const v1::GetCheckpointRequest* request,
                                                 grpc::ServerWriter<v1::ArtifactChunk>* writer) {
  CART_CALLER(who, "GetCheckpoint");
  std::shared_ptr<void> slot;  // held while the download streams
  if (ctx_.downloads != nullptr) {
    absl::StatusOr<std::shared_ptr<void>> taken = ctx_.downloads->Take(who);
    if (!taken.ok()) return ToGrpc(taken.status());
    slot = *std::move(taken);
  }
  absl::StatusOr<store::CheckpointRecord> chosen =
      ctx_.scheduler->Checkpoint(request->run_id(), request->step());
  if (!chosen.ok()) return ToGrpc(chosen.status());
  return StreamArtifact(*ctx_.artifacts, chosen->sha256, context, ctx_.send_watch, *writer);
}

grpc::Status SchedulerServiceImpl::QueryTable(grpc::ServerContext* context,
                                              const v1::QueryTableRequest* request,
                                              v1::Table* response) {
  CART_CALLER(who, "QueryTable");
  CART_BIG_READ(true, who);
  SchedulerResults results(ctx_.scheduler);
  absl::StatusOr<v1::Table> table = report::QueryTable(results, *request);
  if (!table.ok()) return ToGrpc(table.status());
  *response = *std::move(table);
  return grpc::Status::OK;
}

grpc::Status SchedulerServiceImpl::Annotate(grpc::ServerContext* context,
                                            const v1::AnnotateRequest* request,
                                            v1::AnnotateResponse* response) {
  CART_CALLER(who, "Annotate");
  store::AnnotationChange change;
  change.add_tags.assign(request->add_tags().begin(), request->add_tags().end());
  change.remove_tags.assign(request->remove_tags().begin(), request->remove_tags().end());
  if (request->set_note()) change.note = request->note();
  const bool run = request->run_id() != 0;
  if (run == !request->sweep().empty()) {
    return ToGrpc(absl::InvalidArgumentError("Annotate: give either run_id or sweep"));
  }
  if (run) {
    absl::StatusOr<store::RunRecord> after =
        ctx_.scheduler->AnnotateRun(request->run_id(), change, who);
    if (!after.ok()) return ToGrpc(after.status());
    ToAnnotationViews(after->tags, after->note, response->mutable_tags(), response->mutable_note());
  } else {
    absl::StatusOr<store::SweepRecord> after =
        ctx_.scheduler->AnnotateSweep(request->sweep(), change, who);
    if (!after.ok()) return ToGrpc(after.status());
    ToAnnotationViews(after->tags, after->note, response->mutable_tags(), response->mutable_note());
  }
  return grpc::Status::OK;
}

grpc::Status SchedulerServiceImpl::ListWorkers(grpc::ServerContext* context,
                                               const v1::ListWorkersRequest* request,
                                               v1::ListWorkersResponse* response) {
  CART_CALLER(who, "ListWorkers");
  for (const WorkerStatus& worker : ctx_.scheduler->ListWorkers()) {
    *response->add_workers() = ToWorkerView(worker);
  }
  return grpc::Status::OK;
}

grpc::Status SchedulerServiceImpl::DrainWorker(grpc::ServerContext* context,
                                               const v1::DrainWorkerRequest* request,
                                               v1::DrainWorkerResponse* response) {
  CART_CALLER(who, "DrainWorker");
  return ToGrpc(ctx_.scheduler->DrainWorker(request->worker_id(), who));
}

}  // namespace cart::server::internal
