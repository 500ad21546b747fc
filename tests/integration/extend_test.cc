// `cart runs extend` on real processes: a finished run extended far past its end is refused
// until the user says what the learning rate does, and with --schedule hold it trains on at its
// final rate from its final checkpoint.

#include <cmath>

#include "common/strings.h"
#include "config/config.h"
#include "config/schedule.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace cart::testing {
namespace {

using ::testing::HasSubstr;

TEST(ExtendTest, AWarmRestartIsRefusedUntilAskedForAndHoldTrainsOnAtTheFinalRate) {
  Cluster c;
  c.StartCartd();
  const std::string data = c.SynthData();
  const std::string file =
      c.WriteFile("x.yaml", StrCat("name: x\nbase:\n", RunBase(data, 20, 10), "seeds: [3]\n"));
  c.Cart({"sweep", "submit", file});
  const int64_t run = RunId(c, "x", 0);
  c.StartWorker("a");
  ASSERT_TRUE(c.WaitFor([&] { return StateOf(c, run) == "SUCCEEDED"; }, std::chrono::seconds(120)))
      << c.Log("worker-a.log");
  const std::map<int64_t, double> lr = c.Series(run, "lr");
  ASSERT_EQ(lr.size(), 20u);
  absl::StatusOr<config::RunConfig> config =
      config::ParseRunConfigYaml(c.GetRun(run).run().config_yaml(), "run");
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(lr.at(20), config->train.lr_min);

  int code = 0;
  const std::string refused =
      c.Cart({"runs", "extend", StrCat(run), "--steps", "200"}, /*allow_failure=*/true, &code);
  EXPECT_NE(code, 0);
  config::RunConfig stretched = *config;
  stretched.train.steps = 200;
  EXPECT_THAT(refused,
              HasSubstr(StrCat("from ", Sci(lr.at(20)), " at step 20 to ",
                               Sci(config::ScheduledLr(stretched.train, 20)), " at step 21")));
  EXPECT_THAT(refused, HasSubstr("--schedule hold"));
  EXPECT_EQ(StateOf(c, run), "SUCCEEDED");

  const std::string held =
      c.Cart({"runs", "extend", StrCat(run), "--steps", "200", "--schedule", "hold"});
  EXPECT_THAT(held, HasSubstr(StrCat("learning rate ", Sci(lr.at(20)), " at its last step -> ",
                                     Sci(lr.at(20)))));
  ASSERT_TRUE(c.WaitFor([&] { return StateOf(c, run) == "SUCCEEDED"; }, std::chrono::seconds(180)))
      << c.Log("worker-a.log");
  const std::map<int64_t, double> after = c.Series(run, "lr");
  ASSERT_EQ(after.size(), 200u);
  for (int64_t s = 1; s <= 20; ++s) EXPECT_EQ(after.at(s), lr.at(s)) << "step " << s;
  for (int64_t s = 21; s <= 200; ++s) EXPECT_EQ(after.at(s), lr.at(20)) << "step " << s;
  EXPECT_THAT(c.Cart({"runs", "show", StrCat(run)}),
              HasSubstr(StrCat("schedule hold: learning rate ", Sci(lr.at(20)), " at step 20 -> ",
                               Sci(lr.at(20)), " at step 21")));
}

}  // namespace
}  // namespace cart::testing
