// server/preemption.h: which running runs stop at a checkpoint for waiting work, on hand-made
// queues and fleets (the Scheduler's end-to-end cases are PreemptionTest in scheduler_test.cc).

#include "server/preemption.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cart::server {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kGiB = int64_t{1} << 30;

store::PlaceableRun Queued(int64_t id, const std::string& owner, int64_t priority = 0,
                           double hours = 1, int64_t min_memory = kGiB) {
  store::PlaceableRun r;
  r.id = id;
  r.owner = owner;
  r.priority = priority;
  r.work_hours = hours;
  r.steps = 100;
  r.created_us = id;
  r.min_memory_bytes = min_memory;
  return r;
}

PreemptionCandidate Running(int64_t id, const std::string& owner, int64_t priority = 0,
                            int64_t claimed_us = 0, int64_t memory = 24 * kGiB) {
  PreemptionCandidate c;
  c.run_id = id;
  c.attempt = 1;
  c.owner = owner;
  c.priority = priority;
  c.claimed_us = claimed_us == 0 ? id : claimed_us;
  c.memory_bytes = memory;
  c.preemptible = true;
  return c;
}

std::vector<int64_t> Ids(const std::vector<PreemptionAsk>& asks) {
  std::vector<int64_t> ids;
  for (const PreemptionAsk& a : asks) ids.push_back(a.run_id);
  return ids;
}

TEST(ChoosePreemptionsTest, AHigherPriorityRunDisplacesTheLowestAndSaysWhy) {
  const std::vector<PreemptionAsk> asks = ChoosePreemptions(
      {Queued(10, "bob", /*priority=*/5)}, {},
      {Running(1, "alice", 1), Running(2, "alice", 0), Running(3, "alice", 3)}, {}, false);
  ASSERT_EQ(asks.size(), 1u);
  EXPECT_EQ(asks[0].run_id, 2);
  EXPECT_EQ(asks[0].attempt, 1);
  EXPECT_EQ(asks[0].reason, "run 10 of bob waits at priority 5 > 0");
}

// A free worker that fits the waiting run is placement's to use; one too small is not.
TEST(ChoosePreemptionsTest, NothingIsPreemptedWhileAFreeWorkerFits) {
  const std::vector<PreemptionCandidate> running = {Running(1, "alice", 0)};
  EXPECT_TRUE(ChoosePreemptions({Queued(10, "bob", 5)}, {24 * kGiB}, running, {}, false).empty());
  EXPECT_EQ(
      Ids(ChoosePreemptions({Queued(10, "bob", 5, 1, 16 * kGiB)}, {8 * kGiB}, running, {}, false)),
      std::vector<int64_t>{1});
}

// Evaluations, runs with no checkpoint and runs preempted within the interval are not asked; a
// run whose worker is too small for the waiting run is not either.
TEST(ChoosePreemptionsTest, OnlyPreemptibleRunsOnWorkersThatFitAreAsked) {
  PreemptionCandidate evaluation = Running(1, "alice", 0);
  evaluation.preemptible = false;
  const PreemptionCandidate small = Running(2, "alice", 0, 0, 8 * kGiB);
  const store::PlaceableRun big = Queued(10, "bob", 5, 1, 16 * kGiB);
  EXPECT_TRUE(ChoosePreemptions({big}, {}, {evaluation, small}, {}, false).empty());
  EXPECT_EQ(
      Ids(ChoosePreemptions({big}, {}, {evaluation, small, Running(3, "carol", 0)}, {}, false)),
      std::vector<int64_t>{3});
}

// A run already handing its worker back serves the first waiting run; one overdue does not.
TEST(ChoosePreemptionsTest, AWorkerBeingHandedBackServesTheFirstWaitingRun) {
  PreemptionCandidate asked = Running(1, "alice", 0);
  asked.asked = PreemptionCandidate::Asked::kHandingBack;
  const std::vector<store::PlaceableRun> queued = {Queued(10, "bob", 5, 2), Queued(11, "bob", 5)};
  EXPECT_EQ(Ids(ChoosePreemptions(queued, {}, {asked, Running(2, "alice", 0)}, {}, false)),
            std::vector<int64_t>{2});  // run 10 gets run 1's worker, run 11 run 2's
  asked.asked = PreemptionCandidate::Asked::kOverdue;
  EXPECT_EQ(Ids(ChoosePreemptions({Queued(10, "bob", 5)}, {}, {asked, Running(2, "alice", 0)}, {},
                                  false)),
            std::vector<int64_t>{2});
}

// Fair share at one priority: an owner with less usage displaces one holding at least two more
// workers, the most recently started of theirs; an owner one worker ahead keeps them.
TEST(ChoosePreemptionsTest, FairShareTakesFromTheOwnerHoldingTwoMoreWorkers) {
  const std::map<std::string, double> usage = {{"alice", 40.0}, {"bob", 2.0}};
  const std::vector<PreemptionAsk> asks = ChoosePreemptions(
      {Queued(10, "bob")}, {},
      {Running(1, "alice", 0, 100), Running(2, "alice", 0, 300), Running(3, "alice", 0, 200)},
      usage, true);
  ASSERT_EQ(Ids(asks), std::vector<int64_t>{2});
  EXPECT_THAT(asks[0].reason, HasSubstr("fair share: run 10 of bob waits (0 workers, 2.0"));
  EXPECT_THAT(asks[0].reason, HasSubstr("alice holds 3 (40.0 GPU-h)"));
  // With fair share off, or when alice holds only one more than bob, nothing moves.
  EXPECT_TRUE(ChoosePreemptions({Queued(10, "bob")}, {}, {Running(1, "alice"), Running(2, "alice")},
                                usage, false)
                  .empty());
  EXPECT_TRUE(ChoosePreemptions({Queued(10, "bob")}, {},
                                {Running(1, "alice"), Running(2, "alice"), Running(3, "bob")},
                                usage, true)
                  .empty());
}

// Several waiting runs each take one victim, in the order placement serves them, and the counts
// move as they do: the second fair-share ask stops once the owners are within one worker.
TEST(ChoosePreemptionsTest, EachWaitingRunTakesOneVictimAndTheCountsMove) {
  const std::map<std::string, double> usage = {{"alice", 40.0}, {"bob", 2.0}};
  std::vector<PreemptionCandidate> running;
  for (int64_t id = 1; id <= 4; ++id) running.push_back(Running(id, "alice", 0, id * 100));
  const std::vector<PreemptionAsk> asks = ChoosePreemptions(
      {Queued(10, "bob"), Queued(11, "bob"), Queued(12, "bob")}, {}, running, usage, true);
  // alice 4 / bob 0 -> ask (3 / 1) -> ask (2 / 2) -> no: within one.
  EXPECT_EQ(Ids(asks), (std::vector<int64_t>{4, 3}));
}

// Waiting runs are taken in placement's own order (InPlanOrder): with fair share, each worker
// handed out counts in its owner's share at that worker's speed, so owners alternate as placement
// would serve them. Two workers of carol's lower-priority runs for ann (usage 1, three 10 h runs)
// and bob (usage 2, one 5 h run): ann's first run (ann's share becomes 11), then bob's, not two of
// ann's.
TEST(ChoosePreemptionsTest, WaitingRunsAreTakenInPlacementsOrderOwnersAlternating) {
  const std::vector<store::PlaceableRun> queued = {
      Queued(10, "ann", 1, 10), Queued(11, "ann", 1, 10), Queued(12, "ann", 1, 10),
      Queued(20, "bob", 1, 5)};
  const std::vector<PreemptionAsk> asks =
      ChoosePreemptions(queued, {}, {Running(1, "carol", 0), Running(2, "carol", 0)},
                        {{"ann", 1.0}, {"bob", 2.0}}, /*fair=*/true);
  ASSERT_EQ(asks.size(), 2u);
  EXPECT_THAT(asks[0].reason, HasSubstr("run 10 of ann"));
  EXPECT_THAT(asks[1].reason, HasSubstr("run 20 of bob"));
  // Without fair share: longest first, then oldest.
  const std::vector<PreemptionAsk> plain = ChoosePreemptions(
      queued, {}, {Running(1, "carol", 0), Running(2, "carol", 0)}, {}, /*fair=*/false);
  ASSERT_EQ(plain.size(), 2u);
  EXPECT_THAT(plain[0].reason, HasSubstr("run 10 of ann"));
  EXPECT_THAT(plain[1].reason, HasSubstr("run 11 of ann"));
}

}  // namespace
}  // namespace cart::server
