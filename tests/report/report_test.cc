// The report over a real database with known values: tables, mean ± 95 % CI over seeds, unfinished
// cells and missing parts shown as such, CSVs equal to the tables, plots drawn as SVG and PNG.

#include "report/report.h"

#include <filesystem>
#include <fstream>

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/store/store_fixture.h"
#include "tests/support/test_support.h"

namespace cart::report {
namespace {

using ::cart::store::AttemptOutcome;
using ::cart::store::MetricPoint;
using ::cart::store::RunRecord;
using ::cart::store::testing::FinishAllQueued;
using ::cart::store::testing::kT0;
using ::cart::store::testing::MakeRun;
using ::cart::store::testing::MakeSweep;
using ::cart::store::testing::OpenStore;
using ::cart::store::testing::PointsAt;
using ::cart::testing::ReadFile;
using ::cart::testing::StatusIs;
using ::cart::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

int64_t IntParam(const RunRecord& r, const char* key) {
  return ParseInt64(r.params.at(key)).value_or(-1);
}

// ρ of a stage-2 run: 0.80, +0.01 at d = 512, +0.0005 per loop, +0.02 for seed 2.
double Rho(const RunRecord& r) {
  return 0.80 + (IntParam(r, "d") == 512 ? 0.01 : 0.0) + 0.0005 * IntParam(r, "R") +
         (IntParam(r, "seed") == 2 ? 0.02 : 0.0);
}
double Ppl(const RunRecord& r) {
  return 40.0 - (IntParam(r, "d") == 512 ? 10.0 : 0.0) + 0.1 * IntParam(r, "R") +
         (IntParam(r, "seed") == 2 ? 1.0 : 0.0);
}

class ReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = OpenStore(dir_.File("cart.db"));
    std::vector<store::NewRun> runs;
    for (int d : {256, 512}) {
      for (int r : {6, 8}) {
        for (int seed : {1, 2}) {
          runs.push_back(
              MakeRun(StrCat(runs.size()),
                      {{"d", StrCat(d)}, {"R", StrCat(r)}, {"P", "6"}, {"seed", StrCat(seed)}}));
        }
      }
    }
    ASSERT_TRUE(store_->CreateSweep(MakeSweep("stage2", runs), store::Audit{1, "t", "t"}).ok());
    std::vector<store::NewRun> leak;
    for (const char* causal : {"on", "off"}) {  // booleans are stored as on/off
      leak.push_back(MakeRun(StrCat(leak.size()), {{"cross_causal", causal}, {"R", "2"}}));
    }
    ASSERT_TRUE(store_->CreateSweep(MakeSweep("leak", leak), store::Audit{1, "t", "t"}).ok());
    FinishAllQueued(
        *store_,
        [](const RunRecord& r) {
          std::vector<MetricPoint> p;
          if (r.params.count("cross_causal")) {
            const bool causal = r.params.at("cross_causal") == "on";
            p = PointsAt(10, {{"loss", 2.5}});
            auto last = PointsAt(20, {{"loss", causal ? 1.2 : 0.3},
                                      {"val_loss/synth", causal ? 1.15 : 0.40},
                                      {"val_ppl/synth", causal ? 3.16 : 1.49},
                                      {"entropy_floor/synth", 1.067}});
            p.insert(p.end(), last.begin(), last.end());
            return p;
          }
          p = PointsAt(10, {{"loss", 5.0}, {"rho_max", 0.9}});
          auto last = PointsAt(20, {{"loss", 4.0}, {"rho_max", Rho(r)}, {"val_ppl/wiki", Ppl(r)}});
          p.insert(p.end(), last.begin(), last.end());
          return p;
        },
        [](const RunRecord& r) -> std::optional<AttemptOutcome> {
          // d = 512, R = 8, seed 2 is still running.
          if (r.params.count("d") && r.params.at("d") == "512" && r.params.count("R") &&
              r.params.at("R") == "8" && r.params.at("seed") == "2") {
            return std::nullopt;
          }
          return AttemptOutcome::kSucceeded;
        });
  }

  const Table* FindTable(const Report& report, const std::string& id) {
    for (const Section& s : report.sections) {
      for (const Table& t : s.tables) {
        if (t.id == id) return &t;
      }
    }
    return nullptr;
  }

  TempDir dir_;
  std::unique_ptr<store::RunStore> store_;
};

TEST_F(ReportTest, TablesShowMeanAndStdOverSeedsBesideThePublishedFigures) {
  std::unique_ptr<StudySource> source = StoreSource(*store_);
  ReportOptions options;
  options.out_dir = dir_.File("report");
  CART_ASSERT_OK_AND_ASSIGN(Report report, BuildReport(*source, options));
  EXPECT_EQ(report.val_set, "wiki");
  const Table* rho = FindTable(report, "rho_stage2");
  ASSERT_NE(rho, nullptr);
  ASSERT_EQ(rho->rows.size(), 2u);  // d = 256, 512
  EXPECT_EQ(rho->columns, (std::vector<std::string>{"d \\ R", "R=6", "R=8"}));
  // d = 256, R = 6: seeds give 0.803 and 0.823 -> mean 0.8130, sample std 0.0141, and the 95 %
  // interval's half-width t(0.975, 1) × 0.0141 / √2 = 12.706 × 0.01 = 0.1271.
  EXPECT_EQ(rho->rows[0], (std::vector<std::string>{"256", "0.8130 ± 0.1271 (n = 2)",
                                                    "0.8140 ± 0.1271 (n = 2)"}));
  // d = 512, R = 8: one of two seeds finished (0.814): its value, marked incomplete.
  EXPECT_EQ(rho->rows[1][2], "0.8140 (1/2 done)");
  // Published: 0.790 at d = 256, R = 6; ours − published = +0.0230.
  const Table* paper = FindTable(report, "rho_stage2_paper");
  ASSERT_NE(paper, nullptr);
  EXPECT_THAT(paper->paper_section, HasSubstr("Stage 2"));
  EXPECT_EQ(paper->rows[0][0], "256");
  EXPECT_EQ(paper->rows[0][1], "0.7900 (+0.0230)");
  EXPECT_EQ(paper->rows[2][1], "0.8140");  // d = 768: not in this study, no difference
  const Table* ppl = FindTable(report, "wiki_ppl_stage2");
  ASSERT_NE(ppl, nullptr);
  EXPECT_EQ(ppl->rows[0][1], "41.10 ± 6.35 (n = 2)");  // 40.6 and 41.6: 12.706 × 0.5
}

TEST_F(ReportTest, MissingPartsSayWhatIsMissingAndTheLeakIsJudgedAgainstTheFloor) {
  std::unique_ptr<StudySource> source = StoreSource(*store_);
  ReportOptions options;
  options.out_dir = dir_.File("report");
  options.plots = false;
  CART_ASSERT_OK_AND_ASSIGN(Report report, BuildReport(*source, options));
  std::map<std::string, const Section*> by_sweep;
  for (const Section& s : report.sections) by_sweep[s.sweep] = &s;
  for (const char* missing : {"stage1", "baselines", "ablations", "faithfulness"}) {
    ASSERT_TRUE(by_sweep.count(missing)) << missing;
    const Section& s = *by_sweep[missing];
    ASSERT_EQ(s.status.size(), 1u) << missing;
    EXPECT_THAT(s.status[0], HasSubstr(StrCat("in sweep '", missing, "': nothing to show yet")));
    EXPECT_TRUE(s.tables.empty()) << missing;  // nothing filled in
  }
  const Section& stage2 = *by_sweep["stage2"];
  ASSERT_EQ(stage2.status.size(), 1u);
  EXPECT_THAT(stage2.status[0], HasSubstr("7 of 8 training runs finished"));
  const Section& leak = *by_sweep["leak"];
  EXPECT_TRUE(leak.status.empty());
  std::string findings = StrJoin(leak.findings, "\n");
  EXPECT_THAT(findings, HasSubstr("the leak is reproduced"));
  EXPECT_THAT(findings, HasSubstr("stays above the floor"));
  const Table* t = FindTable(report, "leak");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->rows.size(), 2u);
  EXPECT_EQ(t->rows[0][0], "off (sees the future)");
  EXPECT_EQ(t->rows[0].back(), "yes");  // below the floor
  EXPECT_EQ(t->rows[1].back(), "no");

  CART_ASSERT_OK(WriteReport(report, options));
  const std::string md = ReadFile(dir_.File("report/report.md"));
  EXPECT_THAT(md, HasSubstr("> **Not complete:** no training runs in sweep 'stage1'"));
  EXPECT_THAT(md, HasSubstr("| 256 | 0.8130 ± 0.1271 (n = 2) | 0.8140 ± 0.1271 (n = 2) |"));
  EXPECT_THAT(md, Not(HasSubstr("plots/")));  // --no-plots
}

TEST_F(ReportTest, CsvFilesEqualTheTablesAndPlotsAreSvgAndPng) {
  std::unique_ptr<StudySource> source = StoreSource(*store_);
  ReportOptions options;
  options.out_dir = dir_.File("report");
  options.html = true;
  CART_ASSERT_OK_AND_ASSIGN(Report report, BuildReport(*source, options));
  CART_ASSERT_OK(WriteReport(report, options));
  int tables = 0;
  for (const Section& s : report.sections) {
    for (const Table& t : s.tables) {
      ++tables;
      std::string expected = StrJoin(t.columns, ",") + "\n";
      for (const auto& row : t.rows) expected += StrJoin(row, ",") + "\n";
      EXPECT_EQ(ReadFile(dir_.File("report/tables/" + t.id + ".csv")), expected) << t.id;
    }
  }
  EXPECT_GE(tables, 5);
  int plots = 0;
  for (const Section& s : report.sections) {
    for (const Plot& p : s.plots) {
      ++plots;
      const std::string svg = ReadFile(dir_.File("report/plots/" + p.id + ".svg"));
      EXPECT_EQ(svg.rfind("<?xml", 0), 0u) << p.id;
      EXPECT_THAT(svg, HasSubstr("<svg")) << p.id;
      EXPECT_THAT(svg, HasSubstr("</svg>")) << p.id;
      const std::string png = ReadFile(dir_.File("report/plots/" + p.id + ".png"));
      ASSERT_GT(png.size(), 24u) << p.id;
      EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8)) << p.id;
      EXPECT_EQ(png.substr(12, 4), "IHDR") << p.id;
    }
  }
  // rho_heatmap, rho_steps, ppl_vs_R, loss_curves (stage 2) and leak_loss.
  EXPECT_EQ(plots, 5);
  const std::string html = ReadFile(dir_.File("report/report.html"));
  EXPECT_THAT(html, HasSubstr("<table>"));
  EXPECT_THAT(html, HasSubstr("plots/rho_heatmap.svg"));
}

// gnuplot is started without a shell: a quote in --out used to end the shell's quoted path, and
// the plots failed (or the rest of the path ran as a command).
TEST_F(ReportTest, PlotsAreDrawnWhateverCharactersTheOutputFolderHas) {
  std::unique_ptr<StudySource> source = StoreSource(*store_);
  ReportOptions options;
  options.out_dir = dir_.File("o'brien's report; touch pwned");
  CART_ASSERT_OK_AND_ASSIGN(Report report, BuildReport(*source, options));
  CART_ASSERT_OK(WriteReport(report, options));
  const std::string svg = ReadFile(options.out_dir + "/plots/rho_heatmap.svg");
  EXPECT_THAT(svg, HasSubstr("</svg>"));
  EXPECT_FALSE(std::filesystem::exists("pwned"));
}

TEST_F(ReportTest, WithoutGnuplotTheTablesAreStillWrittenAndTheErrorSaysWhatToInstall) {
  std::unique_ptr<StudySource> source = StoreSource(*store_);
  ReportOptions options;
  options.out_dir = dir_.File("report");
  options.gnuplot = dir_.File("no-such-gnuplot");
  CART_ASSERT_OK_AND_ASSIGN(Report report, BuildReport(*source, options));
  EXPECT_THAT(WriteReport(report, options),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("gnuplot-nox")));
  EXPECT_THAT(ReadFile(dir_.File("report/report.md")),
              HasSubstr("| 256 | 0.8130 ± 0.1271 (n = 2)"));
  EXPECT_FALSE(ReadFile(dir_.File("report/tables/rho_stage2.csv")).empty());
}

// Stage 2's own eval jobs cover every width; the variable-R curve is one trained shape, the widest.
TEST(VariableRTest, EvalJobsOfSeveralWidthsShowTheWidest) {
  TempDir dir;
  auto store = OpenStore(dir.File("cart.db"));
  std::vector<store::NewRun> runs;
  for (const char* d : {"256", "512"}) {
    store::NewRun eval = MakeRun(StrCat(runs.size()), {{"d", d}, {"R", "6"}});
    eval.kind = JobKind::kEval;
    eval.eval_loops = {1, 6};
    runs.push_back(eval);
  }
  ASSERT_TRUE(store->CreateSweep(MakeSweep("stage2", runs), store::Audit{1, "t", "t"}).ok());
  FinishAllQueued(*store, [](const RunRecord& r) {
    const double base = r.params.at("d") == "512" ? 30.0 : 50.0;
    std::vector<MetricPoint> p = PointsAt(1, {{"val_ppl/wiki", base + 10}});
    auto six = PointsAt(6, {{"val_ppl/wiki", base}});
    p.insert(p.end(), six.begin(), six.end());
    return p;
  });
  std::unique_ptr<StudySource> source = StoreSource(*store);
  ReportOptions options;
  options.out_dir = dir.File("report");
  CART_ASSERT_OK_AND_ASSIGN(Report report, BuildReport(*source, options));
  const Section* varr = nullptr;
  for (const Section& s : report.sections) {
    if (!s.tables.empty() && s.tables[0].id == "variable_r") varr = &s;
  }
  ASSERT_NE(varr, nullptr);
  EXPECT_THAT(StrJoin(varr->findings, "\n"), HasSubstr("the table shows d = 512"));
  const Table& t = varr->tables[0];
  EXPECT_THAT(t.title, HasSubstr("mean over 1 finished models"));
  ASSERT_EQ(t.rows.size(), 2u);  // R_infer 1 and 6
  EXPECT_EQ(t.rows[1][0], "6");
  EXPECT_EQ(t.rows[1][1], "30.00");  // d = 512 only
}

// Series from memory, by run id.
class SeriesSource : public StudySource {
 public:
  explicit SeriesSource(std::map<int64_t, std::vector<StudyPoint>> series)
      : series_(std::move(series)) {}
  absl::StatusOr<std::vector<StudyRun>> Runs(const std::string&) override {
    return std::vector<StudyRun>{};
  }
  absl::StatusOr<std::vector<StudyPoint>> Series(int64_t run_id, const std::string&,
                                                 int64_t) override {
    return series_.at(run_id);
  }

 private:
  std::map<int64_t, std::vector<StudyPoint>> series_;
};

TEST(MeanCurveTest, ADivergedSeedMakesTheMeanAndTheBandNaNAtItsSteps) {
  const double nan = std::nan("");
  // The NaN comes second at step 1 and first at step 2: min_element and max_element alone
  // would give a finite band at one of them.
  SeriesSource source({{1, {{0, 1.0}, {1, 2.0}, {2, nan}}}, {2, {{0, 3.0}, {1, nan}, {2, 5.0}}}});
  StudyRun a, b;
  a.id = 1;
  b.id = 2;
  absl::Status error;
  const PlotSeries s = MeanCurve(source, {&a, &b}, "loss", "two seeds", &error);
  CART_ASSERT_OK(error);
  ASSERT_EQ(s.x, (std::vector<double>{0, 1, 2}));
  ASSERT_EQ(s.low.size(), 3u);
  ASSERT_EQ(s.high.size(), 3u);
  EXPECT_EQ(s.y[0], 2.0);
  EXPECT_EQ(s.low[0], 1.0);
  EXPECT_EQ(s.high[0], 3.0);
  for (size_t i : {1, 2}) {
    EXPECT_TRUE(std::isnan(s.y[i])) << "step " << i;
    EXPECT_TRUE(std::isnan(s.low[i])) << "step " << i;
    EXPECT_TRUE(std::isnan(s.high[i])) << "step " << i;
  }
}

// What the study cost (docs/study.md "What it cost"): a claim counts every run its tests' sides
// selected, each sweep every run once, energy only where a counter measured it, priced at the
// report's prices or else the source's.
TEST(CostTest, AClaimCountsTheRunsItsTestsReadAndEachSweepCountsEveryRunOnce) {
  TempDir dir;
  std::unique_ptr<store::RunStore> store = OpenStore(dir.File("cart.db"));
  ASSERT_NE(store, nullptr);
  std::vector<store::NewRun> stage2;
  for (const auto& [r, seed] :
       std::vector<std::pair<int, int>>{{2, 1}, {2, 2}, {4, 1}, {4, 2}, {8, 1}}) {
    stage2.push_back(MakeRun(StrCat(stage2.size()), {{"R", StrCat(r)}, {"seed", StrCat(seed)}}));
  }
  ASSERT_TRUE(store->CreateSweep(MakeSweep("stage2", stage2), store::Audit{1, "t", "t"}).ok());
  ASSERT_TRUE(
      store->CreateSweep(MakeSweep("leak", {MakeRun("0", {{"R", "2"}})}), store::Audit{1, "t", "t"})
          .ok());
  // Each stage 2 run trains R / 2 hours and its worker's counter reads 1 kWh; the leak run trains
  // 3 hours on a worker that measures nothing.
  const int64_t hour = int64_t{3600} * 1'000'000;
  CART_ASSERT_OK(store->RegisterWorker("w", "test", 80 * store::testing::kGiB, kT0));
  for (int i = 0; i < 6; ++i) {
    auto claim = store->ClaimNextRun("w", 80 * store::testing::kGiB, kT0);
    ASSERT_TRUE(claim.ok() && claim->has_value());
    const RunRecord& run = (*claim)->run;
    CART_ASSERT_OK(store->MarkRunning(run.id, 1, kT0));
    const int64_t r = IntParam(run, "R");
    const bool leak = run.sweep_name == "leak";
    CART_ASSERT_OK(store->AppendMetrics(
        run.id, 1, PointsAt(10, {{"rho_max", 0.8 + 0.01 * r + 0.001 * IntParam(run, "seed")}})));
    if (!leak) CART_ASSERT_OK(store->RecordEnergy(run.id, 1, 3.6e6, "rapl"));
    CART_ASSERT_OK(store->RecordAttemptOutcome(
        run.id, 1, AttemptOutcome::kSucceeded,
        store::testing::By("worker:w", kT0 + (leak ? 3 : r / 2) * hour)));
  }
  const std::string claims = dir.File("claims.yaml");
  {
    std::ofstream f(claims);
    f << "rho_by_r:\n  claim: \"ρ grows with R\"\n  section: \"s\"\n  published: \"p\"\n"
         "  part: stage2\n  tests:\n    - kind: compare\n      label: \"ρ\"\n"
         "      metric: rho_max\n      a: {match: {R: 2}}\n      b: {match: {R: 4}}\n"
         "      direction: less\n";
  }
  store::EnergyPrices cartds;
  cartds.per_kwh = 0.25;
  std::unique_ptr<StudySource> source = StoreSource(*store, cartds);
  ReportOptions options;
  options.out_dir = dir.File("report");
  options.plots = false;
  options.claims_file = claims;
  {
    // Without prices of its own the report takes the source's (cartd's).
    CART_ASSERT_OK_AND_ASSIGN(Report report, BuildReport(*source, options));
    EXPECT_DOUBLE_EQ(report.prices.per_kwh, 0.25);
  }
  options.prices.emplace();
  options.prices->per_kwh = 0.5;
  options.prices->co2_grams_per_kwh = 400;
  CART_ASSERT_OK_AND_ASSIGN(Report report, BuildReport(*source, options));
  ASSERT_EQ(report.claims.size(), 1u);
  // The claim read R = 2 and R = 4 (four runs: 1 + 1 + 2 + 2 hours, 4 kWh), not R = 8.
  const ClaimLine& claim = report.claims[0];
  EXPECT_EQ(claim.runs, 4);
  EXPECT_EQ(claim.spending.attempts, 4);
  EXPECT_EQ(claim.spending.measured_attempts, 4);
  EXPECT_DOUBLE_EQ(claim.spending.device_hours, 6);
  EXPECT_DOUBLE_EQ(claim.spending.energy_j, 4 * 3.6e6);
  ASSERT_EQ(report.costs.size(), 2u);
  EXPECT_EQ(report.costs[0].sweep, "stage2");
  EXPECT_EQ(report.costs[0].runs, 5);
  EXPECT_DOUBLE_EQ(report.costs[0].spending.device_hours, 10);
  EXPECT_EQ(report.costs[1].part, "leak");
  EXPECT_EQ(report.costs[1].spending.measured_attempts, 0);

  const Table* by_claim = nullptr;
  const Table* by_part = nullptr;
  for (const Section& s : report.sections) {
    for (const Table& t : s.tables) {
      if (t.id == "cost_claims") by_claim = &t;
      if (t.id == "cost_parts") by_part = &t;
    }
  }
  ASSERT_NE(by_claim, nullptr);
  ASSERT_NE(by_part, nullptr);
  EXPECT_EQ(by_claim->columns,
            (std::vector<std::string>{"claim", "runs", "attempts", "device-hours",
                                      "measured attempts", "kWh", "EUR", "g CO2"}));
  EXPECT_EQ(
      by_claim->rows,
      (std::vector<std::vector<std::string>>{{"rho_by_r", "4", "4", "6", "4", "4", "2", "1600"}}));
  EXPECT_EQ(by_part->rows, (std::vector<std::vector<std::string>>{
                               {"stage2 (stage2)", "5", "5", "10", "5", "5", "2.5", "2000"},
                               {"leak (leak)", "1", "1", "3", "0", "—", "—", "—"},
                               {"all", "6", "6", "13", "5", "5", "2.5", "2000"}}));

  CART_ASSERT_OK(WriteReport(report, options));
  const std::string md = ReadFile(dir.File("report/report.md"));
  EXPECT_THAT(md, HasSubstr("## What the study cost"));
  EXPECT_THAT(md, HasSubstr("The whole study: 5.000 kWh (5 of 6 attempts measured, rapl) · "
                            "2.50 EUR · 2000 g CO2 · 13.00 device-hours."));
  const std::string csv = ReadFile(dir.File("report/claims.csv"));
  EXPECT_THAT(csv, HasSubstr(",runs,attempts,device_hours,measured_attempts,energy_kwh\n"));
  EXPECT_THAT(csv, HasSubstr(",4,4,6,4,4\n"));
  EXPECT_EQ(ReadFile(dir.File("report/tables/cost_parts.csv")),
            "part (sweep),runs,attempts,device-hours,measured attempts,kWh,EUR,g CO2\n"
            "stage2 (stage2),5,5,10,5,5,2.5,2000\nleak (leak),1,1,3,0,—,—,—\n"
            "all,6,6,13,5,5,2.5,2000\n");
}

TEST(PaperFiguresTest, EveryPublishedFigureNamesItsSection) {
  const auto& figures = PaperFigures();
  EXPECT_EQ(figures.size(), 7u);
  for (const auto& [id, table] : figures) {
    EXPECT_FALSE(table.section.empty()) << id;
    EXPECT_FALSE(table.cells.empty()) << id;
  }
  EXPECT_DOUBLE_EQ(figures.at("rho_stage2").cells.at("1024/6"), 0.823);
  EXPECT_DOUBLE_EQ(figures.at("wiki_ppl_stage2").cells.at("256/8"), 40.31);
  EXPECT_DOUBLE_EQ(figures.at("ablations").cells.at("unshared core"), 19.22);
}

}  // namespace
}  // namespace cart::report
