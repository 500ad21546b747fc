// The results layer (store/results.h): the pure statistics, and the RunStore queries behind the
// paper's tables. Every table is read from run_summaries, never from the metrics table, except a
// run's series.

#include "store/results.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "common/status.h"
#include "common/strings.h"
#include "common/student_t.h"
#include "store/internal/records.h"
#include "store/internal/writer.h"
#include "store/run_store.h"

namespace cart::store {

using internal::Database;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Fragments of the metric-rows query (FetchMetricRows); every value, key path included, is a
// bound parameter.
constexpr char kRowsSelectFinal[] = "SELECT r.id, s.final_value";
constexpr char kRowsSelectLatest[] = "SELECT r.id, s.latest_value";
constexpr char kRowsFrom[] =
    " FROM runs AS r JOIN run_summaries AS s ON s.run_id = r.id AND s.name_id = ?";
constexpr char kRowsKeyColumn[] = ", json_extract(r.params_json, ?)";
constexpr char kRowsKeyPresent[] = " AND json_type(r.params_json, ?) IS NOT NULL";
constexpr char kRowsWhereFinal[] = " WHERE s.final_step IS NOT NULL";
constexpr char kRowsWhereLatest[] = " WHERE 1 = 1";
constexpr char kRowsOrder[] = " ORDER BY r.id";
constexpr char kSelectKeyExists[] =
    "SELECT 1 FROM runs WHERE json_type(params_json, ?) IS NOT NULL LIMIT 1";
// One aggregate each, so that SQLite answers both from the primary key with one seek instead of
// reading every point of the range (as `count(*), min(step), max(step)` together would).
constexpr char kSelectSeriesFirst[] =
    "SELECT min(step) FROM metrics WHERE run_id = ? AND name_id = ? AND step BETWEEN ? AND ?";
constexpr char kSelectSeriesLast[] =
    "SELECT max(step) FROM metrics WHERE run_id = ? AND name_id = ? AND step BETWEEN ? AND ?";
constexpr char kSelectSeriesAll[] =
    "SELECT step, value, wall_time_us FROM metrics "
    "WHERE run_id = ? AND name_id = ? AND step BETWEEN ? AND ? ORDER BY step";

struct MetricRow {
  int64_t run_id;
  double value;
  std::vector<std::string> keys;  // values of the requested config keys
};

// The summary value of `name_id` for every run matching `filter` that has all of `keys`.
absl::StatusOr<std::vector<MetricRow>> FetchMetricRows(Database& db, const RunFilter& filter,
                                                       int64_t name_id, SummaryField field,
                                                       const std::vector<std::string>& keys) {
  const bool final = field == SummaryField::kFinal;
  std::string sql = final ? kRowsSelectFinal : kRowsSelectLatest;
  for (size_t i = 0; i < keys.size(); ++i) sql += kRowsKeyColumn;
  sql += kRowsFrom;
  sql += final ? kRowsWhereFinal : kRowsWhereLatest;
  for (size_t i = 0; i < keys.size(); ++i) sql += kRowsKeyPresent;
  CART_ASSIGN_OR_RETURN(const internal::FilterSql where, internal::BuildFilterSql(filter));
  sql += where.conditions;
  sql += kRowsOrder;

  // Parameters in the order they appear: key paths (columns), metric, key paths (presence),
  // the filter's.
  std::vector<std::string> paths;
  for (const std::string& key : keys) paths.push_back(internal::JsonPath(key));
  CART_ASSIGN_OR_RETURN(auto select, db.Prepare(sql));
  int index = 1;
  for (const std::string& path : paths) select->BindText(index++, path);
  select->BindInt64(index++, name_id);
  for (const std::string& path : paths) select->BindText(index++, path);
  for (const std::string& bind : where.binds) select->BindText(index++, bind);
  std::vector<MetricRow> rows;
  CART_RETURN_IF_ERROR(select->ForEachRow([&](const auto& cur) -> absl::Status {
    MetricRow row{cur.ColumnInt64(0), cur.ColumnDouble(1), {}};
    for (size_t i = 0; i < keys.size(); ++i) {
      row.keys.push_back(cur.ColumnText(static_cast<int>(i + 2)));
    }
    rows.push_back(std::move(row));
    return absl::OkStatus();
  }));
  return rows;
}

absl::StatusOr<int64_t> RequireMetric(Database& db, const std::string& metric) {
  if (metric.empty()) return absl::InvalidArgumentError("metric name is empty");
  CART_ASSIGN_OR_RETURN(std::optional<int64_t> id, internal::FindMetricId(db, metric));
  if (!id) return absl::NotFoundError(StrCat("no metric named '", metric, "' has been logged"));
  return *id;
}

// NotFound naming the first of `keys` that no run has: called when a query matched nothing, to
// tell a misspelt key from an empty selection.
absl::Status CheckKeysExist(Database& db, const std::vector<std::string>& keys) {
  for (const std::string& key : keys) {
    CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectKeyExists));
    select->BindAll(internal::JsonPath(key));
    CART_ASSIGN_OR_RETURN(bool row, select->Step());
    if (!row) return absl::NotFoundError(StrCat("no run has config key '", key, "'"));
  }
  return absl::OkStatus();
}

size_t IndexOf(const std::vector<std::string>& values, const std::string& v) {
  return static_cast<size_t>(std::find(values.begin(), values.end(), v) - values.begin());
}

// Whether a is strictly better than b under goal; NaN is never better.
bool Better(double a, double b, Goal goal) {
  if (std::isnan(a)) return false;
  if (std::isnan(b)) return true;
  return goal == Goal::kMin ? a < b : a > b;
}

absl::Status ValidateFilterKeys(const RunFilter& filter) {
  for (const auto& [key, value] : filter.params) {
    if (key.empty()) return absl::InvalidArgumentError("run filter has an empty config key");
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> SortedValues(const std::set<std::string>& values) {
  std::vector<std::string> out(values.begin(), values.end());
  const bool numeric = std::all_of(out.begin(), out.end(),
                                   [](const std::string& v) { return ParseDouble(v).has_value(); });
  if (numeric) {
    std::stable_sort(out.begin(), out.end(), [](const std::string& a, const std::string& b) {
      return *ParseDouble(a) < *ParseDouble(b);
    });
  }
  return out;
}

CellStats Summarize(const std::vector<double>& values) {
  const cart::stats::SampleMean m = cart::stats::MeanOf(values);
  CellStats stats;
  stats.n = m.n;
  if (values.empty()) return stats;
  stats.mean = m.mean;
  // One run has no spread to show: 0. A diverged run: NaN, as its mean.
  stats.std = std::isnan(m.mean) ? kNaN : m.n < 2 ? 0 : m.std;
  stats.ci_low = m.low;
  stats.ci_high = m.high;
  return stats;
}

std::vector<CurvePoint> SeedMeanCurve(const std::vector<std::vector<StepValue>>& runs,
                                      int64_t bins) {
  if (bins < 1) return {};
  int64_t last = 0;
  for (const std::vector<StepValue>& run : runs) {
    for (const StepValue& p : run) last = std::max(last, p.step);
  }
  const auto bin_of = [&](int64_t step) {
    return std::clamp<int64_t>(step * bins / (last + 1), 0, bins - 1);
  };
  std::vector<std::vector<double>> values(bins);  // [bin] -> one value per run
  std::vector<int64_t> step(bins, -1);
  std::vector<double> sum(bins);
  std::vector<int64_t> count(bins);
  for (const std::vector<StepValue>& run : runs) {
    std::fill(sum.begin(), sum.end(), 0.0);
    std::fill(count.begin(), count.end(), 0);
    for (const StepValue& p : run) {
      const int64_t b = bin_of(p.step);
      sum[b] += p.value;
      ++count[b];
      step[b] = std::max(step[b], p.step);
    }
    for (int64_t b = 0; b < bins; ++b) {
      if (count[b] > 0) values[b].push_back(sum[b] / static_cast<double>(count[b]));
    }
  }
  std::vector<CurvePoint> curve;
  for (int64_t b = 0; b < bins; ++b) {
    if (values[b].empty()) continue;
    CurvePoint point;
    point.step = step[b];
    point.stats = Summarize(values[b]);
    // min_element and max_element over a NaN would depend on where it sits.
    const bool diverged = std::isnan(point.stats.mean);
    const auto [lo, hi] = std::minmax_element(values[b].begin(), values[b].end());
    point.min = diverged ? kNaN : *lo;
    point.max = diverged ? kNaN : *hi;
    curve.push_back(point);
  }
  return curve;
}

std::vector<double> Ranks(const std::vector<double>& values, Goal goal) {
  std::vector<size_t> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return Better(values[a], values[b], goal); });
  std::vector<double> ranks(values.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i + 1;
    // A tie: neither is better than the other (NaNs tie with each other).
    while (j < order.size() && !Better(values[order[i]], values[order[j]], goal) &&
           !Better(values[order[j]], values[order[i]], goal)) {
      ++j;
    }
    const double shared = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2.0;
    for (size_t k = i; k < j; ++k) ranks[order[k]] = shared;
    i = j;
  }
  return ranks;
}

double RankCorrelation(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size() || a.size() < 2) return kNaN;
  const double n = static_cast<double>(a.size());
  const double mean_a = std::accumulate(a.begin(), a.end(), 0.0) / n;
  const double mean_b = std::accumulate(b.begin(), b.end(), 0.0) / n;
  double cov = 0, var_a = 0, var_b = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    cov += (a[i] - mean_a) * (b[i] - mean_b);
    var_a += (a[i] - mean_a) * (a[i] - mean_a);
    var_b += (b[i] - mean_b) * (b[i] - mean_b);
  }
  if (var_a == 0 || var_b == 0) return kNaN;
  return cov / std::sqrt(var_a * var_b);
}

std::vector<BestCell> BestPerRow(const PivotTable& table, Goal goal) {
  std::vector<BestCell> out;
  for (size_t r = 0; r < table.row_values.size(); ++r) {
    std::optional<size_t> best;
    for (size_t c = 0; c < table.col_values.size(); ++c) {
      const CellStats& cell = table.cells[r][c];
      if (cell.n == 0 || std::isnan(cell.mean)) continue;
      if (!best || Better(cell.mean, table.cells[r][*best].mean, goal)) best = c;
    }
    if (best) {
      out.push_back(BestCell{table.row_values[r], table.col_values[*best], table.cells[r][*best]});
    }
  }
  return out;
}

absl::StatusOr<PivotTable> RunStore::Pivot(const PivotRequest& request) {
  if (request.row_key.empty() || request.col_key.empty()) {
    return absl::InvalidArgumentError("pivot needs a row key and a column key");
  }
  if (request.row_key == request.col_key) {
    return absl::InvalidArgumentError(
        StrCat("pivot row and column key are both '", request.row_key, "'"));
  }
  CART_RETURN_IF_ERROR(ValidateFilterKeys(request.filter));
  return internal::ReadSnapshot<PivotTable>(
      *readers_, [&](Database& db) -> absl::StatusOr<PivotTable> {
        CART_ASSIGN_OR_RETURN(int64_t name_id, RequireMetric(db, request.metric));
        CART_ASSIGN_OR_RETURN(std::vector<MetricRow> rows,
                              FetchMetricRows(db, request.filter, name_id, request.field,
                                              {request.row_key, request.col_key}));
        if (rows.empty())
          CART_RETURN_IF_ERROR(CheckKeysExist(db, {request.row_key, request.col_key}));
        std::set<std::string> row_set, col_set;
        std::map<std::pair<std::string, std::string>, std::vector<double>> groups;
        for (const MetricRow& row : rows) {
          row_set.insert(row.keys[0]);
          col_set.insert(row.keys[1]);
          groups[{row.keys[0], row.keys[1]}].push_back(row.value);
        }
        PivotTable table;
        table.metric = request.metric;
        table.row_key = request.row_key;
        table.col_key = request.col_key;
        table.field = request.field;
        table.row_values = SortedValues(row_set);
        table.col_values = SortedValues(col_set);
        table.cells.assign(table.row_values.size(),
                           std::vector<CellStats>(table.col_values.size()));
        for (const auto& [key, values] : groups) {
          table.cells[IndexOf(table.row_values, key.first)][IndexOf(table.col_values, key.second)] =
              Summarize(values);
        }
        return table;
      });
}

absl::StatusOr<std::vector<AblationRow>> RunStore::Ablation(const AblationRequest& request) {
  std::set<std::string> labels;
  for (const RunGroup& group : request.groups) {
    if (group.label.empty()) return absl::InvalidArgumentError("ablation group without a label");
    if (!labels.insert(group.label).second) {
      return absl::InvalidArgumentError(
          StrCat("two ablation groups are labelled '", group.label, "'"));
    }
    CART_RETURN_IF_ERROR(ValidateFilterKeys(group.filter));
  }
  if (!labels.count(request.baseline)) {
    return absl::InvalidArgumentError(
        StrCat("baseline '", request.baseline, "' is not one of the ablation groups"));
  }
  using Out = std::vector<AblationRow>;
  return internal::ReadSnapshot<Out>(*readers_, [&](Database& db) -> absl::StatusOr<Out> {
    CART_ASSIGN_OR_RETURN(int64_t name_id, RequireMetric(db, request.metric));
    Out out;
    const AblationRow* baseline = nullptr;
    for (const RunGroup& group : request.groups) {
      CART_ASSIGN_OR_RETURN(std::vector<MetricRow> rows,
                            FetchMetricRows(db, group.filter, name_id, request.field, {}));
      std::vector<double> values;
      for (const MetricRow& row : rows) values.push_back(row.value);
      AblationRow row;
      row.label = group.label;
      row.stats = Summarize(values);
      row.is_baseline = group.label == request.baseline;
      out.push_back(std::move(row));
    }
    for (const AblationRow& row : out) {
      if (row.is_baseline) baseline = &row;
    }
    if (baseline->stats.n == 0) {
      return absl::FailedPreconditionError(StrCat("baseline group '", request.baseline,
                                                  "' matches no run with a value of '",
                                                  request.metric, "'"));
    }
    const double base = baseline->stats.mean;
    for (AblationRow& row : out) {
      row.delta = row.stats.n == 0 ? kNaN : row.stats.mean - base;
      row.relative_delta = row.delta / base;
    }
    return out;
  });
}

absl::StatusOr<Series> RunStore::MetricSeries(const SeriesRequest& request) {
  if (request.max_points < 0) {
    return absl::InvalidArgumentError(
        StrCat("series max_points must be >= 0, got ", request.max_points));
  }
  const int64_t from = request.from_step.value_or(0);
  const int64_t to = request.to_step.value_or(std::numeric_limits<int64_t>::max());
  if (from > to) {
    return absl::InvalidArgumentError(StrCat("series step range ", from, "..", to, " is empty"));
  }
  return internal::ReadSnapshot<Series>(*readers_, [&](Database& db) -> absl::StatusOr<Series> {
    CART_RETURN_IF_ERROR(internal::RequireRun(db, request.run_id));
    CART_ASSIGN_OR_RETURN(int64_t name_id, RequireMetric(db, request.metric));
    Series series;
    series.run_id = request.run_id;
    series.metric = request.metric;
    CART_ASSIGN_OR_RETURN(series.summary,
                          internal::LoadSummary(db, request.run_id, name_id, request.metric));
    // The range's ends by two index seeks; its points are then read once, in step order, and
    // averaged into buckets here: SQLite would sort them to group by a computed bucket (a
    // GROUP BY over an expression), which costs several times the read itself.
    auto end_step = [&](const char* sql) -> absl::StatusOr<std::optional<int64_t>> {
      CART_ASSIGN_OR_RETURN(auto query, db.Cached(sql));
      query->BindAll(request.run_id, name_id, from, to);
      CART_ASSIGN_OR_RETURN(bool row, query->Step());
      if (!row) return absl::InternalError("min/max returned no row");
      if (query->ColumnIsNull(0)) return std::optional<int64_t>();
      return std::optional<int64_t>(query->ColumnInt64(0));
    };
    CART_ASSIGN_OR_RETURN(std::optional<int64_t> first, end_step(kSelectSeriesFirst));
    if (!first) return series;  // no point in the range
    CART_ASSIGN_OR_RETURN(std::optional<int64_t> last, end_step(kSelectSeriesLast));
    const int64_t span = *last - *first + 1;
    const int64_t buckets = request.max_points;
    // Every point, as long as there are no more than max_points of them (0: no limit). A sparse
    // series (evaluations every 500 steps and one at step 1) can span more steps than max_points
    // and still have fewer points: those come back one by one, even where two share a bucket.
    std::vector<SeriesPoint> points;
    // Buckets of equal step width: bucket = (step - first) * max_points / span. `sum` adds the
    // values that are not NULL (as SQL's avg does) and `present` counts them; a bucket with none
    // stays NaN.
    struct Bucket {
      int64_t index;
      SeriesPoint point;
      double sum = 0;
      int64_t present = 0;
    };
    std::vector<Bucket> bucketed;
    CART_ASSIGN_OR_RETURN(auto select, db.Cached(kSelectSeriesAll));
    select->BindAll(request.run_id, name_id, from, to);
    CART_RETURN_IF_ERROR(select->ForEachRow([&](const auto& cur) -> absl::Status {
      const int64_t step = cur.ColumnInt64(0);
      // SQLite stores a NaN (a diverged loss) as NULL; ColumnDouble reads it back as NaN.
      const bool null = cur.ColumnIsNull(1);
      const double v = cur.ColumnDouble(1);
      const int64_t wall = cur.ColumnInt64(2);
      ++series.total_points;
      if (buckets == 0 || series.total_points <= buckets) {
        points.push_back(SeriesPoint{step, v, v, v, 1, wall});
      }
      if (buckets == 0 || span <= buckets) return absl::OkStatus();
      // In 128 bits: a span of 10^15 steps times 20,000 buckets overflows 64.
      const auto index =
          static_cast<int64_t>(static_cast<__int128>(step - *first) * buckets / span);
      if (bucketed.empty() || bucketed.back().index != index) {
        bucketed.push_back(Bucket{index, SeriesPoint{step, kNaN, kNaN, kNaN, 0, wall}});
      }
      Bucket& b = bucketed.back();
      b.point.step = step;
      b.point.wall_time_us = std::max(b.point.wall_time_us, wall);
      ++b.point.count;
      if (!null) {
        b.point.min = b.present == 0 ? v : std::min(b.point.min, v);
        b.point.max = b.present == 0 ? v : std::max(b.point.max, v);
        b.sum += v;
        ++b.present;
      }
      return absl::OkStatus();
    }));
    if (buckets == 0 || series.total_points <= buckets) {
      series.points = std::move(points);
      return series;
    }
    for (Bucket& b : bucketed) {
      if (b.present > 0) b.point.value = b.sum / static_cast<double>(b.present);
      series.points.push_back(b.point);
    }
    return series;
  });
}

absl::StatusOr<StageComparison> RunStore::CompareStages(const StageComparisonRequest& request) {
  if (request.config_keys.empty()) {
    return absl::InvalidArgumentError("stage comparison needs at least one config key");
  }
  CART_RETURN_IF_ERROR(ValidateFilterKeys(request.stage_a));
  CART_RETURN_IF_ERROR(ValidateFilterKeys(request.stage_b));
  using Groups = std::map<std::vector<std::string>, std::vector<double>>;
  return internal::ReadSnapshot<StageComparison>(
      *readers_, [&](Database& db) -> absl::StatusOr<StageComparison> {
        CART_ASSIGN_OR_RETURN(int64_t name_id, RequireMetric(db, request.metric));
        auto fetch = [&](const RunFilter& filter, Groups& groups) -> absl::Status {
          CART_ASSIGN_OR_RETURN(
              std::vector<MetricRow> rows,
              FetchMetricRows(db, filter, name_id, request.field, request.config_keys));
          for (MetricRow& row : rows) groups[std::move(row.keys)].push_back(row.value);
          return absl::OkStatus();
        };
        Groups a, b;
        CART_RETURN_IF_ERROR(fetch(request.stage_a, a));
        CART_RETURN_IF_ERROR(fetch(request.stage_b, b));
        if (a.empty() && b.empty()) CART_RETURN_IF_ERROR(CheckKeysExist(db, request.config_keys));
        StageComparison out;
        out.config_keys = request.config_keys;
        std::vector<double> means_a, means_b;
        for (const auto& [keys, values] : a) {
          auto it = b.find(keys);
          if (it == b.end()) {
            ++out.only_in_a;
            continue;
          }
          RankedConfig row;
          row.key_values = keys;
          row.a = Summarize(values);
          row.b = Summarize(it->second);
          means_a.push_back(row.a.mean);
          means_b.push_back(row.b.mean);
          out.rows.push_back(std::move(row));
        }
        out.only_in_b = static_cast<int64_t>(b.size() - out.rows.size());
        const std::vector<double> ranks_a = Ranks(means_a, request.goal);
        const std::vector<double> ranks_b = Ranks(means_b, request.goal);
        for (size_t i = 0; i < out.rows.size(); ++i) {
          out.rows[i].rank_a = ranks_a[i];
          out.rows[i].rank_b = ranks_b[i];
        }
        out.spearman = RankCorrelation(ranks_a, ranks_b);
        std::stable_sort(
            out.rows.begin(), out.rows.end(),
            [](const RankedConfig& x, const RankedConfig& y) { return x.rank_a < y.rank_a; });
        return out;
      });
}

}  // namespace cart::store
