// server/budgets.h: which queued runs a budget holds back, and what it says, on hand-made
// ledgers; the store's side (what is spent, a budget below it refused) and the scheduler's
// (placement waits, an admin raises) are in scheduler_test.cc and tests/integration.

#include "server/budgets.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cart::server {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

store::PlaceableRun Queued(int64_t id, double hours, int64_t sweep = 1,
                           const std::string& owner = "user:ann") {
  store::PlaceableRun r;
  r.id = id;
  r.work_hours = hours;
  r.steps = 100;
  r.sweep_id = sweep;
  r.owner = owner;
  return r;
}

BudgetLedger SweepBudget(double limit, double spent, double held = 0) {
  BudgetLedger ledger;
  ledger.sweeps[1] = BudgetAccount{limit, spent, held, "sweep file or admin"};
  ledger.sweep_names[1] = "stage2";
  return ledger;
}

TEST(BudgetsTest, ARunThatFitsWhatIsLeftStartsAndOneThatWouldOverrunWaitsSayingWhy) {
  const BudgetLedger ledger = SweepBudget(10, 4, 1);                       // 5 left
  EXPECT_THAT(BudgetRefusal(ledger, Queued(1, 5), 1.0, "w1"), IsEmpty());  // fills it exactly
  const std::string why = BudgetRefusal(ledger, Queued(2, 6), 1.0, "w1");
  EXPECT_THAT(why, AllOf(HasSubstr("sweep 'stage2'"), HasSubstr("5.0 device-hours left"),
                         HasSubstr("of its 10.0 device-hours"), HasSubstr("4.0 device-hours spent"),
                         HasSubstr("1.0 device-hours held by running runs"),
                         HasSubstr("needs about 6.0 device-hours on worker w1"),
                         HasSubstr("cart budget set --sweep stage2 --device-hours N")));
}

TEST(BudgetsTest, TheWorkersSpeedSetsWhatARunCosts) {
  const BudgetLedger ledger = SweepBudget(10, 0);
  // 4 RTX 3090 hours: 4 device-hours on a 3090, 16 on a card a quarter as fast.
  EXPECT_THAT(BudgetRefusal(ledger, Queued(1, 4), 1.0, "w1"), IsEmpty());
  EXPECT_THAT(BudgetRefusal(ledger, Queued(1, 4), 0.25, "w2"), HasSubstr("about 16.0"));
}

TEST(BudgetsTest, ARunOfUnknownWorkStartsWhileAnythingIsLeftAndNotAfter) {
  EXPECT_THAT(BudgetRefusal(SweepBudget(10, 9.5), Queued(1, 0), 1.0, "w1"), IsEmpty());
  const std::string why = BudgetRefusal(SweepBudget(10, 10), Queued(1, 0), 1.0, "w1");
  EXPECT_THAT(why, HasSubstr("0.0 device-hours left"));
  EXPECT_THAT(why, ::testing::Not(HasSubstr("needs about")));
}

TEST(BudgetsTest, TheOwnersBudgetHoldsEveryOneOfTheirSweepsWhicheverTokenSubmitted) {
  BudgetLedger ledger;
  ledger.owners["ann"] = BudgetAccount{3, 2, 0, "cartd config"};
  EXPECT_THAT(BudgetRefusal(ledger, Queued(1, 2, 7, "admin:ann"), 1.0, "w1"),
              AllOf(HasSubstr("user 'ann'"), HasSubstr("cart budget set --user ann")));
  EXPECT_THAT(BudgetRefusal(ledger, Queued(2, 2, 7, "user:bob"), 1.0, "w1"), IsEmpty());
  // The sweep's own budget is checked first and named when it is the one short.
  ledger.sweeps[7] = BudgetAccount{1, 0, 0, "sweep file or admin"};
  ledger.sweep_names[7] = "s7";
  EXPECT_THAT(BudgetRefusal(ledger, Queued(3, 2, 7, "user:ann"), 1.0, "w1"),
              HasSubstr("sweep 's7'"));
}

TEST(BudgetsTest, HoldOverBudgetKeepsTheOthersInOrderAndRecordsEachRefusal) {
  const BudgetLedger ledger = SweepBudget(5, 0);
  std::vector<store::PlaceableRun> queued = {Queued(1, 6), Queued(2, 1, 2), Queued(3, 4),
                                             Queued(4, 9)};
  std::map<int64_t, std::string> refused;
  HoldOverBudget(ledger, 1.0, "w1", queued, &refused);
  ASSERT_EQ(queued.size(), 2u);
  EXPECT_EQ(queued[0].id, 2);  // another sweep's, no budget
  EXPECT_EQ(queued[1].id, 3);
  ASSERT_EQ(refused.size(), 2u);
  EXPECT_THAT(refused[1], HasSubstr("needs about 6.0"));
  EXPECT_THAT(refused[4], HasSubstr("needs about 9.0"));
}

TEST(BudgetsTest, NoLimitAnywhereHoldsNothing) {
  BudgetLedger ledger;
  ledger.owners["ann"] = BudgetAccount{0, 100, 0, "cartd config"};  // 0: none
  EXPECT_TRUE(ledger.Empty());
  std::vector<store::PlaceableRun> queued = {Queued(1, 1000)};
  HoldOverBudget(ledger, 1.0, "w1", queued, nullptr);
  EXPECT_EQ(queued.size(), 1u);
}

TEST(BudgetsTest, SmallBudgetsKeepTheirDigits) {
  EXPECT_EQ(DeviceHours(0.0014), "0.0014 device-hours");
  EXPECT_EQ(DeviceHours(12.34), "12.3 device-hours");
}

}  // namespace
}  // namespace cart::server
