#pragma once

// The results layer: the paper's tables as structured rows, read from run_summaries (one row per
// run and metric) so they answer in milliseconds over any number of metric points. The CLI
// (`cart results`) and the dashboard format these; nothing here prints.
//
// Requests are run by RunStore (Pivot, Ablation, Series, CompareStages); the pure functions at the
// bottom work on their results.

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "store/types.h"

namespace cart::store {

// Which runs a query reads. Every non-empty field narrows the set (AND); an empty filter is every
// run in the database.
struct RunFilter {
  std::vector<std::string> sweeps;            // sweep names; a run in any of them
  std::map<std::string, std::string> params;  // config key -> value, compared as text
  std::vector<RunState> states;               // any of these states
  std::vector<JobKind> kinds;                 // any of these job kinds (results: kTrain)
  std::vector<std::string> tags;              // runs carrying every one of these tags
};

enum class SummaryField {
  kFinal,   // the value at the run's last step, fixed when it succeeded (unfinished runs excluded)
  kLatest,  // the value at the highest step logged so far (any run with the metric)
};

// Whether smaller or larger values of a metric are better (perplexity: kMin; accuracy, ρ: kMax).
enum class Goal { kMin, kMax };

// Mean, sample standard deviation, the mean's 95 % confidence interval and count over the runs
// in one cell (typically one per seed). std is 0 when n < 2. The interval is Student's t over the
// n runs (mean ± t(0.975, n - 1) std / sqrt(n)), NaN when n < 2. A NaN value (a diverged run)
// makes mean, std and the interval NaN. Every view of a mean over seeds shows this interval: the
// dashboard, `cart results` and `cart report`.
struct CellStats {
  double mean = 0;
  double std = 0;
  double ci_low = std::numeric_limits<double>::quiet_NaN();
  double ci_high = std::numeric_limits<double>::quiet_NaN();
  int64_t n = 0;  // 0: no run in this cell
};

// --- Pivot: a metric by two config keys (ρ by d × R, wiki perplexity by d × R).
struct PivotRequest {
  RunFilter filter;
  std::string metric;   // e.g. "rho", "val/wiki/ppl"
  std::string row_key;  // a config key, e.g. "d"
  std::string col_key;  // a config key, e.g. "R"
  SummaryField field = SummaryField::kFinal;
};

struct PivotTable {
  std::string metric;
  std::string row_key;
  std::string col_key;
  SummaryField field = SummaryField::kFinal;
  // Distinct values seen, in numeric order when every value is a number, else in text order.
  std::vector<std::string> row_values;
  std::vector<std::string> col_values;
  std::vector<std::vector<CellStats>> cells;  // [row][col]; n == 0 where no run matched
};

// --- Ablation deltas: named run groups against a named baseline group.
struct RunGroup {
  std::string label;  // unique within a request, e.g. "recompute KV"
  RunFilter filter;
};

struct AblationRequest {
  std::string metric;
  SummaryField field = SummaryField::kFinal;
  std::vector<RunGroup> groups;  // includes the baseline
  std::string baseline;          // label of one of `groups`
};

struct AblationRow {
  std::string label;
  CellStats stats;
  double delta = 0;           // stats.mean - baseline mean (0 for the baseline itself)
  double relative_delta = 0;  // delta / baseline mean
  bool is_baseline = false;
};

// --- A run's metric series, downsampled for plots.
struct SeriesRequest {
  int64_t run_id = 0;
  std::string metric;
  // At most this many points; above it, steps are split into max_points equal step ranges and
  // each range gives one point (mean, min, max). 0: every point.
  int64_t max_points = 1000;
  std::optional<int64_t> from_step;  // inclusive
  std::optional<int64_t> to_step;    // inclusive
};

struct SeriesPoint {
  int64_t step = 0;  // last step in the bucket (the step itself when count == 1)
  double value = 0;  // mean over the bucket
  double min = 0;
  double max = 0;
  int64_t count = 0;         // points in the bucket
  int64_t wall_time_us = 0;  // latest wall time in the bucket
};

struct Series {
  int64_t run_id = 0;
  std::string metric;
  std::vector<SeriesPoint> points;  // by step
  int64_t total_points = 0;         // points in the step range before downsampling
  // The run's summary of this metric, read in the same snapshot as the points.
  std::optional<MetricSummary> summary;
};

// --- Stage-vs-stage rank comparison: does the ranking of configs at a short budget (stage 1)
// survive at a long one (stage 2)?
struct StageComparisonRequest {
  std::string metric;
  SummaryField field = SummaryField::kFinal;
  Goal goal = Goal::kMin;
  RunFilter stage_a;
  RunFilter stage_b;
  std::vector<std::string> config_keys;  // what identifies a config across stages, e.g. d, R, P
};

struct RankedConfig {
  std::vector<std::string> key_values;  // in the order of config_keys
  CellStats a;
  CellStats b;
  double rank_a = 0;  // 1 = best; ties share the mean of their ranks
  double rank_b = 0;
};

struct StageComparison {
  std::vector<std::string> config_keys;
  std::vector<RankedConfig> rows;  // configs present in both stages, by rank_a then key values
  int64_t only_in_a = 0;           // configs of stage A with no match in stage B
  int64_t only_in_b = 0;
  double spearman = 0;  // rank correlation over `rows`; NaN with fewer than 2 rows
};

// The best cell of each row of a pivot (e.g. the best R for each d); rows without any run are
// skipped. Cells with a NaN mean never win.
struct BestCell {
  std::string row_value;
  std::string col_value;
  CellStats stats;
};
std::vector<BestCell> BestPerRow(const PivotTable& table, Goal goal);

// Config values in numeric order when every one is a number ("256" < "1024"), else in text order.
std::vector<std::string> SortedValues(const std::set<std::string>& values);

// Mean, sample std, 95 % interval and count of `values`.
CellStats Summarize(const std::vector<double>& values);

// --- One seed-averaged curve: a metric over several runs (seeds) on one grid of steps. The
// dashboard's group curves and `cart report`'s plots both draw it.
struct StepValue {
  int64_t step = 0;
  double value = 0;
};
struct CurvePoint {
  int64_t step = 0;  // the last step any run reported in this range
  CellStats stats;   // over the runs with a point in the range (Summarize)
  double min = 0;    // the smallest and largest run; NaN where the mean is NaN
  double max = 0;
};
// Steps 0 .. the last step any run reached are cut into `bins` equal ranges; a run's points in
// one range are averaged, and each range with at least one run's point gives a CurvePoint, in
// step order. A run's NaN in a range (a diverged seed) makes its value there NaN, and so the
// range's mean, interval, min and max. Fewer logged steps than bins: one point per step.
std::vector<CurvePoint> SeedMeanCurve(const std::vector<std::vector<StepValue>>& runs,
                                      int64_t bins);

// Ranks 1..n of `values` (1 = best under `goal`), ties sharing the mean of their ranks.
std::vector<double> Ranks(const std::vector<double>& values, Goal goal);

// Pearson correlation of two rank vectors of equal length (Spearman's ρ when given ranks); NaN
// when there are fewer than 2 elements or either side is constant.
double RankCorrelation(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace cart::store
