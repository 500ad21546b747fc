#pragma once

// `cart report`: the paper's tables, built from a results database alone, each beside the
// paper's published figure and the difference, with a CSV per table and plots drawn by gnuplot.
//
// The study is a set of sweeps, one per part of the paper (ReportOptions::sweeps names them;
// by default the names of the files in sweeps/paper/). A part whose sweep has no runs, or whose
// runs have not finished, says so: a cell is filled only from finished (SUCCEEDED) runs, and
// shows how many of its runs that is. See docs/study.md for what each table answers.
//
// No Torch, no gRPC: the runs come through a StudySource (the store directly, or cartd over
// gRPC, which cli/ implements).

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/job_kind.h"
#include "store/results.h"
#include "store/spending.h"

namespace cart::store {
class RunStore;
}  // namespace cart::store

namespace cart::report {

// One run as the report sees it.
struct StudyRun {
  int64_t id = 0;
  std::string sweep;
  std::string name;  // "<sweep>/<index>"
  JobKind kind = JobKind::kTrain;
  bool finished = false;                      // SUCCEEDED
  std::string state;                          // "SUCCEEDED", "RUNNING", …
  std::map<std::string, std::string> params;  // config keys
  std::map<std::string, double> values;       // latest value of each metric
  int64_t step = 0;                           // latest step with a metric
  int64_t total_steps = 0;
  int64_t stored_params = 0;
  // The card models its kept attempts trained on (docs/architecture.md "Device classes"),
  // first first; empty: not known (a store from before device classes).
  std::vector<std::string> device_classes;
  // What its attempts used (store/spending.h): device-hours, and energy where a counter measured
  // it; no attempts: nothing yet.
  store::Spending spending;
};

// One point of a run's metric series.
using StudyPoint = store::StepValue;

// One look of a claim's group-sequential design, as a seed plan recorded it when `cart plan
// --apply` queued seeds for the claim (store::PlanClaim; docs/study.md "Planning seeds").
struct ClaimLook {
  std::string claim;
  int64_t plan_id = 0;
  int64_t seeds_now = 0;     // per side, when planned
  int64_t seeds_target = 0;  // per side, planned
  double alpha = 0.05;
  std::string spending = "obrien-fleming";  // or "pocock"
  std::vector<int64_t> run_ids;             // the runs the plan queued (those not deleted)
  // Of those, the ones the report found queued, blocked or training (BuildReport fills it in):
  // while some are, the claim awaits them; once none is, it may be planned again.
  int64_t pending = 0;
};

// Where a claim stands in its group-sequential design: the look it is at, the level spent so far
// and the boundary of this look (docs/study.md "Planning seeds"). Only claims a plan was applied
// to have one; the others are decided as a fixed design.
struct SequentialStatus {
  bool sequential = false;
  int look = 0;                     // 1-based: the plans' looks, then this one when it is new
  std::vector<int64_t> look_seeds;  // seeds per side at each look so far, this one last
  int64_t seeds_target = 0;         // the planned seeds (the last plan's, or more when passed)
  double fraction = 0;              // information at this look: seeds / target
  double alpha = 0;                 // the claim's family-wise level
  double alpha_spent = 0;           // the level spent by this look, all looks together
  double boundary = 0;              // |Z| a test must reach at this look (the strictest step)
  double nominal = 0;               // that boundary as a two-sided p
  bool crossed = false;             // a test of the claim was decided at this look
  // The chance that the planned seeds decide the claim, given the seeds so far and the paper's
  // effect (the least over its tests that cannot tell); NaN: not computable (no paper effect,
  // no spread, or the last look).
  double conditional_power = 0;
  bool futile = false;  // conditional power below ReportOptions::futility_floor
  // No seed has finished since the last plan and some of its runs are still queued, blocked or
  // training (plan_id names it).
  bool awaiting = false;
  int64_t plan_id = 0;  // the last plan applied to the claim
};

// One zero-shot task's per-item outcomes at one loop count, as an evaluation job stored them
// (store::EvalItems; docs/study.md "Paired tests over items").
struct ItemOutcomes {
  std::string task;
  int loops = 0;
  std::string correct, correct_norm;  // '1' / '0' per item; correct_norm: multiple choice
  std::vector<double> logprob;        // LAMBADA: each item's target log-likelihood (nats)
};

// Where the runs come from. Sweeps that do not exist have no runs (not an error).
class StudySource {
 public:
  virtual ~StudySource() = default;
  virtual absl::StatusOr<std::vector<StudyRun>> Runs(const std::string& sweep) = 0;
  // A run's metric series by step, at most max_points (bucket means), empty when never logged.
  virtual absl::StatusOr<std::vector<StudyPoint>> Series(int64_t run_id, const std::string& metric,
                                                         int64_t max_points) = 0;
  // Every claim's looks that seed plans recorded, by plan (none by default: a source without
  // plans decides every claim as a fixed design).
  virtual absl::StatusOr<std::vector<ClaimLook>> Looks() { return std::vector<ClaimLook>{}; }
  // An evaluation run's per-item outcomes (none by default: its tests then pair runs, not items).
  virtual absl::StatusOr<std::vector<ItemOutcomes>> EvalItems(int64_t run_id) {
    return std::vector<ItemOutcomes>{};
  }
  // What the source prices energy at (cartd's config, read over gRPC); none by default.
  virtual absl::StatusOr<store::EnergyPrices> Prices() { return store::EnergyPrices{}; }
};

// Reads an open store (what `cart report --db FILE` uses; cartd's dashboard passes its prices).
std::unique_ptr<StudySource> StoreSource(store::RunStore& store, store::EnergyPrices prices = {});

// The parts of the study and the sweep that holds each.
struct StudySweeps {
  std::string stage1 = "stage1";
  std::string stage2 = "stage2";
  std::string baselines = "baselines";
  std::string ablations = "ablations";
  std::string faithfulness = "faithfulness";
  std::string leak = "leak";
  std::string variable_r = "variable_r";  // its eval runs (else stage2's own eval runs)
};

// The parts of the study in order, each with the field naming its sweep: stage1, stage2,
// baselines, ablations, faithfulness, leak, variable_r.
std::vector<std::pair<std::string, std::string*>> StudyParts(StudySweeps& sweeps);
std::vector<std::pair<std::string, const std::string*>> StudyParts(const StudySweeps& sweeps);

// Points the part `part` (stage1, stage2, baselines, ablations, faithfulness, leak, variable_r)
// at `sweep`; InvalidArgument naming the part and the parts there are for another name.
absl::Status SetStudyPart(StudySweeps& sweeps, const std::string& part, const std::string& sweep);

struct ReportOptions {
  StudySweeps sweeps;
  // The validation set the paper's perplexity tables use; empty: "wiki" when the runs have it,
  // else the first set in name order.
  std::string val_set;
  std::string out_dir;
  std::string title = "CART study report";
  // Draw plots with gnuplot (SVG and PNG). Without it only tables and CSVs are written.
  bool plots = true;
  std::string gnuplot = "gnuplot";
  bool html = false;  // also write report.html
  // The claims to decide (the form of report/claims.yaml); empty: the compiled-in ones.
  std::string claims_file;
  // A claim in a sequential design whose conditional power falls below this stops for futility
  // (the report says so and `cart plan` plans it no further); 0: never.
  double futility_floor = 0.1;
  // What energy is priced at in "What the study cost"; nullopt: the source's (cartd's config when
  // the report reads cartd, none from a database file).
  std::optional<store::EnergyPrices> prices;
};

// A table as written: header, rows of text cells, and where its published figures come from.
struct Table {
  std::string id;  // file stem of its CSV, e.g. "rho_stage2"
  std::string title;
  std::string paper_section;  // empty: no published figures beside it
  std::vector<std::string> columns;
  std::vector<std::vector<std::string>> rows;
};

// A plot's data; WriteReport draws it with gnuplot.
struct PlotSeries {
  std::string label;
  std::vector<double> x, y;
  std::vector<double> low, high;  // a band around y (min and max over seeds); empty: none
};
// The mean of a metric's series over runs on one grid of steps (store::SeedMeanCurve, at most the
// report's curve points), with the min-max band when there is more than one run. A range where a
// run's value is NaN (a diverged seed) has a NaN mean and band. A failed read sets *error and
// returns no series.
PlotSeries MeanCurve(StudySource& source, const std::vector<const StudyRun*>& runs,
                     const std::string& metric, const std::string& label, absl::Status* error);

struct Plot {
  enum class Kind { kLines, kHeatmap };
  std::string id;  // file stem: plots/ID.svg, plots/ID.png
  std::string title;
  std::string xlabel, ylabel;
  Kind kind = Kind::kLines;
  bool log_y = false;
  bool discrete_x = false;         // kLines: x takes a few values (R); tick exactly those
  std::vector<PlotSeries> series;  // kLines
  // kHeatmap: values[row][col] (NaN: no value), labelled by row and column values.
  std::vector<std::string> rows, cols;
  std::vector<std::vector<double>> values;
};

struct Section {
  std::string title;
  std::string sweep;                // the sweep it reads
  std::vector<std::string> status;  // what is missing or unfinished; empty: complete
  std::vector<Table> tables;
  std::vector<std::string> findings;  // what the numbers say, one sentence each
  std::vector<Plot> plots;
};

// One test of a claim as the planner reads it (report/plan.h; filled from report/claims.h's
// TestOutcome): in the test's own scale (log values for a log-scale test).
struct TestNumbers {
  std::string label;
  std::string kind;     // "compare", "value", "trend", "best_at"
  std::string verdict;  // "holds", "does not hold", "cannot tell"
  bool paired = false;  // a compare paired by seed (else Welch)
  bool within = false;  // a band or margin
  bool log_scale = false;
  bool confounded = false;
  bool over_items = false;  // tested over items (n: items, n2: seeds), not over runs
  double se = 0;            // the effect's standard error; NaN: fewer than two runs
  double published = 0;     // the paper's effect; NaN: none
  int64_t n = 0, n2 = 0;
  std::vector<std::map<std::string, std::string>> arms;  // each side's config, seed removed
  std::vector<int64_t> arm_runs;  // each side's first run (id): where its new seeds copy from
};

// One claim of the paper with its computed verdict (report/claims.h decides it).
struct ClaimLine {
  std::string id;
  std::string claim;
  std::string section;    // where the paper says it
  std::string published;  // what the paper measured
  std::string verdict;    // "holds", "does not hold", "cannot tell"
  std::string evidence;   // the decisive test, in one line
  // A test of it compared sides that trained on disjoint sets of card models: it cannot tell
  // (docs/architecture.md "Device classes"); device_classes names each side's, as the first
  // confounded test saw them (else the decisive test's).
  bool confounded = false;
  std::string device_classes;
  // Every test behind it, one row each: label, method, effect, low, high, unit, p, Holm p, n,
  // n2, detectable effect, published effect, verdict, note (ClaimTestColumns).
  std::vector<std::vector<std::string>> tests;
  // The same tests as numbers, for the planner (report/plan.h).
  std::vector<TestNumbers> numbers;
  SequentialStatus sequential;  // where its sequential design stands, when a plan was applied
  int64_t seeds = 0;            // seeds per side it stands on, as its looks count them (claims.h)
  // What the evidence cost: every run its tests' sides selected, in any state (a failed or
  // cancelled seed cost as much as a finished one), with their attempts' spending. A run read by
  // several claims counts in each; an evaluation counts its own job, not the training before it.
  int64_t runs = 0;
  store::Spending spending;
};

// What one part of the study cost: every run of its sweep (docs/study.md "What it cost").
struct PartCost {
  std::string part;  // "stage1", "stage2", …; parts that share a sweep are named together
  std::string sweep;
  int64_t runs = 0;
  store::Spending spending;
};

struct Report {
  std::string title;
  std::string val_set;
  // Runs whose attempts trained on more than one card model ("stage2/5: RTX 3090, then RTX
  // 3050"): CUDA does not promise equal results across models, so they are named beside the
  // claims.
  std::vector<std::string> spanning_runs;
  std::vector<ClaimLine> claims;  // in the claims file's order
  std::vector<Section> sections;
  // What the study's sweeps cost, one row per sweep that has runs (in the parts' order), and the
  // prices the figures are given at (none: energy and hours only).
  std::vector<PartCost> costs;
  store::EnergyPrices prices;
};

// A claim's look in its sequential design in words ("look 2: 6 of 12 seeds (t = 0.50); α spent
// 0.0056 of 0.05; boundary |z| ≥ 2.80 (p < 0.0051): not crossed; …"), as report.md gives it.
std::string LookText(const SequentialStatus& s);

// The columns of ClaimLine::tests (claim_tests.csv, after the claim's id).
const std::vector<std::string>& ClaimTestColumns();

// Builds every section from the source and decides the claims. Errors when the source fails, and
// InvalidArgument (file, line, field) when options.claims_file cannot be read or parsed.
absl::StatusOr<Report> BuildReport(StudySource& source, const ReportOptions& options);

// Writes out_dir/report.md (and report.html with options.html), which open with the claims and
// their verdicts; out_dir/claims.md (that table alone), claims.csv (a row per claim) and
// claim_tests.csv (a row per test); out_dir/tables/ID.csv for every table and, with options.plots,
// out_dir/plots/ID.{svg,png} (the data and gnuplot script beside them). FailedPrecondition names a
// missing gnuplot and what to install; Internal carries gnuplot's own error; report.md, report.html
// and the CSVs are written before the plots.
absl::Status WriteReport(const Report& report, const ReportOptions& options);

// The published figures (report/paper_figures.yaml): table id -> section and cells.
struct PaperTable {
  std::string section;
  std::map<std::string, double> cells;  // "ROW/COL" or a label
};
const std::map<std::string, PaperTable>& PaperFigures();

// Formatting shared with the tests: "0.8123 ± 0.0052 (n = 3)", the half-width of the cell's 95 %
// Student-t interval (store::CellStats; only when n > 1), "—" when n == 0.
std::string FormatStats(const store::CellStats& stats, int precision);

}  // namespace cart::report
