// A power cut under cartd (docs/design.md "Storage"): cartd runs with an LD_PRELOAD library
// (tests/support/power_cut.cc) that keeps beside its data directory only what had been fsync'ed,
// a worker streams a run into it, cartd is killed, and it restarts on that copy: every write that
// was only in the page cache is gone. The database must be intact, and every result a worker was
// told was stored must still be there (or be trained again to the same values): the run ends
// with each step's loss once, equal to a straight run's.

#include <signal.h>

#include <filesystem>
#include <thread>

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace cart::testing {
namespace {

TEST(PowerCutTest, AfterACutEveryAcknowledgedResultIsThereAndTheRunEndsWhole) {
  Cluster c(/*lease_ttl_s=*/5);
  const std::string data_dir = c.dir() + "/cartd";
  const std::string copy = c.dir() + "/durable";
  c.StartCartdWithEnv(
      "", {StrCat("LD_PRELOAD=", CART_POWER_CUT_LIB), StrCat("CART_POWER_CUT_DIR=", data_dir),
           StrCat("CART_POWER_CUT_COPY=", copy)});
  const std::string data = c.SynthData();
  c.Cart(
      {"sweep", "submit",
       c.WriteFile("p.yaml", StrCat("name: p\nbase:\n", RunBase(data, 2000, 50), "seeds: [5]\n"))});
  const int64_t run = RunId(c, "p", 0);
  c.StartWorker("a");
  // Mid-run, with checkpoints and acknowledged metrics behind it, the power goes.
  ASSERT_TRUE(
      c.WaitFor([&] { return c.GetRun(run).run().step() >= 300; }, std::chrono::seconds(120)))
      << c.Log("worker-a.log") << c.Log("cartd.log");
  c.KillCartd(SIGKILL);
  std::filesystem::remove_all(data_dir);
  ASSERT_TRUE(std::filesystem::exists(copy + "/cart.db")) << "nothing was ever fsync'ed";
  std::filesystem::rename(copy, data_dir);
  // Intact: SQLite's integrity and foreign-key checks pass on what the cut left.
  EXPECT_THAT(c.Cart({"admin", "check", "--db", data_dir + "/cart.db"}),
              ::testing::HasSubstr("cart.db: ok"));
  c.StartCartd();
  ASSERT_TRUE(c.WaitFor([&] { return StateOf(c, run) == "SUCCEEDED"; }, std::chrono::seconds(300)))
      << StateOf(c, run) << c.Log("worker-a.log") << c.Log("cartd.log");
  ExpectStraightLosses(c, run, 2000);
}

}  // namespace
}  // namespace cart::testing
