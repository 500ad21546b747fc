// What the dashboard's API handlers share (server/http/internal/api_util.h).

#include "server/http/internal/api_util.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/strings.h"
#include "config/config.h"
#include "server/http/request_body.h"

namespace cart::server::http {

using nlohmann::json;
using store::RunRecord;
using store::RunState;

int HttpStatusOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAborted:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

Response Json(const json& body, int status) {
  Response r;
  r.status = status;
  r.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  r.headers.push_back({"Cache-Control", "no-store"});
  return r;
}

Response Error(const absl::Status& status) {
  // A failure of cartd itself says so without its details (they can hold SQL text or paths):
  // the details go to cartd's log, which the answer points at.
  const bool internal = status.code() == absl::StatusCode::kInternal ||
                        status.code() == absl::StatusCode::kUnknown ||
                        status.code() == absl::StatusCode::kDataLoss;
  if (internal) {
    std::fprintf(stderr, "cartd: HTTP request failed: %s\n", status.ToString().c_str());
  }
  return Json(json{{"error", internal ? std::string("internal error in cartd (details in its log)")
                                      : std::string(status.message())},
                   {"code", absl::StatusCodeToString(status.code())}},
              HttpStatusOf(status.code()));
}

Response Error(absl::StatusCode code, const std::string& message) {
  return Error(absl::Status(code, message));
}

// A number for JSON: NaN and infinities become null (JSON has neither).
json Num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

std::optional<int64_t> QueryInt(const Request& r, const std::string& key, int64_t fallback,
                                int64_t min, int64_t max, absl::Status* error) {
  const std::string text = r.Query(key);
  if (text.empty()) return fallback;
  std::optional<int64_t> v = ParseInt64(text);
  if (!v || *v < min || *v > max) {
    *error = absl::InvalidArgumentError(
        StrCat("query parameter '", key, "': '", text, "' is not an integer in ", min, "..", max));
    return std::nullopt;
  }
  return *v;
}

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> out;
  for (std::string& part : Split(text, ',')) {
    if (!part.empty()) out.push_back(std::move(part));
  }
  return out;
}

json StateCounts(const std::map<RunState, int64_t>& counts) {
  json out = json::object();
  for (const auto& [state, n] : counts) out[std::string(store::RunStateName(state))] = n;
  return out;
}

// Config filters of a runs query: every `param.KEY=VALUE` parameter, at most kMaxParamFilters
// (a sweep varies a handful of keys; a thousand filters made SQLite refuse the query).
absl::StatusOr<std::map<std::string, std::string>> ParamFilter(const Request& request) {
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : request.query) {
    if (key.rfind("param.", 0) == 0 && key.size() > 6) out[key.substr(6)] = value;
  }
  if (out.size() > kMaxParamFilters) {
    return absl::InvalidArgumentError(
        StrCat(out.size(), " param.KEY filters; at most ", kMaxParamFilters, " per request"));
  }
  return out;
}

// A runs page's sort: a known config key after "param:" (config keys are the model's, which the
// store does not know); the store checks the rest, a metric's name included.
absl::Status CheckSort(const std::string& sort) {
  if (sort.rfind("param:", 0) == 0) {
    const std::string key = sort.substr(6);
    const std::vector<std::string>& keys = config::ScalarKeys();
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      return absl::InvalidArgumentError(StrCat("sort param:", ValidUtf8(key.substr(0, 64)),
                                               ": not a config key (docs/model.md lists them)"));
    }
  }
  return absl::OkStatus();  // a metric's name the store checks, by the rule it keeps names by
}

// An annotate body ({"add_tags": [...], "remove_tags": [...], "note": "..."}) as a change; the
// store checks each tag's spelling and the note.
absl::StatusOr<store::AnnotationChange> AnnotationOf(const Request& request) {
  CART_ASSIGN_OR_RETURN(json body, ActionBody(request, {"add_tags", "remove_tags", "note"}));
  store::AnnotationChange change;
  for (const char* key : {"add_tags", "remove_tags"}) {
    if (!body.contains(key)) continue;
    const json& list = body[key];
    if (!list.is_array() || list.size() > store::kMaxTags) {
      return absl::InvalidArgumentError(
          StrCat(key, " must be an array of at most ", store::kMaxTags, " tag strings"));
    }
    for (const json& tag : list) {
      if (!tag.is_string()) return absl::InvalidArgumentError(StrCat(key, " holds a non-string"));
      (std::string_view(key) == "add_tags" ? change.add_tags : change.remove_tags)
          .push_back(tag.get<std::string>());
    }
  }
  if (body.contains("note")) {
    if (!body["note"].is_string()) return absl::InvalidArgumentError("note must be a string");
    change.note = body["note"].get<std::string>();
  }
  if (change.add_tags.empty() && change.remove_tags.empty() && !change.note) {
    return absl::InvalidArgumentError("annotate needs add_tags, remove_tags or note");
  }
  return change;
}

json TagNames(const std::vector<store::Tag>& tags) {
  json out = json::array();
  for (const store::Tag& tag : tags) out.push_back(tag.name);
  return out;
}

// Tags with who set them and when, the note, and who changed them (oldest first): what a run's
// or sweep's page shows. A history that could not be read is left out, not an error.
json AnnotationJson(const std::vector<store::Tag>& tags, const store::Note& note,
                    const absl::StatusOr<std::vector<store::AnnotationEvent>>& history) {
  json detail = json::array();
  for (const store::Tag& tag : tags) {
    detail.push_back(json{{"name", tag.name}, {"who", tag.who}, {"at_us", tag.at_us}});
  }
  json changes = json::array();
  if (history.ok()) {
    for (const store::AnnotationEvent& e : *history) {
      changes.push_back(json{{"at_us", e.at_us},
                             {"who", e.who},
                             {"kind", std::string(store::AnnotationKindName(e.kind))},
                             {"value", e.value},
                             {"previous", e.previous}});
    }
  }
  return json{{"tags", detail},
              {"note", json{{"text", note.text}, {"who", note.who}, {"at_us", note.at_us}}},
              {"history", changes}};
}

// `response` with `slot` held for as long as its stream runs (released with it, or at once when
// it is no stream).
Response Holding(Response response, std::shared_ptr<void> slot) {
  if (response.stream) {
    response.stream = [slot = std::move(slot), inner = std::move(response.stream)]() mutable {
      return inner();
    };
  }
  return response;
}

// A cancel's "reason" (a string), or the dashboard's default.
absl::StatusOr<std::string> Reason(const json& body) {
  if (!body.contains("reason")) return std::string("cancelled from the dashboard");
  if (!body["reason"].is_string()) return absl::InvalidArgumentError("reason must be a string");
  return body["reason"].get<std::string>();
}

json RunRowJson(const store::RunRow& row, const std::vector<std::string>* keys) {
  const RunRecord& run = row.run;
  json params = json::object();
  if (keys == nullptr) {
    for (const auto& [k, v] : run.params) params[k] = v;
  } else {
    for (const std::string& k : *keys) {
      auto it = run.params.find(k);
      if (it != run.params.end()) params[k] = it->second;
    }
  }
  json latest = json::object();
  for (const auto& [name, value] : row.latest) latest[name] = Num(value);
  // A finished run's step is its last one even when the last metric record came earlier.
  const int64_t step = run.state == RunState::kSucceeded ? std::max(row.step, run.steps) : row.step;
  return json{{"id", run.id},
              {"name", StrCat(run.sweep_name, "/", run.name)},
              {"sweep", run.sweep_name},
              {"state", std::string(store::RunStateName(run.state))},
              {"kind", std::string(JobKindName(run.kind))},
              {"step", step},
              {"steps", run.steps},
              {"attempt", run.attempt},
              {"worker", row.worker_id},
              {"cancel_requested", run.cancel_requested},
              {"updated_us", run.updated_us},
              {"params", params},
              {"latest", latest},
              {"tags", TagNames(run.tags)},
              {"has_note", !run.note.text.empty()},
              {"device_classes", run.device_classes}};
}

json SeriesJson(const store::Series& series) {
  json steps = json::array(), mean = json::array(), lo = json::array(), hi = json::array();
  int64_t points = 0;
  for (const store::SeriesPoint& p : series.points) {
    steps.push_back(p.step);
    mean.push_back(Num(p.value));
    lo.push_back(Num(p.min));
    hi.push_back(Num(p.max));
    points += p.count;
  }
  return json{{"metric", series.metric}, {"step", steps}, {"mean", mean}, {"min", lo}, {"max", hi},
              {"points", points}};
}

// The path after the API prefix, split on '/'; run names contain none.
std::vector<std::string> PathParts(const std::string& path) {
  std::vector<std::string> out;
  for (std::string& part : Split(path.substr(std::string(kApiPrefix).size()), '/')) {
    if (!part.empty()) out.push_back(std::move(part));
  }
  return out;
}

std::string SseEvent(const std::string& event, const json& data) {
  return StrCat("event: ", event,
                "\ndata: ", data.dump(-1, ' ', false, json::error_handler_t::replace), "\n\n");
}

}  // namespace cart::server::http
