// The sweeps resource of the dashboard's API (docs/dashboard.md "Sweeps"): the list, one
// sweep, its runs page, pivot and seed-averaged groups, and its live event stream.

#include <algorithm>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/strings.h"
#include "server/http/budget_api.h"
#include "server/http/dashboard.h"
#include "server/http/internal/api_util.h"
#include "server/http/study_view.h"
#include "server/scheduler.h"
#include "store/results.h"
#include "store/spending.h"

namespace cart::server::http {

using nlohmann::json;
using store::RunState;

Response Dashboard::ListSweeps() {
  absl::StatusOr<std::vector<store::SweepProgress>> sweeps = scheduler_->ListSweepProgress();
  if (!sweeps.ok()) return Error(sweeps.status());
  absl::StatusOr<std::shared_ptr<const Forecast>> forecast = scheduler_->ExpectedFinish();
  if (!forecast.ok()) return Error(forecast.status());
  absl::StatusOr<std::map<int64_t, store::Spending>> spending = scheduler_->SweepSpending();
  if (!spending.ok()) return Error(spending.status());
  absl::StatusOr<BudgetLedger> budgets = scheduler_->BudgetsNow();
  if (!budgets.ok()) return Error(budgets.status());
  json out = json::array();
  for (const store::SweepProgress& p : *sweeps) {
    json budget = nullptr;
    if (auto b = budgets->sweeps.find(p.sweep.id); b != budgets->sweeps.end()) {
      budget = BudgetJson(BudgetLine{"sweep", p.sweep.name, p.sweep.id, b->second});
    }
    int64_t total = 0, finished = 0;
    for (const auto& [state, n] : p.sweep.run_counts) {
      total += n;
      if (store::IsTerminal(state)) finished += n;
    }
    // The expected finish from the placement plan (Scheduler::ExpectedFinish), and how many of
    // the unfinished runs it covers.
    json finish_us = nullptr, eta = nullptr;
    int64_t estimated = 0;
    if (auto at = (*forecast)->sweep_finish_us.find(p.sweep.id);
        at != (*forecast)->sweep_finish_us.end()) {
      finish_us = at->second;
      eta = static_cast<double>(std::max<int64_t>(at->second - (*forecast)->at_us, 0)) / 1e6;
      estimated = (*forecast)->sweep_estimated_runs.at(p.sweep.id);
    }
    out.push_back(json{
        {"name", p.sweep.name},
        {"id", p.sweep.id},
        {"cancelled", p.sweep.cancelled},
        {"priority", p.sweep.priority},
        {"created_by", p.sweep.created_by},
        {"created_us", p.sweep.created_us},
        {"runs", total},
        {"finished", finished},
        {"states", StateCounts(p.sweep.run_counts)},
        {"train_runs", p.train_runs},
        {"planned_tokens", p.planned_tokens},
        {"done_tokens", p.done_tokens},
        {"tokens_per_s", Num(p.tokens_per_s)},
        {"expected_finish_us", finish_us},
        {"eta_s", eta},
        {"unfinished", total - finished},
        {"runs_estimated", estimated},
        {"spending",
         SpendingJson(spending->count(p.sweep.id) ? spending->at(p.sweep.id) : store::Spending{},
                      options_.prices)},
        {"budget", budget},
        {"tags", TagNames(p.sweep.tags)}});
  }
  return Json(json{{"sweeps", out}});
}

Response Dashboard::GetSweep(const std::string& name) {
  absl::Status bad;
  absl::StatusOr<store::SweepRecord> sweep = scheduler_->GetSweep(name);
  if (!sweep.ok()) return Error(sweep.status());
  std::shared_ptr<const store::SweepKeys> keys = Keys(name, &bad);
  if (!keys) return Error(bad);
  // Where its file came from, as the submitting client saw it (null: a client that sent none).
  absl::StatusOr<std::optional<store::SweepProvenance>> provenance =
      scheduler_->GetSweepProvenance(name);
  if (!provenance.ok()) return Error(provenance.status());
  json origin = nullptr;
  if (provenance->has_value()) {
    json items = json::array();
    for (const auto& [key, value] : (*provenance)->items)
      items.push_back(json::array({key, value}));
    origin = json{{"items", items}, {"git_diff", (*provenance)->git_diff}};
  }
  absl::StatusOr<BudgetLedger> budgets = scheduler_->BudgetsNow();
  if (!budgets.ok()) return Error(budgets.status());
  json budget = nullptr;
  if (auto b = budgets->sweeps.find(sweep->id); b != budgets->sweeps.end()) {
    budget = BudgetJson(BudgetLine{"sweep", sweep->name, sweep->id, b->second});
  }
  return Json(json{{"name", sweep->name},
                   {"id", sweep->id},
                   {"budget", budget},
                   {"cancelled", sweep->cancelled},
                   {"priority", sweep->priority},
                   {"created_by", sweep->created_by},
                   {"created_us", sweep->created_us},
                   {"states", StateCounts(sweep->run_counts)},
                   {"varying", keys->varying},
                   {"metrics", keys->metrics},
                   {"spec", sweep->spec_text},
                   {"provenance", origin},
                   {"tags", TagNames(sweep->tags)},
                   {"annotation", AnnotationJson(sweep->tags, sweep->note,
                                                 scheduler_->SweepAnnotationHistory(name))}});
}

Response Dashboard::SweepRuns(const Request& request, const std::string& name) {
  absl::Status bad;
  store::RunPageRequest page;
  page.filter.sweeps = {name};
  for (const std::string& s : SplitList(request.Query("state"))) {
    std::optional<RunState> state = store::ParseRunState(s);
    if (!state) {
      return Error(absl::StatusCode::kInvalidArgument,
                   StrCat("state '", s,
                          "' is not one of QUEUED, BLOCKED, LEASED, RUNNING, SUCCEEDED, "
                          "FAILED, CANCELLED"));
    }
    page.filter.states.push_back(*state);
  }
  const std::string kind = request.Query("kind", "train");
  if (kind != "all") {
    std::optional<JobKind> k = ParseJobKind(kind);
    if (!k) {
      return Error(absl::StatusCode::kInvalidArgument,
                   StrCat("kind '", kind, "' is not one of train, eval, all"));
    }
    page.filter.kinds = {*k};
  }
  absl::StatusOr<std::map<std::string, std::string>> params = ParamFilter(request);
  if (!params.ok()) return Error(params.status());
  page.filter.params = std::move(*params);
  page.filter.tags = SplitList(request.Query("tag"));  // the store limits how many
  page.metrics =
      request.query.count("metrics") ? SplitList(request.Query("metrics")) : kTableMetrics;
  if (page.metrics.size() > 32) {
    return Error(absl::StatusCode::kInvalidArgument, "at most 32 metrics per page");
  }
  page.sort = request.Query("sort", "id");
  if (absl::Status sort = CheckSort(page.sort); !sort.ok()) return Error(sort);
  const std::string order = request.Query("order", "asc");
  if (order != "asc" && order != "desc") {
    return Error(absl::StatusCode::kInvalidArgument,
                 StrCat("order '", order, "' is not asc or desc"));
  }
  page.descending = order == "desc";
  std::optional<int64_t> offset = QueryInt(request, "offset", 0, 0, INT64_MAX, &bad);
  std::optional<int64_t> limit = QueryInt(request, "limit", 50, 1, 5000, &bad);
  if (!offset || !limit) return Error(bad);
  page.offset = *offset;
  page.limit = *limit;
  std::shared_ptr<const store::SweepKeys> keys = Keys(name, &bad);
  if (!keys) return Error(bad);
  absl::StatusOr<store::RunPage> result = scheduler_->ListRunPage(page);
  if (!result.ok()) return Error(result.status());
  const bool all_params = request.Query("params") == "all";
  json rows = json::array();
  // One answer holds at most max_answer_bytes of rows (estimated from their params, which
  // dominate; the first always goes in): past it the page is cut short, "truncated" says so, and
  // the next page starts at offset + runs.length (docs/architecture.md, "No answer is unbounded").
  size_t bytes = 0;
  bool truncated = false;
  for (const store::RunRow& row : result->rows) {
    json r = RunRowJson(row, all_params ? nullptr : &keys->varying);
    bytes += 256;
    for (const auto& [k, v] : r["params"].items()) {
      bytes += k.size() + v.get_ref<const std::string&>().size() + 6;
    }
    if (!rows.empty() && bytes > options_.max_answer_bytes) {
      truncated = true;
      break;
    }
    rows.push_back(std::move(r));
  }
  return Json(json{{"total", result->total},
                   {"offset", page.offset},
                   {"limit", page.limit},
                   {"truncated", truncated},
                   {"varying", keys->varying},
                   {"metrics", page.metrics},
                   {"runs", rows}});
}

Response Dashboard::SweepPivot(const Request& request, const std::string& name) {
  store::PivotRequest pivot;
  pivot.filter.sweeps = {name};
  pivot.filter.kinds = {JobKind::kTrain};
  pivot.metric = request.Query("metric", "rho_max");
  pivot.row_key = request.Query("rows");
  pivot.col_key = request.Query("cols");
  if (pivot.row_key.empty() || pivot.col_key.empty()) {
    return Error(absl::StatusCode::kInvalidArgument,
                 "pivot needs rows=<config key> and cols=<config key>");
  }
  const std::string value = request.Query("value", "latest");
  if (value != "final" && value != "latest") {
    return Error(absl::StatusCode::kInvalidArgument,
                 StrCat("value '", value, "' is not final or latest"));
  }
  pivot.field = value == "final" ? store::SummaryField::kFinal : store::SummaryField::kLatest;
  absl::StatusOr<store::PivotTable> table = scheduler_->Pivot(pivot);
  if (!table.ok()) return Error(table.status());
  json cells = json::array();
  for (const auto& row : table->cells) {
    json r = json::array();
    for (const store::CellStats& c : row) {
      r.push_back(json{{"mean", c.n ? Num(c.mean) : json(nullptr)},
                       {"std", c.n > 1 ? Num(c.std) : json(nullptr)},
                       // The 95 % interval of the mean (Student t over the cell's runs);
                       // Summarize leaves it NaN, sent as null, below two runs.
                       {"ci_low", Num(c.ci_low)},
                       {"ci_high", Num(c.ci_high)},
                       {"n", c.n}});
    }
    cells.push_back(r);
  }
  return Json(json{{"metric", table->metric},
                   {"rows", table->row_key},
                   {"cols", table->col_key},
                   {"value", value},
                   {"row_values", table->row_values},
                   {"col_values", table->col_values},
                   {"cells", cells}});
}

Response Dashboard::SweepGroups(const Request& request, const std::string& name) {
  absl::Status bad;
  // Runs grouped by one config key: per group the mean and standard deviation over its runs
  // (seeds) of a metric, on a common grid of steps.
  const std::string by = request.Query("by");
  const std::string metric = request.Query("metric", "loss");
  if (by.empty()) return Error(absl::StatusCode::kInvalidArgument, "groups needs by=<config key>");
  std::optional<int64_t> points = QueryInt(request, "points", 100, 2, 1000, &bad);
  std::optional<int64_t> max_runs = QueryInt(request, "max_runs", 200, 1, 1000, &bad);
  if (!points || !max_runs) return Error(bad);
  store::RunPageRequest page;
  page.filter.sweeps = {name};
  page.filter.kinds = {JobKind::kTrain};
  absl::StatusOr<std::map<std::string, std::string>> params = ParamFilter(request);
  if (!params.ok()) return Error(params.status());
  page.filter.params = std::move(*params);
  page.sort = StrCat("param:", by);
  page.limit = *max_runs;
  absl::StatusOr<store::RunPage> runs = scheduler_->ListRunPage(page);
  if (!runs.ok()) return Error(runs.status());
  // Each group's runs (seeds) averaged on one grid of steps, the curve `cart report` draws
  // (store::SeedMeanCurve): mean, sample std and the mean's 95 % interval, a diverged seed
  // making them NaN (sent as null).
  std::vector<std::string> order;
  std::map<std::string, std::vector<std::vector<store::StepValue>>> curves;  // group -> runs
  for (const store::RunRow& row : runs->rows) {
    store::SeriesRequest s;
    s.run_id = row.run.id;
    s.metric = metric;
    s.max_points = *points;
    absl::StatusOr<store::Series> series = scheduler_->MetricSeries(s);
    if (!series.ok() || series->points.empty()) continue;
    auto it = row.run.params.find(by);
    const std::string group = it == row.run.params.end() ? std::string("(none)") : it->second;
    auto [members, fresh] = curves.try_emplace(group);
    if (fresh) order.push_back(group);
    std::vector<store::StepValue>& run = members->second.emplace_back();
    for (const store::SeriesPoint& p : series->points) run.push_back({p.step, p.value});
  }
  json groups = json::array();
  for (const std::string& group : order) {
    json steps = json::array(), mean = json::array(), sd = json::array(), n = json::array();
    json low = json::array(), high = json::array();
    for (const store::CurvePoint& p : store::SeedMeanCurve(curves[group], *points)) {
      steps.push_back(p.step);
      mean.push_back(Num(p.stats.mean));
      sd.push_back(p.stats.n > 1 ? Num(p.stats.std) : json(nullptr));
      low.push_back(Num(p.stats.ci_low));  // NaN (null) below two runs
      high.push_back(Num(p.stats.ci_high));
      n.push_back(p.stats.n);
    }
    groups.push_back(json{{"value", group},
                          {"runs", static_cast<int64_t>(curves[group].size())},
                          {"step", steps},
                          {"mean", mean},
                          {"std", sd},
                          {"ci_low", low},
                          {"ci_high", high},
                          {"n", n}});
  }
  return Json(json{{"by", by},
                   {"metric", metric},
                   {"runs", curves.size()},
                   {"truncated", runs->total > static_cast<int64_t>(runs->rows.size())},
                   {"groups", groups}});
}

absl::StatusOr<std::string> Dashboard::SweepUpdate(const std::string& name,
                                                   const std::vector<std::string>& metrics,
                                                   const StepMap* since, StepMap* last_step) {
  store::RunPageRequest page;
  page.filter.sweeps = {name};
  page.filter.states = {RunState::kRunning};
  page.metrics = kTableMetrics;
  page.sort = "updated";
  page.descending = true;
  page.limit = options_.live_runs;
  CART_ASSIGN_OR_RETURN(store::RunPage running, scheduler_->ListRunPage(page));
  CART_ASSIGN_OR_RETURN(store::SweepRecord sweep, scheduler_->GetSweep(name));
  json runs = json::array();
  for (const store::RunRow& row : running.rows) {
    json series = json::object();
    for (const std::string& metric : metrics) {
      store::SeriesRequest s;
      s.run_id = row.run.id;
      s.metric = metric;
      s.max_points = 500;
      const auto key = std::make_pair(row.run.id, metric);
      if (since != nullptr) {
        if (auto it = since->find(key); it != since->end()) s.from_step = it->second + 1;
      }
      absl::StatusOr<store::Series> got = scheduler_->MetricSeries(s);
      if (!got.ok() || got->points.empty()) {
        if (since != nullptr && last_step != nullptr && since->count(key)) {
          (*last_step)[key] = since->at(key);
        }
        continue;
      }
      if (last_step != nullptr) (*last_step)[key] = got->points.back().step;
      series[metric] = SeriesJson(*got);
    }
    json entry = RunRowJson(row, nullptr);
    entry.erase("params");
    entry["series"] = series;
    runs.push_back(entry);
  }
  return SseEvent("update", json{{"states", StateCounts(sweep.run_counts)}, {"runs", runs}});
}

absl::StatusOr<std::shared_ptr<const Dashboard::SweepFrame>> Dashboard::Frame(
    const std::string& name, const std::vector<std::string>& metrics) {
  const std::string key = StrCat(name, "\n", StrJoin(metrics, ","));
  // One follower computes a frame while the others of the same moment wait and then share it.
  absl::MutexLock compute(&frames_mu_);
  std::shared_ptr<const SweepFrame> previous;
  if (auto it = frames_.find(key); it != frames_.end()) previous = it->second;
  if (previous && absl::Now() - previous->at < options_.live_poll / 2) return previous;
  auto frame = std::make_shared<SweepFrame>();
  frame->generation = previous ? previous->generation + 1 : 1;
  frame->at = absl::Now();
  CART_ASSIGN_OR_RETURN(
      frame->event,
      SweepUpdate(name, metrics, previous ? &previous->last_step : nullptr, &frame->last_step));
  if (frames_.size() > 256) frames_.clear();
  frames_[key] = frame;
  return std::shared_ptr<const SweepFrame>(frame);
}

Response Dashboard::SweepLive(const Request& request, const std::string& name) {
  // Server-sent events: every live_poll, the new points of the sweep's running runs. The points
  // are read once per sweep and poll (a shared frame), however many pages follow the sweep; a
  // follower that is not in step with the frames (its first event, or it missed one) reads its
  // own catch-up of the whole series.
  std::vector<std::string> metrics = request.query.count("metrics")
                                         ? SplitList(request.Query("metrics"))
                                         : std::vector<std::string>{"loss", "rho_max"};
  if (metrics.size() > 8) return Error(absl::StatusCode::kInvalidArgument, "at most 8 metrics");
  absl::StatusOr<store::SweepRecord> sweep = scheduler_->GetSweep(name);
  if (!sweep.ok()) return Error(sweep.status());
  Response r;
  r.content_type = "text/event-stream";
  // Polled by the HTTP port every live_poll (server/http/http_server.h): no thread waits.
  r.stream = [this, name, metrics, in_step = int64_t{0}]() mutable {
    StreamPoll poll;
    poll.again = options_.live_poll;
    if (options_.stopping() || scheduler_->shutting_down()) {
      poll.last = true;
      return poll;
    }
    absl::StatusOr<std::shared_ptr<const SweepFrame>> frame = Frame(name, metrics);
    absl::StatusOr<std::string> event = std::string(":\n\n");  // nothing new: keep alive
    // The first frame holds whole series, so it serves a follower's first event as well.
    const bool first_frame = frame.ok() && in_step == 0 && (*frame)->generation == 1;
    if (frame.ok() && (first_frame || (in_step > 0 && (*frame)->generation == in_step + 1))) {
      event = (*frame)->event;
    } else if (frame.ok() && (*frame)->generation != in_step) {
      event = SweepUpdate(name, metrics, nullptr, nullptr);
    }
    if (!frame.ok()) event = frame.status();
    if (!event.ok()) {
      poll.chunk = SseEvent("error", json{{"error", Message(event.status())}});
      poll.last = true;
      return poll;
    }
    in_step = (*frame)->generation;
    poll.chunk = *std::move(event);
    return poll;
  };
  return r;
}

}  // namespace cart::server::http
