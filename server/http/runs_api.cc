// The runs resource of the dashboard's API (docs/dashboard.md "Runs"): one run, its series,
// its log, its live event stream, its actions (cancel, resume, extend, annotate), and two runs
// compared.

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/run_comparison.h"
#include "common/status.h"
#include "common/strings.h"
#include "server/http/dashboard.h"
#include "server/http/internal/api_util.h"
#include "server/http/request_body.h"
#include "server/http/study_view.h"
#include "server/run_cursor.h"
#include "server/scheduler.h"
#include "store/spending.h"

namespace cart::server::http {

using nlohmann::json;
using store::RunRecord;
using store::RunState;

Response Dashboard::GetRun(int64_t id) {
  absl::StatusOr<RunDetails> details = scheduler_->GetRun(id);
  if (!details.ok()) return Error(details.status());
  const RunRecord& run = details->info.run;
  store::RunRow row;
  row.run = run;
  row.worker_id = details->info.worker_id;
  row.step = details->info.step;
  json summaries = json::array();
  for (const store::MetricSummary& s : details->summaries) {
    row.step = std::max(row.step, s.latest_step);
    summaries.push_back(json{{"name", s.name},
                             {"latest_step", s.latest_step},
                             {"latest", Num(s.latest_value)},
                             {"final", s.final_value ? Num(*s.final_value) : json(nullptr)}});
  }
  json out = RunRowJson(row, nullptr);
  out["config_yaml"] = run.config_yaml;
  out["waiting_reason"] = details->info.waiting_reason;
  out["diverged"] = run.diverged
                        ? json{{"step", run.diverged->step}, {"loss", StrCat(run.diverged->loss)}}
                        : json(nullptr);
  out["parent_run_id"] = run.parent_run_id ? json(*run.parent_run_id) : json(nullptr);
  out["max_attempts"] = run.max_attempts;
  // Device classes (docs/architecture.md "Device classes"): device_classes comes with the row.
  out["checkpoint_class"] = run.checkpoint_class;
  out["any_device_class"] = run.any_device_class;
  out["balanced"] = !run.seed_group.empty();
  out["memory_estimate_bytes"] = run.memory_estimate_bytes;
  out["stored_params"] = run.stored_params;
  out["effective_params"] = run.effective_params;
  out["created_us"] = run.created_us;
  out["summaries"] = summaries;
  out["annotation"] = AnnotationJson(run.tags, run.note, details->annotation_history);
  json events = json::array();
  for (const store::EventRecord& e : details->events) {
    events.push_back(json{{"at_us", e.at_us},
                          {"from", e.from_state},
                          {"to", e.to_state},
                          {"who", e.who},
                          {"why", e.why}});
  }
  out["events"] = events;
  json checkpoints = json::array();
  for (const store::CheckpointRecord& c : details->checkpoints) {
    checkpoints.push_back(json{{"step", c.step},
                               {"attempt", c.attempt},
                               {"sha256", c.sha256},
                               {"size_bytes", c.size_bytes},
                               {"created_us", c.created_us}});
  }
  out["checkpoints"] = checkpoints;
  json data = json::array();
  for (const store::RunDataRecord& d : details->data) {
    json row{{"role", d.role},
             {"path", d.path},
             {"recorded_by", d.recorded_by},
             {"recorded_us", d.recorded_us},
             {"sha256", nullptr}};
    if (d.identity) {
      row["sha256"] = d.identity->sha256;
      row["size_bytes"] = d.identity->size_bytes;
      row["tokens"] = d.identity->tokens;
      row["tokenizer"] = d.identity->tokenizer;
      row["tokenizer_sha256"] = d.identity->tokenizer_sha256;
    }
    data.push_back(std::move(row));
  }
  out["data"] = data;
  json tries = json::array();
  for (const store::AttemptRecord& a : details->attempts) {
    // What it ran on: [key, value] pairs in the worker's order (empty: not recorded).
    json environment = json::array();
    for (const auto& [key, value] : a.environment) environment.push_back(json::array({key, value}));
    tries.push_back(
        json{{"attempt", a.attempt},
             {"worker", a.worker_id},
             {"device_class", a.device_class},
             {"leased_us", a.leased_us},
             {"started_us", a.started_us ? json(*a.started_us) : json(nullptr)},
             {"ended_us", a.ended_us ? json(*a.ended_us) : json(nullptr)},
             {"outcome",
              a.outcome ? json(std::string(store::AttemptOutcomeName(*a.outcome))) : json(nullptr)},
             {"reason", a.reason},
             {"energy_j", a.energy_j ? json(*a.energy_j) : json(nullptr)},
             {"energy_source", a.energy_source},
             {"environment", environment}});
  }
  out["attempts"] = tries;
  out["spending"] =
      SpendingJson(store::SpendingOf(details->attempts, scheduler_->NowMicros()), options_.prices);
  return Json(out);
}

Response Dashboard::RunSeries(const Request& request, int64_t id) {
  absl::Status bad;
  store::SeriesRequest s;
  s.run_id = id;
  s.metric = request.Query("metric");
  if (s.metric.empty()) {
    return Error(absl::StatusCode::kInvalidArgument, "series needs metric=<name>");
  }
  std::optional<int64_t> points = QueryInt(request, "points", 1000, 1, 20000, &bad);
  if (!points) return Error(bad);
  s.max_points = *points;
  if (!request.Query("from").empty()) {
    s.from_step = QueryInt(request, "from", 0, 0, INT64_MAX, &bad);
    if (!s.from_step) return Error(bad);
  }
  if (!request.Query("to").empty()) {
    s.to_step = QueryInt(request, "to", 0, 0, INT64_MAX, &bad);
    if (!s.to_step) return Error(bad);
  }
  absl::StatusOr<store::Series> series = scheduler_->MetricSeries(s);
  if (!series.ok()) return Error(series.status());
  return Json(SeriesJson(*series));
}

Response Dashboard::RunLogLines(const Request& request, int64_t id) {
  absl::Status bad;
  std::optional<int64_t> after = QueryInt(request, "after", 0, 0, INT64_MAX, &bad);
  std::optional<int64_t> limit = QueryInt(request, "limit", 1000, 1, 10000, &bad);
  if (!after || !limit) return Error(bad);
  absl::StatusOr<std::vector<store::LogLine>> lines = scheduler_->RunLog(id, *after, *limit);
  if (!lines.ok()) return Error(lines.status());
  json out = json::array();
  for (const store::LogLine& l : *lines) {
    out.push_back(
        json{{"id", l.id}, {"attempt", l.attempt}, {"at_us", l.wall_time_us}, {"text", l.text}});
  }
  return Json(json{{"lines", out}});
}

Response Dashboard::RunLive(const Request& request, int64_t id) {
  absl::Status bad;
  // Server-sent events following one run: new points of every metric after `after` (a step),
  // new log lines after `log_after` (a line id), and its state; "end" when it finishes.
  std::optional<int64_t> after = QueryInt(request, "after", 0, 0, INT64_MAX, &bad);
  std::optional<int64_t> log_after = QueryInt(request, "log_after", 0, 0, INT64_MAX, &bad);
  if (!after || !log_after) return Error(bad);
  absl::StatusOr<RunDetails> exists = scheduler_->GetRun(id);
  if (!exists.ok()) return Error(exists.status());
  Response r;
  r.content_type = "text/event-stream";
  // Polled by the HTTP port (server/http/http_server.h): each poll looks at the run's change
  // counter and reads only when it moved, or live_poll has passed (then at least a keep-alive).
  struct Follow {
    Follow(Scheduler& scheduler, int64_t run, int64_t from_step, int64_t log_after)
        : metrics(scheduler, run, from_step), logs(scheduler, run, log_after) {}
    MetricCursor metrics;
    LogCursor logs;
    std::optional<int64_t> version;  // the counter as of the last read
    absl::Time last_read = absl::InfinitePast();
    absl::Time quiet_until = absl::InfinitePast();  // no event before it (live_min_interval)
  };
  // `after` is the last step the page has; the cursor reads from the step after it.
  auto follow = std::make_shared<Follow>(*scheduler_, id, *after + 1, *log_after);
  const absl::Duration tick = std::min(options_.live_min_interval, absl::Milliseconds(250));
  r.stream = [this, run_id = id, follow, tick]() {
    StreamPoll poll;
    poll.again = tick;
    if (options_.stopping()) {
      poll.last = true;
      return poll;
    }
    if (scheduler_->shutting_down()) {
      poll.chunk = SseEvent("error", json{{"error", "cartd is shutting down; follow again later"}});
      poll.last = true;
      return poll;
    }
    const absl::Time now = absl::Now();
    if (now < follow->quiet_until) {
      // At most one read (and event) per live_min_interval: changes in between are coalesced
      // into the next one (a run may report many batches a second; a page needs one update).
      poll.again = follow->quiet_until - now;
      return poll;
    }
    // Read the counter before the data: a change after this point is seen by the next poll.
    const int64_t version = scheduler_->RunVersion(run_id);
    if (follow->version == version && now - follow->last_read < options_.live_poll) return poll;
    follow->version = version;
    follow->last_read = now;
    absl::StatusOr<std::string> event = [&]() -> absl::StatusOr<std::string> {
      CART_ASSIGN_OR_RETURN(RunRecord run, scheduler_->GetRunRecord(run_id));
      const bool last = store::IsTerminal(run.state);
      // At most 1000 points a metric per event (a longer stretch, as on a page's first event,
      // comes downsampled) and 1000 log lines (the rest in the next event).
      CART_ASSIGN_OR_RETURN(std::vector<store::Series> points, follow->metrics.Next(1000));
      json series = json::object();
      for (const store::Series& s : points) series[s.metric] = SeriesJson(s);
      CART_ASSIGN_OR_RETURN(std::vector<store::LogLine> lines, follow->logs.Next(1000));
      json log = json::array();
      for (const store::LogLine& l : lines) {
        log.push_back(json{
            {"id", l.id}, {"attempt", l.attempt}, {"at_us", l.wall_time_us}, {"text", l.text}});
      }
      const bool news = !series.empty() || !log.empty();
      if (!news && !last) return std::string(":\n\n");  // keep alive
      json data{{"state", std::string(store::RunStateName(run.state))},
                {"step", follow->metrics.latest_step()},
                {"attempt", run.attempt},
                {"series", series},
                {"log", log}};
      return SseEvent(last ? "end" : "update", data);
    }();
    if (!event.ok()) {
      poll.chunk = SseEvent("error", json{{"error", Message(event.status())}});
      poll.last = true;
      return poll;
    }
    poll.last = event->rfind("event: end", 0) == 0;
    // Whatever the read found, the next waits live_min_interval: a change counted before its
    // points are committed would otherwise have the stream read again and again meanwhile.
    follow->quiet_until = now + options_.live_min_interval;
    poll.chunk = *std::move(event);
    return poll;
  };
  return r;
}

Response Dashboard::RunAction(const Request& request, int64_t id, const std::string& action,
                              const std::string& who) {
  absl::StatusOr<json> parsed = action == "extend"
                                    ? ActionBody(request, {"total_steps", "schedule"})
                                : action == "resume" ? ActionBody(request, {"set", "reason"})
                                                     : ActionBody(request, {"reason"});
  if (!parsed.ok()) return Error(parsed.status());
  const json& body = *parsed;
  absl::StatusOr<RunRecord> result;
  json extension;
  if (action == "cancel") {
    absl::StatusOr<std::string> reason = Reason(body);
    if (!reason.ok()) return Error(reason.status());
    result = scheduler_->CancelRun(id, who, *reason);
  } else if (action == "resume") {
    std::vector<std::string> set;
    if (body.contains("set")) {
      const json& s = body["set"];
      const bool strings =
          s.is_array() && s.size() <= 64 &&
          std::all_of(s.begin(), s.end(), [](const json& e) { return e.is_string(); });
      if (!strings) {
        return Error(absl::StatusCode::kInvalidArgument,
                     "resume: set must be a list of at most 64 \"key=value\" strings");
      }
      for (const json& e : s) set.push_back(e.get<std::string>());
    }
    result = scheduler_->ResumeRun(id, who, set);
  } else {
    const char* usage = "extend needs {\"total_steps\": <integer above the run's steps>}";
    if (!body.contains("total_steps") || !body["total_steps"].is_number_integer()) {
      return Error(absl::StatusCode::kInvalidArgument, usage);
    }
    // nlohmann keeps a number above 2^63 - 1 as unsigned; read as int64 it would wrap negative.
    if (body["total_steps"].is_number_unsigned() &&
        body["total_steps"].get<uint64_t>() > uint64_t{std::numeric_limits<int64_t>::max()}) {
      return Error(
          absl::StatusCode::kInvalidArgument,
          StrCat("total_steps ", body["total_steps"].get<uint64_t>(),
                 " is past the largest step count, ", std::numeric_limits<int64_t>::max()));
    }
    ExtendSchedule schedule = ExtendSchedule::kAsk;
    if (body.contains("schedule")) {
      const json& s = body["schedule"];
      if (s == "stretch") {
        schedule = ExtendSchedule::kStretch;
      } else if (s == "hold") {
        schedule = ExtendSchedule::kHold;
      } else if (!(s.is_string() && s.get<std::string>().empty())) {
        return Error(absl::StatusCode::kInvalidArgument,
                     "extend: schedule must be \"stretch\" or \"hold\" (or \"\": cartd "
                     "chooses when the rate changes at most 2x)");
      }
    }
    absl::StatusOr<ExtendOutcome> out =
        scheduler_->ExtendRun(id, body["total_steps"].get<int64_t>(), schedule, who);
    if (!out.ok()) return Error(out.status());
    extension = json{{"schedule", std::string(ExtendScheduleName(out->schedule))},
                     {"from_step", out->from_step},
                     {"lr_before", out->lr_before},
                     {"lr_after", out->lr_after}};
    result = out->run;
  }
  if (!result.ok()) return Error(result.status());
  json answer{{"id", result->id},
              {"state", std::string(store::RunStateName(result->state))},
              {"steps", result->steps},
              {"cancel_requested", result->cancel_requested}};
  if (!extension.is_null()) answer["extension"] = extension;
  return Json(answer);
}

namespace {

// What the compare view needs of one run: who it is, its device classes, and each attempt's
// class with the step it started from (its resume point: the latest checkpoint an earlier
// attempt wrote), so that the view can mark where a resume on another class began.
json CompareSide(const RunDetails& d) {
  const RunRecord& run = d.info.run;
  json attempts = json::array();
  for (const store::AttemptRecord& a : d.attempts) {
    if (!a.started_us) continue;
    int64_t from = 0;
    for (const store::CheckpointRecord& c : d.checkpoints) {
      if (c.attempt < a.attempt) from = std::max(from, c.step);
    }
    attempts.push_back(json{{"attempt", a.attempt},
                            {"worker", a.worker_id},
                            {"device_class", a.device_class},
                            {"from_step", from}});
  }
  return json{{"id", run.id},
              {"name", StrCat(run.sweep_name, "/", run.name)},
              {"state", std::string(store::RunStateName(run.state))},
              {"device_classes", run.device_classes},
              {"attempts", attempts}};
}

// The environment of the run's latest attempt that recorded one (attempt 0: none did).
std::pair<int64_t, std::map<std::string, std::string>> LatestEnvironment(const RunDetails& d) {
  for (auto it = d.attempts.rbegin(); it != d.attempts.rend(); ++it) {
    if (it->environment.empty()) continue;
    return {it->attempt, {it->environment.begin(), it->environment.end()}};
  }
  return {0, {}};
}

json DifferenceRows(const std::vector<Difference>& diffs) {
  json rows = json::array();
  for (const Difference& d : diffs) rows.push_back(json{{"key", d.key}, {"a", d.a}, {"b", d.b}});
  return rows;
}

// At most `most` of a series' points for a chart, evenly by index, with `keep` (the step the
// two series part) among them.
json ChartPoints(const std::map<int64_t, double>& series, size_t most,
                 std::optional<int64_t> keep) {
  json steps = json::array(), values = json::array();
  const size_t stride = std::max<size_t>(1, (series.size() + most - 1) / most);
  size_t i = 0;
  for (const auto& [step, value] : series) {
    if (i++ % stride == 0 || (keep && step == *keep) || i == series.size()) {
      steps.push_back(step);
      values.push_back(Num(value));
    }
  }
  return json{{"steps", steps}, {"values", values}};
}

}  // namespace

Response Dashboard::CompareRuns(const Request& request) {
  absl::Status bad;
  std::optional<int64_t> a = QueryInt(request, "a", 0, 1, INT64_MAX, &bad);
  std::optional<int64_t> b = a ? QueryInt(request, "b", 0, 1, INT64_MAX, &bad) : std::nullopt;
  if (!a || !b) return Error(bad);
  if (*a == 0 || *b == 0) {
    return Error(absl::StatusCode::kInvalidArgument, "compare needs a=<run id>&b=<run id>");
  }
  const std::string metric = request.Query("metric").empty() ? "loss" : request.Query("metric");
  absl::StatusOr<RunDetails> da = scheduler_->GetRun(*a);
  if (!da.ok()) return Error(da.status());
  absl::StatusOr<RunDetails> db = scheduler_->GetRun(*b);
  if (!db.ok()) return Error(db.status());
  std::map<std::string, std::string> data_a, data_b;
  for (const store::RunDataRecord& d : da->data) {
    data_a[d.role + " " + d.path] = d.identity ? d.identity->sha256 : "";
  }
  for (const store::RunDataRecord& d : db->data) {
    data_b[d.role + " " + d.path] = d.identity ? d.identity->sha256 : "";
  }
  const auto [attempt_a, env_a] = LatestEnvironment(*da);
  const auto [attempt_b, env_b] = LatestEnvironment(*db);
  std::map<int64_t, double> series[2];
  for (int side = 0; side < 2; ++side) {
    store::SeriesRequest s;
    s.run_id = side == 0 ? *a : *b;
    s.metric = metric;
    // Every point (the first step they part must be exact) up to a bound: past 200,000 points a
    // series comes as bucket means, and the step they part is then the end of the first bucket
    // that differs.
    s.max_points = 200'000;
    absl::StatusOr<store::Series> got = scheduler_->MetricSeries(s);
    if (!got.ok() && !absl::IsNotFound(got.status())) return Error(got.status());
    if (got.ok()) {
      for (const store::SeriesPoint& p : got->points) series[side][p.step] = p.value;
    }
  }
  const SeriesComparison compared = CompareSeries(series[0], series[1]);
  json latest = json::array();
  std::map<std::string, double> latest_b;
  for (const store::MetricSummary& m : db->summaries) latest_b[m.name] = m.latest_value;
  for (const store::MetricSummary& m : da->summaries) {
    auto it = latest_b.find(m.name);
    if (it == latest_b.end() || !ShownMetric(m.name)) continue;
    latest.push_back(json{{"metric", m.name},
                          {"a", Num(m.latest_value)},
                          {"b", Num(it->second)},
                          {"delta", Num(it->second - m.latest_value)}});
  }
  json out{{"a", CompareSide(*da)},
           {"b", CompareSide(*db)},
           {"config", DifferenceRows(Differences(ConfigKeys(da->info.run.config_yaml),
                                                 ConfigKeys(db->info.run.config_yaml)))},
           {"data", DifferenceRows(Differences(data_a, data_b))},
           {"environment", json{{"a_attempt", attempt_a},
                                {"b_attempt", attempt_b},
                                {"items", DifferenceRows(Differences(env_a, env_b))}}},
           {"latest", latest}};
  out["series"] =
      json{{"metric", metric},
           {"common_steps", compared.common},
           {"first_different_step", compared.parted ? json(*compared.parted) : json(nullptr)},
           {"a_at_parting", compared.parted ? Num(compared.a_at_parting) : json(nullptr)},
           {"b_at_parting", compared.parted ? Num(compared.b_at_parting) : json(nullptr)},
           {"largest_deviation", Num(compared.largest)},
           {"largest_at", compared.largest_at},
           {"a", ChartPoints(series[0], 2000, compared.parted)},
           {"b", ChartPoints(series[1], 2000, compared.parted)}};
  return Json(out);
}

}  // namespace cart::server::http
