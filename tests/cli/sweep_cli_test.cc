// `cart sweep submit --dry-run` on the paper's sweep files: run counts, tokens and the RTX 3090
// estimate; a derived-only sweep reads its parent sweep's file beside it.
// Careless input to the CLI gets a message naming the problem, never an abort.

#include <nlohmann/json.hpp>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace cart::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::string kPaper = std::string(CART_SOURCE_DIR) + "/sweeps/paper/";

TEST(SweepCliTest, DryRunOfEachPaperFilePrintsRunsTokensAndEstimatedHours) {
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"stage1", "64 runs (64 train, 0 eval"},     {"stage2", "48 runs (36 train, 12 eval"},
      {"baselines", "6 runs (6 train, 0 eval"},    {"ablations", "6 runs (6 train, 0 eval"},
      {"faithfulness", "3 runs (3 train, 0 eval"}, {"leak", "2 runs (2 train, 0 eval"},
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

TEST(SweepCliTest, CarelessInputGetsAClearErrorNotAnAbort) {
  TempDir dir;
  // A run id that is not a number (this aborted on an uncaught exception).
  CommandResult bad_id = RunCart("results series --run abc");
  EXPECT_NE(bad_id.exit_code, 0);
  EXPECT_THAT(bad_id.output, HasSubstr("run id 'abc' is not a positive integer"));
  EXPECT_THAT(bad_id.output, Not(HasSubstr("terminate called")));
  // A key given twice, a Latin-1 byte, and a width that would overflow the accounting.
  WriteFile(dir.File("dup.yaml"), "name: a\nbase: {d: 64}\ngrid:\n  R: [2]\n  R: [4]\n");
  WriteFile(dir.File("latin1.yaml"), "name: a\nbase: {train_data: caf\xe9.bin}\n");
  WriteFile(dir.File("huge.yaml"), "name: a\nbase: {d: 9223372036854775744}\n");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"dup.yaml", "dup.yaml:5: 'R' is given twice in one mapping (first at line 4)"},
      {"latin1.yaml", "latin1.yaml:2: not UTF-8 (byte 0xe9 at column 23)"},
      {"huge.yaml", "d: 9223372036854775744 is above 65536"}};
  for (const auto& [file, message] : cases) {
    CommandResult r = RunCart("sweep submit --dry-run " + dir.File(file));
    EXPECT_NE(r.exit_code, 0) << file << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr(message)) << file;
  }
  // A file name over 255 bytes: the limit named, not "internal error ... please report it".
  CommandResult long_name =
      RunCart("sweep submit --dry-run " + dir.File(std::string(300, 'n') + ".yaml"));
  EXPECT_NE(long_name.exit_code, 0);
  EXPECT_THAT(long_name.output, HasSubstr("each of its names at most 255"));
  EXPECT_THAT(long_name.output, Not(HasSubstr("internal error")));
}

}  // namespace
}  // namespace cart::testing
