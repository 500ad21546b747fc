// Checkpoints on real processes (docs/design.md "Storage"): a cartd whose artifact disk is at its
// floor ends the attempt with its reason after a bounded wait, instead of holding a finishing
// worker for ever; periodic checkpoints it refuses are skipped while training goes on.

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace cart::testing {
namespace {

using ::testing::HasSubstr;

TEST(CheckpointTest, ACartdAtItsDiskFloorFailsTheAttemptWithItsReasonAfterABoundedWait) {
  Cluster c;
  // A floor no disk reaches: every upload is refused for space.
  c.StartCartd("min_free_artifact_bytes: 1000000000000000\n");
  const std::string data = c.SynthData();
  const std::string file = c.WriteFile(
      "f.yaml", StrCat("name: f\nbase:\n", RunBase(data, 20, 10), "seeds: [1]\nmax_attempts: 1\n"));
  c.Cart({"sweep", "submit", file});
  const int64_t run = RunId(c, "f", 0);
  c.StartWorker("a", 0, {"--space-wait-s", "2"});
  ASSERT_TRUE(c.WaitFor([&] { return StateOf(c, run) == "FAILED"; }, std::chrono::seconds(120)))
      << c.Log("worker-a.log") << c.Log("cartd.log");
  const std::string shown = c.Cart({"runs", "show", StrCat(run)});
  EXPECT_THAT(shown, HasSubstr("the final checkpoint at step 20 was not stored: cartd refused it "
                               "for space"));
  EXPECT_THAT(shown, HasSubstr("below the floor of 1000000000000000 bytes"));
  const std::string log = c.Cart({"runs", "logs", StrCat(run)});
  EXPECT_THAT(log, HasSubstr("checkpoint at step 10 not uploaded (cartd has no room for it)"));
  EXPECT_THAT(log, HasSubstr("waiting up to 2s for room before the attempt fails"));
  // Training went on past the refused checkpoint: every step was logged.
  EXPECT_EQ(c.Series(run, "loss").size(), 20u);
  EXPECT_TRUE(c.GetRun(run).checkpoints().empty());
}

}  // namespace
}  // namespace cart::testing
