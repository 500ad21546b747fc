// The card model as a factor of the experiment (docs/architecture.md "Device classes") with real
// cartd and cart-worker processes: workers that stand in for RTX 3050s and 3090s
// (cart-worker --stand-in-for, with the speed each would have), a checkpointed run kept on its
// class until it is unpinned, a run whose attempts span classes flagged, and a sweep that
// balances each config's seeds over the classes.

#include <signal.h>

#include <map>
#include <set>
#include <string>

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/cluster.h"
#include "tests/support/test_support.h"

namespace cart::testing {
namespace {

using ::testing::HasSubstr;

constexpr char k3050[] = "NVIDIA GeForce RTX 3050";
constexpr char k3090[] = "NVIDIA GeForce RTX 3090";

std::vector<std::string> StandIn(const char* device, const char* speed) {
  return {"--stand-in-for", device, "--speed-factor", speed};
}

// Once run `run` has a checkpoint written on a 3050, its next attempt waits for a 3050: the 3090
// that asks is refused and told why, a 3050 takes it. Unpinned, the 3090 takes it and the run is
// flagged as spanning classes in `cart runs show` and `cart runs ls`.
TEST(DeviceClassTest, ACheckpointedRunStaysOnItsClassUntilUnpinnedAndSpanningIsFlagged) {
  Cluster c(/*lease_ttl_s=*/2);
  c.StartCartd();
  const std::string data = c.SynthData();
  c.Cart(
      {"sweep", "submit",
       c.WriteFile("k.yaml", StrCat("name: k\nbase:\n", RunBase(data, 60, 10), "seeds: [3]\n"))});
  const int64_t run = RunId(c, "k", 0);
  pid_t a = c.StartWorker("a", 0, StandIn(k3050, "0.25"));
  ASSERT_TRUE(c.WaitForStepAndCheckpoint(run, 25)) << c.Log("worker-a.log");
  c.Signal(a, SIGKILL);
  c.Wait(a);
  {
    const cart::v1::GetRunResponse got = c.GetRun(run);
    ASSERT_GE(got.checkpoints_size(), 1);
    ASSERT_EQ(got.attempts_size(), 1);
    EXPECT_EQ(got.attempts(0).device_class(), k3050);
  }

  // The 3090 asks, again and again, and is refused: the checkpoint was written on a 3050.
  c.StartWorker("b", 0, StandIn(k3090, "1"));
  ASSERT_TRUE(c.WaitFor(
      [&] {
        return c.GetRun(run).run().waiting_reason().find(
                   "not given to worker testbox-b (NVIDIA GeForce RTX 3090): its latest "
                   "checkpoint was written on NVIDIA GeForce RTX 3050") != std::string::npos;
      },
      std::chrono::seconds(60)))
      << c.GetRun(run).DebugString();
  {
    const cart::v1::GetRunResponse got = c.GetRun(run);
    EXPECT_EQ(got.run().state(), cart::v1::RUN_STATE_QUEUED);
    EXPECT_EQ(got.attempts_size(), 1);
    EXPECT_EQ(got.run().checkpoint_class(), k3050);
    EXPECT_THAT(got.run().waiting_reason(), HasSubstr(StrCat("`cart runs unpin ", run, "`")));
    EXPECT_THAT(c.Cart({"runs", "show", StrCat(run)}),
                HasSubstr("device class: NVIDIA GeForce RTX 3050; later attempts stay on "
                          "NVIDIA GeForce RTX 3050 (its latest checkpoint's)"));
  }

  // Another 3050 takes it; killed after its next checkpoint, the run is still of one class.
  pid_t a2 = c.StartWorker("a2", 0, StandIn(k3050, "0.25"));
  ASSERT_TRUE(c.WaitFor(
      [&] {
        const cart::v1::GetRunResponse got = c.GetRun(run);
        return got.attempts_size() == 2 && got.run().step() >= 45;
      },
      std::chrono::seconds(120)))
      << c.Log("worker-a2.log");
  c.Signal(a2, SIGKILL);
  c.Wait(a2);
  {
    const cart::v1::GetRunResponse got = c.GetRun(run);
    EXPECT_EQ(got.attempts(1).worker_id(), "testbox-a2");
    EXPECT_EQ(got.attempts(1).device_class(), k3050);
    ASSERT_EQ(got.run().device_classes_size(), 1);
    EXPECT_EQ(got.run().device_classes(0), k3050);
  }

  // Unpinned, the 3090 takes it and finishes it: its attempts now span classes, flagged.
  EXPECT_THAT(c.Cart({"runs", "unpin", StrCat(run)}),
              HasSubstr("later attempts may go to any class"));
  ASSERT_TRUE(c.WaitFor([&] { return StateOf(c, run) == "SUCCEEDED"; }, std::chrono::seconds(180)))
      << c.Log("worker-b.log");
  const cart::v1::GetRunResponse done = c.GetRun(run);
  ASSERT_EQ(done.attempts_size(), 3);
  EXPECT_EQ(done.attempts(2).worker_id(), "testbox-b");
  EXPECT_EQ(done.attempts(2).device_class(), k3090);
  ASSERT_EQ(done.run().device_classes_size(), 2);
  EXPECT_EQ(done.run().device_classes(0), k3050);
  EXPECT_EQ(done.run().device_classes(1), k3090);
  EXPECT_TRUE(done.run().any_device_class());
  bool unpinned_event = false;
  for (const auto& e : done.events()) {
    unpinned_event =
        unpinned_event || e.why().find("unpinned: later attempts may go to any device class") == 0;
  }
  EXPECT_TRUE(unpinned_event);
  const std::string shown = c.Cart({"runs", "show", StrCat(run)});
  EXPECT_THAT(shown, HasSubstr("device classes: NVIDIA GeForce RTX 3050, then NVIDIA GeForce RTX "
                               "3090 — SPANS CLASSES"));
  EXPECT_THAT(shown, HasSubstr("testbox-b [NVIDIA GeForce RTX 3090]"));
  EXPECT_THAT(c.Cart({"runs", "ls", "--sweep", "k"}), HasSubstr("RTX 3050+RTX 3090 (SPANS)"));
  // The environment record says the worker stood in for the card it registered as.
  std::map<std::string, std::string> env;
  for (const auto& item : done.attempts(2).environment()) env[item.key()] = item.value();
  EXPECT_EQ(env["device.stands_in_for"], k3090);
  EXPECT_EQ(env["device.kind"], "cpu");
}

// `device_classes: {balance: true}`: each config's four seeds go two to the 3050 and two to the
// 3090, although every run would finish sooner on the 3090.
TEST(DeviceClassTest, ABalancedSweepSpreadsEachConfigsSeedsOverTheClasses) {
  Cluster c;
  c.StartCartd();
  const std::string data = c.SynthData();
  c.StartWorker("slow", 0, StandIn(k3050, "0.25"));
  c.StartWorker("fast", 0, StandIn(k3090, "1"));
  ASSERT_TRUE(c.WaitFor(
      [&] {
        const std::string workers = c.Cart({"workers", "ls"});
        return workers.find("testbox-slow") != std::string::npos &&
               workers.find("testbox-fast") != std::string::npos;
      },
      std::chrono::seconds(60)));
  c.Cart({"sweep", "submit",
          c.WriteFile("b.yaml", StrCat("name: b\nbase:\n", RunBase(data, 4, 4),
                                       "grid: {lr: [3e-3, 1e-3]}\nseeds: [1, 2, 3, 4]\n"
                                       "device_classes: {balance: true}\n"))});
  ASSERT_TRUE(c.WaitFor(
      [&] {
        for (const cart::v1::RunView& r : c.Runs("b")) {
          if (r.state() != cart::v1::RUN_STATE_SUCCEEDED) return false;
        }
        return true;
      },
      std::chrono::seconds(300)))
      << c.Log("worker-slow.log") << c.Log("worker-fast.log");
  std::map<std::string, std::map<std::string, int>> seeds;  // lr -> class -> seeds
  for (const cart::v1::RunView& r : c.Runs("b")) {
    EXPECT_TRUE(r.balanced());
    ASSERT_EQ(r.device_classes_size(), 1) << r.name();
    ++seeds[r.params().at("lr")][r.device_classes(0)];
  }
  ASSERT_EQ(seeds.size(), 2u);
  for (const auto& [lr, classes] : seeds) {
    SCOPED_TRACE(lr);
    EXPECT_EQ(classes.count(k3050) ? classes.at(k3050) : 0, 2);
    EXPECT_EQ(classes.count(k3090) ? classes.at(k3090) : 0, 2);
  }
  EXPECT_THAT(c.Cart({"runs", "show", StrCat(RunId(c, "b", 0))}),
              HasSubstr("its sweep balances each config's seeds over the classes"));
}

// A sweep file's device_classes key: bad values are named with the file and line.
TEST(DeviceClassTest, ABadDeviceClassesKeyIsNamedWithItsLine) {
  Cluster c;
  c.StartCartd();
  const std::string data = c.SynthData();
  int code = 0;
  const std::string out =
      c.Cart({"sweep", "submit",
              c.WriteFile("bad.yaml", StrCat("name: bad\nbase:\n", RunBase(data, 4, 4),
                                             "device_classes: {balance: sometimes}\n"))},
             /*allow_failure=*/true, &code);
  EXPECT_NE(code, 0);
  EXPECT_THAT(out, HasSubstr("bad.yaml:22: device_classes.balance: 'sometimes' is not one of "
                             "true, false"));
}

}  // namespace
}  // namespace cart::testing
