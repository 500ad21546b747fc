// A lab of three hosts on one machine: cartd here, two workers in network namespaces of their own
// joined to this one by veth links. One worker's link is cut mid-run: its lease lapses, the other
// host resumes the run from its checkpoint, the cut worker is fenced out when its link returns,
// and the finished loss series equals an uninterrupted run's bit for bit.

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/cluster.h"

namespace cart::testing {
namespace {

using ::testing::HasSubstr;

TEST(NetworkTest, ACutLinkMovesTheRunToAnotherHostAndTheLossesMatchAnUninterruptedRun) {
  Cluster c(/*lease_ttl_s=*/2);
  std::string why;
  if (!c.AddHost("a", &why) || !c.AddHost("b", &why)) GTEST_SKIP() << why;
  c.StartCartd();
  const std::string data = c.SynthData();
  const std::string file =
      c.WriteFile("net.yaml", StrCat("name: net\nbase:\n", RunBase(data, 120, 10), "seeds: [7]\n"));
  c.Cart({"sweep", "submit", file});
  const int64_t run = RunId(c, "net", 0);

  c.StartWorker("a");
  ASSERT_TRUE(c.WaitForStepAndCheckpoint(run, 25)) << c.Log("worker-a.log") << c.Log("cartd.log");
  c.SetLink("a", false);  // host a is cut off; it goes on training, unheard
  const int64_t cut_at = c.GetRun(run).run().step();
  c.StartWorker("b");

  // a's lease lapses and b resumes the run from the newest checkpoint cartd holds.
  ASSERT_TRUE(c.WaitFor(
      [&] {
        const cart::v1::RunView view = c.GetRun(run).run();
        return view.attempt() == 2 && view.worker_id() == Cluster::WorkerId("b") &&
               view.step() > cut_at;
      },
      std::chrono::seconds(120)))
      << c.Log("worker-b.log") << c.Log("cartd.log");
  c.SetLink("a", true);  // a's queued reports now reach cartd, for an attempt that is over

  ASSERT_TRUE(c.WaitFor([&] { return StateOf(c, run) == "SUCCEEDED"; }, std::chrono::seconds(240)))
      << c.Log("worker-b.log") << c.Log("cartd.log");
  ASSERT_TRUE(c.WaitFor([&] { return c.Log("worker-a.log").find("FENCED") != std::string::npos; },
                        std::chrono::seconds(120)))
      << "the cut worker was not fenced out when its link returned:\n"
      << c.Log("worker-a.log");

  const cart::v1::GetRunResponse resp = c.GetRun(run);
  EXPECT_EQ(resp.run().attempt(), 2);
  EXPECT_EQ(resp.run().worker_id(), Cluster::WorkerId("b"));
  EXPECT_THAT(c.Log("worker-b.log"), HasSubstr("from step"));
  // After the lease lapsed, no event came from the cut worker: every later change was cartd's
  // (LOST) or b's.
  bool lost = false;
  for (const cart::v1::RunEvent& e : resp.events()) {
    if (lost) {
      EXPECT_NE(e.who(), "worker:" + Cluster::WorkerId("a")) << e.why();
    }
    lost |= e.why().find("LOST") != std::string::npos || e.why().find("lease") != std::string::npos;
  }
  EXPECT_TRUE(lost) << "no event records the lapsed lease";

  // The same run trained straight through in this process.
  ExpectStraightLosses(c, run, 120);
}

}  // namespace
}  // namespace cart::testing
