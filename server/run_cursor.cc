#include "server/run_cursor.h"

#include <algorithm>
#include <utility>

#include "common/status.h"
#include "server/scheduler.h"

namespace cart::server {

MetricCursor::MetricCursor(Scheduler& scheduler, int64_t run_id, int64_t from_step,
                           std::vector<std::string> names)
    : scheduler_(scheduler), run_id_(run_id), from_step_(from_step), all_names_(names.empty()) {
  for (std::string& name : names) next_step_.emplace(std::move(name), from_step);
}

absl::StatusOr<std::vector<store::Series>> MetricCursor::Next(int64_t max_points) {
  // Metrics whose summary shows nothing past their cursor are not read (known only when
  // following every name: the summaries are read anyway, to find new names).
  std::map<std::string, int64_t> newest;
  if (all_names_) {
    CART_ASSIGN_OR_RETURN(std::vector<store::MetricSummary> summaries,
                          scheduler_.RunSummaries(run_id_));
    for (const store::MetricSummary& s : summaries) {
      next_step_.emplace(s.name, from_step_);
      newest[s.name] = s.latest_step;
    }
  }
  // The cursors move only once every read succeeded: after an error the next call reads again.
  std::map<std::string, int64_t> moved = next_step_;
  int64_t latest = latest_step_;
  std::vector<store::Series> out;
  for (auto& [name, from] : moved) {
    if (auto it = newest.find(name); it != newest.end()) {
      latest = std::max(latest, it->second);
      if (it->second < from) continue;
    }
    store::SeriesRequest request;
    request.run_id = run_id_;
    request.metric = name;
    request.max_points = max_points;
    request.from_step = from;
    absl::StatusOr<store::Series> series = scheduler_.MetricSeries(request);
    if (absl::IsNotFound(series.status())) continue;  // not logged yet
    CART_RETURN_IF_ERROR(series.status());
    if (series->points.empty()) continue;
    from = series->points.back().step + 1;
    latest = std::max(latest, series->points.back().step);
    out.push_back(*std::move(series));
  }
  next_step_ = std::move(moved);
  latest_step_ = latest;
  return out;
}

absl::StatusOr<std::vector<store::LogLine>> LogCursor::Next(int64_t limit) {
  CART_ASSIGN_OR_RETURN(std::vector<store::LogLine> lines,
                        scheduler_.RunLog(run_id_, after_id_, limit));
  if (!lines.empty()) after_id_ = lines.back().id;
  return lines;
}

}  // namespace cart::server
