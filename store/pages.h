#pragma once

// Paged reads for screens that show many runs at once (the dashboard, `cart runs ls`,
// `cart sweep show`, /metrics): each answers in a fixed number of queries however many runs a
// sweep has, instead of one query per run. RunStore runs them (run_store.h).

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "store/results.h"
#include "store/types.h"

namespace cart::store {

// One page of runs, sorted and filtered.
struct RunPageRequest {
  RunFilter filter;
  // Latest values of these metrics come with each row, and `sort` may name them.
  std::vector<std::string> metrics;
  // "id" (default), "name", "state", "step", "updated", "param:<config key>" (numbers in numeric
  // order before other text) or "metric:<name>" (latest value; runs without it last).
  std::string sort = "id";
  bool descending = false;
  int64_t offset = 0;   // >= 0
  int64_t limit = 100;  // 0: every matching run
};

struct RunRow {
  RunRecord run;
  std::string worker_id;  // the worker of the latest attempt; empty when never leased
  int64_t step = 0;       // the highest step any of the run's metrics reached; 0: none yet
  std::map<std::string, double> latest;  // the requested metrics the run has logged
};

struct RunPage {
  int64_t total = 0;  // runs matching the filter, before offset and limit
  std::vector<RunRow> rows;
};

// A sweep with what its progress bar needs. Tokens count train jobs only (eval jobs read no
// training tokens); a run's planned tokens are steps × batch × accum × seq_len.
struct SweepProgress {
  SweepRecord sweep;  // run_counts filled in
  int64_t train_runs = 0;
  int64_t planned_tokens = 0;
  // Finished runs count their planned tokens; others their latest "tokens" metric.
  int64_t done_tokens = 0;
  // Sum of the latest "tokens_per_s" of the sweep's RUNNING runs.
  double tokens_per_s = 0;
};

// What a sweep's pages choose from.
struct SweepKeys {
  std::vector<std::string> varying;  // config keys with more than one value among its train runs
  std::vector<std::string> metrics;  // metric names its runs have logged, sorted
};

// Counts for /metrics: runs per state over every sweep, and the bytes of stored artifacts.
struct StoreTotals {
  std::map<RunState, int64_t> runs;
  int64_t artifact_bytes = 0;
  int64_t artifacts = 0;
};

}  // namespace cart::store
