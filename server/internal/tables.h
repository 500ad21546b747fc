#pragma once

// QueryTable: a results request (scheduler.proto QueryTableRequest) answered by the store's results
// layer (store/results.h) and laid out as a Table of rows the CLI and dashboard print.
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
#include "server/scheduler.h"
#include "store/results.h"
#include "store/run_store.h"

namespace cart::server::internal {

// What the tables read: the store's results queries, through the Scheduler in cartd, or from a
// RunStore opened on a database file (`cart results --db`; server/results_tables.h).
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

// The reader of cartd's tables. `scheduler` must outlive it.
class SchedulerResults final : public ResultsReader {
 public:
  explicit SchedulerResults(Scheduler* scheduler) : scheduler_(scheduler) {}
  absl::StatusOr<store::PivotTable> Pivot(const store::PivotRequest& request) override {
    return scheduler_->Pivot(request);
  }
  absl::StatusOr<std::vector<store::AblationRow>> Ablation(
      const store::AblationRequest& request) override {
    return scheduler_->Ablation(request);
  }
  absl::StatusOr<store::Series> MetricSeries(const store::SeriesRequest& request) override {
    return scheduler_->MetricSeries(request);
  }
  absl::StatusOr<store::StageComparison> CompareStages(
      const store::StageComparisonRequest& request) override {
    return scheduler_->CompareStages(request);
  }
  absl::StatusOr<std::vector<store::RunRecord>> ListRunRecords(
      const store::RunFilter& filter) override {
    return scheduler_->ListRunRecords(filter);
  }

 private:
  Scheduler* scheduler_;
};

absl::StatusOr<v1::Table> QueryTable(ResultsReader& results, const v1::QueryTableRequest& request);

}  // namespace cart::server::internal
