#include "server/http/dashboard.h"

#include <unistd.h>

#include <algorithm>
#include <boost/asio/ip/address.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <vector>

#include "common/file.h"
#include "common/run_comparison.h"
#include "common/status.h"
#include "common/strings.h"
#include "config/config.h"
#include "report/report.h"
#include "server/auth.h"
#include "server/caller_slots.h"
#include "server/http/budget_api.h"
#include "server/http/notify_api.h"
#include "server/http/prometheus.h"
#include "server/http/request_body.h"
#include "server/http/study_view.h"
#include "server/run_cursor.h"
#include "server/scheduler.h"
#include "store/results.h"
#include "store/spending.h"

namespace cart::server::http {
namespace {

using nlohmann::json;
using store::RunRecord;
using store::RunState;

constexpr char kApiPrefix[] = "/api/v1/";
// Metrics a run table row and a sweep's live charts carry by default.
const std::vector<std::string> kTableMetrics = {"loss", "rho_max", "tokens_per_s"};

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

Response Json(const json& body, int status = 200) {
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
constexpr size_t kMaxParamFilters = 32;
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

// A runs page's sort: a known config key after "param:", a metric name of at most 128 printable
// characters after "metric:" (the store's rule for names); the rest the store checks.
absl::Status CheckSort(const std::string& sort) {
  if (sort.rfind("param:", 0) == 0) {
    const std::string key = sort.substr(6);
    const std::vector<std::string>& keys = model::ScalarKeys();
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      return absl::InvalidArgumentError(StrCat("sort param:", ValidUtf8(key.substr(0, 64)),
                                               ": not a config key (docs/model.md lists them)"));
    }
  } else if (sort.rfind("metric:", 0) == 0) {
    const std::string name = sort.substr(7);
    const bool printable = std::all_of(name.begin(), name.end(), [](char c) {
      return static_cast<unsigned char>(c) >= 0x20 && c != 0x7f;
    });
    if (name.empty() || name.size() > 128 || !printable) {
      return absl::InvalidArgumentError(
          "sort metric:<name> needs a metric name of 1 to 128 printable characters");
    }
  }
  return absl::OkStatus();
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

std::string ContentTypeOf(const std::filesystem::path& path) {
  const std::string ext = path.extension().string();
  if (ext == ".html") return "text/html; charset=utf-8";
  if (ext == ".js") return "text/javascript; charset=utf-8";
  if (ext == ".css") return "text/css; charset=utf-8";
  if (ext == ".svg") return "image/svg+xml";
  if (ext == ".png") return "image/png";
  if (ext == ".json") return "application/json";
  return "application/octet-stream";
}

std::string SseEvent(const std::string& event, const json& data) {
  return StrCat("event: ", event,
                "\ndata: ", data.dump(-1, ' ', false, json::error_handler_t::replace), "\n\n");
}

}  // namespace

Dashboard::Dashboard(Scheduler* scheduler, DashboardOptions options)
    : scheduler_(scheduler), options_(std::move(options)) {
  if (!options_.stopping) options_.stopping = [] { return false; };
  char name[256] = {0};
  if (gethostname(name, sizeof name - 1) == 0) machine_name_ = ToLower(name);
}

Dashboard::~Dashboard() = default;

std::shared_ptr<const store::SweepKeys> Dashboard::Keys(const std::string& sweep,
                                                        absl::Status* error) {
  const absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    auto it = keys_.find(sweep);
    if (it != keys_.end() && now - it->second.at < absl::Seconds(5)) return it->second.keys;
  }
  absl::StatusOr<store::SweepKeys> keys = scheduler_->GetSweepKeys(sweep);
  if (!keys.ok()) {
    *error = keys.status();
    return nullptr;
  }
  auto shared = std::make_shared<const store::SweepKeys>(std::move(*keys));
  // A sweep whose runs have logged nothing yet is not kept: its first points must show on the
  // next page load, not 5 s later (and reading it again is cheap, there are no points to scan).
  if (shared->metrics.empty()) return shared;
  absl::MutexLock lock(&mu_);
  if (keys_.size() > 256) keys_.clear();
  keys_[sweep] = CachedKeys{now, shared};
  return shared;
}

bool AllowedHost(std::string_view host_header, const std::vector<std::string>& allowed,
                 std::string_view machine_name) {
  std::string host = ToLower(Trim(host_header));
  if (host.empty()) return true;
  if (host.front() == '[') {  // [v6]:port
    const size_t close = host.find(']');
    if (close == std::string::npos) return false;
    boost::system::error_code ec;
    boost::asio::ip::make_address_v6(host.substr(1, close - 1), ec);
    return !ec;
  }
  if (const size_t colon = host.rfind(':'); colon != std::string::npos) {
    host = host.substr(0, colon);
  }
  if (!host.empty() && host.back() == '.') host.pop_back();  // "localhost." is localhost
  boost::system::error_code ec;
  boost::asio::ip::make_address_v4(host, ec);
  if (!ec) return true;  // a rebinding page needs a name of its own: an address is never one
  constexpr std::string_view kLocal = ".localhost";
  if (host == "localhost" ||
      (host.size() > kLocal.size() &&
       host.compare(host.size() - kLocal.size(), kLocal.size(), kLocal) == 0)) {
    return true;
  }
  if (!machine_name.empty() && host == ToLower(machine_name)) return true;
  for (const std::string& name : allowed) {
    if (host == ToLower(name)) return true;
  }
  return false;
}

Response Dashboard::Handle(const Request& request) {
  const std::string& path = request.path;
  const bool api = path.rfind(kApiPrefix, 0) == 0;
  // Before anything else, pages included: a DNS-rebinding page would read them as its own.
  if (!AllowedHost(request.Header("host"), options_.allowed_hosts, machine_name_)) {
    // Said without naming the machine: the asker is a page of another site, not the lab.
    return Error(absl::StatusCode::kPermissionDenied,
                 StrCat("Host '", ValidUtf8(request.Header("host")),
                        "' is not a name of this cartd (allowed: IP addresses, localhost, this "
                        "machine's name and the names in cartd's http_hosts)"));
  }
  if (path == "/healthz") {
    // Up, and whether its disk has room (the dashboard's banner; server/store_room.h). Said
    // without the data directory's path: anyone may ask.
    const StoreRoom::State room = scheduler_->store_room();
    json store{{"full", room.full}, {"needed_bytes", room.needed_bytes}};
    if (room.free_bytes >= 0) store["free_bytes"] = room.free_bytes;
    if (room.full) store["since_us"] = room.since_us;
    return Json(json{{"ok", true}, {"store", store}});
  }
  if (!api && path != "/metrics") {
    if (request.method != "GET" && request.method != "HEAD") {
      return Error(absl::StatusCode::kInvalidArgument,
                   StrCat(request.method, " ", path, ": pages are read with GET"));
    }
    return Static(request);
  }
  // Who is calling (docs/design.md "Security").
  // Named like the gRPC side: "admin:<name>" or "user:<name>" (authentication off: the admin
  // "anonymous").
  std::string who = "admin:anonymous";
  if (options_.tokens != nullptr && options_.tokens->enabled()) {
    const std::string header = request.Header("authorization");
    std::optional<std::string_view> auth;
    if (!header.empty()) auth = header;
    absl::StatusOr<Principal> principal =
        options_.tokens->Check(auth, Api::kScheduler, StrCat(request.method, " ", path));
    const bool metrics_by_worker = path == "/metrics" && !principal.ok() &&
                                   principal.status().code() == absl::StatusCode::kPermissionDenied;
    if (!principal.ok() && !metrics_by_worker) return Error(principal.status());
    if (principal.ok()) {
      who = StrCat(principal->role == Role::kAdmin ? "admin:" : "user:", principal->name);
    }
  }
  if (path == "/metrics") {
    if (request.method != "GET") {
      return Error(absl::StatusCode::kInvalidArgument, "/metrics is read with GET");
    }
    return Metrics();
  }
  if (request.method == "POST") {
    // Only the dashboard's own JSON requests may change anything (see the header comment).
    const std::string type = request.Header("content-type");
    if (type.rfind("application/json", 0) != 0) {
      return Error(absl::StatusCode::kPermissionDenied,
                   "changes must be sent as Content-Type: application/json");
    }
    // The Origin must be this server under a name of its own (the Host check's list), and
    // the one the request was sent to.
    const std::string origin = request.Header("origin");
    const std::string host = request.Header("host");
    if (!origin.empty()) {
      std::string_view origin_host = origin;
      if (origin_host.rfind("http://", 0) == 0) {
        origin_host.remove_prefix(7);
      } else if (origin_host.rfind("https://", 0) == 0) {
        origin_host.remove_prefix(8);
      } else {
        origin_host = {};
      }
      if (origin_host.empty() || ToLower(origin_host) != ToLower(host) ||
          !AllowedHost(origin_host, options_.allowed_hosts, machine_name_)) {
        return Error(absl::StatusCode::kPermissionDenied,
                     StrCat("cross-origin request from ", ValidUtf8(origin), " refused"));
      }
    }
  } else if (request.method != "GET") {
    return Error(absl::StatusCode::kInvalidArgument,
                 StrCat(request.method, " is not allowed; the API takes GET and POST"));
  }
  return Api(request, who);
}

Response Dashboard::Static(const Request& request) {
  namespace fs = std::filesystem;
  if (options_.web_dir.empty()) {
    return Error(absl::StatusCode::kNotFound,
                 "this cartd serves no pages (no web folder); the API is under /api/v1/");
  }
  std::string rel = request.path;
  if (rel == "/" || rel.empty()) rel = "/index.html";
  // Two fixed names for the charting library npm installed beside the pages.
  if (rel == "/vendor/uplot.js") rel = "/node_modules/uplot/dist/uPlot.iife.min.js";
  if (rel == "/vendor/uplot.css") rel = "/node_modules/uplot/dist/uPlot.min.css";
  if (rel.find("..") != std::string::npos || rel.find('\0') != std::string::npos) {
    return Error(absl::StatusCode::kInvalidArgument, "a page path may not contain '..'");
  }
  const bool allowed = rel == "/index.html" || rel.rfind("/static/", 0) == 0 ||
                       rel.rfind("/node_modules/uplot/dist/", 0) == 0;
  if (!allowed) return Error(absl::StatusCode::kNotFound, StrCat("no page ", request.path));
  const fs::path file = fs::path(options_.web_dir) / rel.substr(1);
  std::error_code ec;
  if (rel.back() == '/' || !fs::is_regular_file(file, ec)) {  // a folder is not a page
    return Error(absl::StatusCode::kNotFound, StrCat("no page ", request.path));
  }
  absl::StatusOr<std::string> text = ReadWholeFile(file.string());
  if (!text.ok()) {
    if (rel.rfind("/node_modules/", 0) == 0) {
      return Error(absl::StatusCode::kNotFound,
                   StrCat("the charting library is not installed in ", options_.web_dir,
                          " (run deploy/install-deps.sh, which runs npm ci there)"));
    }
    return Error(absl::StatusCode::kNotFound, StrCat("no page ", request.path));
  }
  Response r;
  r.content_type = ContentTypeOf(file);
  r.body = std::move(*text);
  r.headers.push_back({"Cache-Control", "no-cache"});
  return r;
}

absl::StatusOr<std::vector<ClaimCost>> Dashboard::ClaimCosts() {
  absl::MutexLock lock(&claims_mu_);
  const absl::Time now = absl::Now();
  if (now - claims_at_ < absl::Minutes(1)) return claim_costs_;
  report::ReportOptions options;
  options.plots = false;
  std::unique_ptr<report::StudySource> source = report::StoreSource(scheduler_->store());
  CART_ASSIGN_OR_RETURN(report::Report built, report::BuildReport(*source, options));
  claim_costs_.clear();
  for (const report::ClaimLine& c : built.claims) {
    if (c.runs > 0)
      claim_costs_.push_back({c.id, c.runs, c.spending});  // a claim with no runs yet has no series
  }
  claims_at_ = now;
  return claim_costs_;
}

Response Dashboard::Metrics() {
  absl::StatusOr<std::vector<ClaimCost>> claims = ClaimCosts();
  if (!claims.ok()) return Error(claims.status());
  absl::StatusOr<std::string> text = RenderPrometheus(*scheduler_, options_.storage, *claims);
  if (!text.ok()) return Error(text.status());
  Response r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = std::move(*text);
  return r;
}

Response Dashboard::Api(const Request& request, const std::string& who) {
  const std::vector<std::string> parts = PathParts(request.path);
  const std::string& method = request.method;
  const bool get = method == "GET";
  const size_t n = parts.size();
  const std::string sub = n >= 3 ? parts[2] : "";
  if (n == 1 && get && parts[0] == "sweeps") return ListSweeps();
  if (n == 1 && get && parts[0] == "workers") return ListWorkers();
  if (n == 1 && get && parts[0] == "compare") return CompareRuns(request);
  if (n >= 1 && parts[0] == "budgets") {
    absl::StatusOr<json> answer = BudgetApi(*scheduler_, request, parts, who);
    if (!answer.ok()) return Error(answer.status());
    return Json(*answer);
  }
  if (n >= 1 && (parts[0] == "subscriptions" || parts[0] == "notifications")) {
    if (options_.notifier == nullptr) {
      return Error(absl::StatusCode::kUnavailable, "this cartd runs no notifier");
    }
    absl::StatusOr<json> answer = NotifyApi(*options_.notifier, request, parts, who);
    if (!answer.ok()) return Error(answer.status());
    return Json(*answer);
  }
  const bool study = n == 1 && get && parts[0] == "study";
  // Large reads hold a slot while they run (DashboardOptions::big_reads): 429 past the bound.
  // One run's series is not one (at most a few thousand points, and a run page asks for every
  // metric's at once).
  const bool big = study || (get && n == 3 && parts[0] == "sweeps" &&
                             (sub == "runs" || sub == "pivot" || sub == "groups"));
  const bool tokens = options_.tokens != nullptr && options_.tokens->enabled();
  const std::string caller = tokens ? who : StrCat("address:", request.peer);
  std::shared_ptr<void> slot;
  if (big && options_.big_reads != nullptr) {
    absl::StatusOr<std::shared_ptr<void>> taken = options_.big_reads->Take(caller);
    if (!taken.ok()) return Error(taken.status());
    slot = *std::move(taken);
  }
  if (study) return Study(request);
  // A live stream holds a follow slot for as long as it streams (the stream runs after this
  // returns, so the slot goes with it): 429 past the caller's share.
  const bool live = get && n == 3 && sub == "live" && (parts[0] == "sweeps" || parts[0] == "runs");
  std::shared_ptr<void> follow;
  if (live && options_.followers != nullptr) {
    absl::StatusOr<std::shared_ptr<void>> taken = options_.followers->Take(caller);
    if (!taken.ok()) return Error(taken.status());
    follow = *std::move(taken);
  }
  if (n >= 2 && n <= 3 && parts[0] == "sweeps") {
    const std::string& name = parts[1];
    if (get && sub.empty()) return GetSweep(name);
    if (get && sub == "runs") return SweepRuns(request, name);
    if (get && sub == "pivot") return SweepPivot(request, name);
    if (get && sub == "groups") return SweepGroups(request, name);
    if (get && sub == "live") return Holding(SweepLive(request, name), std::move(follow));
    if (method == "POST" && (sub == "cancel" || sub == "resume")) {
      // The same body as a run's: a JSON object, with an optional "reason" for cancel.
      absl::StatusOr<json> body = ActionBody(request, {"reason"});
      if (!body.ok()) return Error(body.status());
      absl::StatusOr<std::string> reason = Reason(*body);
      if (!reason.ok()) return Error(reason.status());
      absl::StatusOr<int64_t> changed = sub == "cancel"
                                            ? scheduler_->CancelSweep(name, who, *reason)
                                            : scheduler_->ResumeSweep(name, who);
      if (!changed.ok()) return Error(changed.status());
      return Json(json{{"sweep", name}, {"runs_affected", *changed}});
    }
    if (method == "POST" && sub == "annotate") {
      absl::StatusOr<store::AnnotationChange> change = AnnotationOf(request);
      if (!change.ok()) return Error(change.status());
      absl::StatusOr<store::SweepRecord> after = scheduler_->AnnotateSweep(name, *change, who);
      if (!after.ok()) return Error(after.status());
      json out = AnnotationJson(after->tags, after->note, scheduler_->SweepAnnotationHistory(name));
      out["sweep"] = name;
      return Json(out);
    }
    if (method == "POST" && sub == "delete") {
      absl::StatusOr<json> body = ActionBody(request, {});
      if (!body.ok()) return Error(body.status());
      absl::StatusOr<store::DeletedSweep> deleted = scheduler_->DeleteSweep(name, who);
      if (!deleted.ok()) return Error(deleted.status());
      {
        absl::MutexLock lock(&mu_);  // a sweep of the same name may come back
        keys_.erase(name);
      }
      return Json(json{{"sweep", name},
                       {"runs_deleted", deleted->runs()},
                       {"metric_points_deleted", deleted->metric_points},
                       {"checkpoints_deleted", deleted->checkpoints},
                       {"artifacts_removed", deleted->released_artifacts.size()}});
    }
  }
  if (n >= 2 && n <= 3 && parts[0] == "runs") {
    std::optional<int64_t> id = ParseInt64(parts[1]);
    if (!id || *id <= 0) {
      return Error(absl::StatusCode::kInvalidArgument,
                   StrCat("run id '", parts[1], "' is not a positive integer"));
    }
    if (get && sub.empty()) return GetRun(*id);
    if (get && sub == "series") return RunSeries(request, *id);
    if (get && sub == "log") return RunLogLines(request, *id);
    if (get && sub == "live") return Holding(RunLive(request, *id), std::move(follow));
    if (method == "POST" && (sub == "cancel" || sub == "resume" || sub == "extend")) {
      return RunAction(request, *id, sub, who);
    }
    if (method == "POST" && sub == "annotate") {
      absl::StatusOr<store::AnnotationChange> change = AnnotationOf(request);
      if (!change.ok()) return Error(change.status());
      absl::StatusOr<RunRecord> after = scheduler_->AnnotateRun(*id, *change, who);
      if (!after.ok()) return Error(after.status());
      json out = AnnotationJson(after->tags, after->note, scheduler_->RunAnnotationHistory(*id));
      out["id"] = after->id;
      return Json(out);
    }
  }
  return Error(absl::StatusCode::kNotFound,
               StrCat("no API endpoint ", method, " ", request.path, " (see docs/dashboard.md)"));
}

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
  page.filter.tags = SplitList(request.Query("tag"));
  if (page.filter.tags.size() > store::kMaxTags) {
    return Error(absl::StatusCode::kInvalidArgument,
                 StrCat("at most ", store::kMaxTags, " tags in a filter"));
  }
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
  struct RunCurve {
    std::string group;
    std::vector<store::SeriesPoint> points;
  };
  std::vector<RunCurve> curves;
  int64_t max_step = 0;
  for (const store::RunRow& row : runs->rows) {
    store::SeriesRequest s;
    s.run_id = row.run.id;
    s.metric = metric;
    s.max_points = *points;
    absl::StatusOr<store::Series> series = scheduler_->MetricSeries(s);
    if (!series.ok() || series->points.empty()) continue;
    auto it = row.run.params.find(by);
    RunCurve c{it == row.run.params.end() ? std::string("(none)") : it->second,
               std::move(series->points)};
    max_step = std::max(max_step, c.points.back().step);
    curves.push_back(std::move(c));
  }
  const int64_t g = *points;
  std::vector<std::string> order;
  std::map<std::string, std::vector<std::vector<double>>> values;  // group -> [bin] -> runs
  std::map<std::string, int64_t> members;
  for (const RunCurve& c : curves) {
    auto [it, fresh] = values.try_emplace(c.group, g);
    if (fresh) order.push_back(c.group);
    ++members[c.group];
    // A run's points in one bin are averaged; a NaN among them (a diverged run) makes the
    // bin NaN, the rule of store::Summarize, so that this view and `cart report` draw the same
    // curve for the same sweep.
    std::vector<double> sum(g, 0), count(g, 0);
    for (const store::SeriesPoint& p : c.points) {
      const int64_t bin = std::min(g - 1, p.step * g / (max_step + 1));
      sum[bin] += p.value;
      ++count[bin];
    }
    for (int64_t b = 0; b < g; ++b) {
      if (count[b] > 0) it->second[b].push_back(sum[b] / count[b]);
    }
  }
  json groups = json::array();
  for (const std::string& group : order) {
    json steps = json::array(), mean = json::array(), sd = json::array(), n = json::array();
    json low = json::array(), high = json::array();
    const auto& bins = values[group];
    for (int64_t b = 0; b < g; ++b) {
      if (bins[b].empty()) continue;
      // Mean, sample std and the mean's 95 % interval over the group's runs: the results
      // queries' one helper and rule (a NaN run makes them NaN, sent as null).
      const store::CellStats st = store::Summarize(bins[b]);
      steps.push_back((b + 1) * (max_step + 1) / g);
      mean.push_back(Num(st.mean));
      sd.push_back(st.n > 1 ? Num(st.std) : json(nullptr));
      low.push_back(Num(st.ci_low));  // NaN (null) below two runs
      high.push_back(Num(st.ci_high));
      n.push_back(st.n);
    }
    groups.push_back(json{{"value", group},
                          {"runs", members[group]},
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

Response Dashboard::Study(const Request& request) {
  StudyQuery query;
  for (const auto& [key, field] : std::initializer_list<std::pair<const char*, double*>>{
           {"power", &query.power}, {"alpha", &query.alpha}}) {
    const std::string text = request.Query(key);
    if (text.empty()) continue;
    const std::optional<double> v = ParseDouble(text);
    if (!v || !(*v > 0 && *v < 1)) {
      return Error(absl::StatusCode::kInvalidArgument,
                   StrCat("query parameter '", key, "': '", text, "' is not a number in (0, 1)"));
    }
    *field = *v;
  }
  for (const char* part :
       {"stage1", "stage2", "baselines", "ablations", "faithfulness", "leak", "variable_r"}) {
    if (!request.Query(part).empty()) query.sweeps[part] = request.Query(part);
  }
  query.prices = options_.prices;
  absl::StatusOr<json> out = StudyJson(scheduler_->store(), query);
  if (!out.ok()) return Error(out.status());
  return Json(*out);
}

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

Response Dashboard::ListWorkers() {
  json out = json::array();
  for (const WorkerStatus& w : scheduler_->ListWorkers(/*device_history=*/true)) {
    json worker{{"id", w.info.id},
                {"hostname", w.info.hostname},
                {"version", w.info.version},
                {"device_kind", w.info.device_kind},
                {"device_name", w.info.device_name},
                {"device_index", w.info.device_index},
                {"uuid", w.info.uuid},
                {"memory_bytes", w.info.memory_bytes},
                {"free_disk_bytes", w.info.free_disk_bytes},
                {"disk_floor_bytes", w.info.disk_floor_bytes},
                {"state", w.state},
                {"run_id", w.run_id},
                {"run_name", w.run_name},
                {"run_mfu", w.run_mfu ? Num(*w.run_mfu) : json(nullptr)},
                {"run_mfu_6n", w.run_mfu_6n ? Num(*w.run_mfu_6n) : json(nullptr)},
                {"speed", Num(w.speed)},
                {"speed_source", w.speed_source},
                {"idle_while_queued", w.idle_while_queued},
                {"idle_while_queued_hours", Num(w.idle_while_queued_s / 3600)},
                {"last_seen_us", w.last_seen_us}};
    // The recent readings as columns (what the sparklines draw), oldest first; a value a device
    // does not report (a CPU's temperature) is null.
    json t = json::array(), util = json::array(), mem = json::array(), temp = json::array(),
         power = json::array();
    for (const DeviceSample& d : w.device) {
      t.push_back(d.at_us / 1'000'000.0);
      util.push_back(Num(d.utilization));
      mem.push_back(d.memory_used_bytes);
      temp.push_back(d.temperature_c ? Num(*d.temperature_c) : json(nullptr));
      power.push_back(d.power_w ? Num(*d.power_w) : json(nullptr));
    }
    worker["device"] = {{"t", t},
                        {"utilization", util},
                        {"memory_used_bytes", mem},
                        {"temperature_c", temp},
                        {"power_w", power}};
    if (!w.device.empty()) {
      const DeviceSample& d = w.device.back();
      worker["latest"] = {
          {"at_us", d.at_us},
          {"utilization", Num(d.utilization)},
          {"memory_used_bytes", d.memory_used_bytes},
          {"memory_total_bytes", d.memory_total_bytes},
          {"temperature_c", d.temperature_c ? Num(*d.temperature_c) : json(nullptr)},
          {"power_w", d.power_w ? Num(*d.power_w) : json(nullptr)},
          {"sm_clock_hz", d.sm_clock_hz ? Num(*d.sm_clock_hz) : json(nullptr)},
          {"throttle_reasons", d.throttle_reasons ? json(*d.throttle_reasons) : json(nullptr)}};
    } else {
      worker["latest"] = nullptr;
    }
    out.push_back(std::move(worker));
  }
  return Json(json{{"workers", out}});
}

}  // namespace cart::server::http
