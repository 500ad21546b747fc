#pragma once

// The results tables (report/: what the results database says): a request (scheduler.proto
// QueryTableRequest) answered by the store's results layer (store/results.h) and laid out as a
// Table of rows the CLI and dashboard print. cartd answers QueryTable with it; `cart results --db`
// and cartlab's open_db(...).table() compute the same answer from a database file.
//
//   pivot   metric by `rows` × `cols` (mean ± std over seeds); first column holds the row value
//   best    the best `cols` value of each `rows` value (lower_is_better decides)
//   deltas  every group of `group_by` keys against `baseline` ("key=value,key=value")
//   series  one run's metric by step, downsampled to max_points
//   ranks   stage comparison of exactly two sweeps over the configs named by `group_by`
//           (default "d,R,P"); the title carries Spearman's ρ
//
// InvalidArgument for an unknown table, a missing field (message names it) or a baseline that is
// not one of the groups; the store's NotFound for an unknown metric or key.

#include <vector>

#include "absl/status/statusor.h"
#include "cart/v1/scheduler.pb.h"
#include "store/results.h"
#include "store/run_store.h"

namespace cart::report {

// What the tables read: the store's results queries, through cartd's Scheduler
// (server/internal/tables.h), or from a RunStore opened on a database file.
class ResultsReader {
 public:
  virtual ~ResultsReader() = default;
  virtual absl::StatusOr<store::PivotTable> Pivot(const store::PivotRequest& request) = 0;
  virtual absl::StatusOr<std::vector<store::AblationRow>> Ablation(
      const store::AblationRequest& request) = 0;
  virtual absl::StatusOr<store::Series> MetricSeries(const store::SeriesRequest& request) = 0;
  virtual absl::StatusOr<store::StageComparison> CompareStages(
      const store::StageComparisonRequest& request) = 0;
  virtual absl::StatusOr<std::vector<store::RunRecord>> ListRunRecords(
      const store::RunFilter& filter) = 0;
};

absl::StatusOr<v1::Table> QueryTable(ResultsReader& results, const v1::QueryTableRequest& request);

// The same over a RunStore opened on a database file. Reads only; thread-safe as the store is.
absl::StatusOr<v1::Table> QueryTableOverStore(store::RunStore& store,
                                              const v1::QueryTableRequest& request);

}  // namespace cart::report
