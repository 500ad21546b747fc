// Device-hour budgets end to end (docs/operations.md "Budgets"): a real cartd and cart-worker; a
// sweep whose budget its first run uses up leaves its second run waiting, saying why in `cart
// runs show`; `cart budget ls`, `cart sweep show` and the dashboard's JSON show spent and left;
// a user may not raise it, an admin may not set it below what is spent, and once an admin raises
// it the second run trains to the end.

#include <nlohmann/json.hpp>

#include "common/strings.h"
#include "tests/integration/cluster.h"

namespace cart::testing {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

TEST(BudgetTest, ASweepOverItsBudgetWaitsSayingWhyAndRunsOnceAnAdminRaisesIt) {
  Cluster c;
  c.StartCartd("user_budgets: {tester: 100}\n");
  // 0.0002 device-hours is 0.72 s: one run's attempt (a worker starting it, 300 steps) uses more.
  c.Cart({"sweep", "submit",
          c.WriteFile("b.yaml", StrCat("name: b\nbase:\n", RunBase(c.SynthData(), 300, 100),
                                       "seeds: [1, 2]\nbudget_device_hours: 0.0002\n"))});
  const pid_t worker = c.StartWorker("w1");
  auto states = [&] {
    std::vector<cart::v1::RunState> out;
    for (const auto& r : c.Runs("b")) out.push_back(r.state());
    return out;
  };
  ASSERT_TRUE(c.WaitFor(
      [&] {
        const auto s = states();
        return std::count(s.begin(), s.end(), cart::v1::RUN_STATE_SUCCEEDED) == 1;
      },
      std::chrono::seconds(120)))
      << c.Log("cartd.log") << c.Log("worker-w1.log");
  int64_t waiting = 0;
  for (const auto& r : c.Runs("b")) {
    if (r.state() == cart::v1::RUN_STATE_QUEUED) waiting = r.run_id();
  }
  ASSERT_NE(waiting, 0) << "the second run started over its budget";
  // The worker asks again every few seconds; what it was told stays the run's reason.
  std::string shown;
  ASSERT_TRUE(c.WaitFor(
      [&] {
        shown = c.Cart({"runs", "show", StrCat(waiting)});
        return shown.find("waits for budget") != std::string::npos;
      },
      std::chrono::seconds(30)))
      << shown;
  EXPECT_THAT(shown, HasSubstr("sweep 'b' has 0.0 device-hours left of its 0.0002 device-hours"));
  EXPECT_THAT(shown, HasSubstr("cart budget set --sweep b --device-hours N"));
  EXPECT_EQ(c.Runs("b")[waiting == c.Runs("b")[0].run_id() ? 0 : 1].state(),
            cart::v1::RUN_STATE_QUEUED);

  const std::string sweep = c.Cart({"sweep", "show", "b"});
  EXPECT_THAT(sweep, HasSubstr("sweep b: budget 0.0002 h, "));
  const json ls = json::parse(c.Cart({"budget", "ls", "--json"}));
  ASSERT_EQ(ls["budgets"].size(), 2u) << ls.dump();
  EXPECT_EQ(ls["budgets"][0]["scope"], "user");
  EXPECT_EQ(ls["budgets"][0]["name"], "tester");
  EXPECT_EQ(ls["budgets"][0]["limit_device_hours"], 100);
  EXPECT_EQ(ls["budgets"][1]["name"], "b");
  const double spent = ls["budgets"][1]["spent_device_hours"].get<double>();
  EXPECT_GT(spent, 0.0002);
  EXPECT_LT(ls["budgets"][1]["left_device_hours"].get<double>(), 0);
  const json dashboard = json::parse(c.Http("/api/v1/sweeps"));
  EXPECT_EQ(dashboard["sweeps"][0]["budget"]["limit"], 0.0002);
  EXPECT_GT(dashboard["sweeps"][0]["budget"]["spent"].get<double>(), 0.0002);

  int code = 0;
  const std::string denied =
      c.Cart({"budget", "set", "--sweep", "b", "--device-hours", "1"}, true, &code);
  EXPECT_NE(code, 0);
  EXPECT_THAT(denied, HasSubstr("needs an admin token"));
  const std::string below = c.Cart(
      {"budget", "set", "--sweep", "b", "--device-hours", "0.0001", "--token", c.admin_token()},
      true, &code);
  EXPECT_NE(code, 0);
  EXPECT_THAT(below, HasSubstr("sweep 'b' has already spent"));
  EXPECT_THAT(
      c.Cart({"budget", "set", "--sweep", "b", "--device-hours", "1", "--token", c.admin_token()}),
      HasSubstr("sweep b: budget 1.0 h"));
  ASSERT_TRUE(c.WaitFor(
      [&] {
        const auto s = states();
        return std::count(s.begin(), s.end(), cart::v1::RUN_STATE_SUCCEEDED) == 2;
      },
      std::chrono::seconds(120)))
      << c.Log("cartd.log") << c.Log("worker-w1.log");
  c.Signal(worker, SIGTERM);
  c.Wait(worker);
}

}  // namespace
}  // namespace cart::testing
