// StudySource over an open RunStore: runs with their latest metric values, and series.

#include "absl/time/clock.h"
#include "common/status.h"
#include "common/strings.h"
#include "report/report.h"
#include "store/run_store.h"

namespace cart::report {
namespace {

class StoreStudySource : public StudySource {
 public:
  StoreStudySource(store::RunStore& store, store::EnergyPrices prices)
      : store_(store), prices_(std::move(prices)) {}

  absl::StatusOr<std::vector<StudyRun>> Runs(const std::string& sweep) override {
    store::RunFilter filter;
    filter.sweeps = {sweep};
    CART_ASSIGN_OR_RETURN(std::vector<store::RunRecord> records, store_.ListRuns(filter));
    std::vector<StudyRun> out;
    if (records.empty()) return out;
    using SpendingById = std::map<int64_t, store::Spending>;
    CART_ASSIGN_OR_RETURN(SpendingById spending,
                          store_.RunSpending(sweep, absl::ToUnixMicros(absl::Now())));
    out.reserve(records.size());
    for (store::RunRecord& r : records) {
      StudyRun run;
      run.id = r.id;
      run.sweep = r.sweep_name;
      run.name = StrCat(r.sweep_name, "/", r.name);
      run.state = std::string(store::RunStateName(r.state));
      run.finished = r.state == store::RunState::kSucceeded;
      run.total_steps = r.steps;
      run.stored_params = r.stored_params;
      run.kind = r.kind;
      run.params = std::move(r.params);
      run.device_classes = std::move(r.device_classes);
      if (auto it = spending.find(run.id); it != spending.end()) run.spending = it->second;
      CART_ASSIGN_OR_RETURN(std::vector<store::MetricSummary> summaries,
                            store_.RunSummaries(run.id));
      for (const store::MetricSummary& s : summaries) {
        run.values[s.name] = s.latest_value;
        run.step = std::max(run.step, s.latest_step);
      }
      out.push_back(std::move(run));
    }
    return out;
  }

  absl::StatusOr<std::vector<StudyPoint>> Series(int64_t run_id, const std::string& metric,
                                                 int64_t max_points) override {
    store::SeriesRequest request;
    request.run_id = run_id;
    request.metric = metric;
    request.max_points = max_points;
    absl::StatusOr<store::Series> series = store_.MetricSeries(request);
    if (absl::IsNotFound(series.status())) return std::vector<StudyPoint>{};
    CART_RETURN_IF_ERROR(series.status());
    std::vector<StudyPoint> out;
    out.reserve(series->points.size());
    for (const store::SeriesPoint& p : series->points) out.push_back({p.step, p.value});
    return out;
  }

  absl::StatusOr<std::vector<ItemOutcomes>> EvalItems(int64_t run_id) override {
    CART_ASSIGN_OR_RETURN(std::vector<store::EvalItems> items, store_.ListEvalItems(run_id));
    std::vector<ItemOutcomes> out;
    for (store::EvalItems& e : items) {
      out.push_back({std::move(e.task), e.loops, std::move(e.correct), std::move(e.correct_norm),
                     std::move(e.logprob)});
    }
    return out;
  }

  absl::StatusOr<store::EnergyPrices> Prices() override { return prices_; }

  absl::StatusOr<std::vector<ClaimLook>> Looks() override {
    CART_ASSIGN_OR_RETURN(std::vector<store::PlanRecord> plans, store_.ListPlans());
    std::vector<ClaimLook> out;
    for (const store::PlanRecord& p : plans) {
      for (const store::PlanClaim& c : p.claims) {
        out.push_back({c.claim, p.id, c.seeds_now, c.seeds_target, p.alpha, p.spending, p.run_ids});
      }
    }
    return out;
  }

 private:
  store::RunStore& store_;
  store::EnergyPrices prices_;
};

}  // namespace

std::unique_ptr<StudySource> StoreSource(store::RunStore& store, store::EnergyPrices prices) {
  return std::make_unique<StoreStudySource>(store, std::move(prices));
}

}  // namespace cart::report
