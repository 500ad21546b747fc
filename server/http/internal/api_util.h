#pragma once

// What the dashboard's API handlers share (server/http/dashboard.cc routes to them, each
// resource in a file of its own: sweeps_api.cc, runs_api.cc, workers_api.cc, study_api.cc,
// metrics_api.cc, static_files.cc): answers as JSON with the HTTP code of a Status, query
// parameters checked with errors that name them, annotation bodies, a run row and a series as
// JSON, server-sent events. Private to server/http/.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/http/http_server.h"
#include "store/pages.h"
#include "store/results.h"
#include "store/types.h"

namespace cart::server::http {

inline constexpr char kApiPrefix[] = "/api/v1/";
// Metrics a run table row and a sweep's live charts carry by default.
inline const std::vector<std::string> kTableMetrics = {"loss", "rho_max", "tokens_per_s"};
// Config filters of a runs query: every `param.KEY=VALUE` parameter, at most this many (a sweep
// varies a handful of keys; a thousand filters made SQLite refuse the query).
inline constexpr size_t kMaxParamFilters = 32;

// The HTTP status of a Status code (400, 401, 403, 404, 409, 429, 503, 504, else 500).
int HttpStatusOf(absl::StatusCode code);
// `body` as the answer, not cached.
Response Json(const nlohmann::json& body, int status = 200);
// {"error", "code"} with the status's HTTP code; cartd's own failures say only that, their
// details going to cartd's log.
Response Error(const absl::Status& status);
Response Error(absl::StatusCode code, const std::string& message);
// A number for JSON: NaN and infinities become null (JSON has neither).
nlohmann::json Num(double v);
// The query parameter `key` as an integer in min..max (`fallback` when absent); nullopt with
// *error naming the parameter otherwise.
std::optional<int64_t> QueryInt(const Request& r, const std::string& key, int64_t fallback,
                                int64_t min, int64_t max, absl::Status* error);
// "a,b,,c" as {"a", "b", "c"}.
std::vector<std::string> SplitList(const std::string& text);
nlohmann::json StateCounts(const std::map<store::RunState, int64_t>& counts);
// The `param.KEY=VALUE` filters of a runs query; InvalidArgument past kMaxParamFilters.
absl::StatusOr<std::map<std::string, std::string>> ParamFilter(const Request& request);
// A runs page's sort, as far as the dashboard checks it (the store checks the rest).
absl::Status CheckSort(const std::string& sort);
// An annotate body as a change (the store checks each tag's spelling and the note).
absl::StatusOr<store::AnnotationChange> AnnotationOf(const Request& request);
nlohmann::json TagNames(const std::vector<store::Tag>& tags);
// Tags with who set them and when, the note, and who changed them (oldest first).
nlohmann::json AnnotationJson(const std::vector<store::Tag>& tags, const store::Note& note,
                              const absl::StatusOr<std::vector<store::AnnotationEvent>>& history);
// `response` with `slot` held for as long as its stream runs.
Response Holding(Response response, std::shared_ptr<void> slot);
// A cancel's "reason" (a string), or the dashboard's default.
absl::StatusOr<std::string> Reason(const nlohmann::json& body);
// A run's row of a runs table: its config (only `keys` when given), state and latest metrics.
nlohmann::json RunRowJson(const store::RunRow& row, const std::vector<std::string>* keys);
nlohmann::json SeriesJson(const store::Series& series);
// The path after the API prefix, split on '/'.
std::vector<std::string> PathParts(const std::string& path);
// One server-sent event.
std::string SseEvent(const std::string& event, const nlohmann::json& data);

}  // namespace cart::server::http
