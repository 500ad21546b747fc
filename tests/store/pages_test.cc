// The paged reads behind the dashboard and the list commands (store/pages.h) on a real SQLite
// file: sorting, filtering, paging, latest values, sweep progress and varying keys.

#include "store/pages.h"

#include <limits>

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

class PagesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = OpenStore(dir_.File("cart.db"));
    // Six runs over d × seed; loss = d / 100 + seed, so the order by loss is known.
    std::vector<NewRun> runs;
    int index = 0;
    for (const char* d : {"64", "512", "128"}) {
      for (const char* seed : {"1", "2"}) {
        runs.push_back(MakeRun(std::to_string(index++), {{"d", d},
                                                         {"seed", seed},
                                                         {"batch", "4"},
                                                         {"seq_len", "8"},
                                                         {"steps", "10"},
                                                         {"note", "<b>x</b>"}}));
      }
    }
    ASSERT_TRUE(store_->CreateSweep(MakeSweep("grid", runs), By("user:t", kT0)).ok());
    // The first four succeed with points; the last two are left RUNNING (no outcome).
    int finished = 0;
    FinishAllQueued(
        *store_,
        [](const RunRecord& run) {
          const double loss =
              std::stod(run.params.at("d")) / 100 + std::stod(run.params.at("seed"));
          std::vector<MetricPoint> points = PointsAt(5, {{"loss", loss + 1}, {"tokens", 160}});
          for (MetricPoint& p :
               PointsAt(8, {{"loss", loss}, {"tokens", 256}, {"tokens_per_s", 100}})) {
            points.push_back(p);
          }
          return points;
        },
        [&](const RunRecord&) -> std::optional<AttemptOutcome> {
          return finished++ < 4 ? std::optional<AttemptOutcome>(AttemptOutcome::kSucceeded)
                                : std::nullopt;
        });
  }

  TempDir dir_;
  std::unique_ptr<RunStore> store_;
};

std::vector<std::string> Names(const RunPage& page) {
  std::vector<std::string> out;
  for (const RunRow& row : page.rows) out.push_back(row.run.name);
  return out;
}

TEST_F(PagesTest, PagesInIdOrderWithTotalsWorkersStepsAndLatestValues) {
  RunPageRequest request;
  request.filter.sweeps = {"grid"};
  request.metrics = {"loss", "rho_max"};
  request.limit = 4;
  absl::StatusOr<RunPage> first = store_->ListRunPage(request);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->total, 6);
  EXPECT_THAT(Names(*first), ElementsAre("0", "1", "2", "3"));
  const RunRow& row = first->rows[0];
  EXPECT_EQ(row.worker_id, "fixture-worker");
  EXPECT_EQ(row.step, 8);
  EXPECT_DOUBLE_EQ(row.latest.at("loss"), 0.64 + 1);
  EXPECT_EQ(row.latest.count("rho_max"), 0u);  // never logged
  EXPECT_EQ(row.run.params.at("note"), "<b>x</b>");
  request.offset = 4;
  absl::StatusOr<RunPage> second = store_->ListRunPage(request);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->total, 6);
  EXPECT_THAT(Names(*second), ElementsAre("4", "5"));
}

TEST_F(PagesTest, SortsByMetricParamAndStateAndFilters) {
  RunPageRequest request;
  request.filter.sweeps = {"grid"};
  request.metrics = {"loss"};
  request.limit = 0;
  request.sort = "metric:loss";
  request.descending = true;
  absl::StatusOr<RunPage> page = store_->ListRunPage(request);
  ASSERT_TRUE(page.ok()) << page.status();
  // Losses: d 512 → 6.12/7.12, d 128 → 2.28/3.28, d 64 → 1.64/2.64.
  EXPECT_THAT(Names(*page), ElementsAre("3", "2", "5", "1", "4", "0"));
  // Numeric order of a config value (text order would put 512 before 64).
  request.sort = "param:d";
  request.descending = false;
  page = store_->ListRunPage(request);
  ASSERT_TRUE(page.ok());
  EXPECT_THAT(Names(*page), ElementsAre("0", "1", "4", "5", "2", "3"));
  request.filter.states = {RunState::kRunning};
  request.sort = "state";
  page = store_->ListRunPage(request);
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->total, 2);
  EXPECT_THAT(Names(*page), ElementsAre("4", "5"));
  request.filter.states = {};
  request.filter.params = {{"seed", "2"}};
  page = store_->ListRunPage(request);
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->total, 3);
  request.sort = "colour";
  EXPECT_THAT(store_->ListRunPage(request),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'colour' is not one of")));
  // A metric's name by the rule the store keeps names by, whichever front end asked.
  for (const std::string bad : {std::string("metric:has space"), "metric:" + std::string(129, 'm'),
                                std::string("metric:a;b")}) {
    request.sort = bad;
    EXPECT_THAT(store_->ListRunPage(request),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(": not a metric name")))
        << bad;
  }
  request.sort = "metric:val/wiki.ppl_2-x";
  EXPECT_TRUE(store_->ListRunPage(request).ok());
  request.sort = "id";
  request.offset = -1;
  EXPECT_THAT(store_->ListRunPage(request),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("must not be negative")));
}

TEST_F(PagesTest, SweepProgressCountsStatesTokensAndThroughput) {
  absl::StatusOr<std::vector<SweepProgress>> sweeps = store_->ListSweepProgress();
  ASSERT_TRUE(sweeps.ok()) << sweeps.status();
  ASSERT_EQ(sweeps->size(), 1u);
  const SweepProgress& p = (*sweeps)[0];
  EXPECT_EQ(p.sweep.name, "grid");
  EXPECT_EQ(p.sweep.run_counts.at(RunState::kSucceeded), 4);
  EXPECT_EQ(p.sweep.run_counts.at(RunState::kRunning), 2);
  EXPECT_EQ(p.train_runs, 6);
  // Planned: 6 runs × 10 steps × batch 4 × seq_len 8 = 1,920. Done: 4 finished × 320 plus the two
  // running runs' latest "tokens" (256 each).
  EXPECT_EQ(p.planned_tokens, 1920);
  EXPECT_EQ(p.done_tokens, 4 * 320 + 2 * 256);
  EXPECT_DOUBLE_EQ(p.tokens_per_s, 200);  // the running runs only
}

// One user's sweep inside every validated bound must not break everyone's sweeps page: three runs
// of a billion steps × 1,048,576 sequences × 4,096 micro-batches plan 1.3e19 tokens, past 2^63,
// which SQLite's sum() refused as "integer overflow" (the page answered 500 for good).
TEST_F(PagesTest, SweepProgressSaturatesInsteadOfOverflowing) {
  std::vector<NewRun> runs;
  for (int i = 0; i < 3; ++i) {
    runs.push_back(MakeRun(std::to_string(i), {{"seed", std::to_string(i)},
                                               {"batch", "1048576"},
                                               {"accum", "4096"},
                                               {"seq_len", "1"},
                                               {"steps", "1000000000"}}));
  }
  ASSERT_TRUE(store_->CreateSweep(MakeSweep("huge", runs), By("user:t", kT0)).ok());
  absl::StatusOr<std::vector<SweepProgress>> sweeps = store_->ListSweepProgress();
  ASSERT_TRUE(sweeps.ok()) << sweeps.status();
  ASSERT_EQ(sweeps->size(), 2u);
  for (const SweepProgress& p : *sweeps) {
    if (p.sweep.name == "grid") {
      EXPECT_EQ(p.planned_tokens, 1920);  // the other user's figures are untouched
    } else {
      EXPECT_EQ(p.sweep.name, "huge");
      EXPECT_EQ(p.planned_tokens, std::numeric_limits<int64_t>::max());
      EXPECT_EQ(p.done_tokens, 0);
    }
  }
}

TEST_F(PagesTest, SweepKeysNameTheVaryingKeysAndLoggedMetrics) {
  absl::StatusOr<SweepKeys> keys = store_->GetSweepKeys("grid");
  ASSERT_TRUE(keys.ok()) << keys.status();
  EXPECT_THAT(keys->varying, ElementsAre("d", "seed"));
  EXPECT_THAT(keys->metrics, ElementsAre("loss", "tokens", "tokens_per_s"));
  EXPECT_THAT(store_->GetSweepKeys("nope"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("nope")));
  absl::StatusOr<StoreTotals> totals = store_->Totals();
  ASSERT_TRUE(totals.ok());
  EXPECT_EQ(totals->runs.at(RunState::kSucceeded), 4);
  EXPECT_EQ(totals->artifacts, 0);
}

}  // namespace
}  // namespace cart::store
