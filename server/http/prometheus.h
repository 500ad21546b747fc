#pragma once

// /metrics: cartd's state in Prometheus's text exposition format, written by prometheus-cpp's
// TextSerializer from a registry filled at each scrape (docs/dashboard.md "Prometheus" lists
// every series). Per-run series exist only for RUNNING runs, at most kMaxRunSeries of them, so
// the number of series stays bounded however large the database grows.

#include <string>

#include "absl/status/statusor.h"

namespace cart::server {
class Scheduler;
}

namespace cart::server::http {

inline constexpr int kMaxRunSeries = 100;

absl::StatusOr<std::string> RenderPrometheus(Scheduler& scheduler);

}  // namespace cart::server::http
