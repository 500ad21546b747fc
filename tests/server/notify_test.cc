// The Notifier's rules (server/notify/): which happenings reach which subscriptions, once each,
// the timed checks (lost, stuck, finish slipped), retries with backoff and giving up, owners and
// bad input. A real RunStore and Scheduler in a temp dir driven by a FakeClock, the scanner and
// sender run by hand; delivery recorded by an injected function (the channels themselves are
// tested against real receivers in notify_senders_test.cc and tests/integration/notify_test.cc).

#include <cmath>
#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/strings.h"
#include "report/claims.h"
#include "server/notify/notifier.h"
#include "server/scheduler.h"
#include "store/run_store.h"
#include "tests/support/test_support.h"

namespace cart::server::notify {
namespace {

using ::cart::testing::StatusIs;
using ::cart::testing::TempDir;
using store::RunState;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

constexpr int64_t kGiB = int64_t{1} << 30;
const absl::Duration kTtl = absl::Seconds(60);

std::string Sweep(const std::string& name, int runs = 1, int max_attempts = 1) {
  return StrCat("name: ", name, "\nbase: {d: 64, vocab: 100, P: 1, R: 2, steps: 1000}\n",
                "seeds: [", runs == 1 ? "1" : "1, 2", "]\nmax_attempts: ", max_attempts, "\n");
}

class NullStream : public AttemptStream {
 public:
  void Send(const Control&) override {}
  void Close() override {}
};

class NotifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store::StoreOptions store_options;
    store_options.path = dir_.File("cart.db");
    store_options.lease_ttl_us = absl::ToInt64Microseconds(kTtl);
    auto store = store::RunStore::Open(store_options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    SchedulerOptions options;
    options.lease_ttl = kTtl;
    options.expiry_interval = absl::ZeroDuration();
    options.startup_grace = absl::ZeroDuration();
    options.raise_micro_batch = false;
    scheduler_ = std::make_unique<Scheduler>(store_.get(), &clock_, options);
    notifier_ = MakeNotifier();
  }

  std::unique_ptr<Notifier> MakeNotifier() {
    NotifierOptions options;
    options.scan_interval = absl::ZeroDuration();  // Scan() and DeliverDue() by hand
    options.retry_base = absl::Seconds(10);
    options.retry_max = absl::Seconds(40);
    options.give_up_after = absl::Minutes(5);
    options.stuck_floor = absl::Seconds(30);
    options.delivery.smtp.host = "smtp.invalid";  // e-mail subscriptions are accepted
    options.deliver = [this](const store::Outgoing& out) {
      absl::MutexLock lock(&mu_);
      delivered_.push_back(out);
      notify::Delivered result;
      result.ok = fail_next_ == 0;
      if (fail_next_ > 0) --fail_next_;
      result.detail = result.ok ? "HTTP 200" : "HTTP 503: try later";
      return result;
    };
    return std::make_unique<Notifier>(store_.get(), scheduler_.get(), &clock_, options);
  }

  int64_t Submit(const std::string& yaml, const std::string& who = "user:ann") {
    SubmitRequest request;
    request.spec_yaml = yaml;
    request.file_name = "test.yaml";
    request.who = who;
    auto result = scheduler_->SubmitSweep(request);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? result->sweep.id : 0;
  }
  std::vector<int64_t> RunsOf(const std::string& sweep) {
    store::RunFilter filter;
    filter.sweeps = {sweep};
    auto runs = store_->ListRuns(filter);
    EXPECT_TRUE(runs.ok()) << runs.status();
    std::vector<int64_t> ids;
    for (const auto& r : *runs) ids.push_back(r.id);
    return ids;
  }
  void Register(const std::string& id, double speed = 1) {
    WorkerInfo worker;
    worker.id = id;
    worker.device_kind = "cuda";
    worker.device_name = "NVIDIA GeForce RTX 3090";
    worker.memory_bytes = 1024 * kGiB;
    worker.memory_reserve_bytes = 0;
    worker.speed_factor = speed;
    CART_ASSERT_OK(scheduler_->RegisterWorker(worker).status());
  }
  Job Start(const std::string& worker) {
    auto job = scheduler_->Acquire(worker, absl::ZeroDuration());
    EXPECT_TRUE(job.ok() && job->has_value()) << job.status();
    if (!job.ok() || !job->has_value()) return Job{};
    CART_EXPECT_OK(
        scheduler_->AttachStream((*job)->run.id, (*job)->attempt, std::make_shared<NullStream>()));
    return **job;
  }
  store::Subscription Subscribe(const std::string& who, SubscribeRequest request) {
    if (request.target.empty()) request.target = "https://hooks.example/services/T0/B0/SECRET";
    auto sub = notifier_->Subscribe(who, request);
    EXPECT_TRUE(sub.ok()) << sub.status();
    return sub.ok() ? *sub : store::Subscription{};
  }
  int64_t Scan() {
    auto added = notifier_->Scan();
    EXPECT_TRUE(added.ok()) << added.status();
    return added.ok() ? *added : -1;
  }
  // Every notification stored, oldest first, as "subscription:event".
  std::vector<std::string> Stored() {
    auto log = notifier_->Log("admin:root", 0, true, 1000);
    EXPECT_TRUE(log.ok()) << log.status();
    std::vector<std::string> out;
    if (!log.ok()) return out;
    for (auto it = log->rbegin(); it != log->rend(); ++it) {
      out.push_back(StrCat(it->notice.subscription_id, ":", it->notice.event));
    }
    return out;
  }
  std::vector<store::Outgoing> DeliveredSoFar() {
    absl::MutexLock lock(&mu_);
    return delivered_;
  }

  TempDir dir_;
  FakeClock clock_;
  std::unique_ptr<store::RunStore> store_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<Notifier> notifier_;
  absl::Mutex mu_;
  std::vector<store::Outgoing> delivered_ ABSL_GUARDED_BY(mu_);
  int fail_next_ ABSL_GUARDED_BY(mu_) = 0;
};

TEST_F(NotifyTest, AFailedRunReachesTheSubscriptionsOfItsRunSweepAndOwnerOnceAndNoOtherOne) {
  Submit(Sweep("alpha"));
  Submit(Sweep("beta"));
  const int64_t run = RunsOf("alpha").front();
  SubscribeRequest mine{.events = "failed,sweep_finished"};
  const auto ann_mine = Subscribe("user:ann", mine);  // ann submitted both sweeps
  SubscribeRequest on_sweep{.sweep = "alpha", .events = "failed"};
  const auto bob_sweep = Subscribe("user:bob", on_sweep);
  EXPECT_THAT(notifier_
                  ->Subscribe("user:bob", {.run_id = run,
                                           .events = "failed,sweep_finished",
                                           .target = "https://hooks.example/x"})
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is about sweeps")));
  SubscribeRequest on_run{.run_id = run, .events = "all"};
  const auto bob_run = Subscribe("user:bob", on_run);
  Subscribe("user:bob", mine);  // bob submitted nothing
  Subscribe("user:ann", SubscribeRequest{.sweep = "beta", .events = "failed"});
  Subscribe("user:ann", SubscribeRequest{.run_id = run, .events = "lost,stuck"});
  EXPECT_EQ(Scan(), 0);

  Register("w1");
  const Job job = Start("w1");
  ASSERT_EQ(job.run.id, run);
  CART_ASSERT_OK(scheduler_
                     ->ReportOutcome(run, job.attempt, store::AttemptOutcome::kFailed,
                                     "CUDA error: an illegal memory access")
                     .status());
  // failed for three subscriptions, and the sweep's end for its owner's that asked.
  EXPECT_EQ(Scan(), 4);
  EXPECT_EQ(Scan(), 0);  // derived again: not stored twice
  EXPECT_THAT(Stored(), UnorderedElementsAre(
                            StrCat(ann_mine.id, ":failed"), StrCat(ann_mine.id, ":sweep_finished"),
                            StrCat(bob_sweep.id, ":failed"), StrCat(bob_run.id, ":failed")));
  EXPECT_THAT(bob_run.events,
              ElementsAre("failed", "lost", "stuck", "diverged", "leak_suspected", "preempted"));
  auto sent = notifier_->DeliverDue();
  ASSERT_TRUE(sent.ok()) << sent.status();
  EXPECT_EQ(*sent, 4);
  EXPECT_EQ(*notifier_->DeliverDue(), 0);
  const std::vector<store::Outgoing> delivered = DeliveredSoFar();
  ASSERT_EQ(delivered.size(), 4u);
  const nlohmann::json payload =
      nlohmann::json::parse(delivered.front().notification.notice.payload);
  EXPECT_EQ(payload["run"]["id"], run);
  EXPECT_EQ(payload["sweep"]["name"], "alpha");
  EXPECT_THAT(payload["details"]["why"].get<std::string>(), HasSubstr("illegal memory access"));
  auto log = notifier_->Log("user:bob", bob_sweep.id, false, 10);
  ASSERT_TRUE(log.ok()) << log.status();
  ASSERT_EQ(log->size(), 1u);
  EXPECT_EQ(log->front().state, store::NotificationState::kDelivered);
  ASSERT_EQ(log->front().log.size(), 1u);
  EXPECT_EQ(log->front().log.front().detail, "HTTP 200");
}

TEST_F(NotifyTest, ANewSubscriptionIsNotToldWhatHappenedBeforeItWasMade) {
  Submit(Sweep("old"));
  Register("w1");
  const Job job = Start("w1");
  CART_ASSERT_OK(
      scheduler_->ReportOutcome(job.run.id, job.attempt, store::AttemptOutcome::kFailed, "boom")
          .status());
  clock_.Advance(absl::Seconds(1));
  Subscribe("user:ann", SubscribeRequest{.events = "all"});
  EXPECT_EQ(Scan(), 0);
  EXPECT_TRUE(Stored().empty());
}

TEST_F(NotifyTest, DivergedAndPreemptedAreToldApartFromAPlainFailureAndADrain) {
  Submit(Sweep("div", 2, 3));
  const auto sub = Subscribe("user:ann", SubscribeRequest{.events = "diverged,preempted,failed"});
  EXPECT_EQ(Scan(), 0);
  Register("w1");
  Register("w2");
  const Job a = Start("w1");
  const Job b = Start("w2");
  CART_ASSERT_OK(scheduler_
                     ->ReportOutcome(a.run.id, a.attempt, store::AttemptOutcome::kFailed,
                                     "loss is nan", store::Divergence{412, NAN})
                     .status());
  // A drain (SIGTERM on the worker) is no preemption; a preemption's drain is.
  CART_ASSERT_OK(
      scheduler_->ReportOutcome(b.run.id, b.attempt, store::AttemptOutcome::kDrained, "").status());
  const Job b2 = Start("w2");
  CART_ASSERT_OK(
      store_
          ->RecordAttemptOutcome(b2.run.id, b2.attempt, store::AttemptOutcome::kDrained,
                                 store::Audit{scheduler_->NowMicros(), "worker:w2",
                                              "preempted for x", store::EventCause::kPreempted})
          .status());
  Scan();
  EXPECT_THAT(Stored(), UnorderedElementsAre(StrCat(sub.id, ":failed"), StrCat(sub.id, ":diverged"),
                                             StrCat(sub.id, ":preempted")));
}

TEST_F(NotifyTest, LostIsToldOnlyOfARunNotRunningAgainWithinLostAfter) {
  Submit(Sweep("lost", 2, 3));
  const auto sub =
      Subscribe("user:ann", SubscribeRequest{.events = "lost", .lost_after = absl::Minutes(10)});
  Register("w1");
  Register("w2");
  const Job a = Start("w1");
  const Job b = Start("w2");
  clock_.Advance(kTtl + absl::Seconds(1));
  auto expired = scheduler_->ExpireLeases();
  ASSERT_TRUE(expired.ok()) << expired.status();
  ASSERT_EQ(expired->size(), 2u);
  clock_.Advance(absl::Minutes(5));
  EXPECT_EQ(Scan(), 0);           // both may still be picked up in time
  const Job again = Start("w1");  // one of them runs again within the 10 minutes
  clock_.Advance(absl::Minutes(6));
  EXPECT_EQ(Scan(), 1);
  auto log = notifier_->Log("user:ann", sub.id, false, 10);
  ASSERT_TRUE(log.ok());
  ASSERT_EQ(log->size(), 1u);
  const int64_t not_again = again.run.id == a.run.id ? b.run.id : a.run.id;
  EXPECT_EQ(log->front().notice.run_id, not_again);
  EXPECT_THAT(log->front().notice.summary, HasSubstr("lost its worker"));
  clock_.Advance(absl::Minutes(1));
  EXPECT_EQ(Scan(), 0);  // once
}

TEST_F(NotifyTest, StuckNeedsTheFactorTimesItsStepTimeAndTheFloorAndIsToldOncePerStall) {
  Submit(Sweep("slow"));
  const auto sub = Subscribe("user:ann", SubscribeRequest{.events = "stuck", .stuck_factor = 5});
  Register("w1");
  const Job job = Start("w1");
  for (int step = 1; step <= 3; ++step) {  // 10 s a step
    clock_.Advance(absl::Seconds(10));
    CART_ASSERT_OK(scheduler_->Heartbeat(job.run.id, job.attempt, step).status());
  }
  clock_.Advance(absl::Seconds(45));  // < 5 x 10 s
  EXPECT_EQ(Scan(), 0);
  clock_.Advance(absl::Seconds(10));  // 55 s without progress
  EXPECT_EQ(Scan(), 1);
  clock_.Advance(absl::Seconds(60));
  EXPECT_EQ(Scan(), 0);  // the same stall
  CART_ASSERT_OK(scheduler_->Heartbeat(job.run.id, job.attempt, 4).status());
  clock_.Advance(absl::Seconds(20));
  EXPECT_EQ(Scan(), 0);  // moving again
  clock_.Advance(absl::Hours(1));
  EXPECT_EQ(Scan(), 1);  // stuck again, at step 4
  auto log = notifier_->Log("user:ann", sub.id, false, 10);
  ASSERT_TRUE(log.ok());
  ASSERT_EQ(log->size(), 2u);
  EXPECT_THAT(log->front().notice.summary, HasSubstr("stuck at step 4"));
  EXPECT_THAT(log->back().notice.summary, HasSubstr("stuck at step 3"));
}

TEST_F(NotifyTest, ALeakSuspectedIsToldOncePerRun) {
  Submit(Sweep("leak"));
  const auto sub = Subscribe("user:ann", SubscribeRequest{.events = "leak_suspected"});
  Register("w1");
  const Job job = Start("w1");
  std::vector<store::MetricPoint> points = {
      {.step = 100, .name = "leak_suspected", .value = 0, .wall_time_us = scheduler_->NowMicros()}};
  CART_ASSERT_OK(scheduler_->AppendMetrics(job.run.id, job.attempt, points).status());
  EXPECT_EQ(Scan(), 0);
  points = {
      {.step = 200, .name = "leak_suspected", .value = 1, .wall_time_us = scheduler_->NowMicros()}};
  CART_ASSERT_OK(scheduler_->AppendMetrics(job.run.id, job.attempt, points).status());
  EXPECT_EQ(Scan(), 1);
  points = {
      {.step = 300, .name = "leak_suspected", .value = 1, .wall_time_us = scheduler_->NowMicros()}};
  CART_ASSERT_OK(scheduler_->AppendMetrics(job.run.id, job.attempt, points).status());
  EXPECT_EQ(Scan(), 0);
  EXPECT_THAT(Stored(), ElementsAre(StrCat(sub.id, ":leak_suspected")));
}

TEST_F(NotifyTest, ASweepFinishesOnceWhenItsLastRunEnds) {
  Submit(Sweep("two", 2, 1));
  const auto sub =
      Subscribe("user:ann", SubscribeRequest{.sweep = "two", .events = "sweep_finished"});
  Register("w1");
  Register("w2");
  const Job a = Start("w1");
  const Job b = Start("w2");
  CART_ASSERT_OK(
      scheduler_->ReportOutcome(a.run.id, a.attempt, store::AttemptOutcome::kSucceeded, "")
          .status());
  EXPECT_EQ(Scan(), 0);
  CART_ASSERT_OK(
      scheduler_->ReportOutcome(b.run.id, b.attempt, store::AttemptOutcome::kFailed, "x").status());
  EXPECT_EQ(Scan(), 1);
  EXPECT_EQ(Scan(), 0);
  auto log = notifier_->Log("user:ann", sub.id, false, 10);
  ASSERT_TRUE(log.ok());
  ASSERT_EQ(log->size(), 1u);
  EXPECT_THAT(log->front().notice.summary, HasSubstr("1 SUCCEEDED, 1 FAILED"));
}

TEST_F(NotifyTest, AFailedDeliveryIsRetriedWithDoublingWaitsAndGivenUpAfterTheLimit) {
  Submit(Sweep("retry"));
  const auto sub = Subscribe("user:ann", SubscribeRequest{.events = "failed"});
  Register("w1");
  const Job job = Start("w1");
  CART_ASSERT_OK(
      scheduler_->ReportOutcome(job.run.id, job.attempt, store::AttemptOutcome::kFailed, "x")
          .status());
  ASSERT_EQ(Scan(), 1);
  {
    absl::MutexLock lock(&mu_);
    fail_next_ = 1000;
  }
  std::vector<int64_t> waits_s;
  int64_t last_try_us = 0;
  for (int i = 0; i < 20; ++i) {
    auto sent = notifier_->DeliverDue();
    ASSERT_TRUE(sent.ok()) << sent.status();
    auto log = notifier_->Log("user:ann", sub.id, false, 1);
    ASSERT_TRUE(log.ok());
    const store::NotificationRecord& n = log->front();
    if (n.state != store::NotificationState::kPending) break;
    if (*sent > 0) {
      waits_s.push_back((n.next_try_us - n.log.back().at_us) / 1'000'000);
      last_try_us = n.log.back().at_us;
    }
    clock_.Set(absl::FromUnixMicros(n.next_try_us));
  }
  // 10 s, 20 s, 40 s, then at most retry_max (40 s), until 5 minutes have passed.
  ASSERT_GE(waits_s.size(), 4u);
  EXPECT_EQ(waits_s[0], 10);
  EXPECT_EQ(waits_s[1], 20);
  EXPECT_EQ(waits_s[2], 40);
  EXPECT_EQ(waits_s[3], 40);
  auto log = notifier_->Log("user:ann", sub.id, false, 1);
  ASSERT_TRUE(log.ok());
  EXPECT_EQ(log->front().state, store::NotificationState::kGaveUp);
  EXPECT_EQ(log->front().log.back().detail, "HTTP 503: try later");
  EXPECT_LE(last_try_us - log->front().created_us, absl::ToInt64Microseconds(absl::Minutes(5)));
  EXPECT_EQ(log->front().tries, static_cast<int64_t>(log->front().log.size()));
}

TEST_F(NotifyTest, AnExpectedFinishThatSlipsPastTheShareIsToldAndBecomesTheNewBaseline) {
  Submit(Sweep("plan", 2, 1));
  const auto sub = Subscribe(
      "user:ann", SubscribeRequest{.sweep = "plan", .events = "finish_slipped", .slip_share = 0.5});
  Register("w1", /*speed=*/1);
  EXPECT_EQ(Scan(), 0);  // the baseline: the plan at speed 1
  auto before = scheduler_->ExpectedFinish();
  ASSERT_TRUE(before.ok());
  // The worker turns out four times slower than it said: the forecast moves out.
  const Job job = Start("w1");
  clock_.Advance(absl::Seconds(30));
  CART_ASSERT_OK(scheduler_->Heartbeat(job.run.id, job.attempt, 1).status());
  clock_.Advance(absl::Minutes(10));  // the forecast is made again at least every 10 s
  CART_ASSERT_OK(scheduler_->Heartbeat(job.run.id, job.attempt, 2).status());
  auto after = scheduler_->ExpectedFinish();
  ASSERT_TRUE(after.ok());
  const int64_t sweep_id = job.run.sweep_id;
  ASSERT_TRUE((*after)->sweep_finish_us.count(sweep_id));
  const double left = (*before)->sweep_finish_us.at(sweep_id) - (*before)->at_us;
  const double slip =
      (*after)->sweep_finish_us.at(sweep_id) - (*before)->sweep_finish_us.at(sweep_id);
  ASSERT_GT(slip, 0.5 * left) << "the test's own premise: the forecast must have slipped";
  EXPECT_EQ(Scan(), 1);
  EXPECT_EQ(Scan(), 0);  // the new baseline
  EXPECT_THAT(Stored(), ElementsAre(StrCat(sub.id, ":finish_slipped")));
}

TEST_F(NotifyTest, AClaimWhoseVerdictChangesIsToldToTheSubscribersOfTheSweepsItReads) {
  Submit(Sweep("stage2", 2, 1));  // the part most claims read
  Submit(Sweep("elsewhere"));
  const auto on_stage2 =
      Subscribe("user:bob", SubscribeRequest{.sweep = "stage2", .events = "verdict_changed"});
  const auto mine = Subscribe("user:ann", SubscribeRequest{.events = "verdict_changed"});
  Subscribe("user:bob", SubscribeRequest{.sweep = "elsewhere", .events = "verdict_changed"});
  Register("w1");
  Register("w2");
  const Job a = Start("w1");
  const Job b = Start("w2");
  CART_ASSERT_OK(
      scheduler_->ReportOutcome(a.run.id, a.attempt, store::AttemptOutcome::kFailed, "x").status());
  EXPECT_EQ(Scan(), 0);  // the claims decided for the first time: the baseline
  auto report_claims = report::DefaultClaims();
  ASSERT_TRUE(report_claims.ok());
  std::string claim;
  for (const report::ClaimSpec& spec : *report_claims) {
    if (spec.part == "stage2") claim = spec.id;
  }
  ASSERT_FALSE(claim.empty());
  auto seen = store_->notify().Mark(StrCat("verdict/claim/", claim));
  ASSERT_TRUE(seen.ok() && seen->has_value());
  // As if the claim had been decided otherwise before: the next decision differs.
  const std::string before = **seen == "holds" ? "does not hold" : "holds";
  CART_ASSERT_OK(
      store_->notify()
          .Enqueue({}, {{StrCat("verdict/claim/", claim), before}}, scheduler_->NowMicros())
          .status());
  CART_ASSERT_OK(
      scheduler_->ReportOutcome(b.run.id, b.attempt, store::AttemptOutcome::kFailed, "y").status());
  EXPECT_EQ(Scan(), 0);  // within the interval: not decided again yet
  clock_.Advance(absl::Minutes(2));
  EXPECT_EQ(Scan(), 2);
  EXPECT_EQ(Scan(), 0);
  auto log = notifier_->Log("admin:root", 0, true, 10);
  ASSERT_TRUE(log.ok());
  std::vector<int64_t> subs;
  for (const auto& n : *log) {
    subs.push_back(n.notice.subscription_id);
    EXPECT_EQ(n.notice.event, "verdict_changed");
    EXPECT_THAT(n.notice.summary,
                HasSubstr(StrCat("claim ", claim, " now ", **seen, " (was ", before, ")")));
  }
  EXPECT_THAT(subs, UnorderedElementsAre(on_stage2.id, mine.id));
}

TEST_F(NotifyTest, ADeletedSweepTakesItsSubscriptionsAlongAndLaterEventsAreStillSeen) {
  Submit(Sweep("gone"));
  const auto on_sweep =
      Subscribe("user:bob", SubscribeRequest{.sweep = "gone", .events = "failed"});
  const auto mine = Subscribe("user:ann", SubscribeRequest{.events = "failed"});
  Register("w1");
  const Job job = Start("w1");
  CART_ASSERT_OK(
      scheduler_->ReportOutcome(job.run.id, job.attempt, store::AttemptOutcome::kFailed, "x")
          .status());
  ASSERT_EQ(Scan(), 2);
  // The sweep held the newest events; deleting it must not let new events reuse their ids
  // below the notifier's mark.
  CART_ASSERT_OK(scheduler_->DeleteSweep("gone", "user:ann").status());
  auto bobs = notifier_->List("user:bob", false);
  ASSERT_TRUE(bobs.ok());
  EXPECT_TRUE(bobs->empty()) << "the subscription to the deleted sweep is gone";
  auto kept = notifier_->Log("user:ann", mine.id, false, 10);
  ASSERT_TRUE(kept.ok());
  ASSERT_EQ(kept->size(), 1u);
  EXPECT_FALSE(kept->front().notice.run_id.has_value());
  EXPECT_THAT(kept->front().notice.summary, HasSubstr("gone/"));
  EXPECT_THAT(notifier_->Unsubscribe("user:bob", on_sweep.id),
              StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  Submit(Sweep("next"));
  const Job again = Start("w1");
  CART_ASSERT_OK(
      scheduler_->ReportOutcome(again.run.id, again.attempt, store::AttemptOutcome::kFailed, "y")
          .status());
  EXPECT_EQ(Scan(), 1);
}

TEST_F(NotifyTest, AnAdminSendsATestOnAnotherUsersSubscription) {
  const auto bob = Subscribe("user:bob", SubscribeRequest{.events = "failed"});
  auto sent = notifier_->SendTest("admin:root", bob.id);
  ASSERT_TRUE(sent.ok()) << sent.status();
  auto log = notifier_->Log("user:bob", bob.id, false, 10);
  ASSERT_TRUE(log.ok());
  ASSERT_EQ(log->size(), 1u);
  EXPECT_EQ(log->front().id, *sent);
  EXPECT_EQ(log->front().notice.event, "test");
}

TEST_F(NotifyTest, OwnersSeeAndRemoveOnlyTheirOwnSubscriptions) {
  Submit(Sweep("own"));
  const auto ann = Subscribe("user:ann", SubscribeRequest{.events = "failed"});
  const auto bob = Subscribe("user:bob", SubscribeRequest{.events = "failed"});
  auto anns = notifier_->List("user:ann", false);
  ASSERT_TRUE(anns.ok());
  ASSERT_EQ(anns->size(), 1u);
  EXPECT_EQ(anns->front().id, ann.id);
  EXPECT_THAT(notifier_->List("user:ann", true).status(),
              StatusIs(absl::StatusCode::kPermissionDenied, ::testing::_));
  EXPECT_THAT(notifier_->Unsubscribe("user:ann", bob.id),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("belongs to user:bob")));
  EXPECT_THAT(notifier_->SendTest("user:ann", bob.id),
              StatusIs(absl::StatusCode::kPermissionDenied, ::testing::_));
  EXPECT_THAT(notifier_->Log("user:ann", 0, true, 10).status(),
              StatusIs(absl::StatusCode::kPermissionDenied, ::testing::_));
  CART_EXPECT_OK(notifier_->Unsubscribe("admin:root", bob.id));
  EXPECT_THAT(notifier_->Unsubscribe("user:bob", bob.id),
              StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  auto all = notifier_->List("admin:root", true);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 1u);
}

TEST_F(NotifyTest, ARemovedSubscriptionGetsNothingNewAndItsPendingOnesAreGivenUp) {
  Submit(Sweep("rm", 2, 1));
  const auto sub = Subscribe("user:ann", SubscribeRequest{.events = "failed"});
  Register("w1");
  Register("w2");
  const Job a = Start("w1");
  const Job b = Start("w2");
  CART_ASSERT_OK(
      scheduler_->ReportOutcome(a.run.id, a.attempt, store::AttemptOutcome::kFailed, "x").status());
  ASSERT_EQ(Scan(), 1);
  CART_ASSERT_OK(notifier_->Unsubscribe("user:ann", sub.id));
  CART_ASSERT_OK(
      scheduler_->ReportOutcome(b.run.id, b.attempt, store::AttemptOutcome::kFailed, "y").status());
  EXPECT_EQ(Scan(), 0);
  EXPECT_EQ(*notifier_->DeliverDue(), 0);
  EXPECT_TRUE(DeliveredSoFar().empty());
  auto log = notifier_->Log("admin:root", sub.id, true, 10);
  ASSERT_TRUE(log.ok());
  ASSERT_EQ(log->size(), 1u);
  EXPECT_EQ(log->front().state, store::NotificationState::kGaveUp);
  EXPECT_EQ(log->front().log.back().detail, "subscription removed");
}

TEST_F(NotifyTest, BadSubscriptionsAreRefusedNamingTheProblem) {
  Submit(Sweep("bad"));
  auto refused = [&](SubscribeRequest r) { return notifier_->Subscribe("user:ann", r).status(); };
  EXPECT_THAT(refused({.events = "failed,exploded", .target = "https://h.example/x"}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("unknown event 'exploded' (known: failed, lost")));
  EXPECT_THAT(refused({.events = "failed", .target = "ftp://h.example/x"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not http")));
  EXPECT_THAT(refused({.events = "failed",
                       .channel = store::NotifyChannel::kEmail,
                       .target = "not an address"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is not one")));
  EXPECT_THAT(refused({.sweep = "nosuch", .events = "failed", .target = "https://h.example/x"}),
              StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  EXPECT_THAT(refused({.run_id = 9999, .events = "failed", .target = "https://h.example/x"}),
              StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  EXPECT_THAT(refused({.events = "stuck", .target = "https://h.example/x", .stuck_factor = 1}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("stuck_factor must be > 1")));
  EXPECT_THAT(refused({.events = "", .target = "https://h.example/x"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no event named")));
  // Without an SMTP server, e-mail is refused by name.
  NotifierOptions no_smtp;
  no_smtp.scan_interval = absl::ZeroDuration();
  Notifier bare(store_.get(), scheduler_.get(), &clock_, no_smtp);
  EXPECT_THAT(bare.Subscribe("user:ann", {.events = "failed",
                                          .channel = store::NotifyChannel::kEmail,
                                          .target = "ann@lab.example"})
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("smtp_host")));
}

}  // namespace
}  // namespace cart::server::notify
