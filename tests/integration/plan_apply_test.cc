// `cart plan --apply` against a real cartd (docs/study.md "Planning seeds"): a study whose
// no-hyper-connection ablation cannot tell after three seeds gets the planner's seeds queued as
// new seeds of the same sweep, each with a copy of the evaluation job derived from its arm's run
// (in another sweep); the plan is recorded with the claim's look; a budget below one run, a
// budget without --apply and --apply on a database file are refused naming the flag. Once the
// new seeds have finished (written here through the store, as a worker would have), `cart
// report` decides the claim at its second look, at the boundary that spends the rest of α.

#include <signal.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "store/run_store.h"
#include "tests/integration/cluster.h"
#include "tests/store/store_fixture.h"
#include "tests/support/test_support.h"

namespace cart::testing {
namespace {

using ::cart::store::MetricPoint;
using ::cart::store::RunRecord;
using ::cart::store::testing::FinishAllQueued;
using ::cart::store::testing::MakeRun;
using ::cart::store::testing::MakeSweep;
using ::cart::store::testing::OpenStore;
using ::cart::store::testing::PointsAt;
using ::testing::HasSubstr;

std::string P(const RunRecord& r, const char* key) {
  auto it = r.params.find(key);
  return it == r.params.end() ? "" : it->second;
}

// Perplexity of an ablations run: the baseline 100 ± a little by seed; without hyper-connections
// the seeds' log-differences 0.01, −0.02, 0.005 (cannot tell), then about +1.2 % for every seed
// the plan adds.
std::vector<MetricPoint> Ppl(const RunRecord& r) {
  const int64_t seed = ParseInt64(P(r, "seed")).value_or(0);
  const double base = 100 + static_cast<double>(seed % 5) - 2;
  double delta = 0;
  if (P(r, "hyper") == "off") {
    delta = seed <= 3 ? std::vector<double>{0.01, -0.02, 0.005}[seed - 1]
                      : 0.012 + 0.004 * static_cast<double>(seed % 3 - 1);
  }
  return PointsAt(100, {{"val_ppl/speeches", base * std::exp(delta)}});
}

// A run's index in its sweep, from its name ("ablations/7" or "7").
int Index(const cart::v1::RunView& r) {
  const size_t slash = r.name().rfind('/');
  return static_cast<int>(
      ParseInt64(slash == std::string::npos ? r.name() : r.name().substr(slash + 1)).value_or(-1));
}

TEST(PlanApplyTest, ThePlannedSeedsAreQueuedWithTheirDerivedJobsAndDecideAtTheNextLook) {
  Cluster c;
  const std::string db = c.dir() + "/cartd/cart.db";
  std::filesystem::create_directories(c.dir() + "/cartd");
  {
    std::unique_ptr<store::RunStore> s = OpenStore(db);
    ASSERT_NE(s, nullptr);
    std::vector<store::NewRun> runs;
    for (const char* hyper : {"on", "off"}) {
      for (const char* seed : {"1", "2", "3"}) {
        runs.push_back(MakeRun(StrCat(runs.size()), {{"kv", "frozen"},
                                                     {"core", "shared"},
                                                     {"core_attn", "cross"},
                                                     {"hyper", hyper},
                                                     {"R", "4"},
                                                     {"seed", seed}}));
      }
    }
    const store::Audit by{1, "user:tester", "submitted"};
    auto made = s->CreateSweep(MakeSweep("ablations", runs), by);
    ASSERT_TRUE(made.ok()) << made.status();
    // One evaluation of each trained run, in a sweep of its own.
    std::vector<store::NewRun> evals;
    for (size_t i = 0; i < runs.size(); ++i) {
      store::NewRun e = runs[i];
      e.name = StrCat(i);
      e.kind = JobKind::kEval;
      e.eval_loops = {1, 4};
      e.parent_run_id = made->run_ids[i];
      e.parent_checkpoint = "final";
      evals.push_back(std::move(e));
    }
    ASSERT_TRUE(s->CreateSweep(MakeSweep("probe", evals), by).ok());
    FinishAllQueued(*s, Ppl);
    // A sweep budget far below one new seed (docs/operations.md "Budgets").
    ASSERT_TRUE(s->SetSweepBudget("ablations", 1e-9, by).ok());
  }
  c.StartCartd();

  // Refusals, each naming what is wrong.
  std::string out = c.Cart({"plan", "--apply", "--budget", "0.0000001"}, true);
  EXPECT_THAT(out, HasSubstr("--budget 1e-07 RTX 3090 hours is smaller than one run"));
  out = c.Cart({"plan", "--budget", "10"}, true);
  EXPECT_THAT(out, HasSubstr("--budget holds what --apply queues; give --apply too"));
  out = c.Cart({"plan", "--apply", "--db", db}, true);
  EXPECT_THAT(out, HasSubstr("--apply queues runs through cartd; drop --db"));
  EXPECT_EQ(c.Runs("ablations").size(), 6u);

  // The plan, held by the sweep's budget until an admin raises it, then applied.
  out = c.Cart({"plan", "--json"});
  const size_t at = out.find("\"claim\": \"ablation_no_hyper\"");
  ASSERT_NE(at, std::string::npos) << out;
  out = c.Cart({"plan", "--apply"});
  EXPECT_THAT(out, HasSubstr("nothing to queue: every planned claim passes a budget"));
  EXPECT_THAT(out, HasSubstr("left out: ablation_no_hyper (its seeds in sweep 'ablations' take "));
  EXPECT_EQ(c.Runs("ablations").size(), 6u);
  c.Cart({"budget", "set", "--sweep", "ablations", "--device-hours", "1000", "--token",
          c.admin_token()});
  out = c.Cart({"plan", "--apply"});
  EXPECT_THAT(out, HasSubstr("plan 1 queued: "));
  EXPECT_THAT(out, HasSubstr("for ablation_no_hyper"));

  const std::vector<cart::v1::RunView> trained = c.Runs("ablations");
  const std::vector<cart::v1::RunView> probes = c.Runs("probe");
  ASSERT_GT(trained.size(), 6u);
  const size_t added = trained.size() - 6;
  ASSERT_EQ(added % 2, 0u);  // both arms reach the same seeds
  const int64_t seeds = 3 + static_cast<int64_t>(added / 2);
  std::map<std::string, std::set<std::string>> seeds_of;  // hyper -> seeds
  std::map<int64_t, const cart::v1::RunView*> new_runs;
  for (const cart::v1::RunView& r : trained) {
    seeds_of[r.params().at("hyper")].insert(r.params().at("seed"));
    if (Index(r) >= 6) {
      new_runs.emplace(r.run_id(), &r);
      EXPECT_EQ(r.state(), cart::v1::RUN_STATE_QUEUED);
      EXPECT_EQ(r.params().at("kv"), "frozen");
    }
  }
  EXPECT_EQ(seeds_of["on"].size(), static_cast<size_t>(seeds));
  EXPECT_EQ(seeds_of["off"], seeds_of["on"]);
  EXPECT_TRUE(seeds_of["on"].count(StrCat(seeds)));  // 4 … seeds
  // Each new seed brought its evaluation, blocked until it has trained.
  ASSERT_EQ(probes.size(), 6 + added);
  std::set<int64_t> evaluated;
  for (const cart::v1::RunView& e : probes) {
    if (Index(e) < 6) continue;
    EXPECT_EQ(e.kind(), cart::v1::JOB_KIND_EVAL);
    EXPECT_EQ(e.state(), cart::v1::RUN_STATE_BLOCKED);
    auto parent = new_runs.find(e.parent_run_id());
    ASSERT_NE(parent, new_runs.end()) << e.name();
    EXPECT_EQ(e.params().at("seed"), parent->second->params().at("seed"));
    evaluated.insert(e.parent_run_id());
  }
  EXPECT_EQ(evaluated.size(), added);

  // The plan is recorded with the claim's look.
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer " + c.user_token());
  cart::v1::ListPlansResponse plans;
  ASSERT_TRUE(c.stub().ListPlans(&ctx, {}, &plans).ok());
  ASSERT_EQ(plans.plans_size(), 1);
  EXPECT_EQ(plans.plans(0).created_by(), "user:tester");
  ASSERT_EQ(plans.plans(0).claims_size(), 1);
  EXPECT_EQ(plans.plans(0).claims(0).claim(), "ablation_no_hyper");
  EXPECT_EQ(plans.plans(0).claims(0).seeds_now(), 3);
  EXPECT_EQ(plans.plans(0).claims(0).seeds_target(), seeds);
  EXPECT_EQ(plans.plans(0).run_ids_size(), static_cast<int>(2 * added));

  // Until a new seed finishes the claim waits: planning again queues nothing for it.
  out = c.Cart({"plan"});
  EXPECT_THAT(out, HasSubstr("not planned: ablation_no_hyper: "));
  EXPECT_THAT(out, HasSubstr("plan 1 queued seeds for it"));

  // The new seeds finish (as workers would report them); the report decides at look 2.
  c.KillCartd(SIGTERM);
  {
    std::unique_ptr<store::RunStore> s = OpenStore(db);
    ASSERT_NE(s, nullptr);
    FinishAllQueued(*s, Ppl);
  }
  const std::string report_dir = c.dir() + "/report";
  out = c.Cart({"report", "--db", db, "--no-plots", "--out", report_dir});
  const std::string md = ReadFile(report_dir + "/report.md");
  EXPECT_THAT(md, HasSubstr(StrCat("- `ablation_no_hyper`: look 2: ", seeds, " of ", seeds,
                                   " seeds (t = 1.00); α spent 0.05 of 0.05")));
  EXPECT_THAT(md, HasSubstr(": crossed"));
  const std::string csv = ReadFile(report_dir + "/claims.csv");
  EXPECT_THAT(csv, HasSubstr("ablation_no_hyper,holds,"));

  // Two sides that name the same config (a training side, and an evaluation of its runs) are
  // one: the larger count of new seeds, each seed once.
  c.StartCartd();
  int64_t probe_of_baseline = 0;
  std::map<std::string, std::string> baseline;
  for (const cart::v1::RunView& e : c.Runs("probe")) {
    const cart::v1::GetRunResponse parent = c.GetRun(e.parent_run_id());
    if (parent.run().params().at("hyper") == "on") {
      probe_of_baseline = e.run_id();
      baseline.insert(parent.run().params().begin(), parent.run().params().end());
      break;
    }
  }
  ASSERT_GT(probe_of_baseline, 0);
  baseline.erase("seed");
  cart::v1::ApplyPlanRequest twice;
  cart::v1::PlanSide* by_eval = twice.add_sides();
  by_eval->set_template_run_id(probe_of_baseline);
  by_eval->set_runs(2);
  cart::v1::PlanSide* by_config = twice.add_sides();
  by_config->set_sweep("ablations");
  by_config->mutable_config()->insert(baseline.begin(), baseline.end());
  by_config->set_runs(3);
  cart::v1::PlanClaimLook* look = twice.add_claims();
  look->set_claim("mine");
  look->set_seeds_now(1);
  look->set_seeds_target(4);
  twice.set_power(0.8);
  twice.set_alpha(0.05);
  grpc::ClientContext apply_ctx;
  apply_ctx.AddMetadata("authorization", "Bearer " + c.user_token());
  cart::v1::ApplyPlanResponse merged;
  ASSERT_TRUE(c.stub().ApplyPlan(&apply_ctx, twice, &merged).ok());
  std::set<int64_t> new_seeds;
  int64_t new_trained = 0;
  for (const cart::v1::PlannedRun& r : merged.runs()) {
    if (r.kind() != cart::v1::JOB_KIND_TRAIN) continue;
    ++new_trained;
    EXPECT_TRUE(new_seeds.insert(r.seed()).second) << "seed " << r.seed() << " queued twice";
    EXPECT_GT(r.seed(), seeds) << "seed " << r.seed() << " was taken";
  }
  EXPECT_EQ(new_trained, 3);
}

// An evaluation job stores each item's outcome of its zero-shot tasks at every loop count
// (RecordEvalItems before the loop count's metrics), and GetEvalItems reads them back: their
// mean is the accuracy metric, and LAMBADA's log-likelihoods give its perplexity.
TEST(EvalItemsTest, AnEvaluationJobStoresEachItemsOutcomeBesideItsMetrics) {
  Cluster c;
  c.StartCartd();
  const std::vector<std::pair<std::string, std::string>> eats = {
      {"cat", "fish"}, {"dog", "meat"}, {"cow", "grass"}, {"bird", "seeds"}};
  std::string text, lambada, piqa;
  for (int i = 0; i < 400; ++i) {
    const auto& [animal, food] = eats[(i * 7) % eats.size()];
    text += "the " + animal + " eats " + food + ".\n";
  }
  for (size_t i = 0; i < eats.size(); ++i) {
    const auto& [animal, food] = eats[i];
    lambada += StrCat(R"({"text": "the )", animal, " eats ", food, R"("})", "\n");
    piqa += StrCat(R"({"goal": "the )", animal, R"( eats", "sol1": ")",
                   eats[(i + 1) % eats.size()].second, R"(", "sol2": ")", food, R"("})", "\n");
  }
  c.WriteFile("eats.txt", text);
  const std::string lambada_file = c.WriteFile("lambada_test.jsonl", lambada);
  const std::string piqa_file = c.WriteFile("valid.jsonl", piqa);
  c.WriteFile("valid-labels.lst", "1\n1\n1\n1\n");
  const std::string data = c.dir() + "/eats.bin";
  c.Cart({"data", "prepare", c.dir() + "/eats.txt", "--format", "lines", "--out", data});
  const std::string file = c.WriteFile(
      "e.yaml",
      StrCat("name: e\nbase:\n  vocab: 258\n  d: 64\n  P: 1\n  R: 2\n  seq_len: 32\n  batch: 4\n"
             "  lr: 1e-2\n  warmup: 3\n  eval_every: 0\n  threads: 1\n  steps: 30\n"
             "  checkpoint_every: 30\n  train_data: ",
             data, "\n  tasks:\n    lambada: lambada=", lambada_file,
             "\n    piqa: piqa=", piqa_file,
             "\nseeds: [1]\nderived:\n  - name: varR\n    from: {run: 0, checkpoint: final}\n"
             "    eval_loops: [1, 2]\n"));
  c.Cart({"sweep", "submit", file});
  const int64_t eval = RunId(c, "e", 1);
  ASSERT_GT(eval, 0);
  c.StartWorker("a");
  ASSERT_TRUE(
      c.WaitFor([&] { return c.GetRun(eval).run().state() == cart::v1::RUN_STATE_SUCCEEDED; },
                std::chrono::seconds(180)))
      << c.Log("worker-a.log");

  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer " + c.user_token());
  cart::v1::GetEvalItemsRequest req;
  req.set_run_id(eval);
  cart::v1::GetEvalItemsResponse items;
  ASSERT_TRUE(c.stub().GetEvalItems(&ctx, req, &items).ok());
  ASSERT_EQ(items.tasks_size(), 4);  // lambada and piqa, at 1 and 2 loops
  const std::map<int64_t, double> acc = c.Series(eval, "task_acc/lambada");
  const std::map<int64_t, double> ppl = c.Series(eval, "task_ppl/lambada");
  const std::map<int64_t, double> piqa_acc = c.Series(eval, "task_acc/piqa");
  for (const cart::v1::EvalItems& e : items.tasks()) {
    ASSERT_EQ(e.correct().size(), 4u) << e.task();
    const double right =
        static_cast<double>(std::count(e.correct().begin(), e.correct().end(), '1'));
    if (e.task() == "lambada") {
      ASSERT_EQ(e.logprob_size(), 4);
      EXPECT_TRUE(e.correct_norm().empty());
      EXPECT_DOUBLE_EQ(right / 4, acc.at(e.loops()));
      double sum = 0;
      for (double lp : e.logprob()) sum += lp;
      EXPECT_NEAR(std::exp(-sum / 4), ppl.at(e.loops()), 1e-9 * ppl.at(e.loops()));
    } else {
      EXPECT_EQ(e.task(), "piqa");
      EXPECT_EQ(e.correct_norm().size(), 4u);
      EXPECT_EQ(e.logprob_size(), 0);
      EXPECT_DOUBLE_EQ(right / 4, piqa_acc.at(e.loops()));
    }
  }
  // An unknown run is named.
  grpc::ClientContext again;
  again.AddMetadata("authorization", "Bearer " + c.user_token());
  req.set_run_id(99999);
  const grpc::Status unknown = c.stub().GetEvalItems(&again, req, &items);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace cart::testing
