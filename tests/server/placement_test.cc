// server/placement.h: earliest finish, longest first, on hand-made fleets and queues.

#include "server/placement.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cart::server {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kGiB = int64_t{1} << 30;

PlacementWorker Worker(const std::string& id, double speed, double free_in_hours = 0,
                       int64_t memory = 24 * kGiB) {
  PlacementWorker w;
  w.id = id;
  w.device = id;
  w.speed = speed;
  w.free_in_hours = free_in_hours;
  w.memory_bytes = memory;
  return w;
}

store::PlaceableRun Queued(int64_t id, double hours, int64_t priority = 0, int64_t created = 0,
                           int64_t min_memory = kGiB) {
  store::PlaceableRun r;
  r.id = id;
  r.work_hours = hours;
  r.steps = 100;
  r.priority = priority;
  r.created_us = created == 0 ? id : created;
  r.min_memory_bytes = min_memory;
  return r;
}

TEST(PlacementTest, TheLongestRunGoesFirst) {
  const PlacementDecision d =
      PlaceEarliestFinish(Worker("a", 1), {}, {Queued(1, 2), Queued(2, 10), Queued(3, 5)});
  EXPECT_EQ(d.run_id, 2);
}

// A free slow worker does not take a long run that a fast worker, free soon, would finish
// sooner: it takes the shorter run that it finishes first.
TEST(PlacementTest, ASlowWorkerTakesWhatItWouldFinishFirst) {
  const PlacementWorker slow = Worker("slow", 0.25);
  const std::vector<PlacementWorker> fast = {Worker("fast", 1, /*free_in_hours=*/1)};
  // 10 h of work: 40 h on the slow one, 1 + 10 = 11 h on the fast one. 2 h: 8 h on the slow one,
  // 11 + 2 = 13 h on the fast one after the long run.
  const PlacementDecision d = PlaceEarliestFinish(slow, fast, {Queued(1, 10), Queued(2, 2)});
  EXPECT_EQ(d.run_id, 2);
  ASSERT_EQ(d.declined.count(1), 1u);
  EXPECT_THAT(d.declined.at(1), HasSubstr("finishes sooner on fast"));
}

// When every run finishes sooner elsewhere, the slow worker waits.
TEST(PlacementTest, ASlowWorkerWaitsWhenEverythingFinishesSoonerElsewhere) {
  const PlacementDecision d = PlaceEarliestFinish(
      Worker("slow", 0.25), {Worker("fast", 1, 0.5), Worker("fast2", 1, 0.5)}, {Queued(1, 10)});
  EXPECT_FALSE(d.run_id.has_value());
  EXPECT_EQ(d.declined.count(1), 1u);
}

// ... and takes the long run when the fast workers are busy long enough.
TEST(PlacementTest, ASlowWorkerTakesALongRunWhenFastOnesAreBusyForLonger) {
  const PlacementDecision d =
      PlaceEarliestFinish(Worker("slow", 0.25), {Worker("fast", 1, 50)}, {Queued(1, 10)});
  EXPECT_EQ(d.run_id, 1);
}

// Memory: a run that fits only the asker is planned there even if another is faster.
TEST(PlacementTest, OnlyWorkersItFitsAreWeighed) {
  const PlacementDecision d = PlaceEarliestFinish(Worker("big-slow", 0.5, 0, 80 * kGiB),
                                                  {Worker("small-fast", 2, 0, 8 * kGiB)},
                                                  {Queued(1, 10, 0, 0, /*min_memory=*/40 * kGiB)});
  EXPECT_EQ(d.run_id, 1);
  // A run above a device's out-of-memory floor only.
  store::PlaceableRun oom = Queued(2, 1);
  oom.oom_memory_bytes = 24 * kGiB;
  EXPECT_FALSE(PlaceEarliestFinish(Worker("a", 1), {}, {oom}).run_id.has_value());
}

// A higher level is planned before a lower one; the asker takes a lower-level run only when the
// ones above are planned onto other workers.
TEST(PlacementTest, PriorityLevelsComeFirstAndALowerOneFillsTheRest) {
  const PlacementDecision high =
      PlaceEarliestFinish(Worker("a", 1), {}, {Queued(1, 10, 0), Queued(2, 1, 5)});
  EXPECT_EQ(high.run_id, 2);
  const PlacementDecision rest = PlaceEarliestFinish(Worker("slow", 0.25), {Worker("fast", 1)},
                                                     {Queued(1, 10, 5), Queued(2, 1, 0)});
  EXPECT_EQ(rest.run_id, 2);
}

// A resumed run counts only the work it has left; unknown work goes after known, oldest first.
TEST(PlacementTest, RemainingWorkAndUnknownWorkOrderTheQueue) {
  store::PlaceableRun resumed = Queued(1, 10);
  resumed.done_steps = 90;  // 1 h left
  EXPECT_DOUBLE_EQ(resumed.RemainingHours(), 1.0);
  EXPECT_EQ(PlaceEarliestFinish(Worker("a", 1), {}, {resumed, Queued(2, 3)}).run_id, 2);
  EXPECT_EQ(
      PlaceEarliestFinish(Worker("a", 1), {}, {Queued(5, 0, 0, 50), Queued(6, 0, 0, 40)}).run_id,
      6);
  EXPECT_EQ(PlaceEarliestFinish(Worker("a", 1), {}, {Queued(5, 0), Queued(6, 0.1)}).run_id, 6);
}

// Fair share: within a level, the owner who has used less goes first, even with a shorter run;
// without usage figures the longest run goes first whoever owns it.
TEST(PlacementTest, TheLessServedOwnerGoesFirstWithinALevel) {
  store::PlaceableRun a = Queued(1, 10);
  a.owner = "user:a";
  store::PlaceableRun b = Queued(2, 1);
  b.owner = "user:b";
  EXPECT_EQ(PlaceEarliestFinish(Worker("w", 1), {}, {a, b}).run_id, 1);
  EXPECT_EQ(PlaceEarliestFinish(Worker("w", 1), {}, {a, b}, {{"user:a", 10}, {"user:b", 0}}).run_id,
            2);
  // A higher level still comes first.
  store::PlaceableRun high = Queued(4, 1, /*priority=*/5);
  high.owner = "user:a";
  EXPECT_EQ(PlaceEarliestFinish(Worker("w", 1), {}, {a, b, high}, {{"user:a", 100}}).run_id, 4);
}

// The whole queue planned for expected finish times: longest first, each on the worker that
// finishes it first given what the plan already put there; a run that fits no worker, or whose
// work is unknown, gets no estimate.
TEST(PlanQueueTest, EachRunFinishesWhereThePlanPutsIt) {
  // fast: busy for 1 h more, speed 1; slow: free, speed 0.5.
  const std::vector<PlacementWorker> fleet = {Worker("fast", 1, 1), Worker("slow", 0.5)};
  std::vector<store::PlaceableRun> queued = {Queued(1, 4), Queued(2, 2), Queued(3, 1), Queued(4, 0),
                                             Queued(5, 1, 0, 0, 100 * kGiB)};
  const std::vector<PlannedRun> plan = PlanQueue(fleet, queued);
  ASSERT_EQ(plan.size(), 3u);
  // Run 1 (4 h): fast at 1 + 4 = 5, slow at 8: fast. Run 2 (2 h): fast at 7, slow at 4: slow.
  // Run 3 (1 h): fast at 6, slow at 4 + 2 = 6: a tie goes to the first worker, fast.
  EXPECT_EQ(plan[0].run_id, 1);
  EXPECT_EQ(plan[0].worker_id, "fast");
  EXPECT_DOUBLE_EQ(plan[0].start_in_hours, 1);
  EXPECT_DOUBLE_EQ(plan[0].finish_in_hours, 5);
  EXPECT_EQ(plan[1].run_id, 2);
  EXPECT_EQ(plan[1].worker_id, "slow");
  EXPECT_DOUBLE_EQ(plan[1].finish_in_hours, 4);
  EXPECT_EQ(plan[2].run_id, 3);
  EXPECT_EQ(plan[2].worker_id, "fast");
  EXPECT_DOUBLE_EQ(plan[2].start_in_hours, 5);
  EXPECT_DOUBLE_EQ(plan[2].finish_in_hours, 6);
}

// Device classes (docs/architecture.md "Device classes"): a run pinned to the class of its
// checkpoint goes only there, even when another class would finish it sooner, and the asker of
// another class is told why.
TEST(DeviceClassPlacementTest, APinnedRunWaitsForItsClassAndSaysWhy) {
  PlacementWorker fast = Worker("box-3090", 1);
  fast.device = "NVIDIA GeForce RTX 3090";
  PlacementWorker slow = Worker("box-3050", 0.25, /*free_in_hours=*/3);
  slow.device = "NVIDIA GeForce RTX 3050";
  store::PlaceableRun pinned = Queued(1, 10);
  pinned.device_class_pin = "NVIDIA GeForce RTX 3050";
  const PlacementDecision d = PlaceEarliestFinish(fast, {slow}, {pinned});
  EXPECT_FALSE(d.run_id.has_value());
  ASSERT_EQ(d.declined.count(1), 1u);
  EXPECT_THAT(d.declined.at(1), HasSubstr("its latest checkpoint was written on NVIDIA GeForce "
                                          "RTX 3050 and its attempts stay on that device class "
                                          "(`cart runs unpin 1` lets them go to any)"));
  // The 3050 takes it when it asks, and the plan puts it there.
  EXPECT_EQ(PlaceEarliestFinish(slow, {fast}, {pinned}).run_id, 1);
  const std::vector<PlannedRun> plan = PlanQueue({fast, slow}, {pinned});
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].worker_id, "box-3050");
  // Pinned to a class no live worker has: nobody takes it.
  pinned.device_class_pin = "NVIDIA GeForce RTX 4090";
  EXPECT_FALSE(PlaceEarliestFinish(slow, {fast}, {pinned}).run_id.has_value());
  EXPECT_TRUE(PlanQueue({fast, slow}, {pinned}).empty());
}

// A balanced sweep: each config's seeds go to the classes holding fewest of its seeds so far,
// the plan's own placements counted, so that three seeds on two classes split 2 + 1 however much
// faster one class is; another config's counts are its own.
TEST(DeviceClassPlacementTest, ABalancedSweepSpreadsEachConfigsSeedsOverTheClasses) {
  PlacementWorker a1 = Worker("a1", 1), a2 = Worker("a2", 1), b1 = Worker("b1", 0.25);
  a1.device = a2.device = "NVIDIA GeForce RTX 3090";
  b1.device = "NVIDIA GeForce RTX 3050";
  std::vector<store::PlaceableRun> queued;
  for (int64_t id = 1; id <= 6; ++id) {
    store::PlaceableRun r = Queued(id, 4);
    r.sweep_id = 7;
    r.seed_group = id <= 3 ? "config-x" : "config-y";
    queued.push_back(r);
  }
  const std::vector<PlannedRun> plan = PlanQueue({a1, a2, b1}, queued);
  ASSERT_EQ(plan.size(), 6u);
  std::map<std::string, std::map<std::string, int>> per_group;  // group -> class -> seeds
  for (const PlannedRun& p : plan) {
    const std::string group = p.run_id <= 3 ? "config-x" : "config-y";
    ++per_group[group][p.worker_id == "b1" ? "3050" : "3090"];
  }
  for (const auto& [group, classes] : per_group) {
    SCOPED_TRACE(group);
    EXPECT_GE(classes.count("3050") ? classes.at("3050") : 0, 1);
    EXPECT_GE(classes.count("3090") ? classes.at("3090") : 0, 1);
  }
  // Without balance the fast class takes every seed: each finishes sooner there.
  std::vector<store::PlaceableRun> unbalanced = queued;
  for (store::PlaceableRun& r : unbalanced) r.seed_group.clear();
  for (const PlannedRun& p : PlanQueue({a1, a2, b1}, unbalanced)) EXPECT_NE(p.worker_id, "b1");

  // What the store counts: config-x has two seeds on 3090s already, so its next goes to the
  // 3050, and the 3090 that asks is told where it goes.
  const store::SeedGroupClasses counts = {{{7, "config-x"}, {{"NVIDIA GeForce RTX 3090", 2}}}};
  const PlacementDecision d = PlaceEarliestFinish(a1, {b1}, {queued[0]}, {}, counts);
  EXPECT_FALSE(d.run_id.has_value());
  EXPECT_THAT(d.declined.at(1), HasSubstr("balances each config's seeds over device classes, and "
                                          "this config's next seed goes to NVIDIA GeForce RTX "
                                          "3050"));
  EXPECT_EQ(PlaceEarliestFinish(b1, {a1}, {queued[0]}, {}, counts).run_id, 1);
}

// A queued run of a balanced group that its checkpoint pins is counted on its class once (the
// store counts it): the group's fresh seeds then split evenly, not all to the faster class.
TEST(DeviceClassPlacementTest, APinnedRunOfABalancedGroupCountsOnce) {
  PlacementWorker a1 = Worker("a1", 0.25), a2 = Worker("a2", 0.25), b1 = Worker("b1", 1);
  a1.device = a2.device = "NVIDIA GeForce RTX 3050";
  b1.device = "NVIDIA GeForce RTX 3090";
  store::PlaceableRun pinned = Queued(1, 4, /*priority=*/5);
  pinned.device_class_pin = a1.device;
  std::vector<store::PlaceableRun> queued = {pinned, Queued(2, 4), Queued(4, 4)};
  for (store::PlaceableRun& r : queued) {
    r.sweep_id = 3;
    r.seed_group = "g";
  }
  // The store's counts: run 1 (queued, pinned) on the 3050, run 3 (running) on the 3090.
  const store::SeedGroupClasses counts = {{{3, "g"}, {{a1.device, 1}, {b1.device, 1}}}};
  int fresh_on_3050 = 0;
  for (const PlannedRun& p : PlanQueue({a1, a2, b1}, queued, {}, counts)) {
    if (p.run_id == 1) EXPECT_NE(p.worker_id, "b1");
    if (p.run_id != 1 && p.worker_id != "b1") ++fresh_on_3050;
  }
  EXPECT_EQ(fresh_on_3050, 1) << "the group ended unbalanced: the pinned run was counted twice";
}

}  // namespace
}  // namespace cart::server
