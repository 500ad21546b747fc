#pragma once

// "What is new in this run since I last looked": the one reader of a run's new metric points and
// log lines, for every follower of a run — StreamMetrics and StreamRunLog over gRPC and the
// dashboard's live events (server-sent events). One rule for the store's errors: a metric the
// run has not logged yet is no error and is skipped; every other error is returned, the cursor
// stays where it was, and the follower ends its stream with it (never skipped silently, which
// would leave a page showing a curve with a hole and no sign of it).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "store/results.h"
#include "store/types.h"

namespace cart::server {

class Scheduler;

// New points of a run's metrics. A cursor per metric: the next step to read.
class MetricCursor {
 public:
  // Follows `names`, or, when empty, every metric the run logs (looked up again on each read,
  // so a metric first logged later is followed from `from_step` too). Reads steps >= from_step.
  MetricCursor(Scheduler& scheduler, int64_t run_id, int64_t from_step,
               std::vector<std::string> names = {});

  // Each followed metric's points since the previous read, by metric name, leaving out metrics
  // with none, and moves the cursors past them. `max_points` > 0 caps each metric's points,
  // downsampling more into that many buckets (store::SeriesRequest; the cursor then passes
  // the whole range read); 0 reads every point.
  absl::StatusOr<std::vector<store::Series>> Next(int64_t max_points = 0);

  // The newest step any of the run's metrics has reached, as of the last read of every metric's
  // summary (following all names); else the newest step read.
  int64_t latest_step() const { return latest_step_; }

 private:
  Scheduler& scheduler_;
  const int64_t run_id_;
  const int64_t from_step_;
  const bool all_names_;
  std::map<std::string, int64_t> next_step_;  // per metric name
  int64_t latest_step_ = 0;
};

// New log lines of a run, by the store's line id.
class LogCursor {
 public:
  LogCursor(Scheduler& scheduler, int64_t run_id, int64_t after_id)
      : scheduler_(scheduler), run_id_(run_id), after_id_(after_id) {}

  // Lines since the previous read, oldest first, at most `limit` (0: all; the rest come next
  // time), and moves the cursor past them.
  absl::StatusOr<std::vector<store::LogLine>> Next(int64_t limit = 0);

  int64_t after_id() const { return after_id_; }

 private:
  Scheduler& scheduler_;
  const int64_t run_id_;
  int64_t after_id_;
};

}  // namespace cart::server
