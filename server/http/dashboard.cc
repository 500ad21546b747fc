// The dashboard port's front: the request guard (tokens, Host and Origin checks, the caller's
// large-read slots) and the API's router, which hands each resource to its own file
// (sweeps_api.cc, runs_api.cc, workers_api.cc, study_api.cc, metrics_api.cc, budget_api.cc,
// notify_api.cc; static_files.cc serves the pages). docs/dashboard.md lists the routes.

#include "server/http/dashboard.h"

#include <unistd.h>

#include <boost/asio/ip/address.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/strings.h"
#include "server/auth.h"
#include "server/caller_slots.h"
#include "server/http/budget_api.h"
#include "server/http/internal/api_util.h"
#include "server/http/notify_api.h"
#include "server/http/request_body.h"
#include "server/scheduler.h"

namespace cart::server::http {

using nlohmann::json;
using store::RunRecord;

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
      who = CallerName(*principal);  // a worker's token may not call this API
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

}  // namespace cart::server::http
