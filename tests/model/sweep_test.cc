#include "model/sweep.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace cart::model {
namespace {

using ::cart::testing::StatusIs;
using ::testing::HasSubstr;

constexpr char kStage1[] = R"(name: stage1
base:
  d: 256
  steps: 3000
  seq_len: 512
grid:
  d: [256, 512, 768, 1024]
  R: [2, 4, 6, 8]
  P: [2, 3, 4, 6]
seeds: [42]
priority: 5
)";

TEST(SweepTest, Stage1ExpandsToSixtyFourRunsWithAccounting) {
  CART_ASSERT_OK_AND_ASSIGN(SweepSpec spec, ParseSweepYaml(kStage1, "stage1.yaml"));
  EXPECT_EQ(spec.priority, 5);
  CART_ASSERT_OK_AND_ASSIGN(auto runs, ExpandSweep(spec, "stage1.yaml"));
  ASSERT_EQ(runs.size(), 64u);
  EXPECT_EQ(runs[0].name, "stage1/0");
  EXPECT_EQ(runs[0].params.at("d"), "256");
  EXPECT_EQ(runs[0].params.at("R"), "2");
  EXPECT_EQ(runs[0].params.at("P"), "2");
  EXPECT_EQ(runs[1].params.at("P"), "3");  // last grid key varies fastest
  EXPECT_EQ(runs[63].params.at("d"), "1024");
  EXPECT_EQ(runs[63].params.at("R"), "8");
  EXPECT_EQ(runs[63].params.at("steps"), "3000");
  EXPECT_GT(runs[63].stored_params, runs[0].stored_params);
  EXPECT_GT(runs[63].memory_estimate_bytes, runs[0].memory_estimate_bytes);
  for (const auto& r : runs) EXPECT_EQ(r.kind, "train");
}

TEST(SweepTest, SeedsVaryFastestAndDerivedJobsFollowTheirParents) {
  constexpr char kYaml[] = R"(name: s2
base: {d: 64, vocab: 100, P: 1, steps: 10}
grid: {R: [2, 4]}
seeds: [42, 137, 271]
derived:
  - name: varR
    from: {match: {R: 4}, checkpoint: final}
    eval_loops: [1, 2, 8]
)";
  CART_ASSERT_OK_AND_ASSIGN(SweepSpec spec, ParseSweepYaml(kYaml, "s2.yaml"));
  CART_ASSERT_OK_AND_ASSIGN(auto runs, ExpandSweep(spec, "s2.yaml"));
  ASSERT_EQ(runs.size(), 9u);
  EXPECT_EQ(runs[0].params.at("seed"), "42");
  EXPECT_EQ(runs[1].params.at("seed"), "137");
  EXPECT_EQ(runs[3].params.at("R"), "4");
  for (int i = 6; i < 9; ++i) {
    EXPECT_EQ(runs[i].kind, "eval");
    EXPECT_EQ(runs[i].parent_index, i - 3);
    EXPECT_EQ(runs[i].parent_checkpoint_step, -1);
    EXPECT_EQ(runs[i].eval_loops, (std::vector<int>{1, 2, 8}));
  }
}

TEST(SweepTest, ErrorsNameFileLineKeyAndAllowedValues) {
  EXPECT_THAT(ParseSweepYaml("name: a\ngrid:\n  kv: [frozen, frozn]\n", "a.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a.yaml:3: grid.kv: 'frozn' is not one of frozen, recompute")));
  EXPECT_THAT(
      ParseSweepYaml("name: a\ngird: {}\n", "a.yaml"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("a.yaml:2: unknown key 'gird'")));
  EXPECT_THAT(ParseSweepYaml("name: a\nbase:\n  d: 256\n  widht: 3\n", "a.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("a.yaml:4")));
  EXPECT_THAT(ParseSweepYaml("grid: {}\n", "a.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("name: missing")));
  CART_ASSERT_OK_AND_ASSIGN(SweepSpec bad, ParseSweepYaml("name: a\ngrid: {d: [100]}\n", "a.yaml"));
  EXPECT_THAT(ExpandSweep(bad, "a.yaml"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("run a/0 (d=100)")));
}

TEST(SweepTest, GridPastTheLimitIsRefusedWithTheCount) {
  CART_ASSERT_OK_AND_ASSIGN(
      SweepSpec spec,
      ParseSweepYaml("name: big\nmax_runs: 100\ngrid:\n  seq_len: [1,2,3,4,5,6,7,8,9,10,11]\n"
                     "  batch: [1,2,3,4,5,6,7,8,9,10]\n",
                     "big.yaml"));
  EXPECT_THAT(ExpandSweep(spec, "big.yaml"),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("expands to 110 runs")));
}

}  // namespace
}  // namespace cart::model
