#pragma once

// cartd's reader of the results tables (report/results_tables.h): the Scheduler's queries.

#include <vector>

#include "absl/status/statusor.h"
#include "cart/v1/scheduler.pb.h"
#include "report/results_tables.h"
#include "server/scheduler.h"

namespace cart::server::internal {

// The reader of cartd's tables. `scheduler` must outlive it.
class SchedulerResults final : public report::ResultsReader {
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

}  // namespace cart::server::internal
