// `cart sweep submit --dry-run` on the paper's sweep files: run counts, tokens and the RTX 3090
// estimate; a derived-only sweep reads its parent sweep's file beside it.

#include <nlohmann/json.hpp>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace cart::testing {
namespace {

using ::testing::HasSubstr;

const std::string kPaper = std::string(CART_SOURCE_DIR) + "/sweeps/paper/";

TEST(SweepCliTest, DryRunOfEachPaperFilePrintsRunsTokensAndEstimatedHours) {
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"stage1", "64 runs (64 train, 0 eval"},     {"stage2", "48 runs (36 train, 12 eval"},
      {"baselines", "6 runs (6 train, 0 eval"},    {"ablations", "6 runs (6 train, 0 eval"},
      {"faithfulness", "4 runs (4 train, 0 eval"}, {"leak", "2 runs (2 train, 0 eval"},
      {"variable_r", "3 runs (0 train, 3 eval"}};
  for (const auto& [name, counts] : expected) {
    CommandResult r = RunCart("sweep submit --dry-run " + kPaper + name + ".yaml");
    ASSERT_EQ(r.exit_code, 0) << name << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr("sweep " + name + ": " + counts)) << r.output;
    EXPECT_THAT(r.output, HasSubstr("on one RTX 3090")) << name;
    EXPECT_THAT(r.output, HasSubstr("3090 h")) << name;  // the per-run column
  }
  // Stage 2: 36 runs × 30,500 steps × 32,768 tokens, and 12 eval jobs × 8 loop counts × 3 sets
  // × 50 windows × 1,024 tokens: 35,994,009,600 tokens.
  CommandResult s2 = RunCart("sweep submit --dry-run " + kPaper + "stage2.yaml");
  EXPECT_THAT(s2.output, HasSubstr("total: 35.99B tokens")) << s2.output;
}

TEST(SweepCliTest, DryRunOfADerivedSweepWithoutItsParentFileSaysWhereItLooked) {
  TempDir dir;
  WriteFile(dir.File("variable_r.yaml"), ReadFile(kPaper + "variable_r.yaml"));
  CommandResult r = RunCart("sweep submit --dry-run " + dir.File("variable_r.yaml"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("sweep 'stage2'"));
  EXPECT_THAT(r.output, HasSubstr(dir.File("stage2.yaml")));
}

}  // namespace
}  // namespace cart::testing
