#pragma once

// /metrics: cartd's state in Prometheus's text exposition format, written by prometheus-cpp's
// TextSerializer from a registry filled at each scrape (docs/dashboard.md "Prometheus" lists
// every series). Per-run series exist only for RUNNING runs, at most kMaxRunSeries of them, so
// the number of series stays bounded however large the database grows.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "store/spending.h"

namespace cart::server {
class Scheduler;
}

namespace cart::server::http {

inline constexpr int kMaxRunSeries = 100;
// A FAILED run keeps its cart_run_failed_timestamp_seconds series this long after it failed.
inline constexpr int64_t kFailedRunSeriesUs = int64_t{24} * 3600 * 1'000'000;

// The artifact store's room, for the alerts on its quota and disk floor.
struct StorageFigures {
  int64_t stored_bytes = 0;
  int64_t quota_bytes = 0;       // 0: no quota
  int64_t floor_bytes = 0;       // uploads are refused below this much free disk
  int64_t free_disk_bytes = -1;  // -1: unknown
};

// What one claim's evidence cost, as the report counts it (report::ClaimLine::runs): the
// cart_claim_* series.
struct ClaimCost {
  std::string claim;
  int64_t runs = 0;
  store::Spending spending;
};

// `storage`: the artifact store's figures (none: those series are left out); `claims`: each
// claim's cost (none: those series are left out).
absl::StatusOr<std::string> RenderPrometheus(Scheduler& scheduler,
                                             const std::function<StorageFigures()>& storage = {},
                                             const std::vector<ClaimCost>& claims = {});

}  // namespace cart::server::http
