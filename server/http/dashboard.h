#pragma once

// What cartd's HTTP port answers (docs/dashboard.md has every endpoint): the dashboard's pages
// from a folder of static files, the JSON API under /api/v1/ (read through the Scheduler's query
// facade only, like the gRPC services), server-sent events for live runs, and /metrics for
// Prometheus.
//
// Security (docs/design.md "Security"). With a tokens file, every API call and /metrics needs
// `Authorization: Bearer <token>`: a user or admin token for the API, any valid token for
// /metrics; the static files carry no data and need none. The pages keep the token in the
// browser's local storage and send it as a header, never as a cookie, so another site cannot
// make the browser use it. Changes (POST) must also come as JSON from the dashboard's own origin:
// a cross-site form cannot send that content type without a CORS preflight, which cartd never
// grants, so even with authentication off (loopback only) no web page can cancel a run.
// DNS rebinding (a page of the attacker's name whose name then resolves to 127.0.0.1, so that
// its requests are same-origin) is refused by the Host check: a request's Host must be an IP
// address, a loopback name, this machine's host name or a name configured with `http_hosts`, and
// a POST's Origin must name one of those too (AllowedHost).
//
// Thread-safety: Handle and the live streams' sources are called concurrently from the HTTP
// server's handler threads.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/http/http_server.h"
#include "server/http/prometheus.h"
#include "store/spending.h"

namespace cart::store {
struct SweepKeys;
}

namespace cart::server::notify {
class Notifier;
}

namespace cart::server {
class CallerSlots;
class Scheduler;
class TokenTable;
}  // namespace cart::server

namespace cart::server::http {

struct DashboardOptions {
  // The folder with index.html, static/ (the script's ES modules, style.css) and
  // node_modules/uplot (installed by deploy/install-deps.sh). Empty or missing: the API and
  // /metrics only.
  std::string web_dir;
  // Not owned; nullptr or an empty table: authentication off.
  const TokenTable* tokens = nullptr;
  // True once cartd is stopping: event streams end.
  std::function<bool()> stopping;
  // How often a live stream looks for new points when nothing woke it. Default 2 s.
  absl::Duration live_poll = absl::Seconds(2);
  // Host names (no port, lower case) accepted in a request's Host and a POST's Origin besides IP
  // addresses, "localhost" and this machine's host name: the names users browse cartd by (cartd's
  // `http_hosts`).
  std::vector<std::string> allowed_hosts;
  // Bounds the large reads in progress (run pages, pivots, groups) per caller and for
  // everyone, shared with the gRPC side (server/caller_slots.h); more get 429. Not owned;
  // nullptr: unbounded. The caller is the token's user, or the client address without tokens.
  CallerSlots* big_reads = nullptr;
  // Bounds the live streams (a run's or a sweep's events) one caller holds, shared with the gRPC
  // side's follow streams (max_follows_per_caller): a user token once held 320 streams from five
  // addresses. Same caller as big_reads. Not owned; nullptr: unbounded.
  CallerSlots* followers = nullptr;
  // About the most bytes of run rows one runs page carries; past it the page is cut short.
  size_t max_answer_bytes = 8 << 20;
  // Running runs a sweep's live stream follows at most (the most recently updated).
  int live_runs = 12;
  // Least time between two events of a run's live stream. Default 1 s.
  absl::Duration live_min_interval = absl::Seconds(1);
  // The artifact store's room for /metrics (its quota and disk-floor alerts); empty: not shown.
  std::function<StorageFigures()> storage;
  // What spending is priced at (store/spending.h): runs' and sweeps' cost and CO2.
  store::EnergyPrices prices;
  // Subscriptions and the notification log (notify_api.h). Not owned; nullptr: not served.
  notify::Notifier* notifier = nullptr;
};

// True when `host_header` (a Host header's value: name or address, optionally ":port") names this
// server in a way no other site can: an IP address (v4, or v6 in brackets), a name under
// "localhost", `machine_name`, or one of `allowed`. An empty value is allowed (HTTP/1.0).
bool AllowedHost(std::string_view host_header, const std::vector<std::string>& allowed,
                 std::string_view machine_name);

class Dashboard {
 public:
  Dashboard(Scheduler* scheduler, DashboardOptions options);
  ~Dashboard();
  Response Handle(const Request& request);

 private:
  // The API's routes (docs/dashboard.md); Api dispatches on the path.
  Response Api(const Request& request, const std::string& who);
  Response ListSweeps();
  Response GetSweep(const std::string& name);
  Response SweepRuns(const Request& request, const std::string& name);
  Response SweepPivot(const Request& request, const std::string& name);
  Response SweepGroups(const Request& request, const std::string& name);
  Response SweepLive(const Request& request, const std::string& name);
  // A sweep's live update as one SSE event: its states and running runs with the points of
  // `metrics` after `since` (nullptr: whole series, downsampled). Fills last_step when given.
  using StepMap = std::map<std::pair<int64_t, std::string>, int64_t>;  // (run, metric) -> step
  absl::StatusOr<std::string> SweepUpdate(const std::string& name,
                                          const std::vector<std::string>& metrics,
                                          const StepMap* since, StepMap* last_step);
  // One poll of a sweep for all its followers, and the newest one per (sweep, metrics).
  struct SweepFrame {
    int64_t generation = 0;
    absl::Time at;
    std::string event;  // the update since the previous frame
    StepMap last_step;  // where each series stands after this frame
  };
  absl::StatusOr<std::shared_ptr<const SweepFrame>> Frame(const std::string& name,
                                                          const std::vector<std::string>& metrics);
  Response GetRun(int64_t id);
  // GET /api/v1/compare?a=ID&b=ID[&metric=loss]: how two runs differ (docs/dashboard.md).
  Response CompareRuns(const Request& request);
  // GET /api/v1/study[?power=&alpha=&PART=SWEEP]: the claims, their looks, the seed plan and the
  // plans applied (server/http/study_view.h; docs/dashboard.md).
  Response Study(const Request& request);
  Response RunSeries(const Request& request, int64_t id);
  Response RunLogLines(const Request& request, int64_t id);
  Response RunLive(const Request& request, int64_t id);
  Response RunAction(const Request& request, int64_t id, const std::string& action,
                     const std::string& who);
  Response ListWorkers();
  Response Static(const Request& request);
  Response Metrics();
  // The sweep's varying keys and metric names, cached for a few seconds: computing them reads
  // every run of the sweep.
  std::shared_ptr<const store::SweepKeys> Keys(const std::string& sweep, absl::Status* error);
  // Each claim's cost for /metrics (cart_claim_*), as the report over the study's default sweeps
  // counts it; recomputed at most once a minute (it reads every run of the study).
  absl::StatusOr<std::vector<ClaimCost>> ClaimCosts();

  Scheduler* scheduler_;
  DashboardOptions options_;
  std::string machine_name_;  // gethostname(), lower case: a name users browse this box by
  absl::Mutex mu_;
  struct CachedKeys {
    absl::Time at;
    std::shared_ptr<const store::SweepKeys> keys;
  };
  std::map<std::string, CachedKeys> keys_ ABSL_GUARDED_BY(mu_);
  absl::Mutex frames_mu_;  // held while a frame is computed
  std::map<std::string, std::shared_ptr<const SweepFrame>> frames_ ABSL_GUARDED_BY(frames_mu_);
  absl::Mutex claims_mu_;  // held while the claims' costs are computed
  absl::Time claims_at_ ABSL_GUARDED_BY(claims_mu_) = absl::InfinitePast();
  std::vector<ClaimCost> claim_costs_ ABSL_GUARDED_BY(claims_mu_);
};

}  // namespace cart::server::http
