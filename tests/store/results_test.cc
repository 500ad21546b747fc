// The results layer on a seeded database whose answers are known by construction: every metric
// value below is a function of the run's config, chosen so means, standard deviations, deltas and
// rank correlations can be worked out by hand.

#include "store/results.h"

#include <cmath>

#include "common/strings.h"
#include "store/run_store.h"
#include "tests/store/store_fixture.h"
#include "tests/support/test_support.h"

namespace cart::store {
namespace {

using ::cart::store::testing::By;
using ::cart::store::testing::FinishAllQueued;
using ::cart::store::testing::kT0;
using ::cart::store::testing::MakeRun;
using ::cart::store::testing::MakeSweep;
using ::cart::store::testing::OpenStore;
using ::cart::store::testing::PointsAt;
using ::cart::testing::StatusIs;
using ::cart::testing::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr double kTol = 1e-9;

// Stage 2 (3 seeds per cell): the paper's ρ and wiki perplexity for d ∈ {256, 512}, R ∈ {6, 8};
// seed 42 / 137 / 271 add -δ / 0 / +δ, so each cell's mean is the table value and its sample std
// is δ (ρ: δ = 0.01, perplexity: δ = 0.3).
double PaperRho(const std::string& d, const std::string& r) {
  if (d == "256") return r == "6" ? 0.790 : 0.795;
  return r == "6" ? 0.800 : 0.804;
}
double PaperWiki(const std::string& d, const std::string& r) {
  if (d == "256") return r == "6" ? 41.17 : 40.31;
  return r == "6" ? 27.10 : 27.20;
}
double SeedOffset(const std::string& seed) {
  if (seed == "42") return -1;
  if (seed == "137") return 0;
  return 1;
}
// Stage 1 (one seed): ρ chosen so the ranking (larger is better) is
// 512/6 > 256/8 > 512/8 > 256/6, against stage 2's 512/8 > 512/6 > 256/8 > 256/6.
double Stage1Rho(const std::string& d, const std::string& r) {
  if (d == "768") return 0.75;
  if (d == "256") return r == "6" ? 0.70 : 0.72;
  return r == "6" ? 0.74 : 0.71;
}
// Ablations at d = 1024, R = 6 (wiki perplexity; the baseline has two seeds: 20.30 and 20.40).
double AblationWiki(const RunRecord& run) {
  if (run.params.at("kv") == "recompute") return 20.14;
  if (run.params.at("core") == "unshared") return 19.22;
  if (run.params.at("hyper") == "off") return 20.49;
  return run.seed == 42 ? 20.30 : 20.40;
}

class ResultsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = OpenStore(dir_.File("cart.db"));
    ASSERT_NE(store_, nullptr);
    std::vector<NewRun> stage2;
    for (const char* d : {"256", "512"}) {
      for (const char* r : {"6", "8"}) {
        for (const char* seed : {"42", "137", "271"}) {
          stage2.push_back(MakeRun(StrCat("d", d, "-R", r, "-s", seed),
                                   {{"d", d}, {"R", r}, {"P", "6"}, {"seed", seed}}));
        }
      }
    }
    // Still training: has a latest ρ but no final one.
    NewRun unfinished = MakeRun("d768-R6-s42", {{"d", "768"}, {"R", "6"}, {"P", "6"}});
    unfinished.priority = -1;  // claimed last
    stage2.push_back(unfinished);
    CART_ASSERT_OK(store_->CreateSweep(MakeSweep("stage2", stage2), By("user:a", kT0)));

    std::vector<NewRun> stage1;
    for (const char* d : {"256", "512", "768"}) {
      for (const char* r : {"6", "8"}) {
        if (std::string(d) == "768" && std::string(r) == "8") continue;
        stage1.push_back(MakeRun(StrCat("d", d, "-R", r), {{"d", d}, {"R", r}, {"P", "4"}}));
      }
    }
    CART_ASSERT_OK(store_->CreateSweep(MakeSweep("stage1", stage1), By("user:a", kT0)));

    std::vector<NewRun> ablations;
    auto ablation = [](const std::string& name, const std::string& kv, const std::string& core,
                       const std::string& hyper, const std::string& seed) {
      return MakeRun(name, {{"d", "1024"},
                            {"R", "6"},
                            {"kv", kv},
                            {"core", core},
                            {"hyper", hyper},
                            {"seed", seed}});
    };
    ablations.push_back(ablation("base-s42", "frozen", "shared", "on", "42"));
    ablations.push_back(ablation("base-s137", "frozen", "shared", "on", "137"));
    ablations.push_back(ablation("recompute", "recompute", "shared", "on", "42"));
    ablations.push_back(ablation("unshared", "frozen", "unshared", "on", "42"));
    ablations.push_back(ablation("no-hyper", "frozen", "shared", "off", "42"));
    CART_ASSERT_OK(store_->CreateSweep(MakeSweep("ablations", ablations), By("user:a", kT0)));

    CART_ASSERT_OK(
        store_->CreateSweep(MakeSweep("curves", {MakeRun("curve", {})}), By("user:a", kT0)));

    FinishAllQueued(
        *store_,
        [](const RunRecord& run) -> std::vector<MetricPoint> {
          const std::string& d = run.params.at("d");
          if (run.sweep_name == "curves") {
            std::vector<MetricPoint> points;
            for (int64_t step = 0; step < 1000; ++step) {
              points.push_back({step, "train/loss", static_cast<double>(step), kT0 + step});
              // A loss that diverges at step 550, in the middle of a bucket of 100 (NaN is stored
              // as NULL).
              points.push_back(
                  {step, "diverged/loss", step < 550 ? 1.0 + step % 2 : std::nan(""), kT0 + step});
              // A sparse series: an evaluation every 100 steps, and one at step 1.
              if (step % 100 == 0 || step == 1) {
                points.push_back({step, "val/loss", static_cast<double>(step), kT0 + step});
              }
            }
            return points;
          }
          if (run.sweep_name == "ablations") {
            return {{0, "val/wiki/ppl", 99.0, kT0}, {3000, "val/wiki/ppl", AblationWiki(run), kT0}};
          }
          const std::string& r = run.params.at("R");
          if (run.sweep_name == "stage1") return {{3000, "rho", Stage1Rho(d, r), kT0}};
          if (d == "768") return {{500, "rho", 0.9, kT0}};
          const double k = SeedOffset(run.params.at("seed"));
          // An early value at step 0 that the final value (at the last step) must replace.
          return {{0, "rho", 0.5, kT0},
                  {0, "val/wiki/ppl", 1000.0, kT0},
                  {30500, "rho", PaperRho(d, r) + 0.01 * k, kT0},
                  {30500, "val/wiki/ppl", PaperWiki(d, r) + 0.3 * k, kT0}};
        },
        [](const RunRecord& run) -> std::optional<AttemptOutcome> {
          if (run.params.at("d") == "768" && run.sweep_name == "stage2") return std::nullopt;
          return AttemptOutcome::kSucceeded;
        });
  }

  PivotRequest Stage2Pivot(const std::string& metric) {
    PivotRequest request;
    request.filter.sweeps = {"stage2"};
    request.metric = metric;
    request.row_key = "d";
    request.col_key = "R";
    return request;
  }

  TempDir dir_;
  std::unique_ptr<RunStore> store_;
};

// A sweep that holds its own eval jobs (the paper's stage 2 with variable-R): their values are
// over R_infer, and a filter on the job kind keeps them out of the training tables.
TEST(ResultsKindTest, AKindFilterKeepsEvalJobsOutOfAPivot) {
  ::cart::testing::TempDir dir;
  auto store = OpenStore(dir.File("kinds.db"));
  ASSERT_NE(store, nullptr);
  NewRun train = MakeRun("0", {{"d", "256"}, {"R", "6"}});
  NewRun eval = MakeRun("1", {{"d", "256"}, {"R", "6"}});
  eval.kind = JobKind::kEval;
  eval.eval_loops = {1, 16};
  CART_ASSERT_OK(store->CreateSweep(MakeSweep("s2", {train, eval}), By("user:a", kT0)));
  FinishAllQueued(*store, [](const RunRecord& r) {
    return PointsAt(16, {{"val_ppl/wiki", r.kind == JobKind::kEval ? 99.0 : 20.0}});
  });
  PivotRequest pivot;
  pivot.metric = "val_ppl/wiki";
  pivot.row_key = "d";
  pivot.col_key = "R";
  CART_ASSERT_OK_AND_ASSIGN(PivotTable both, store->Pivot(pivot));
  EXPECT_EQ(both.cells[0][0].n, 2);
  pivot.filter.kinds = {JobKind::kTrain};
  CART_ASSERT_OK_AND_ASSIGN(PivotTable trained, store->Pivot(pivot));
  EXPECT_EQ(trained.cells[0][0].n, 1);
  EXPECT_EQ(trained.cells[0][0].mean, 20.0);
}

TEST_F(ResultsTest, RhoByDAndRIsTheSeedMeanWithStdAndCount) {
  CART_ASSERT_OK_AND_ASSIGN(PivotTable table, store_->Pivot(Stage2Pivot("rho")));
  EXPECT_EQ(table.row_values, (std::vector<std::string>{"256", "512"}));
  EXPECT_EQ(table.col_values, (std::vector<std::string>{"6", "8"}));
  for (size_t r = 0; r < 2; ++r) {
    for (size_t c = 0; c < 2; ++c) {
      const CellStats& cell = table.cells[r][c];
      SCOPED_TRACE(StrCat("d=", table.row_values[r], " R=", table.col_values[c]));
      EXPECT_EQ(cell.n, 3);
      EXPECT_NEAR(cell.mean, PaperRho(table.row_values[r], table.col_values[c]), kTol);
      EXPECT_NEAR(cell.std, 0.01, kTol);
    }
  }
}

TEST_F(ResultsTest, WikiPerplexityPivotSortsNumericValuesNumerically) {
  PivotRequest request = Stage2Pivot("val/wiki/ppl");
  request.row_key = "R";  // transpose: rows R, columns d
  request.col_key = "d";
  CART_ASSERT_OK_AND_ASSIGN(PivotTable table, store_->Pivot(request));
  EXPECT_EQ(table.row_values, (std::vector<std::string>{"6", "8"}));
  EXPECT_EQ(table.col_values, (std::vector<std::string>{"256", "512"}));
  EXPECT_NEAR(table.cells[1][0].mean, 40.31, kTol);
  EXPECT_NEAR(table.cells[1][0].std, 0.3, kTol);
  EXPECT_NEAR(table.cells[0][1].mean, 27.10, kTol);
}

TEST_F(ResultsTest, LatestFieldIncludesUnfinishedRunsAndFinalDoesNot) {
  PivotRequest request = Stage2Pivot("rho");
  request.field = SummaryField::kLatest;
  CART_ASSERT_OK_AND_ASSIGN(PivotTable latest, store_->Pivot(request));
  EXPECT_EQ(latest.row_values, (std::vector<std::string>{"256", "512", "768"}));
  EXPECT_EQ(latest.cells[2][0].n, 1);
  EXPECT_NEAR(latest.cells[2][0].mean, 0.9, kTol);
  EXPECT_EQ(latest.cells[2][1].n, 0);  // no d=768, R=8 run
}

TEST_F(ResultsTest, PivotAcrossSweepsWithAFilterOnAnyConfigKey) {
  PivotRequest request;
  request.metric = "rho";
  request.row_key = "d";
  request.col_key = "P";
  request.filter.params = {{"R", "8"}};
  CART_ASSERT_OK_AND_ASSIGN(PivotTable table, store_->Pivot(request));
  EXPECT_EQ(table.row_values, (std::vector<std::string>{"256", "512"}));
  EXPECT_EQ(table.col_values, (std::vector<std::string>{"4", "6"}));  // stage1 P=4, stage2 P=6
  EXPECT_EQ(table.cells[0][0].n, 1);
  EXPECT_NEAR(table.cells[0][0].mean, 0.72, kTol);
  EXPECT_EQ(table.cells[0][0].std, 0.0);  // n < 2
  EXPECT_EQ(table.cells[1][1].n, 3);
  EXPECT_NEAR(table.cells[1][1].mean, 0.804, kTol);
}

TEST_F(ResultsTest, PivotErrorsNameTheMissingMetricOrKey) {
  EXPECT_THAT(store_->Pivot(Stage2Pivot("rh0")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("'rh0'")));
  PivotRequest request = Stage2Pivot("rho");
  request.col_key = "Rr";
  EXPECT_THAT(store_->Pivot(request),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("config key 'Rr'")));
  request.col_key = "d";
  EXPECT_THAT(store_->Pivot(request),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'d'")));
  // A well-formed query that matches nothing is an empty table, not an error.
  request = Stage2Pivot("rho");
  request.filter.sweeps = {"no-such-sweep"};
  CART_ASSERT_OK_AND_ASSIGN(PivotTable empty, store_->Pivot(request));
  EXPECT_TRUE(empty.row_values.empty());
}

TEST_F(ResultsTest, BestPerRowPicksTheBestRForEachD) {
  CART_ASSERT_OK_AND_ASSIGN(PivotTable wiki, store_->Pivot(Stage2Pivot("val/wiki/ppl")));
  std::vector<BestCell> best = BestPerRow(wiki, Goal::kMin);
  ASSERT_EQ(best.size(), 2u);
  EXPECT_EQ(best[0].row_value, "256");
  EXPECT_EQ(best[0].col_value, "8");  // 40.31 < 41.17
  EXPECT_NEAR(best[0].stats.mean, 40.31, kTol);
  EXPECT_EQ(best[1].row_value, "512");
  EXPECT_EQ(best[1].col_value, "6");  // 27.10 < 27.20
  CART_ASSERT_OK_AND_ASSIGN(PivotTable rho, store_->Pivot(Stage2Pivot("rho")));
  best = BestPerRow(rho, Goal::kMax);
  ASSERT_EQ(best.size(), 2u);
  EXPECT_EQ(best[0].col_value, "8");
  EXPECT_EQ(best[1].col_value, "8");
}

TEST_F(ResultsTest, AblationDeltasAgainstTheNamedBaseline) {
  AblationRequest request;
  request.metric = "val/wiki/ppl";
  request.baseline = "baseline";
  auto group = [](const std::string& label, std::map<std::string, std::string> params) {
    RunGroup g;
    g.label = label;
    g.filter.sweeps = {"ablations"};
    g.filter.params = std::move(params);
    return g;
  };
  request.groups = {group("baseline", {{"kv", "frozen"}, {"core", "shared"}, {"hyper", "on"}}),
                    group("recompute KV", {{"kv", "recompute"}}),
                    group("unshared", {{"core", "unshared"}}),
                    group("no hyper", {{"hyper", "off"}}), group("dense", {{"model", "dense"}})};
  CART_ASSERT_OK_AND_ASSIGN(std::vector<AblationRow> rows, store_->Ablation(request));
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_TRUE(rows[0].is_baseline);
  EXPECT_EQ(rows[0].stats.n, 2);
  EXPECT_NEAR(rows[0].stats.mean, 20.35, kTol);
  EXPECT_NEAR(rows[0].delta, 0.0, kTol);
  EXPECT_EQ(rows[1].label, "recompute KV");
  EXPECT_NEAR(rows[1].delta, -0.21, kTol);
  EXPECT_NEAR(rows[1].relative_delta, -0.21 / 20.35, kTol);
  EXPECT_NEAR(rows[2].delta, -1.13, kTol);
  EXPECT_NEAR(rows[3].delta, 0.14, kTol);
  EXPECT_EQ(rows[4].stats.n, 0);  // no dense run: shown, without a delta
  EXPECT_TRUE(std::isnan(rows[4].delta));

  request.baseline = "nope";
  EXPECT_THAT(store_->Ablation(request),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'nope'")));
  request.baseline = "dense";
  EXPECT_THAT(store_->Ablation(request),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("'dense'")));
}

TEST_F(ResultsTest, SeriesIsDownsampledIntoEqualStepBuckets) {
  CART_ASSERT_OK_AND_ASSIGN(auto curves, store_->ListRuns(RunFilter{{"curves"}, {}, {}}));
  ASSERT_EQ(curves.size(), 1u);
  const int64_t id = curves[0].id;
  CART_ASSERT_OK_AND_ASSIGN(Series ten, store_->MetricSeries({id, "train/loss", 10, {}, {}}));
  EXPECT_EQ(ten.total_points, 1000);
  ASSERT_EQ(ten.points.size(), 10u);
  for (int64_t b = 0; b < 10; ++b) {
    const SeriesPoint& p = ten.points[b];
    EXPECT_EQ(p.count, 100);
    EXPECT_EQ(p.step, 100 * b + 99);
    EXPECT_NEAR(p.value, 100 * b + 49.5, kTol);  // the loss equals the step here
    EXPECT_EQ(p.min, 100 * b);
    EXPECT_EQ(p.max, 100 * b + 99);
  }
  ASSERT_TRUE(ten.summary.has_value());
  EXPECT_EQ(ten.summary->latest_step, 999);
  EXPECT_EQ(ten.summary->final_value, std::optional<double>(999.0));

  CART_ASSERT_OK_AND_ASSIGN(Series window, store_->MetricSeries({id, "train/loss", 0, 100, 199}));
  ASSERT_EQ(window.points.size(), 100u);
  EXPECT_EQ(window.points.front().step, 100);
  EXPECT_EQ(window.points.back().value, 199.0);
  EXPECT_EQ(window.points.back().count, 1);

  CART_ASSERT_OK_AND_ASSIGN(Series uneven, store_->MetricSeries({id, "train/loss", 3, {}, {}}));
  ASSERT_EQ(uneven.points.size(), 3u);
  int64_t total = 0;
  for (const SeriesPoint& p : uneven.points) total += p.count;
  EXPECT_EQ(total, 1000);
  EXPECT_EQ(uneven.points.back().step, 999);

  CART_ASSERT_OK_AND_ASSIGN(Series empty, store_->MetricSeries({id, "train/loss", 10, 2000, {}}));
  EXPECT_EQ(empty.total_points, 0);
  EXPECT_TRUE(empty.points.empty());

  // 11 points over 901 steps (0, 1, 100, ..., 900): fewer points than asked for come back one by
  // one, however wide their span and although steps 0 and 1 share a bucket of 45 steps; more are
  // averaged into buckets.
  const std::vector<int64_t> val_steps = {0, 1, 100, 200, 300, 400, 500, 600, 700, 800, 900};
  CART_ASSERT_OK_AND_ASSIGN(Series sparse, store_->MetricSeries({id, "val/loss", 20, {}, {}}));
  EXPECT_EQ(sparse.total_points, 11);
  ASSERT_EQ(sparse.points.size(), val_steps.size());
  for (size_t i = 0; i < val_steps.size(); ++i) {
    EXPECT_EQ(sparse.points[i].step, val_steps[i]);
    EXPECT_EQ(sparse.points[i].value, static_cast<double>(val_steps[i]));
    EXPECT_EQ(sparse.points[i].count, 1);
  }
  CART_ASSERT_OK_AND_ASSIGN(Series sparse4, store_->MetricSeries({id, "val/loss", 4, {}, {}}));
  EXPECT_EQ(sparse4.total_points, 11);
  ASSERT_EQ(sparse4.points.size(), 4u);
  int64_t sparse_total = 0;
  for (const SeriesPoint& p : sparse4.points) sparse_total += p.count;
  EXPECT_EQ(sparse_total, 11);
  EXPECT_EQ(sparse4.points.front().count, 4);  // steps 0, 1, 100 and 200 of 0..225
  EXPECT_EQ(sparse4.points.back().step, 900);

  // NaN comes back as NaN, point by point and in buckets with nothing else, never as 0; a bucket
  // that mixes values and NaN averages its values only (as SQL's avg does) and counts every point.
  CART_ASSERT_OK_AND_ASSIGN(Series diverged,
                            store_->MetricSeries({id, "diverged/loss", 10, {}, {}}));
  ASSERT_EQ(diverged.points.size(), 10u);
  for (int64_t b = 0; b < 10; ++b) {
    const SeriesPoint& p = diverged.points[b];
    EXPECT_EQ(p.count, 100);
    EXPECT_EQ(p.step, 100 * b + 99);
    EXPECT_EQ(p.wall_time_us, kT0 + 100 * b + 99);
    if (b <= 5) {  // values 1 and 2 alternating; bucket 5 holds 50 of them and 50 NaN
      EXPECT_EQ(p.value, 1.5) << "bucket " << b;
      EXPECT_EQ(p.min, 1.0) << "bucket " << b;
      EXPECT_EQ(p.max, 2.0) << "bucket " << b;
    } else {
      EXPECT_TRUE(std::isnan(p.value)) << "bucket " << b;
      EXPECT_TRUE(std::isnan(p.min)) << "bucket " << b;
      EXPECT_TRUE(std::isnan(p.max)) << "bucket " << b;
    }
  }
  CART_ASSERT_OK_AND_ASSIGN(Series raw, store_->MetricSeries({id, "diverged/loss", 0, 549, 550}));
  ASSERT_EQ(raw.points.size(), 2u);
  EXPECT_EQ(raw.points[0].value, 2.0);
  EXPECT_TRUE(std::isnan(raw.points[1].value));

  EXPECT_THAT(store_->MetricSeries({id, "nope", 10, {}, {}}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("'nope'")));
  EXPECT_THAT(store_->MetricSeries({424242, "train/loss", 10, {}, {}}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("run 424242")));
  EXPECT_THAT(store_->MetricSeries({id, "train/loss", -1, {}, {}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("max_points")));
}

TEST_F(ResultsTest, StageComparisonRanksConfigsInBothStagesWithSpearman) {
  StageComparisonRequest request;
  request.metric = "rho";
  request.goal = Goal::kMax;
  request.stage_a.sweeps = {"stage1"};
  request.stage_b.sweeps = {"stage2"};
  request.config_keys = {"d", "R"};
  CART_ASSERT_OK_AND_ASSIGN(StageComparison cmp, store_->CompareStages(request));
  ASSERT_EQ(cmp.rows.size(), 4u);
  EXPECT_EQ(cmp.only_in_a, 1);  // d=768 has no finished stage-2 run
  EXPECT_EQ(cmp.only_in_b, 0);
  // Ranks (1 = best): stage 1 512/6, 256/8, 512/8, 256/6; stage 2 512/8, 512/6, 256/8, 256/6.
  EXPECT_EQ(cmp.rows[0].key_values, (std::vector<std::string>{"512", "6"}));
  EXPECT_EQ(cmp.rows[0].rank_a, 1);
  EXPECT_EQ(cmp.rows[0].rank_b, 2);
  EXPECT_EQ(cmp.rows[3].key_values, (std::vector<std::string>{"256", "6"}));
  EXPECT_EQ(cmp.rows[3].rank_b, 4);
  EXPECT_NEAR(cmp.rows[0].b.mean, 0.800, kTol);
  EXPECT_EQ(cmp.rows[0].b.n, 3);
  // Spearman: d = (1-2, 2-3, 3-1, 4-4) → Σd² = 6 → 1 - 6·6 / (4·15) = 0.4.
  EXPECT_NEAR(cmp.spearman, 0.4, kTol);
}

TEST(ResultsMathTest, SummarizeGivesMeanSampleStdAndCount) {
  CellStats s = Summarize({1, 2, 3, 4});
  EXPECT_EQ(s.n, 4);
  EXPECT_DOUBLE_EQ(s.mean, 2.5);
  EXPECT_NEAR(s.std, std::sqrt(5.0 / 3.0), kTol);
  EXPECT_EQ(Summarize({}).n, 0);
  EXPECT_TRUE(std::isnan(Summarize({1.0, std::nan("")}).mean)) << "a diverged seed shows";
}

// The 95 % interval of the mean: mean ± t(0.975, n − 1) · s / √n, with t from SciPy
// (scipy.stats.t.ppf(0.975, 3) = 3.182446305284263), so the bounds are 0.445739743239121 and
// 4.5542602567608785 for {1, 2, 3, 4}.
TEST(ResultsMathTest, SummarizeGivesTheStudentTIntervalOfTheMean) {
  CellStats s = Summarize({1, 2, 3, 4});
  EXPECT_NEAR(s.ci_low, 0.445739743239121, 1e-9);
  EXPECT_NEAR(s.ci_high, 4.5542602567608785, 1e-9);
  // Two runs: t(0.975, 1) = 12.706204736174698 and s = √0.5 for {0, 1}.
  CellStats two = Summarize({0, 1});
  EXPECT_NEAR(two.ci_high - two.mean, 12.706204736174698 * std::sqrt(0.5) / std::sqrt(2.0), 1e-9);
  EXPECT_TRUE(std::isnan(Summarize({7}).ci_low)) << "one run has no interval";
  EXPECT_TRUE(std::isnan(Summarize({7}).ci_high));
  EXPECT_TRUE(std::isnan(Summarize({1.0, std::nan("")}).ci_low)) << "a diverged seed has none";
}

// The seed-averaged curve the dashboard and `cart report` both draw: runs logged at different
// steps meet on one grid of ranges; each range's point is at the last step logged in it.
TEST(ResultsMathTest, SeedMeanCurveAveragesRunsOnOneGridOfSteps) {
  // Steps 0..9 in 5 ranges of two steps: {0,1} {2,3} {4,5} {6,7} {8,9}.
  const std::vector<std::vector<StepValue>> runs = {
      {{0, 4}, {1, 2}, {2, 6}, {8, 1}},  // ranges 0 (mean 3), 1 (6), 4 (1)
      {{1, 5}, {3, 8}, {9, 3}},          // ranges 0 (5), 1 (8), 4 (3)
  };
  const std::vector<CurvePoint> curve = SeedMeanCurve(runs, 5);
  ASSERT_EQ(curve.size(), 3u) << "ranges no run logged in give no point";
  EXPECT_EQ(curve[0].step, 1);
  EXPECT_EQ(curve[0].stats.mean, 4);
  EXPECT_EQ(curve[0].stats.n, 2);
  EXPECT_EQ(curve[0].min, 3);
  EXPECT_EQ(curve[0].max, 5);
  EXPECT_EQ(curve[1].step, 3);
  EXPECT_EQ(curve[1].stats.mean, 7);
  EXPECT_EQ(curve[2].step, 9);
  EXPECT_EQ(curve[2].stats.mean, 2);
  // The interval is Summarize's, over the runs' values in the range.
  EXPECT_EQ(curve[2].stats.ci_low, Summarize({1, 3}).ci_low);
  // Fewer steps than ranges: one point per logged step.
  const std::vector<CurvePoint> fine = SeedMeanCurve({{{0, 1}, {1, 2}, {2, 3}}}, 200);
  ASSERT_EQ(fine.size(), 3u);
  EXPECT_EQ(fine[2].step, 2);
  EXPECT_EQ(fine[2].stats.n, 1);
  // A diverged run makes its range's mean, interval and band NaN; it still counts.
  const std::vector<CurvePoint> diverged =
      SeedMeanCurve({{{0, 1}, {1, std::nan("")}}, {{0, 2}, {1, 3}}}, 2);
  ASSERT_EQ(diverged.size(), 2u);
  EXPECT_EQ(diverged[0].stats.mean, 1.5);
  EXPECT_TRUE(std::isnan(diverged[1].stats.mean));
  EXPECT_TRUE(std::isnan(diverged[1].min));
  EXPECT_TRUE(std::isnan(diverged[1].max));
  EXPECT_EQ(diverged[1].stats.n, 2);
  EXPECT_TRUE(SeedMeanCurve({}, 10).empty());
}

TEST(ResultsMathTest, RanksShareTiesAndPutNanLast) {
  EXPECT_THAT(Ranks({3, 1, 3, 2}, Goal::kMin), ElementsAre(3.5, 1, 3.5, 2));
  EXPECT_THAT(Ranks({3, 1, 3, 2}, Goal::kMax), ElementsAre(1.5, 4, 1.5, 3));
  EXPECT_THAT(Ranks({std::nan(""), 5, 7}, Goal::kMin), ElementsAre(3, 1, 2));
}

TEST(ResultsMathTest, RankCorrelationIsOneForSameOrderAndMinusOneForReversed) {
  EXPECT_NEAR(RankCorrelation({1, 2, 3, 4}, {1, 2, 3, 4}), 1.0, kTol);
  EXPECT_NEAR(RankCorrelation({1, 2, 3, 4}, {4, 3, 2, 1}), -1.0, kTol);
  EXPECT_TRUE(std::isnan(RankCorrelation({1}, {1})));
  EXPECT_TRUE(std::isnan(RankCorrelation({1, 1}, {1, 2})));
}

}  // namespace
}  // namespace cart::store
