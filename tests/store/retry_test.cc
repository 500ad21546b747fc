// Store additions the scheduler needs: RetryAttempt (a worker-reported failure requeues the run
// until max_attempts), the OOM placement floor (a run that ran out of memory on a device is never
// placed on a device that small again), and each attempt's energy (RecordEnergy, SweepSpending).

#include <optional>

#include "store/run_store.h"
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
using ::cart::testing::StatusIs;
using ::cart::testing::TempDir;
using ::testing::HasSubstr;

class StoreRetryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = OpenStore(dir_.File("cart.db"));
    ASSERT_NE(store_, nullptr);
    CART_ASSERT_OK(store_->RegisterWorker("small", "RTX 3050", 8 * kGiB, kT0));
    CART_ASSERT_OK(store_->RegisterWorker("big", "RTX 3090", 24 * kGiB, kT0));
    NewRun run = MakeRun("r0", {}, 2 * kGiB);
    run.max_attempts = 2;
    auto created = store_->CreateSweep(MakeSweep("s", {run}), By("user:a", kT0));
    ASSERT_TRUE(created.ok()) << created.status();
    run_id_ = created->run_ids.at(0);
  }

  // Claims the run on `worker` with `memory` and marks it RUNNING; returns the attempt (0: none).
  int64_t Start(const std::string& worker, int64_t memory) {
    auto claim = store_->ClaimNextRun(worker, memory, kT0);
    EXPECT_TRUE(claim.ok()) << claim.status();
    if (!claim.ok() || !claim->has_value()) return 0;
    EXPECT_TRUE(store_->MarkRunning(run_id_, (*claim)->attempt, kT0).ok());
    return (*claim)->attempt;
  }

  TempDir dir_;
  std::unique_ptr<RunStore> store_;
  int64_t run_id_ = 0;
};

TEST_F(StoreRetryTest, CountedFailureRequeuesUntilMaxAttemptsThenFails) {
  const int64_t first = Start("big", 24 * kGiB);
  ASSERT_EQ(first, 1);
  CART_ASSERT_OK_AND_ASSIGN(
      RunRecord after_first,
      store_->RetryAttempt(run_id_, first, RetryRequest{}, By("worker:big", kT0, "CUDA error")));
  EXPECT_EQ(after_first.state, RunState::kQueued);
  EXPECT_EQ(after_first.attempts_counted, 1);

  const int64_t second = Start("big", 24 * kGiB);
  ASSERT_EQ(second, 2);
  CART_ASSERT_OK_AND_ASSIGN(
      RunRecord after_second,
      store_->RetryAttempt(run_id_, second, RetryRequest{}, By("worker:big", kT0, "CUDA error")));
  EXPECT_EQ(after_second.state, RunState::kFailed);
  CART_ASSERT_OK_AND_ASSIGN(auto attempts, store_->ListAttempts(run_id_));
  ASSERT_EQ(attempts.size(), 2u);
  EXPECT_EQ(attempts[1].outcome, AttemptOutcome::kFailed);
  EXPECT_EQ(attempts[1].reason, "CUDA error");
}

TEST_F(StoreRetryTest, StaleAttemptIsRejected) {
  const int64_t attempt = Start("big", 24 * kGiB);
  ASSERT_GT(attempt, 0);
  EXPECT_THAT(store_->RetryAttempt(run_id_, attempt + 1, RetryRequest{}, By("worker:big", kT0)),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("stale")));
}

TEST_F(StoreRetryTest, OomFloorKeepsTheRunOffDevicesThatSmall) {
  const int64_t attempt = Start("small", 8 * kGiB);
  ASSERT_EQ(attempt, 1);
  RetryRequest oom;
  oom.counted = false;
  oom.oom_memory_bytes = 8 * kGiB;
  CART_ASSERT_OK_AND_ASSIGN(RunRecord run,
                            store_->RetryAttempt(run_id_, attempt, oom, By("worker:small", kT0)));
  EXPECT_EQ(run.state, RunState::kQueued);
  EXPECT_EQ(run.oom_memory_bytes, 8 * kGiB);
  EXPECT_EQ(run.attempts_counted, 0);  // an OOM is the device's fault, not the run's

  // The estimate (2 GiB) fits 8 GiB, but the floor does not let it back there.
  CART_ASSERT_OK_AND_ASSIGN(auto on_small, store_->ClaimNextRun("small", 8 * kGiB, kT0));
  EXPECT_FALSE(on_small.has_value());
  CART_ASSERT_OK_AND_ASSIGN(auto on_big, store_->ClaimNextRun("big", 24 * kGiB, kT0));
  ASSERT_TRUE(on_big.has_value());
  EXPECT_EQ(on_big->run.id, run_id_);
}

TEST_F(StoreRetryTest, CancelRequestedBeforeAFailureEndsCancelled) {
  const int64_t attempt = Start("big", 24 * kGiB);
  ASSERT_GT(attempt, 0);
  CART_ASSERT_OK(store_->CancelRun(run_id_, By("user:a", kT0)).status());
  CART_ASSERT_OK_AND_ASSIGN(RunRecord run, store_->RetryAttempt(run_id_, attempt, RetryRequest{},
                                                                By("worker:big", kT0, "crash")));
  EXPECT_EQ(run.state, RunState::kCancelled);
}

// Energy (RunStore::RecordEnergy) kept per attempt, and a sweep's spending added up from them.
TEST(StoreEnergyTest, EachAttemptKeepsItsLargestReadingAndTheSweepAddsUpTheMeasuredOnes) {
  TempDir dir;
  std::unique_ptr<RunStore> store = OpenStore(dir.File("cart.db"));
  ASSERT_NE(store, nullptr);
  CART_ASSERT_OK(store->RegisterWorker("w", "RTX 3090", 24 * kGiB, kT0));
  NewRun run = MakeRun("r0", {}, kGiB);
  run.max_attempts = 3;
  auto created = store->CreateSweep(MakeSweep("s", {run}), By("user:a", kT0));
  ASSERT_TRUE(created.ok()) << created.status();
  const int64_t id = created->run_ids.at(0);
  const int64_t hour = int64_t{3600} * 1'000'000;
  auto claim = store->ClaimNextRun("w", 24 * kGiB, kT0);
  ASSERT_TRUE(claim.ok() && claim->has_value());
  CART_ASSERT_OK(store->MarkRunning(id, 1, kT0));
  CART_ASSERT_OK(store->RecordEnergy(id, 1, 1000, "nvml"));
  CART_ASSERT_OK(store->RecordEnergy(id, 1, 900, "nvml"));  // an older heartbeat, late: ignored
  CART_ASSERT_OK(store->RecordEnergy(id, 1, 3.6e6, "nvml"));
  EXPECT_THAT(store->RecordEnergy(id, 1, -1, "nvml"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is not >= 0")));
  EXPECT_THAT(store->RecordEnergy(id, 1, 5, "guess"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not nvml or rapl")));
  CART_ASSERT_OK(store->RetryAttempt(id, 1, RetryRequest{}, By("worker:w", kT0 + hour)).status());
  EXPECT_THAT(store->RecordEnergy(id, 1, 5e6, "nvml"),
              StatusIs(absl::StatusCode::kFailedPrecondition, ::testing::_));  // fenced
  // A second attempt on a worker that measures nothing, still running half an hour later.
  auto again = store->ClaimNextRun("w", 24 * kGiB, kT0 + hour);
  ASSERT_TRUE(again.ok() && again->has_value());
  CART_ASSERT_OK(store->MarkRunning(id, 2, kT0 + hour));
  auto attempts = store->ListAttempts(id);
  ASSERT_TRUE(attempts.ok());
  ASSERT_EQ(attempts->size(), 2u);
  EXPECT_EQ((*attempts)[0].energy_j, 3.6e6);
  EXPECT_EQ((*attempts)[0].energy_source, "nvml");
  EXPECT_FALSE((*attempts)[1].energy_j.has_value());
  auto spending = store->SweepSpending(kT0 + hour + hour / 2);
  ASSERT_TRUE(spending.ok()) << spending.status();
  const Spending& s = spending->at(created->sweep.id);
  EXPECT_EQ(s.attempts, 2);
  EXPECT_EQ(s.measured_attempts, 1);
  EXPECT_DOUBLE_EQ(s.energy_j, 3.6e6);
  EXPECT_DOUBLE_EQ(s.device_hours, 1.5);
  EXPECT_EQ(s.sources, std::vector<std::string>{"nvml"});
}

// Each run of one sweep on its own (RunStore::RunSpending, what `cart report` adds up per claim):
// a run's attempts only, another sweep's runs apart, a run never claimed absent.
TEST(StoreEnergyTest, RunSpendingGivesEachRunOfOneSweepItsOwnAttempts) {
  TempDir dir;
  std::unique_ptr<RunStore> store = OpenStore(dir.File("cart.db"));
  ASSERT_NE(store, nullptr);
  CART_ASSERT_OK(store->RegisterWorker("w", "RTX 3090", 24 * kGiB, kT0));
  const int64_t hour = int64_t{3600} * 1'000'000;
  auto b = store->CreateSweep(MakeSweep("b", {MakeRun("0", {}, kGiB)}), By("user:a", kT0));
  auto a = store->CreateSweep(
      MakeSweep("a", {MakeRun("0", {}, kGiB), MakeRun("1", {}, kGiB), MakeRun("2", {}, kGiB)}),
      By("user:a", kT0));
  ASSERT_TRUE(a.ok() && b.ok());
  // a/0: one hour measured at 2 kWh by RAPL; a/1: two hours, not measured; b/0: 5 hours, NVML.
  // a/2 is never claimed.
  auto run_for = [&](int64_t id, int64_t hours, std::optional<double> joules, const char* source) {
    auto claim = store->ClaimNextRun("w", 24 * kGiB, kT0);
    ASSERT_TRUE(claim.ok() && claim->has_value());
    ASSERT_EQ((*claim)->run.id, id);
    CART_ASSERT_OK(store->MarkRunning(id, 1, kT0));
    if (joules) CART_ASSERT_OK(store->RecordEnergy(id, 1, *joules, source));
    CART_ASSERT_OK(store->RecordAttemptOutcome(id, 1, AttemptOutcome::kSucceeded,
                                               By("worker:w", kT0 + hours * hour)));
  };
  run_for(b->run_ids[0], 5, 1.8e7, "nvml");  // claimed in id order: b's first
  run_for(a->run_ids[0], 1, 7.2e6, "rapl");
  run_for(a->run_ids[1], 2, std::nullopt, "");

  auto spending = store->RunSpending("a", kT0 + 10 * hour);
  ASSERT_TRUE(spending.ok()) << spending.status();
  ASSERT_EQ(spending->size(), 2u);  // a/2 never ran; b's run is another sweep's
  const Spending& first = spending->at(a->run_ids[0]);
  EXPECT_EQ(first.attempts, 1);
  EXPECT_EQ(first.measured_attempts, 1);
  EXPECT_DOUBLE_EQ(first.energy_j, 7.2e6);
  EXPECT_DOUBLE_EQ(first.device_hours, 1);
  EXPECT_EQ(first.sources, std::vector<std::string>{"rapl"});
  const Spending& second = spending->at(a->run_ids[1]);
  EXPECT_EQ(second.measured_attempts, 0);
  EXPECT_DOUBLE_EQ(second.device_hours, 2);
  EXPECT_TRUE(second.sources.empty());
  EXPECT_THAT(store->RunSpending("nope", kT0).status(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("nope")));
}

}  // namespace
}  // namespace cart::store
