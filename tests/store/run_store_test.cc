// RunStore's domain API: sweeps, leases and fencing, the run lifecycle with its events, metrics and
// checkpoints.

#include "store/run_store.h"

#include <set>
#include <utility>

#include "common/clock.h"
#include "common/strings.h"
#include "tests/store/store_fixture.h"
#include "tests/support/test_support.h"

namespace cart::store {
namespace {

using ::cart::store::testing::By;
using ::cart::store::testing::kGiB;
using ::cart::store::testing::kT0;
using ::cart::store::testing::MakeRun;
using ::cart::store::testing::MakeSweep;
using ::cart::store::testing::OpenStore;
using ::cart::store::testing::PointsAt;
using ::cart::testing::IsOk;
using ::cart::testing::StatusIs;
using ::cart::testing::TempDir;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

constexpr int64_t kSecond = 1'000'000;
const std::string kSha1(64, 'a');
const std::string kSha2(64, 'b');

class RunStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = OpenStore(dir_.File("cart.db"));
    ASSERT_NE(store_, nullptr);
    CART_ASSERT_OK(store_->RegisterWorker("w1", "RTX 3050", 8 * kGiB, kT0));
  }

  // Creates a one-run sweep and returns the run id.
  int64_t CreateOne(const std::string& sweep, NewRun run) {
    auto created = store_->CreateSweep(MakeSweep(sweep, {std::move(run)}), By("user:a", kT0));
    EXPECT_TRUE(created.ok()) << created.status();
    return created.ok() ? created->run_ids.at(0) : -1;
  }

  // Claims with w1 and expects `run_id`.
  Claim ClaimExpecting(int64_t run_id, int64_t now_us) {
    auto claim = store_->ClaimNextRun("w1", 8 * kGiB, now_us);
    EXPECT_TRUE(claim.ok()) << claim.status();
    EXPECT_TRUE(claim.ok() && claim->has_value());
    if (!claim.ok() || !claim->has_value()) return Claim{};
    EXPECT_EQ((*claim)->run.id, run_id);
    return **claim;
  }

  std::vector<std::pair<std::string, std::string>> Transitions(int64_t run_id) {
    auto events = store_->RunEvents(run_id);
    EXPECT_TRUE(events.ok()) << events.status();
    std::vector<std::pair<std::string, std::string>> out;
    for (const EventRecord& e : *events) out.emplace_back(e.from_state, e.to_state);
    return out;
  }

  TempDir dir_;
  std::unique_ptr<RunStore> store_;
};

TEST_F(RunStoreTest, CreateSweepWritesEveryRunQueuedWithItsConfigAndAnEvent) {
  NewRun a = MakeRun("d256-R6", {{"d", "256"}, {"R", "6"}, {"P", "6"}, {"seed", "137"}});
  NewRun b = MakeRun("d512-R8", {{"d", "512"}, {"R", "8"}, {"P", "6"}, {"kv", "recompute"}});
  CART_ASSERT_OK_AND_ASSIGN(CreatedSweep created,
                            store_->CreateSweep(MakeSweep("stage2", {a, b}, 3), By("user:a", kT0)));
  EXPECT_TRUE(created.created);
  ASSERT_EQ(created.run_ids.size(), 2u);
  EXPECT_EQ(created.sweep.name, "stage2");
  EXPECT_THAT(created.sweep.run_counts, ElementsAre(Pair(RunState::kQueued, 2)));

  CART_ASSERT_OK_AND_ASSIGN(RunRecord run, store_->GetRun(created.run_ids[1]));
  EXPECT_EQ(run.name, "d512-R8");
  EXPECT_EQ(run.sweep_name, "stage2");
  EXPECT_EQ(run.d, 512);
  EXPECT_EQ(run.r, std::optional<int64_t>(8));
  EXPECT_EQ(run.p, std::optional<int64_t>(6));
  EXPECT_EQ(run.seed, 42);
  EXPECT_EQ(run.steps, 1000);
  EXPECT_EQ(run.priority, 3);  // the sweep's
  EXPECT_EQ(run.params.at("kv"), "recompute");
  EXPECT_EQ(run.config_yaml, b.config_yaml);
  EXPECT_EQ(run.effective_params, 17'970'000);
  EXPECT_EQ(run.state, RunState::kQueued);
  EXPECT_EQ(run.attempt, 0);
  EXPECT_THAT(Transitions(run.id), ElementsAre(Pair("", "QUEUED")));
}

TEST_F(RunStoreTest, SameRequestIdReturnsTheExistingSweepInsteadOfADuplicate) {
  NewSweep sweep = MakeSweep("s", {MakeRun("a", {}), MakeRun("b", {})});
  CART_ASSERT_OK_AND_ASSIGN(CreatedSweep first, store_->CreateSweep(sweep, By("user:a", kT0)));
  CART_ASSERT_OK_AND_ASSIGN(CreatedSweep again, store_->CreateSweep(sweep, By("user:a", kT0 + 1)));
  EXPECT_FALSE(again.created);
  EXPECT_EQ(again.sweep.id, first.sweep.id);
  EXPECT_EQ(again.run_ids, first.run_ids);
  CART_ASSERT_OK_AND_ASSIGN(auto runs, store_->ListRuns(RunFilter{}));
  EXPECT_EQ(runs.size(), 2u);

  NewSweep changed = sweep;
  changed.spec_text = "something else";
  EXPECT_THAT(store_->CreateSweep(changed, By("user:a", kT0)),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("req-s")));
  NewSweep other_request = sweep;
  other_request.client_request_id = "req-2";
  EXPECT_THAT(store_->CreateSweep(other_request, By("user:a", kT0)),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("sweep 's' already exists")));
}

TEST_F(RunStoreTest, MalformedSweepIsRejectedWithTheRunAndFieldNamedAndNothingWritten) {
  NewRun no_d = MakeRun("x", {});
  no_d.params.erase("d");
  EXPECT_THAT(store_->CreateSweep(MakeSweep("s", {no_d}), By("user:a", kT0)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("run 'x' of sweep 's'")));
  EXPECT_THAT(store_->CreateSweep(MakeSweep("s", {MakeRun("x", {{"R", "six"}})}), By("u", kT0)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'R' = 'six'")));
  EXPECT_THAT(
      store_->CreateSweep(MakeSweep("s", {MakeRun("x", {}), MakeRun("x", {})}), By("u", kT0)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("two runs named 'x'")));
  EXPECT_THAT(store_->CreateSweep(MakeSweep("bad name!", {MakeRun("x", {})}), By("u", kT0)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bad name!")));
  NewRun orphan = MakeRun("child", {});
  orphan.parent_run_id = 999;
  orphan.parent_checkpoint = "final";
  EXPECT_THAT(store_->CreateSweep(MakeSweep("s", {MakeRun("ok", {}), orphan}), By("u", kT0)),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("parent run 999")));
  CART_ASSERT_OK_AND_ASSIGN(auto sweeps, store_->ListSweeps());
  EXPECT_TRUE(sweeps.empty()) << "a failed CreateSweep must leave nothing behind";
  CART_ASSERT_OK_AND_ASSIGN(auto runs, store_->ListRuns(RunFilter{}));
  EXPECT_TRUE(runs.empty());
}

TEST_F(RunStoreTest, ClaimTakesHighestPriorityThenOldestRunThatFitsTheDevice) {
  CART_ASSERT_OK_AND_ASSIGN(
      auto low,
      store_->CreateSweep(MakeSweep("low", {MakeRun("old", {}, 2 * kGiB)}, 0), By("u", kT0)));
  CART_ASSERT_OK_AND_ASSIGN(
      auto high,
      store_->CreateSweep(
          MakeSweep("high", {MakeRun("big", {}, 20 * kGiB), MakeRun("small", {}, 4 * kGiB)}, 5),
          By("u", kT0 + kSecond)));
  // 8 GiB device: the big high-priority run does not fit; the small one does and goes first.
  Claim first = ClaimExpecting(high.run_ids[1], kT0 + 2 * kSecond);
  EXPECT_EQ(first.attempt, 1);
  EXPECT_EQ(first.run.state, RunState::kLeased);
  EXPECT_EQ(first.lease_expires_us, kT0 + 2 * kSecond + 60 * kSecond);
  ClaimExpecting(low.run_ids[0], kT0 + 2 * kSecond);
  CART_ASSERT_OK_AND_ASSIGN(auto none, store_->ClaimNextRun("w1", 8 * kGiB, kT0));
  EXPECT_FALSE(none.has_value()) << "the 20 GiB run must not go to an 8 GiB device";
  // Why is it still queued: no registered worker is big enough.
  CART_ASSERT_OK_AND_ASSIGN(auto biggest, store_->MaxWorkerMemory());
  EXPECT_EQ(biggest, std::optional<int64_t>(8 * kGiB));
  CART_ASSERT_OK(store_->RegisterWorker("w2", "RTX 3090", 24 * kGiB, kT0));
  CART_ASSERT_OK_AND_ASSIGN(auto big, store_->ClaimNextRun("w2", 24 * kGiB, kT0));
  ASSERT_TRUE(big.has_value());
  EXPECT_EQ(big->run.id, high.run_ids[0]);
}

TEST_F(RunStoreTest, ClaimByAnUnregisteredWorkerIsNotFound) {
  CreateOne("s", MakeRun("a", {}));
  EXPECT_THAT(store_->ClaimNextRun("ghost", 8 * kGiB, kT0),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("'ghost'")));
  CART_ASSERT_OK_AND_ASSIGN(RunRecord run, store_->GetRun(1));
  EXPECT_EQ(run.state, RunState::kQueued);
}

TEST_F(RunStoreTest, ExpiredLeaseRequeuesRunFromLatestCheckpointAndFencesTheOldAttempt) {
  FakeClock clock(absl::FromUnixMicros(kT0));
  auto now = [&] { return absl::ToUnixMicros(clock.Now()); };
  const int64_t id = CreateOne("s", MakeRun("a", {}));
  Claim claim = ClaimExpecting(id, now());
  CART_ASSERT_OK(store_->MarkRunning(id, claim.attempt, now()));
  CART_ASSERT_OK(
      store_->RecordCheckpoint(id, claim.attempt, {500, kSha1, 1234, "aa/ckpt-500"}, now()));
  clock.Advance(absl::Seconds(30));
  CART_ASSERT_OK_AND_ASSIGN(HeartbeatReply beat, store_->Heartbeat(id, claim.attempt, now()));
  EXPECT_EQ(beat.lease_expires_us, now() + 60 * kSecond);
  EXPECT_FALSE(beat.cancel_requested);

  clock.Advance(absl::Seconds(59));  // 89 s after the claim: the heartbeat kept it alive
  CART_ASSERT_OK_AND_ASSIGN(auto expired, store_->ExpireLeases(now()));
  EXPECT_TRUE(expired.empty());
  clock.Advance(absl::Seconds(2));  // the worker went silent 61 s ago
  CART_ASSERT_OK_AND_ASSIGN(expired, store_->ExpireLeases(now()));
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].run_id, id);
  EXPECT_EQ(expired[0].new_state, RunState::kQueued);
  EXPECT_EQ(expired[0].worker_id, "w1");

  // The old attempt is fenced off everywhere.
  EXPECT_THAT(store_->Heartbeat(id, claim.attempt, now()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr(StrCat("attempt 1 of run ", id, " is stale (run is QUEUED"))));
  EXPECT_THAT(store_->AppendMetrics(id, claim.attempt, PointsAt(600, {{"loss", 1.0}})),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("stale")));
  EXPECT_THAT(store_->RecordCheckpoint(id, claim.attempt, {600, kSha2, 1, "bb/c"}, now()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("stale")));

  Claim again = ClaimExpecting(id, now());
  EXPECT_EQ(again.attempt, 2);
  ASSERT_TRUE(again.resume_from.has_value());
  EXPECT_EQ(again.resume_from->step, 500);
  EXPECT_EQ(again.resume_from->sha256, kSha1);
  EXPECT_EQ(again.resume_from->path, "aa/ckpt-500");
  // A report of attempt 1 now still fails: the run holds a lease, but for attempt 2.
  EXPECT_THAT(store_->Heartbeat(id, 1, now()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("current attempt 2")));
  CART_ASSERT_OK_AND_ASSIGN(auto attempts, store_->ListAttempts(id));
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_EQ(attempts[0].outcome, std::optional<AttemptOutcome>(AttemptOutcome::kLost));
  EXPECT_EQ(attempts[1].outcome, std::nullopt);
  EXPECT_THAT(Transitions(id),
              ElementsAre(Pair("", "QUEUED"), Pair("QUEUED", "LEASED"), Pair("LEASED", "RUNNING"),
                          Pair("RUNNING", "QUEUED"), Pair("QUEUED", "LEASED")));
}

TEST_F(RunStoreTest, LosingMoreLeasesThanMaxAttemptsFailsTheRunAndResumeGivesAFreshBudget) {
  NewRun run = MakeRun("a", {});
  run.max_attempts = 2;
  const int64_t id = CreateOne("s", run);
  int64_t now = kT0;
  for (int i = 0; i < 2; ++i) {
    ClaimExpecting(id, now);
    now += 61 * kSecond;
    CART_ASSERT_OK_AND_ASSIGN(auto expired, store_->ExpireLeases(now));
    ASSERT_EQ(expired.size(), 1u);
    EXPECT_EQ(expired[0].new_state, i == 0 ? RunState::kQueued : RunState::kFailed);
  }
  CART_ASSERT_OK_AND_ASSIGN(RunRecord failed, store_->GetRun(id));
  EXPECT_EQ(failed.state, RunState::kFailed);
  CART_ASSERT_OK_AND_ASSIGN(auto events, store_->RunEvents(id));
  EXPECT_THAT(events.back().why, HasSubstr("2 of 2 attempts spent"));
  EXPECT_EQ(events.back().who, "scheduler");

  CART_ASSERT_OK_AND_ASSIGN(RunRecord resumed, store_->ResumeRun(id, By("user:a", now, "retry")));
  EXPECT_EQ(resumed.state, RunState::kQueued);
  EXPECT_EQ(resumed.attempts_counted, 0);
  Claim third = ClaimExpecting(id, now);
  EXPECT_EQ(third.attempt, 3);  // the fencing token keeps growing
}

TEST_F(RunStoreTest, ReleasedLeaseGoesBackToTheQueueWithoutSpendingAnAttempt) {
  NewRun run = MakeRun("a", {});
  run.max_attempts = 1;
  const int64_t id = CreateOne("s", run);
  Claim first = ClaimExpecting(id, kT0);
  CART_ASSERT_OK_AND_ASSIGN(
      RunRecord released, store_->RecordAttemptOutcome(id, first.attempt, AttemptOutcome::kDrained,
                                                       By("worker:w1", kT0, "draining")));
  EXPECT_EQ(released.state, RunState::kQueued);
  EXPECT_EQ(released.attempts_counted, 0);
  ClaimExpecting(id, kT0);
  CART_ASSERT_OK_AND_ASSIGN(auto expired, store_->ExpireLeases(kT0 + 61 * kSecond));
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].new_state, RunState::kFailed) << "max_attempts = 1, one lease lost";
}

TEST_F(RunStoreTest, IllegalTransitionsAreFailedPreconditionNamingTheRunAndItsState) {
  const int64_t id = CreateOne("s", MakeRun("a", {}));
  const std::string run = StrCat("run ", id, " is ");
  EXPECT_THAT(store_->ResumeRun(id, By("u", kT0)),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr(run + "QUEUED")));
  EXPECT_THAT(store_->ExtendRun(id, 5000, {"steps: 5000", {{"steps", "5000"}}}, By("u", kT0)),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr(run + "QUEUED")));
  Claim claim = ClaimExpecting(id, kT0);
  EXPECT_THAT(store_->RecordAttemptOutcome(id, claim.attempt, AttemptOutcome::kSucceeded,
                                           By("worker:w1", kT0)),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr(run + "LEASED")));
  EXPECT_THAT(
      store_->RecordAttemptOutcome(id, claim.attempt, AttemptOutcome::kLost, By("worker:w1", kT0)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("LOST")));
  CART_ASSERT_OK(store_->MarkRunning(id, claim.attempt, kT0));
  CART_ASSERT_OK(store_->MarkRunning(id, claim.attempt, kT0));  // repeated: no-op
  CART_ASSERT_OK(store_->RecordAttemptOutcome(id, claim.attempt, AttemptOutcome::kSucceeded,
                                              By("worker:w1", kT0)));
  EXPECT_THAT(store_->CancelRun(id, By("u", kT0)),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr(run + "SUCCEEDED")));
  EXPECT_THAT(store_->MarkRunning(id, claim.attempt, kT0),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("SUCCEEDED")));
  EXPECT_THAT(store_->GetRun(12345), StatusIs(absl::StatusCode::kNotFound, HasSubstr("12345")));
  EXPECT_THAT(store_->CancelRun(12345, By("u", kT0)),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("run 12345")));
}

TEST_F(RunStoreTest, CancelIsImmediateWhenQueuedAndRequestedFromTheWorkerWhenRunning) {
  const int64_t queued = CreateOne("s1", MakeRun("a", {}));
  CART_ASSERT_OK_AND_ASSIGN(RunRecord cancelled,
                            store_->CancelRun(queued, By("user:a", kT0, "wrong lr")));
  EXPECT_EQ(cancelled.state, RunState::kCancelled);

  const int64_t running = CreateOne("s2", MakeRun("b", {}));
  Claim claim = ClaimExpecting(running, kT0);
  CART_ASSERT_OK(store_->MarkRunning(running, claim.attempt, kT0));
  CART_ASSERT_OK_AND_ASSIGN(RunRecord requested,
                            store_->CancelRun(running, By("user:a", kT0, "stop")));
  EXPECT_EQ(requested.state, RunState::kRunning);
  EXPECT_TRUE(requested.cancel_requested);
  CART_ASSERT_OK_AND_ASSIGN(HeartbeatReply beat, store_->Heartbeat(running, claim.attempt, kT0));
  EXPECT_TRUE(beat.cancel_requested);
  CART_ASSERT_OK_AND_ASSIGN(RunRecord done, store_->RecordAttemptOutcome(
                                                running, claim.attempt, AttemptOutcome::kCancelled,
                                                By("worker:w1", kT0, "checkpointed")));
  EXPECT_EQ(done.state, RunState::kCancelled);
  CART_ASSERT_OK_AND_ASSIGN(RunRecord resumed, store_->ResumeRun(running, By("user:a", kT0)));
  EXPECT_EQ(resumed.state, RunState::kQueued);
  EXPECT_FALSE(resumed.cancel_requested);
  EXPECT_THAT(Transitions(running),
              ElementsAre(Pair("", "QUEUED"), Pair("QUEUED", "LEASED"), Pair("LEASED", "RUNNING"),
                          Pair("RUNNING", "RUNNING"), Pair("RUNNING", "CANCELLED"),
                          Pair("CANCELLED", "QUEUED")));
  CART_ASSERT_OK_AND_ASSIGN(auto events, store_->RunEvents(running));
  EXPECT_EQ(events[3].why, "cancel requested: stop");
  EXPECT_EQ(events[3].who, "user:a");
}

TEST_F(RunStoreTest, ExtendRequeuesASucceededRunWithMoreStepsFromItsFinalCheckpoint) {
  NewRun run = MakeRun("a", {});
  run.work_hours = 2.0;  // for its 1,000 steps
  const int64_t id = CreateOne("s", run);
  Claim claim = ClaimExpecting(id, kT0);
  CART_ASSERT_OK(store_->MarkRunning(id, claim.attempt, kT0));
  CART_ASSERT_OK(store_->RecordCheckpoint(id, claim.attempt, {1000, kSha1, 10, "a/final"}, kT0));
  CART_ASSERT_OK(store_->RecordAttemptOutcome(id, claim.attempt, AttemptOutcome::kSucceeded,
                                              By("worker:w1", kT0)));
  EXPECT_THAT(
      store_->ExtendRun(id, 1000, {"steps: 1000", {{"steps", "1000"}}}, By("user:a", kT0)),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("already trains for 1000")));
  // The re-resolved config and its params replace the stored ones: the schedule's keys follow
  // the steps (a held schedule keeps decaying over the old 1,000).
  CART_ASSERT_OK_AND_ASSIGN(
      RunRecord extended,
      store_->ExtendRun(id, 3000,
                        {"d: 256\nsteps: 3000\nlr_decay_steps: 1000\n",
                         {{"d", "256"}, {"steps", "3000"}, {"lr_decay_steps", "1000"}}},
                        By("user:a", kT0)));
  EXPECT_EQ(extended.state, RunState::kQueued);
  EXPECT_EQ(extended.steps, 3000);
  EXPECT_EQ(extended.params.at("steps"), "3000");
  EXPECT_EQ(extended.params.at("lr_decay_steps"), "1000");
  EXPECT_EQ(extended.config_yaml, "d: 256\nsteps: 3000\nlr_decay_steps: 1000\n");
  EXPECT_DOUBLE_EQ(extended.work_hours, 6.0);  // the work grows with the steps
  Claim resumed = ClaimExpecting(id, kT0);
  ASSERT_TRUE(resumed.resume_from.has_value());
  EXPECT_EQ(resumed.resume_from->step, 1000);
  CART_ASSERT_OK_AND_ASSIGN(auto events, store_->RunEvents(id));
  EXPECT_THAT(events[events.size() - 2].why, HasSubstr("extend from 1000 to 3000 steps"));
}

TEST_F(RunStoreTest, MetricAppendIsIdempotentAndKeepsTheSummaryInStep) {
  const int64_t id = CreateOne("s", MakeRun("a", {}));
  Claim claim = ClaimExpecting(id, kT0);
  CART_ASSERT_OK(store_->MarkRunning(id, claim.attempt, kT0));
  std::vector<MetricPoint> batch;
  for (int64_t step = 0; step < 10; ++step) {
    batch.push_back({step, "loss", 10.0 - step, kT0 + step});
    batch.push_back({step, "lr", 1e-3, kT0 + step});
  }
  CART_ASSERT_OK_AND_ASSIGN(int64_t acked, store_->AppendMetrics(id, claim.attempt, batch));
  EXPECT_EQ(acked, 9);
  // A reconnecting worker resends steps 5..9 (with different values, to prove they are ignored).
  std::vector<MetricPoint> resend;
  for (int64_t step = 5; step < 10; ++step) resend.push_back({step, "loss", -1.0, kT0});
  CART_ASSERT_OK_AND_ASSIGN(acked, store_->AppendMetrics(id, claim.attempt, resend));
  EXPECT_EQ(acked, 9);

  SeriesRequest all{id, "loss", 0, std::nullopt, std::nullopt};
  CART_ASSERT_OK_AND_ASSIGN(Series series, store_->MetricSeries(all));
  ASSERT_EQ(series.total_points, 10);
  for (int64_t step = 0; step < 10; ++step) {
    EXPECT_EQ(series.points[step].step, step);
    EXPECT_EQ(series.points[step].value, 10.0 - step);
  }
  CART_ASSERT_OK_AND_ASSIGN(auto summaries, store_->RunSummaries(id));
  ASSERT_EQ(summaries.size(), 2u);
  EXPECT_EQ(summaries[0].name, "loss");
  EXPECT_EQ(summaries[0].latest_step, 9);
  EXPECT_EQ(summaries[0].latest_value, 1.0);
  EXPECT_EQ(summaries[0].final_value, std::nullopt);

  CART_ASSERT_OK(store_->AppendMetrics(id, claim.attempt, PointsAt(12, {{"loss", 0.5}})));
  CART_ASSERT_OK(store_->RecordAttemptOutcome(id, claim.attempt, AttemptOutcome::kSucceeded,
                                              By("worker:w1", kT0)));
  CART_ASSERT_OK_AND_ASSIGN(summaries, store_->RunSummaries(id));
  EXPECT_EQ(summaries[0].latest_step, 12);
  EXPECT_EQ(summaries[0].final_step, std::optional<int64_t>(12));
  EXPECT_EQ(summaries[0].final_value, std::optional<double>(0.5));
  EXPECT_EQ(summaries[1].name, "lr");
  EXPECT_EQ(summaries[1].final_step, std::optional<int64_t>(9));
}

TEST_F(RunStoreTest, LogLinesAreIdempotentOnSeqFencedAndPagedById) {
  const int64_t id = CreateOne("s", MakeRun("a", {}));
  Claim claim = ClaimExpecting(id, kT0);
  CART_ASSERT_OK(store_->MarkRunning(id, claim.attempt, kT0));
  std::vector<LogLine> lines = {{0, 0, 1, kT0, "resuming from step 40"},
                                {0, 0, 2, kT0 + 1, "checkpoint at step 50 not uploaded"}};
  CART_ASSERT_OK_AND_ASSIGN(int64_t added, store_->AppendLog(id, claim.attempt, lines));
  EXPECT_EQ(added, 2);
  // A reconnecting worker resends both and one new line: only the new one is stored.
  lines.push_back({0, 0, 3, kT0 + 2, std::string(5000, 'x') + "é"});
  CART_ASSERT_OK_AND_ASSIGN(added, store_->AppendLog(id, claim.attempt, lines));
  EXPECT_EQ(added, 1);
  // Lines without a number are never taken for one another.
  CART_ASSERT_OK_AND_ASSIGN(
      added, store_->AppendLog(id, claim.attempt, {{0, 0, 0, kT0, "u"}, {0, 0, 0, kT0, "u"}}));
  EXPECT_EQ(added, 2);

  CART_ASSERT_OK_AND_ASSIGN(std::vector<LogLine> log, store_->RunLog(id, 0, 0));
  ASSERT_EQ(log.size(), 5u);
  EXPECT_EQ(log[0].text, "resuming from step 40");
  EXPECT_EQ(log[0].attempt, claim.attempt);
  EXPECT_EQ(log[1].seq, 2);
  EXPECT_EQ(log[2].text.size(), kMaxLogLineBytes);  // cut, with "…"
  EXPECT_EQ(log[2].text.substr(log[2].text.size() - 3), "…");
  EXPECT_EQ(log[3].seq, 0);
  // Paging: after the second line, at most two.
  CART_ASSERT_OK_AND_ASSIGN(std::vector<LogLine> page, store_->RunLog(id, log[1].id, 2));
  ASSERT_EQ(page.size(), 2u);
  EXPECT_EQ(page[0].id, log[2].id);

  // A stale attempt is fenced; an unknown run is NotFound.
  EXPECT_THAT(store_->AppendLog(id, claim.attempt + 1, {{0, 0, 9, kT0, "stale"}}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("attempt")));
  EXPECT_THAT(store_->RunLog(id + 100, 0, 0),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("run")));
  EXPECT_THAT(store_->AppendLog(id, claim.attempt, {{0, 0, -1, kT0, "bad"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("negative seq")));
}

// A worker that logs without end fills no disk: past max_log_lines_per_attempt its lines are
// acknowledged and dropped, and one stored line says so. The next attempt has its own budget.
TEST_F(RunStoreTest, LogLinesPastThePerAttemptLimitAreDroppedWithOneLineSayingSo) {
  StoreOptions options;
  options.path = dir_.File("limited.db");
  options.max_log_lines_per_attempt = 5;
  CART_ASSERT_OK_AND_ASSIGN(std::unique_ptr<RunStore> store, RunStore::Open(options));
  CART_ASSERT_OK(store->RegisterWorker("w1", "RTX 3050", 8 * kGiB, kT0));
  CART_ASSERT_OK_AND_ASSIGN(
      CreatedSweep created,
      store->CreateSweep(MakeSweep("s", {MakeRun("a", {})}, 3), By("user:a", kT0)));
  const int64_t id = created.run_ids.at(0);
  CART_ASSERT_OK_AND_ASSIGN(std::optional<Claim> claim, store->ClaimNextRun("w1", 8 * kGiB, kT0));
  ASSERT_TRUE(claim.has_value());
  CART_ASSERT_OK(store->MarkRunning(id, claim->attempt, kT0));
  std::vector<LogLine> lines;
  for (int64_t seq = 1; seq <= 1000; ++seq) lines.push_back({0, 0, seq, kT0 + seq, "chatty"});
  CART_ASSERT_OK_AND_ASSIGN(int64_t added, store->AppendLog(id, claim->attempt, lines));
  EXPECT_EQ(added, 6);  // 5 lines and the notice
  CART_ASSERT_OK_AND_ASSIGN(added, store->AppendLog(id, claim->attempt, {{0, 0, 5000, kT0, "x"}}));
  EXPECT_EQ(added, 0);
  // cartd's own lines (no seq) are not counted against the worker's budget.
  CART_ASSERT_OK_AND_ASSIGN(added, store->AppendLog(id, claim->attempt, {{0, 0, 0, kT0, "cartd"}}));
  EXPECT_EQ(added, 1);

  CART_ASSERT_OK_AND_ASSIGN(std::vector<LogLine> log, store->RunLog(id, 0, 0));
  ASSERT_EQ(log.size(), 7u);
  EXPECT_EQ(log[4].text, "chatty");
  EXPECT_EQ(log[5].seq, 6);
  EXPECT_THAT(log[5].text, HasSubstr("logged more than 5 lines; later lines are not stored"));
  EXPECT_EQ(log[6].text, "cartd");
}

TEST_F(RunStoreTest, MalformedMetricBatchesAndCheckpointsAreRejected) {
  const int64_t id = CreateOne("s", MakeRun("a", {}));
  Claim claim = ClaimExpecting(id, kT0);
  EXPECT_THAT(store_->AppendMetrics(id, claim.attempt, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty metric batch")));
  EXPECT_THAT(store_->AppendMetrics(id, claim.attempt, PointsAt(-1, {{"loss", 1}})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("negative step -1")));
  EXPECT_THAT(store_->AppendMetrics(id, claim.attempt, PointsAt(1, {{"bad name", 1}})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'bad name'")));
  EXPECT_THAT(store_->RecordCheckpoint(id, claim.attempt, {1, "xyz", 1, "p"}, kT0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sha256 'xyz'")));
  EXPECT_THAT(store_->RecordCheckpoint(id, claim.attempt, {1, kSha1, 1, "../etc/passwd"}, kT0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'../etc/passwd'")));
  EXPECT_THAT(store_->RecordCheckpoint(id, claim.attempt, {1, kSha1, 1, "/abs"}, kT0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("relative")));
  CART_ASSERT_OK(store_->RecordCheckpoint(id, claim.attempt, {1, kSha1, 100, "a/1"}, kT0));
  EXPECT_THAT(store_->RecordCheckpoint(id, claim.attempt, {2, kSha1, 999, "a/1"}, kT0),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("size 100")));
}

// Retention keeps a run's newest checkpoints and the ones a derived run starts from, and releases
// exactly the artifacts no checkpoint names any more (an artifact two checkpoints share stays).
TEST_F(RunStoreTest, CheckpointRetentionKeepsTheNewestAndWhatDerivedRunsNeed) {
  NewRun base = MakeRun("base", {});
  NewRun eval_20 = MakeRun("eval-20", {{"R_infer", "2"}});
  eval_20.parent_name = "base";
  eval_20.parent_checkpoint = "20";
  CART_ASSERT_OK_AND_ASSIGN(auto created,
                            store_->CreateSweep(MakeSweep("s", {base, eval_20}), By("u", kT0)));
  const int64_t parent = created.run_ids[0];
  Claim claim = ClaimExpecting(parent, kT0);
  CART_ASSERT_OK(store_->MarkRunning(parent, claim.attempt, kT0));
  auto sha = [](int step) { return std::string(62, 'c') + StrCat(step); };
  for (int step = 10; step <= 60; step += 10) {
    // Steps 40 and 60 hold the same bytes (one artifact named twice).
    const std::string name = step == 60 ? sha(40) : sha(step);
    CART_ASSERT_OK(store_->RecordCheckpoint(parent, claim.attempt,
                                            {step, name, 100, StrCat("c/", name)}, kT0 + step));
  }
  CART_ASSERT_OK_AND_ASSIGN(std::vector<std::string> released, store_->PruneCheckpoints(parent, 2));
  // Kept: 50 and 60 (the newest two) and 20 (eval-20 starts from it). Forgotten: 10, 30, 40;
  // 40's artifact is still named by 60.
  EXPECT_THAT(released, UnorderedElementsAre(sha(10), sha(30)));
  CART_ASSERT_OK_AND_ASSIGN(std::vector<CheckpointRecord> kept, store_->ListCheckpoints(parent));
  std::vector<int64_t> steps;
  for (const CheckpointRecord& c : kept) steps.push_back(c.step);
  EXPECT_THAT(steps, ElementsAre(20, 50, 60));
  CART_ASSERT_OK_AND_ASSIGN(std::vector<std::string> names, store_->ArtifactNames());
  EXPECT_THAT(names, UnorderedElementsAre(sha(20), sha(40), sha(50)));
  // Again: nothing more to do. Every run at once gives the same answer.
  CART_ASSERT_OK_AND_ASSIGN(released, store_->PruneCheckpoints(std::nullopt, 2));
  EXPECT_THAT(released, IsEmpty());
  CART_ASSERT_OK_AND_ASSIGN(released, store_->PruneCheckpoints(std::nullopt, 1));
  EXPECT_THAT(released, UnorderedElementsAre(sha(50)));
  EXPECT_THAT(store_->PruneCheckpoints(parent, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(">= 1")));
}

TEST_F(RunStoreTest, DerivedRunsStayBlockedUntilTheParentCheckpointExists) {
  NewRun base = MakeRun("base", {});
  NewRun eval_final = MakeRun("eval-final", {{"R_infer", "16"}});
  eval_final.parent_name = "base";
  eval_final.parent_checkpoint = "final";
  NewRun eval_500 = MakeRun("eval-500", {{"R_infer", "2"}});
  eval_500.parent_name = "base";
  eval_500.parent_checkpoint = "500";
  CART_ASSERT_OK_AND_ASSIGN(
      auto created,
      store_->CreateSweep(MakeSweep("s", {base, eval_final, eval_500}), By("u", kT0)));
  const int64_t parent = created.run_ids[0];
  const int64_t child_final = created.run_ids[1];
  const int64_t child_500 = created.run_ids[2];
  EXPECT_THAT(created.sweep.run_counts,
              ElementsAre(Pair(RunState::kQueued, 1), Pair(RunState::kBlocked, 2)));

  Claim claim = ClaimExpecting(parent, kT0);  // blocked runs are never claimed
  CART_ASSERT_OK(store_->MarkRunning(parent, claim.attempt, kT0));
  CART_ASSERT_OK(store_->RecordCheckpoint(parent, claim.attempt, {500, kSha1, 1, "a/500"}, kT0));
  CART_ASSERT_OK_AND_ASSIGN(RunRecord r500, store_->GetRun(child_500));
  EXPECT_EQ(r500.state, RunState::kQueued);
  CART_ASSERT_OK_AND_ASSIGN(RunRecord rfinal, store_->GetRun(child_final));
  EXPECT_EQ(rfinal.state, RunState::kBlocked) << "a step-500 checkpoint is not the final one";

  CART_ASSERT_OK(store_->RecordCheckpoint(parent, claim.attempt, {1000, kSha2, 2, "b/1000"}, kT0));
  CART_ASSERT_OK(store_->RecordAttemptOutcome(parent, claim.attempt, AttemptOutcome::kSucceeded,
                                              By("worker:w1", kT0)));
  CART_ASSERT_OK_AND_ASSIGN(rfinal, store_->GetRun(child_final));
  EXPECT_EQ(rfinal.state, RunState::kQueued);
  EXPECT_THAT(Transitions(child_final),
              ElementsAre(Pair("", "BLOCKED"), Pair("BLOCKED", "QUEUED")));

  // Same priority and age: the lower id (eval-final) is claimed first.
  Claim cfinal = ClaimExpecting(child_final, kT0);
  ASSERT_TRUE(cfinal.parent_checkpoint.has_value());
  EXPECT_EQ(cfinal.parent_checkpoint->step, 1000);
  EXPECT_EQ(cfinal.parent_checkpoint->sha256, kSha2);
  EXPECT_FALSE(cfinal.resume_from.has_value());
  Claim c500 = ClaimExpecting(child_500, kT0);
  ASSERT_TRUE(c500.parent_checkpoint.has_value());
  EXPECT_EQ(c500.parent_checkpoint->step, 500);

  // A later sweep deriving from the finished run starts QUEUED at once.
  NewRun later = MakeRun("later", {});
  later.parent_run_id = parent;
  later.parent_checkpoint = "final";
  CART_ASSERT_OK_AND_ASSIGN(auto second,
                            store_->CreateSweep(MakeSweep("s2", {later}), By("u", kT0)));
  EXPECT_THAT(second.sweep.run_counts, ElementsAre(Pair(RunState::kQueued, 1)));
}

TEST_F(RunStoreTest, CancelSweepStopsEveryUnfinishedRunAndResumeSweepBringsThemBack) {
  CART_ASSERT_OK_AND_ASSIGN(
      auto created,
      store_->CreateSweep(MakeSweep("s", {MakeRun("a", {}), MakeRun("b", {}), MakeRun("c", {})}),
                          By("u", kT0)));
  Claim running = ClaimExpecting(created.run_ids[0], kT0);
  CART_ASSERT_OK(store_->MarkRunning(running.run.id, running.attempt, kT0));
  Claim done = ClaimExpecting(created.run_ids[1], kT0);
  CART_ASSERT_OK(store_->MarkRunning(done.run.id, done.attempt, kT0));
  CART_ASSERT_OK(store_->RecordAttemptOutcome(done.run.id, done.attempt, AttemptOutcome::kSucceeded,
                                              By("worker:w1", kT0)));
  CART_ASSERT_OK_AND_ASSIGN(int64_t changed, store_->CancelSweep("s", By("user:a", kT0)));
  EXPECT_EQ(changed, 2);  // the queued run is cancelled, the running one asked to stop
  CART_ASSERT_OK_AND_ASSIGN(SweepRecord sweep, store_->GetSweep("s"));
  EXPECT_TRUE(sweep.cancelled);
  EXPECT_THAT(sweep.run_counts,
              ElementsAre(Pair(RunState::kRunning, 1), Pair(RunState::kSucceeded, 1),
                          Pair(RunState::kCancelled, 1)));
  CART_ASSERT_OK(store_->RecordAttemptOutcome(running.run.id, running.attempt,
                                              AttemptOutcome::kCancelled, By("worker:w1", kT0)));
  CART_ASSERT_OK_AND_ASSIGN(changed, store_->ResumeSweep("s", By("user:a", kT0)));
  EXPECT_EQ(changed, 2);
  CART_ASSERT_OK_AND_ASSIGN(sweep, store_->GetSweep("s"));
  EXPECT_FALSE(sweep.cancelled);
  EXPECT_THAT(sweep.run_counts,
              ElementsAre(Pair(RunState::kQueued, 2), Pair(RunState::kSucceeded, 1)));
  EXPECT_THAT(store_->CancelSweep("nope", By("u", kT0)),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("sweep 'nope'")));
}

TEST_F(RunStoreTest, ListRunsFiltersBySweepStateAndAnyConfigKey) {
  CART_ASSERT_OK(store_->CreateSweep(
      MakeSweep("s1", {MakeRun("a", {{"kv", "frozen"}}), MakeRun("b", {{"kv", "recompute"}})}),
      By("u", kT0)));
  CART_ASSERT_OK(
      store_->CreateSweep(MakeSweep("s2", {MakeRun("c", {{"kv", "recompute"}})}), By("u", kT0)));
  RunFilter filter;
  filter.params = {{"kv", "recompute"}};
  CART_ASSERT_OK_AND_ASSIGN(auto runs, store_->ListRuns(filter));
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].name, "b");
  EXPECT_EQ(runs[1].name, "c");
  EXPECT_EQ(runs[1].params.at("kv"), "recompute");
  filter.sweeps = {"s1"};
  CART_ASSERT_OK_AND_ASSIGN(runs, store_->ListRuns(filter));
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].name, "b");
  RunFilter leased;
  leased.states = {RunState::kLeased};
  ClaimExpecting(1, kT0);
  CART_ASSERT_OK_AND_ASSIGN(runs, store_->ListRuns(leased));
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].id, 1);
}

TEST_F(RunStoreTest, ConfigValuesWithQuotesAndControlCharactersRoundTripAndFilter) {
  const std::string tricky = "say \"hi\"\\n\tdone\n\x01";
  CART_ASSERT_OK_AND_ASSIGN(
      auto created,
      store_->CreateSweep(MakeSweep("s", {MakeRun("a", {{"train_data.wiki", tricky}}),
                                          MakeRun("b", {{"train_data.wiki", "plain"}})}),
                          By("u", kT0)));
  CART_ASSERT_OK_AND_ASSIGN(RunRecord run, store_->GetRun(created.run_ids[0]));
  EXPECT_EQ(run.params.at("train_data.wiki"), tricky);
  RunFilter filter;
  filter.params = {{"train_data.wiki", tricky}};  // a '.' in a key is not a JSON path step
  CART_ASSERT_OK_AND_ASSIGN(auto runs, store_->ListRuns(filter));
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].name, "a");
}

TEST_F(RunStoreTest, WorkersAreListedAndMaxMemoryIsEmptyWithoutWorkers) {
  CART_ASSERT_OK(store_->RegisterWorker("w2", "RTX 3090", 24 * kGiB, kT0 + 5));
  CART_ASSERT_OK(store_->RegisterWorker("w1", "RTX 3050 Ti", 4 * kGiB, kT0 + 6));  // update
  CART_ASSERT_OK_AND_ASSIGN(auto workers, store_->ListWorkers());
  ASSERT_EQ(workers.size(), 2u);
  EXPECT_EQ(workers[0].id, "w1");
  EXPECT_EQ(workers[0].device, "RTX 3050 Ti");
  EXPECT_EQ(workers[0].memory_bytes, 4 * kGiB);
  EXPECT_EQ(workers[0].registered_us, kT0);
  CART_ASSERT_OK_AND_ASSIGN(auto biggest, store_->MaxWorkerMemory());
  EXPECT_EQ(biggest, std::optional<int64_t>(24 * kGiB));
  EXPECT_THAT(store_->RegisterWorker("bad id", "x", 1, kT0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'bad id'")));

  TempDir other;
  auto empty = OpenStore(other.File("e.db"));
  ASSERT_NE(empty, nullptr);
  CART_ASSERT_OK_AND_ASSIGN(auto none, empty->MaxWorkerMemory());
  EXPECT_EQ(none, std::nullopt);
}

// Deleting a sweep removes its runs with everything stored for them in one transaction, releases
// the artifacts no other checkpoint names, and refuses (deleting nothing) while a run is running
// or while another sweep's runs start from its checkpoints.
TEST_F(RunStoreTest, DeleteSweepRemovesEverythingOfItsRunsUnlessSomethingStillNeedsThem) {
  NewRun base = MakeRun("base", {});
  NewRun eval = MakeRun("eval", {{"R_infer", "2"}});
  eval.parent_name = "base";  // derived within the sweep: deleted with it
  eval.parent_checkpoint = "final";
  CART_ASSERT_OK_AND_ASSIGN(auto created,
                            store_->CreateSweep(MakeSweep("s", {base, eval}), By("u", kT0)));
  const int64_t parent = created.run_ids[0];
  Claim claim = ClaimExpecting(parent, kT0);
  CART_ASSERT_OK(store_->MarkRunning(parent, claim.attempt, kT0));
  CART_ASSERT_OK_AND_ASSIGN(
      int64_t acked, store_->AppendMetrics(
                         parent, claim.attempt,
                         {{1, "loss", 2.5, kT0}, {2, "loss", 2.0, kT0}, {2, "rho_max", 0.9, kT0}}));
  EXPECT_EQ(acked, 2);
  LogLine line;
  line.attempt = claim.attempt;
  line.seq = 1;
  line.wall_time_us = kT0;
  line.text = "hello";
  CART_ASSERT_OK(store_->AppendLog(parent, claim.attempt, {line}).status());
  CART_ASSERT_OK(store_->RecordCheckpoint(parent, claim.attempt, {1, kSha1, 10, "a/1"}, kT0));
  // Running: refused, nothing deleted.
  EXPECT_THAT(store_->DeleteSweep("s"), StatusIs(absl::StatusCode::kFailedPrecondition,
                                                 AllOf(HasSubstr("1 run leased or running"),
                                                       HasSubstr("cart sweep cancel s"))));
  CART_ASSERT_OK(store_->RecordCheckpoint(parent, claim.attempt, {2, kSha2, 10, "b/2"}, kT0));
  CART_ASSERT_OK(store_->RecordAttemptOutcome(parent, claim.attempt, AttemptOutcome::kSucceeded,
                                              By("worker:w1", kT0)));
  // Another sweep starts from the final checkpoint: refused, naming it.
  NewRun later = MakeRun("later", {});
  later.parent_run_id = parent;
  later.parent_checkpoint = "final";
  CART_ASSERT_OK_AND_ASSIGN(auto second,
                            store_->CreateSweep(MakeSweep("s2", {later}), By("u", kT0)));
  EXPECT_THAT(store_->DeleteSweep("s"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("'s2' (1 runs)"), HasSubstr("delete that sweep first"))));
  CART_ASSERT_OK_AND_ASSIGN(RunRecord still, store_->GetRun(parent));
  EXPECT_EQ(still.state, RunState::kSucceeded);

  // A third sweep's checkpoint shares kSha2's bytes: that artifact stays.
  // (Its priority puts it before the queued eval run.)
  CART_ASSERT_OK_AND_ASSIGN(
      auto third,
      store_->CreateSweep(MakeSweep("s3", {MakeRun("x", {})}, /*priority=*/10), By("u", kT0)));
  Claim other = ClaimExpecting(third.run_ids[0], kT0);
  CART_ASSERT_OK(store_->MarkRunning(other.run.id, other.attempt, kT0));
  CART_ASSERT_OK(store_->RecordCheckpoint(other.run.id, other.attempt, {5, kSha2, 10, "b/2"}, kT0));

  CART_ASSERT_OK_AND_ASSIGN(DeletedSweep gone, store_->DeleteSweep("s2"));
  EXPECT_EQ(gone.runs(), 1);
  CART_ASSERT_OK_AND_ASSIGN(gone, store_->DeleteSweep("s"));
  EXPECT_EQ(gone.runs(), 2);
  EXPECT_EQ(gone.metric_points, 3);
  EXPECT_EQ(gone.checkpoints, 2);
  EXPECT_THAT(gone.released_artifacts, ElementsAre(kSha1));
  EXPECT_THAT(store_->GetSweep("s"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("sweep 's'")));
  EXPECT_THAT(store_->GetRun(parent), StatusIs(absl::StatusCode::kNotFound, HasSubstr("s")));
  EXPECT_THAT(store_->DeleteSweep("s"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("s")));
  CART_ASSERT_OK_AND_ASSIGN(std::vector<std::string> names, store_->ArtifactNames());
  EXPECT_THAT(names, ElementsAre(kSha2));
  // The other sweep is untouched, and the name can be used again.
  CART_ASSERT_OK_AND_ASSIGN(RunRecord x, store_->GetRun(other.run.id));
  EXPECT_EQ(x.state, RunState::kRunning);
  CART_ASSERT_OK(
      store_->CreateSweep(MakeSweep("s", {MakeRun("again", {})}, 0), By("u", kT0 + 1)).status());
}

// Blobs are shared by content: a deleted sweep's checkpoint and another run's may be one file.
// DeleteSweep used to hand its unnamed blobs to cartd, which deleted them after the write, so a
// checkpoint recorded for the same bytes in between named a file that was then gone. Now the
// blob is deleted only inside a write that finds it still unnamed, and a record asks inside its
// write whether the blob is on disk: whichever comes first, no checkpoint names a deleted blob.
TEST_F(RunStoreTest, ABlobReleasedByADeletedSweepIsKeptForARunThatRecordsTheSameBytes) {
  std::set<std::string> on_disk = {kSha1};
  auto remove = [&](const std::string& sha) { on_disk.erase(sha); };
  auto present = [&]() -> absl::Status {
    return on_disk.count(kSha1) ? absl::OkStatus()
                                : absl::FailedPreconditionError("blob not stored");
  };
  // A one-run sweep whose run is claimed and running.
  auto running = [&](const std::string& sweep) {
    auto created = store_->CreateSweep(MakeSweep(sweep, {MakeRun("r", {})}), By("u", kT0));
    EXPECT_TRUE(created.ok()) << created.status();
    Claim claim = created.ok() ? ClaimExpecting(created->run_ids[0], kT0) : Claim{};
    EXPECT_TRUE(store_->MarkRunning(claim.run.id, claim.attempt, kT0).ok());
    return claim;
  };
  Claim first = running("a");
  CART_ASSERT_OK(store_->RecordCheckpoint(first.run.id, first.attempt, {1, kSha1, 10, "a/1"}, kT0));
  CART_ASSERT_OK(store_->RecordAttemptOutcome(first.run.id, first.attempt,
                                              AttemptOutcome::kSucceeded, By("worker:w1", kT0)));
  Claim second = running("b");

  // Sweep a is deleted; before its blob goes, run b records a checkpoint of the same bytes.
  CART_ASSERT_OK_AND_ASSIGN(DeletedSweep gone, store_->DeleteSweep("a"));
  ASSERT_THAT(gone.released_artifacts, ElementsAre(kSha1));
  CART_ASSERT_OK(
      store_->RecordCheckpoint(second.run.id, second.attempt, {1, kSha1, 10, "a/1"}, kT0, present));
  CART_ASSERT_OK(store_->RemoveUnnamedArtifacts(gone.released_artifacts, remove));
  EXPECT_EQ(on_disk.count(kSha1), 1u) << "the blob run b's checkpoint names was deleted";

  // The other order: b's run is deleted and its blob removed first; a record of the same bytes
  // afterwards is refused (the worker uploads again) instead of naming a missing file.
  CART_ASSERT_OK(store_->RecordAttemptOutcome(second.run.id, second.attempt,
                                              AttemptOutcome::kSucceeded, By("worker:w1", kT0)));
  Claim third = running("c");
  CART_ASSERT_OK_AND_ASSIGN(gone, store_->DeleteSweep("b"));
  CART_ASSERT_OK(store_->RemoveUnnamedArtifacts(gone.released_artifacts, remove));
  EXPECT_EQ(on_disk.count(kSha1), 0u);
  EXPECT_THAT(
      store_->RecordCheckpoint(third.run.id, third.attempt, {1, kSha1, 10, "a/1"}, kT0, present),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("blob not stored")));
  CART_ASSERT_OK_AND_ASSIGN(std::vector<std::string> names, store_->ArtifactNames());
  EXPECT_TRUE(names.empty());
}

// Fair share's usage: an attempt's hours per sweep owner, each weighed by 2^(-age / half-life).
TEST_F(RunStoreTest, DecayedUsageWeighsEachHourByItsAge) {
  constexpr int64_t kHour = 3'600'000'000;
  CART_ASSERT_OK_AND_ASSIGN(
      auto created, store_->CreateSweep(MakeSweep("s", {MakeRun("a", {})}), By("user:a", kT0)));
  Claim claim = ClaimExpecting(created.run_ids[0], kT0);
  CART_ASSERT_OK(store_->MarkRunning(claim.run.id, claim.attempt, kT0));
  // Running: counts up to now.
  CART_ASSERT_OK_AND_ASSIGN(auto usage, store_->DecayedUsage(kT0 + kHour / 2, 1000 * kHour));
  EXPECT_NEAR(usage["user:a"], 0.5, 1e-3);
  CART_ASSERT_OK(store_->RecordAttemptOutcome(
      claim.run.id, claim.attempt, AttemptOutcome::kSucceeded, By("worker:w1", kT0 + kHour)));
  CART_ASSERT_OK_AND_ASSIGN(usage, store_->DecayedUsage(kT0 + kHour, 1000 * kHour));
  EXPECT_NEAR(usage["user:a"], 1.0, 1e-3);
  // One half-life (24 h) after it ended: 24 / ln 2 × (2^-1 − 2^-(25/24)) = 0.4928 hours.
  CART_ASSERT_OK_AND_ASSIGN(usage, store_->DecayedUsage(kT0 + 25 * kHour, 24 * kHour));
  EXPECT_NEAR(usage["user:a"], 0.4928, 1e-3);
  // Past ten half-lives it is left out; a zero half-life turns fair share off.
  CART_ASSERT_OK_AND_ASSIGN(usage, store_->DecayedUsage(kT0 + 300 * kHour, 24 * kHour));
  EXPECT_TRUE(usage.empty());
  CART_ASSERT_OK_AND_ASSIGN(usage, store_->DecayedUsage(kT0 + kHour, 0));
  EXPECT_TRUE(usage.empty());
}

// Deleting a sweep does not give its owner a clean slate: the hours its attempts ran still count,
// decaying as before, beside the owner's other sweeps.
TEST_F(RunStoreTest, DecayedUsageKeepsTheHoursOfADeletedSweep) {
  constexpr int64_t kHour = 3'600'000'000;
  // A sweep of user:a's with one run that trained from `from` to `to`.
  auto trained = [&](const std::string& sweep, int64_t from, int64_t to) {
    auto created = store_->CreateSweep(MakeSweep(sweep, {MakeRun("r", {})}), By("user:a", kT0));
    ASSERT_TRUE(created.ok()) << created.status();
    const Claim claim = ClaimExpecting(created->run_ids[0], from);
    CART_ASSERT_OK(store_->MarkRunning(claim.run.id, claim.attempt, from));
    CART_ASSERT_OK(store_->RecordAttemptOutcome(claim.run.id, claim.attempt,
                                                AttemptOutcome::kSucceeded, By("worker:w1", to)));
  };
  trained("gone", kT0, kT0 + 2 * kHour);
  trained("kept", kT0 + 2 * kHour, kT0 + 3 * kHour);
  CART_ASSERT_OK_AND_ASSIGN(auto before, store_->DecayedUsage(kT0 + 27 * kHour, 24 * kHour));
  ASSERT_NEAR(before["user:a"], 2.0 * 0.5 + 1.0 * 0.5, 0.1);  // about a half-life ago

  CART_ASSERT_OK(store_->DeleteSweep("gone").status());
  CART_ASSERT_OK_AND_ASSIGN(auto after, store_->DecayedUsage(kT0 + 27 * kHour, 24 * kHour));
  EXPECT_DOUBLE_EQ(after["user:a"], before["user:a"]);
  CART_ASSERT_OK(store_->DeleteSweep("kept").status());
  CART_ASSERT_OK_AND_ASSIGN(after, store_->DecayedUsage(kT0 + 27 * kHour, 24 * kHour));
  EXPECT_NEAR(after["user:a"], before["user:a"], 1e-9);
  // They still age out after ten half-lives.
  CART_ASSERT_OK_AND_ASSIGN(after, store_->DecayedUsage(kT0 + 300 * kHour, 24 * kHour));
  EXPECT_TRUE(after.empty());
}

// When a run was last asked to stop for other work: the latest time per run, from a given time.
TEST_F(RunStoreTest, RecentPreemptionsKeepsEachRunsLatest) {
  CART_ASSERT_OK_AND_ASSIGN(
      auto created,
      store_->CreateSweep(MakeSweep("s", {MakeRun("a", {}), MakeRun("b", {})}), By("user:a", kT0)));
  const int64_t a = created.run_ids[0], b = created.run_ids[1];
  CART_ASSERT_OK(store_->RecordPreemption(a, kT0 + 10));
  CART_ASSERT_OK(store_->RecordPreemption(b, kT0 + 20));
  CART_ASSERT_OK(store_->RecordPreemption(a, kT0 + 30));
  CART_ASSERT_OK_AND_ASSIGN(auto recent, store_->RecentPreemptions(kT0));
  EXPECT_EQ(recent, (std::map<int64_t, int64_t>{{a, kT0 + 30}, {b, kT0 + 20}}));
  CART_ASSERT_OK_AND_ASSIGN(recent, store_->RecentPreemptions(kT0 + 25));
  EXPECT_EQ(recent, (std::map<int64_t, int64_t>{{a, kT0 + 30}}));
}

// An admin's new priority reaches the sweep and its unfinished runs, and the claim order.
TEST_F(RunStoreTest, SetSweepPriorityMovesItsUnfinishedRuns) {
  CART_ASSERT_OK_AND_ASSIGN(
      auto first, store_->CreateSweep(MakeSweep("first", {MakeRun("a", {})}), By("u", kT0)));
  CART_ASSERT_OK_AND_ASSIGN(
      auto later, store_->CreateSweep(MakeSweep("later", {MakeRun("b", {}), MakeRun("c", {})}),
                                      By("u", kT0 + 1)));
  CART_ASSERT_OK_AND_ASSIGN(int64_t changed,
                            store_->SetSweepPriority("later", 7, By("admin:root", kT0 + 2)));
  EXPECT_EQ(changed, 2);
  CART_ASSERT_OK_AND_ASSIGN(SweepRecord sweep, store_->GetSweep("later"));
  EXPECT_EQ(sweep.priority, 7);
  ClaimExpecting(later.run_ids[0], kT0 + 3);  // no longer behind the older sweep
  EXPECT_THAT(store_->SetSweepPriority("nope", 1, By("admin:root", kT0)),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("nope")));
  (void)first;
}

}  // namespace
}  // namespace cart::store
