// Seed plans (RunStore::ApplyPlan, ListPlans): the runs a plan adds take the sweep's next free
// indexes, derive from each other or from existing runs, carry the plan's id, and are written with
// the plan and its claims' looks in one transaction; a sweep deleted since the plan was made is
// refused with nothing written.

#include <cmath>
#include <utility>

#include "common/strings.h"
#include "store/run_store.h"
#include "tests/store/store_fixture.h"
#include "tests/support/test_support.h"

namespace cart::store {
namespace {

using ::cart::store::testing::By;
using ::cart::store::testing::kT0;
using ::cart::store::testing::MakeRun;
using ::cart::store::testing::MakeSweep;
using ::cart::store::testing::OpenStore;
using ::cart::testing::StatusIs;
using ::cart::testing::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

class PlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = OpenStore(dir_.File("cart.db"));
    ASSERT_NE(store_, nullptr);
    NewRun eval = MakeRun("2", {{"R", "2"}});
    eval.kind = JobKind::kEval;
    eval.parent_name = "0";
    eval.parent_checkpoint = "final";
    auto created =
        store_->CreateSweep(MakeSweep("s",
                                      {MakeRun("0", {{"R", "2"}}),
                                       MakeRun("1", {{"R", "2"}, {"seed", "43"}}), std::move(eval)},
                                      5),
                            By("user:a", kT0));
    ASSERT_TRUE(created.ok()) << created.status();
    ids_ = created->run_ids;
  }

  // One new seed of the R = 2 config with its eval job, for claim c.
  NewPlan OneSeed(int64_t seed) const {
    NewPlan plan;
    plan.budget_hours = 10;
    plan.text = "{}";
    plan.claims.push_back({"c", 2, 3, 2, 0.5});
    NewRun train = MakeRun("", {{"R", "2"}, {"seed", StrCat(seed)}});
    NewRun eval = MakeRun("", {{"R", "2"}, {"seed", StrCat(seed)}});
    eval.kind = JobKind::kEval;
    eval.parent_checkpoint = "final";
    plan.runs.push_back({"s", std::move(train), -1});
    plan.runs.push_back({"s", std::move(eval), 0});
    return plan;
  }

  TempDir dir_;
  std::unique_ptr<RunStore> store_;
  std::vector<int64_t> ids_;
};

TEST_F(PlanTest, ItsRunsTakeTheSweepsNextIndexesAndDeriveFromEachOther) {
  CART_ASSERT_OK_AND_ASSIGN(AppliedPlan applied,
                            store_->ApplyPlan(OneSeed(44), By("user:b", kT0 + 10, "")));
  ASSERT_EQ(applied.run_ids.size(), 2u);
  CART_ASSERT_OK_AND_ASSIGN(RunRecord train, store_->GetRun(applied.run_ids[0]));
  CART_ASSERT_OK_AND_ASSIGN(RunRecord eval, store_->GetRun(applied.run_ids[1]));
  EXPECT_EQ(train.name, "3");
  EXPECT_EQ(train.seed, 44);
  EXPECT_EQ(train.priority, 5);  // the sweep's
  EXPECT_EQ(train.state, RunState::kQueued);
  EXPECT_EQ(eval.name, "4");
  EXPECT_EQ(eval.parent_run_id, train.id);
  EXPECT_EQ(eval.state, RunState::kBlocked);  // until the new seed has trained
  CART_ASSERT_OK_AND_ASSIGN(std::vector<EventRecord> events, store_->RunEvents(train.id));
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.front().who, "user:b");
  EXPECT_EQ(events.front().why, StrCat("seed plan ", applied.plan_id));

  CART_ASSERT_OK_AND_ASSIGN(std::vector<PlanRecord> plans, store_->ListPlans());
  ASSERT_EQ(plans.size(), 1u);
  EXPECT_EQ(plans[0].id, applied.plan_id);
  EXPECT_EQ(plans[0].created_by, "user:b");
  EXPECT_EQ(plans[0].budget_hours, 10);
  EXPECT_EQ(plans[0].spending, "obrien-fleming");
  EXPECT_THAT(plans[0].run_ids, ElementsAre(train.id, eval.id));
  ASSERT_EQ(plans[0].claims.size(), 1u);
  EXPECT_EQ(plans[0].claims[0].claim, "c");
  EXPECT_EQ(plans[0].claims[0].seeds_now, 2);
  EXPECT_EQ(plans[0].claims[0].seeds_target, 3);

  // A second plan goes on from the indexes the first took.
  CART_ASSERT_OK_AND_ASSIGN(AppliedPlan again, store_->ApplyPlan(OneSeed(45), By("user:b", kT0)));
  CART_ASSERT_OK_AND_ASSIGN(RunRecord next, store_->GetRun(again.run_ids[0]));
  EXPECT_EQ(next.name, "5");
  CART_ASSERT_OK_AND_ASSIGN(plans, store_->ListPlans());
  EXPECT_EQ(plans.size(), 2u);
}

TEST_F(PlanTest, ADeletedSweepIsRefusedAndNothingIsWritten) {
  NewPlan plan = OneSeed(44);
  plan.runs[0].sweep = "gone";
  EXPECT_THAT(store_->ApplyPlan(plan, By("user:b", kT0)),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("sweep 'gone' does not exist")));
  CART_ASSERT_OK_AND_ASSIGN(std::vector<PlanRecord> plans, store_->ListPlans());
  EXPECT_TRUE(plans.empty());
  CART_ASSERT_OK_AND_ASSIGN(std::vector<RunRecord> runs, store_->ListRuns({}));
  EXPECT_EQ(runs.size(), ids_.size());

  plan = OneSeed(44);
  plan.runs[1].parent_entry = -1;
  plan.runs[1].run.parent_run_id = 9999;
  EXPECT_THAT(store_->ApplyPlan(plan, By("user:b", kT0)),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("run 9999, which was deleted")));
  CART_ASSERT_OK_AND_ASSIGN(runs, store_->ListRuns({}));
  EXPECT_EQ(runs.size(), ids_.size());
}

TEST_F(PlanTest, ACancelledSweepTakesNoPlannedSeeds) {
  CART_ASSERT_OK(store_->CancelSweep("s", By("user:a", kT0)).status());
  EXPECT_THAT(store_->ApplyPlan(OneSeed(44), By("user:b", kT0)),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("sweep 's' is cancelled: resume it")));
  CART_ASSERT_OK_AND_ASSIGN(std::vector<PlanRecord> plans, store_->ListPlans());
  EXPECT_TRUE(plans.empty());
}

TEST_F(PlanTest, AMalformedPlanIsRefusedNamingWhatIsWrong) {
  NewPlan plan = OneSeed(44);
  plan.power = 1;
  EXPECT_THAT(store_->ApplyPlan(plan, By("user:b", kT0)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("must each be in (0, 1)")));
  plan = OneSeed(44);
  plan.budget_hours = -1;
  EXPECT_THAT(store_->ApplyPlan(plan, By("user:b", kT0)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("budget -1")));
  plan = OneSeed(44);
  plan.runs[1].parent_entry = 1;
  EXPECT_THAT(store_->ApplyPlan(plan, By("user:b", kT0)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("must come earlier")));
  plan = OneSeed(44);
  plan.claims[0].seeds_target = 1;
  EXPECT_THAT(
      store_->ApplyPlan(plan, By("user:b", kT0)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("claim 'c' has seeds 2 -> 1")));
  plan = OneSeed(44);
  plan.runs[0].run.params.erase("steps");
  EXPECT_THAT(store_->ApplyPlan(plan, By("user:b", kT0)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'steps' is missing")));
  CART_ASSERT_OK_AND_ASSIGN(std::vector<PlanRecord> plans, store_->ListPlans());
  EXPECT_TRUE(plans.empty());
}

// Per-item outcomes of an evaluation job: fenced by the attempt, replaced per (task, loops),
// read back in order with the log-likelihoods bit for bit, refused naming the field.
TEST_F(PlanTest, EvalItemsAreFencedReplacedAndReadBackExactly) {
  CART_ASSERT_OK(store_->RegisterWorker("w", "test", 1LL << 34, kT0));
  CART_ASSERT_OK_AND_ASSIGN(auto claim, store_->ClaimNextRun("w", 1LL << 34, kT0));
  ASSERT_TRUE(claim.has_value());
  const int64_t run = claim->run.id, attempt = claim->attempt;
  EvalItems lambada{"lambada", 6, "101", "", {-1.5, -0.25, -1e-300}};
  EvalItems piqa{"piqa", 6, "01", "11", {}};
  EXPECT_THAT(store_->RecordEvalItems(run, attempt + 1, {piqa}, kT0),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("attempt")));
  CART_ASSERT_OK(store_->RecordEvalItems(run, attempt, {lambada, piqa}, kT0));
  piqa.correct = "11";
  CART_ASSERT_OK(store_->RecordEvalItems(run, attempt, {piqa}, kT0 + 1));
  CART_ASSERT_OK_AND_ASSIGN(std::vector<EvalItems> read, store_->ListEvalItems(run));
  ASSERT_EQ(read.size(), 2u);
  EXPECT_EQ(read[0].task, "lambada");
  EXPECT_EQ(read[0].correct, "101");
  EXPECT_EQ(read[0].logprob, lambada.logprob);
  EXPECT_EQ(read[1].correct, "11");  // replaced
  EXPECT_EQ(read[1].correct_norm, "11");
  EXPECT_TRUE(read[1].logprob.empty());

  EvalItems bad = piqa;
  bad.correct = "1x";
  EXPECT_THAT(store_->RecordEvalItems(run, attempt, {bad}, kT0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("one '0' or '1' per item")));
  bad = piqa;
  bad.correct_norm = "1";
  EXPECT_THAT(store_->RecordEvalItems(run, attempt, {bad}, kT0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("correct_norm (1)")));
  bad = lambada;
  bad.logprob[1] = std::nan("");
  EXPECT_THAT(store_->RecordEvalItems(run, attempt, {bad}, kT0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("item 1's log-likelihood")));
  bad = piqa;
  bad.loops = 17;
  EXPECT_THAT(store_->RecordEvalItems(run, attempt, {bad}, kT0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("loops must be 1..16")));
  EXPECT_THAT(store_->ListEvalItems(9999), StatusIs(absl::StatusCode::kNotFound, HasSubstr("run")));
  // They go with their sweep.
  CART_ASSERT_OK(
      store_->RecordAttemptOutcome(run, attempt, AttemptOutcome::kCancelled, By("worker:w", kT0)));
  CART_ASSERT_OK(store_->CancelSweep("s", By("user:a", kT0)).status());
  CART_ASSERT_OK(store_->DeleteSweep("s").status());
  EXPECT_THAT(store_->ListEvalItems(run), StatusIs(absl::StatusCode::kNotFound, HasSubstr("run")));
}

}  // namespace
}  // namespace cart::store
