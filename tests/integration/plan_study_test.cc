// The planner shown deciding a claim on real training (docs/study.md "Planning seeds"): a claim
// that cannot tell after two seeds per side — one loop against two at 60 steps on a Markov
// source, a small real difference in validation loss — is planned (`cart plan --apply`), its new
// seeds trained by two CPU workers, and decided at its next look by the sequential boundary;
// where a look still cannot tell, it is planned again (up to three looks). The same configs and
// seeds as a fixed design of five seeds per side are trained too (bit for bit the same runs on
// one machine), and the test prints what each design cost in runs and worker-seconds and what
// it decided. docs/measurements.md quotes the figures.

#include <signal.h>

#include <fstream>
#include <iostream>
#include <map>
#include <string>

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/cluster.h"
#include "tests/support/test_support.h"

namespace cart::testing {
namespace {

using ::testing::HasSubstr;

constexpr char kClaims[] = R"yaml(one_loop_better:
  claim: "one loop reaches a lower validation loss than two at 60 steps"
  section: "the planner's study (tests/integration/plan_study_test.cc)"
  published: "R = 2 − R = 1: about +0.005 nats"
  part: stage2
  tests:
    - kind: compare
      label: "validation loss, R = 2 − R = 1"
      metric: "val_loss/synth"
      a: {match: {R: "2"}}
      b: {match: {R: "1"}}
      direction: greater
      published_effect: 0.005
)yaml";

std::string Sweep(const std::string& name, const std::string& data, const std::string& seeds) {
  return StrCat("name: ", name, R"(
base:
  vocab: 32
  d: 64
  P: 1
  seq_len: 32
  batch: 4
  accum: 1
  lr: 3e-3
  lr_min: 3e-4
  warmup: 3
  log_every: 10
  eval_every: 60
  eval_sequences: 16
  threads: 1
  steps: 60
  checkpoint_every: 60
  train_data: )",
                data, "\n  val_data:\n    synth: ", data.substr(0, data.size() - 4),
                ".val.bin\ngrid: {R: [1, 2]}\nseeds: ", seeds, "\n");
}

// The verdict of the claim in the report of `sweep`, and its look ("" when not sequential).
struct Decision {
  std::string verdict, look;
};
Decision Report(Cluster& c, const std::string& sweep, const std::string& claims, int n) {
  const std::string out = c.dir() + "/report-" + sweep + StrCat(n);
  c.Cart({"report", "--stage2", sweep, "--claims", claims, "--no-plots", "--out", out});
  const std::string csv = ReadFile(out + "/claims.csv");
  Decision d;
  const size_t at = csv.find("one_loop_better,");
  if (at == std::string::npos) return d;
  const size_t comma = csv.find(',', at + 16);
  d.verdict = csv.substr(at + 16, comma - at - 16);
  const std::string md = ReadFile(out + "/report.md");
  const size_t look = md.find("- `one_loop_better`: ");
  if (look != std::string::npos) d.look = md.substr(look + 21, md.find('\n', look) - look - 21);
  return d;
}

bool AllSucceeded(Cluster& c, const std::string& sweep, size_t runs) {
  const std::vector<cart::v1::RunView> all = c.Runs(sweep);
  if (all.size() != runs) return false;
  for (const auto& r : all) {
    if (r.state() != cart::v1::RUN_STATE_SUCCEEDED) return false;
  }
  return true;
}

// Runs and the worker-seconds their attempts took (lease to end).
std::pair<size_t, double> Cost(Cluster& c, const std::string& sweep) {
  double seconds = 0;
  const std::vector<cart::v1::RunView> all = c.Runs(sweep);
  for (const auto& r : all) {
    const cart::v1::GetRunResponse got = c.GetRun(r.run_id());
    for (const auto& a : got.attempts()) {
      if (a.ended_us() > 0) seconds += static_cast<double>(a.ended_us() - a.leased_us()) / 1e6;
    }
  }
  return {all.size(), seconds};
}

TEST(PlanStudyTest, AClaimThatCannotTellAfterTwoSeedsIsDecidedWithThePlannersSeeds) {
  Cluster c;
  c.StartCartd();
  const std::string data = c.dir() + "/synth.bin";
  c.Cart({"data", "synth", "--vocab", "32", "--order", "1", "--concentration", "0.3", "--tokens",
          "200000", "--val-tokens", "8192", "--seed", "3", "--out", data});
  const std::string claims = c.WriteFile("claims.yaml", kClaims);
  c.Cart({"sweep", "submit", c.WriteFile("seq.yaml", Sweep("seq", data, "[1, 2]"))});
  c.StartWorker("a");
  c.StartWorker("b");
  ASSERT_TRUE(c.WaitFor([&] { return AllSucceeded(c, "seq", 4); }, std::chrono::seconds(300)))
      << c.Log("worker-a.log");

  Decision d = Report(c, "seq", claims, 0);
  ASSERT_EQ(d.verdict, "cannot tell") << "two seeds per side already decided: the study shows "
                                         "nothing";
  EXPECT_EQ(d.look, "");
  int looks = 1;
  size_t runs = 4;
  while (d.verdict == "cannot tell" && looks < 4) {
    const std::string planned = c.Cart({"plan", "--stage2", "seq", "--claims", claims, "--apply"});
    ASSERT_THAT(planned, HasSubstr("queued: ")) << planned;
    std::cout << "plan study: look " << looks << ": " << planned;
    runs = c.Runs("seq").size();
    ASSERT_TRUE(c.WaitFor([&] { return AllSucceeded(c, "seq", runs); }, std::chrono::seconds(600)))
        << c.Log("worker-a.log");
    ++looks;
    d = Report(c, "seq", claims, looks);
    EXPECT_THAT(d.look, HasSubstr(StrCat("look ", looks, ": "))) << d.look;
    std::cout << "plan study: look " << looks << ": " << d.verdict << " (" << d.look << ")\n";
    if (d.look.find("stop for futility") != std::string::npos) break;
  }
  EXPECT_EQ(d.verdict, "holds") << d.look;
  const auto [seq_runs, seq_seconds] = Cost(c, "seq");

  // The fixed design: five seeds per side, the same configs and seeds.
  c.Cart({"sweep", "submit", c.WriteFile("fixed.yaml", Sweep("fixed", data, "[1, 2, 3, 4, 5]"))});
  ASSERT_TRUE(c.WaitFor([&] { return AllSucceeded(c, "fixed", 10); }, std::chrono::seconds(600)));
  const Decision fixed = Report(c, "fixed", claims, 0);
  const auto [fixed_runs, fixed_seconds] = Cost(c, "fixed");
  std::cout << "plan study: sequential: " << d.verdict << " at look " << looks << " with "
            << seq_runs / 2 << " seeds per side: " << seq_runs << " runs, " << seq_seconds
            << " worker-s; fixed five seeds: " << fixed.verdict << ": " << fixed_runs << " runs, "
            << fixed_seconds << " worker-s; runs " << static_cast<double>(seq_runs) / fixed_runs
            << " of the fixed design's\n";
  EXPECT_EQ(fixed_runs, 10u);
}

}  // namespace
}  // namespace cart::testing
