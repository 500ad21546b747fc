// cli/local_workers.h: `cart up` starts one worker per usable GPU, or CPU workers, saying why.
// It used to start every worker with --device cpu, so on a GPU box the quick start trained on the
// CPU.

#include "cli/local_workers.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace cart::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(LocalWorkersTest, AGpuBoxGetsOneWorkerPerCardByDefault) {
  CART_ASSERT_OK_AND_ASSIGN(LocalWorkerPlan plan, PlanLocalWorkers("auto", 2, 3, true));
  EXPECT_THAT(plan.devices, ElementsAre("cuda:0", "cuda:1", "cuda:2"));
  EXPECT_THAT(plan.note, HasSubstr("one worker per GPU (3)"));
  CART_ASSERT_OK_AND_ASSIGN(plan, PlanLocalWorkers("cuda", 2, 1, true));
  EXPECT_THAT(plan.devices, ElementsAre("cuda:0"));
  EXPECT_EQ(plan.note, "");
}

TEST(LocalWorkersTest, CpuWorkersWhereThereIsNoCardWhenAskedOrWithoutACudaLibTorch) {
  CART_ASSERT_OK_AND_ASSIGN(LocalWorkerPlan plan, PlanLocalWorkers("auto", 2, 0, true));
  EXPECT_THAT(plan.devices, ElementsAre("cpu", "cpu"));
  EXPECT_THAT(plan.note, HasSubstr("no usable NVIDIA GPU"));
  CART_ASSERT_OK_AND_ASSIGN(plan, PlanLocalWorkers("cpu", 3, 2, true));
  EXPECT_THAT(plan.devices, ElementsAre("cpu", "cpu", "cpu"));
  // A card, but Debian's CPU LibTorch in cart-worker: the CPU, and it says so (not silently).
  CART_ASSERT_OK_AND_ASSIGN(plan, PlanLocalWorkers("auto", 2, 2, false));
  EXPECT_THAT(plan.devices, ElementsAre("cpu", "cpu"));
  EXPECT_THAT(plan.note, HasSubstr("the driver lists 2 usable GPU(s), but cart-worker was built "
                                   "against a LibTorch without CUDA"));
}

TEST(LocalWorkersTest, AskingForCudaWithoutAUsableCardNamesTheCause) {
  EXPECT_THAT(PlanLocalWorkers("cuda", 2, 0, true).status().message(),
              HasSubstr("no usable NVIDIA GPU"));
  EXPECT_THAT(PlanLocalWorkers("cuda", 2, 2, false).status().message(),
              HasSubstr("LibTorch without CUDA"));
  EXPECT_THAT(PlanLocalWorkers("gpu", 2, 2, true).status().message(),
              HasSubstr("allowed: auto, cpu, cuda"));
  EXPECT_THAT(PlanLocalWorkers("cpu", -1, 0, true).status().message(), HasSubstr("at least 0"));
  // --workers 0: cartd alone, even on a GPU box.
  CART_ASSERT_OK_AND_ASSIGN(LocalWorkerPlan none, PlanLocalWorkers("auto", 0, 2, true));
  EXPECT_TRUE(none.devices.empty());
}

}  // namespace
}  // namespace cart::cli
