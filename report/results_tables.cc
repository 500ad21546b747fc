// The results tables (report/results_tables.h).

#include "report/results_tables.h"

#include <map>
#include <set>

#include "common/status.h"
#include "common/strings.h"

namespace cart::report {
namespace {

using store::CellStats;

v1::TableCell Text(const std::string& text) {
  v1::TableCell cell;
  cell.set_text(text);
  return cell;
}

v1::TableCell Number(double value) {
  v1::TableCell cell;
  cell.set_mean(value);
  cell.set_n(1);
  return cell;
}

v1::TableCell Stats(const CellStats& stats) {
  v1::TableCell cell;
  cell.set_mean(stats.mean);
  cell.set_std(stats.std);
  cell.set_n(stats.n);
  if (stats.n >= 2) {
    cell.set_ci_low(stats.ci_low);
    cell.set_ci_high(stats.ci_high);
  }
  return cell;
}

absl::Status Require(const std::string& value, const char* field, const std::string& table) {
  if (value.empty()) {
    return absl::InvalidArgumentError(StrCat("table '", table, "' needs the field '", field, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<store::SummaryField> FieldOf(const std::string& value) {
  if (value.empty() || value == "final") return store::SummaryField::kFinal;
  if (value == "latest") return store::SummaryField::kLatest;
  return absl::InvalidArgumentError(StrCat("value '", value, "' is not one of final, latest"));
}

store::RunFilter SweepFilter(const v1::QueryTableRequest& request) {
  store::RunFilter filter;
  filter.sweeps.assign(request.sweeps().begin(), request.sweeps().end());
  filter.tags.assign(request.tags().begin(), request.tags().end());
  // The tables compare trained models; an eval job's values are over R_infer, not training.
  filter.kinds = {JobKind::kTrain};
  return filter;
}

std::vector<std::string> Keys(const std::string& csv) {
  std::vector<std::string> keys;
  for (const std::string& key : Split(csv, ',')) {
    const std::string trimmed(Trim(key));
    if (!trimmed.empty()) keys.push_back(trimmed);
  }
  return keys;
}

absl::StatusOr<store::PivotTable> PivotOf(ResultsReader& results,
                                          const v1::QueryTableRequest& request) {
  CART_RETURN_IF_ERROR(Require(request.metric(), "metric", request.table()));
  CART_RETURN_IF_ERROR(Require(request.rows(), "rows", request.table()));
  CART_RETURN_IF_ERROR(Require(request.cols(), "cols", request.table()));
  store::PivotRequest pivot;
  pivot.filter = SweepFilter(request);
  pivot.metric = request.metric();
  pivot.row_key = request.rows();
  pivot.col_key = request.cols();
  CART_ASSIGN_OR_RETURN(pivot.field, FieldOf(request.value()));
  return results.Pivot(pivot);
}

absl::StatusOr<v1::Table> PivotTable(ResultsReader& results, const v1::QueryTableRequest& request) {
  CART_ASSIGN_OR_RETURN(store::PivotTable pivot, PivotOf(results, request));
  v1::Table table;
  table.set_title(StrCat(pivot.metric, " by ", pivot.row_key, " × ", pivot.col_key));
  table.add_columns(pivot.row_key);
  for (const std::string& col : pivot.col_values)
    table.add_columns(StrCat(pivot.col_key, "=", col));
  for (size_t r = 0; r < pivot.row_values.size(); ++r) {
    v1::TableRow* row = table.add_rows();
    *row->add_cells() = Text(pivot.row_values[r]);
    for (const CellStats& cell : pivot.cells[r]) *row->add_cells() = Stats(cell);
  }
  return table;
}

absl::StatusOr<v1::Table> BestTable(ResultsReader& results, const v1::QueryTableRequest& request) {
  CART_ASSIGN_OR_RETURN(store::PivotTable pivot, PivotOf(results, request));
  const store::Goal goal = request.lower_is_better() ? store::Goal::kMin : store::Goal::kMax;
  v1::Table table;
  table.set_title(StrCat("best ", pivot.col_key, " for each ", pivot.row_key, " by ", pivot.metric,
                         request.lower_is_better() ? " (lower is better)" : " (higher is better)"));
  table.add_columns(pivot.row_key);
  table.add_columns(pivot.col_key);
  table.add_columns(pivot.metric);
  for (const store::BestCell& best : store::BestPerRow(pivot, goal)) {
    v1::TableRow* row = table.add_rows();
    *row->add_cells() = Text(best.row_value);
    *row->add_cells() = Text(best.col_value);
    *row->add_cells() = Stats(best.stats);
  }
  return table;
}

absl::StatusOr<v1::Table> DeltasTable(ResultsReader& results,
                                      const v1::QueryTableRequest& request) {
  CART_RETURN_IF_ERROR(Require(request.metric(), "metric", request.table()));
  CART_RETURN_IF_ERROR(Require(request.group_by(), "group_by", request.table()));
  CART_RETURN_IF_ERROR(Require(request.baseline(), "baseline", request.table()));
  const std::vector<std::string> keys = Keys(request.group_by());
  // The baseline as key -> value, written in group_by order so it matches a group label.
  std::map<std::string, std::string> baseline_values;
  for (const std::string& part : Split(request.baseline(), ',')) {
    const size_t eq = part.find('=');
    if (eq == std::string::npos) {
      return absl::InvalidArgumentError(
          StrCat("baseline '", request.baseline(), "' is not 'key=value,key=value'"));
    }
    baseline_values[std::string(Trim(part.substr(0, eq)))] = std::string(Trim(part.substr(eq + 1)));
  }
  auto label_of = [&](const std::map<std::string, std::string>& values) {
    std::vector<std::string> parts;
    for (const std::string& key : keys) {
      auto it = values.find(key);
      parts.push_back(StrCat(key, "=", it == values.end() ? "" : it->second));
    }
    return StrJoin(parts, ",");
  };
  CART_ASSIGN_OR_RETURN(std::vector<store::RunRecord> runs,
                        results.ListRunRecords(SweepFilter(request)));
  std::set<std::string> seen;
  store::AblationRequest ablation;
  ablation.metric = request.metric();
  CART_ASSIGN_OR_RETURN(ablation.field, FieldOf(request.value()));
  for (const store::RunRecord& run : runs) {
    std::map<std::string, std::string> values;
    for (const std::string& key : keys) {
      auto it = run.params.find(key);
      if (it != run.params.end()) values[key] = it->second;
    }
    if (values.size() != keys.size()) continue;  // the run lacks a group key
    const std::string label = label_of(values);
    if (!seen.insert(label).second) continue;
    store::RunGroup group;
    group.label = label;
    group.filter = SweepFilter(request);
    group.filter.params = values;
    ablation.groups.push_back(std::move(group));
  }
  ablation.baseline = label_of(baseline_values);
  if (!seen.count(ablation.baseline)) {
    return absl::InvalidArgumentError(StrCat("baseline '", request.baseline(),
                                             "' is none of the groups by ", request.group_by()));
  }
  CART_ASSIGN_OR_RETURN(std::vector<store::AblationRow> rows, results.Ablation(ablation));
  v1::Table table;
  table.set_title(
      StrCat(request.metric(), " by ", request.group_by(), " against ", ablation.baseline));
  for (const char* column : {"group", "mean", "delta", "relative_delta"}) table.add_columns(column);
  for (const store::AblationRow& r : rows) {
    v1::TableRow* row = table.add_rows();
    *row->add_cells() = Text(r.is_baseline ? StrCat(r.label, " (baseline)") : r.label);
    *row->add_cells() = Stats(r.stats);
    *row->add_cells() = Number(r.delta);
    *row->add_cells() = Number(r.relative_delta);
  }
  return table;
}

absl::StatusOr<v1::Table> SeriesTable(ResultsReader& results,
                                      const v1::QueryTableRequest& request) {
  CART_RETURN_IF_ERROR(Require(request.metric(), "metric", request.table()));
  if (request.run_id() <= 0) {
    return absl::InvalidArgumentError("table 'series' needs the field 'run_id'");
  }
  store::SeriesRequest series_request;
  series_request.run_id = request.run_id();
  series_request.metric = request.metric();
  series_request.max_points = request.max_points() > 0 ? request.max_points() : 1000;
  CART_ASSIGN_OR_RETURN(store::Series series, results.MetricSeries(series_request));
  v1::Table table;
  table.set_title(StrCat(series.metric, " of run ", series.run_id, " (", series.points.size(),
                         " of ", series.total_points, " points)"));
  for (const char* column : {"step", "value", "min", "max", "count"}) table.add_columns(column);
  for (const store::SeriesPoint& p : series.points) {
    v1::TableRow* row = table.add_rows();
    *row->add_cells() = Number(static_cast<double>(p.step));
    *row->add_cells() = Number(p.value);
    *row->add_cells() = Number(p.min);
    *row->add_cells() = Number(p.max);
    *row->add_cells() = Number(static_cast<double>(p.count));
  }
  return table;
}

absl::StatusOr<v1::Table> RanksTable(ResultsReader& results, const v1::QueryTableRequest& request) {
  CART_RETURN_IF_ERROR(Require(request.metric(), "metric", request.table()));
  if (request.sweeps_size() != 2) {
    return absl::InvalidArgumentError(
        StrCat("table 'ranks' needs exactly two sweeps, got ", request.sweeps_size()));
  }
  store::StageComparisonRequest compare;
  compare.metric = request.metric();
  CART_ASSIGN_OR_RETURN(compare.field, FieldOf(request.value()));
  compare.goal = request.lower_is_better() ? store::Goal::kMin : store::Goal::kMax;
  compare.stage_a.sweeps = {request.sweeps(0)};
  compare.stage_b.sweeps = {request.sweeps(1)};
  compare.config_keys = Keys(request.group_by().empty() ? "d,R,P" : request.group_by());
  CART_ASSIGN_OR_RETURN(store::StageComparison result, results.CompareStages(compare));
  v1::Table table;
  table.set_title(StrCat(request.metric(), " ranks, ", request.sweeps(0), " vs ", request.sweeps(1),
                         ": Spearman ", result.spearman, " over ", result.rows.size(), " configs (",
                         result.only_in_a, " only in the first, ", result.only_in_b,
                         " only in the second)"));
  for (const std::string& key : result.config_keys) table.add_columns(key);
  for (const std::string& sweep : {request.sweeps(0), request.sweeps(1)}) {
    table.add_columns(StrCat(sweep, " rank"));
    table.add_columns(StrCat(sweep, " ", request.metric()));
  }
  for (const store::RankedConfig& config : result.rows) {
    v1::TableRow* row = table.add_rows();
    for (const std::string& value : config.key_values) *row->add_cells() = Text(value);
    *row->add_cells() = Number(config.rank_a);
    *row->add_cells() = Stats(config.a);
    *row->add_cells() = Number(config.rank_b);
    *row->add_cells() = Stats(config.b);
  }
  return table;
}

}  // namespace

absl::StatusOr<v1::Table> QueryTable(ResultsReader& results, const v1::QueryTableRequest& request) {
  const std::string& name = request.table();
  if (name == "pivot") return PivotTable(results, request);
  if (name == "best") return BestTable(results, request);
  if (name == "deltas") return DeltasTable(results, request);
  if (name == "series") return SeriesTable(results, request);
  if (name == "ranks") return RanksTable(results, request);
  return absl::InvalidArgumentError(
      StrCat("unknown table '", name, "' (known: pivot, best, deltas, series, ranks)"));
}

namespace {

// The same queries straight from a store: what `cart results --db` reads.
class StoreResults final : public ResultsReader {
 public:
  explicit StoreResults(store::RunStore* store) : store_(store) {}
  absl::StatusOr<store::PivotTable> Pivot(const store::PivotRequest& request) override {
    return store_->Pivot(request);
  }
  absl::StatusOr<std::vector<store::AblationRow>> Ablation(
      const store::AblationRequest& request) override {
    return store_->Ablation(request);
  }
  absl::StatusOr<store::Series> MetricSeries(const store::SeriesRequest& request) override {
    return store_->MetricSeries(request);
  }
  absl::StatusOr<store::StageComparison> CompareStages(
      const store::StageComparisonRequest& request) override {
    return store_->CompareStages(request);
  }
  absl::StatusOr<std::vector<store::RunRecord>> ListRunRecords(
      const store::RunFilter& filter) override {
    return store_->ListRuns(filter);
  }

 private:
  store::RunStore* store_;
};

}  // namespace

absl::StatusOr<v1::Table> QueryTableOverStore(store::RunStore& store,
                                              const v1::QueryTableRequest& request) {
  StoreResults results(&store);
  return QueryTable(results, request);
}

}  // namespace cart::report
