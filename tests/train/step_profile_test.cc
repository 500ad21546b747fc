// The step breakdown's attribution (train/step_profile.h): each op's own time goes to the kind a
// scope around it names, or else to its own kind; a real training run shows all four kinds.

#include "train/step_profile.h"

#include <ATen/record_function.h>
#include <torch/torch.h>

#include <chrono>
#include <optional>
#include <vector>

#include "gtest/gtest.h"
#include "model/layers.h"
#include "tests/support/test_support.h"
#include "tests/train/train_fixtures.h"
#include "train/trainer.h"

namespace cart::train {
namespace {

double Seconds(const StepBreakdown& b, WorkKind k) {
  auto it = b.seconds.find(k);
  return it == b.seconds.end() ? 0 : it->second;
}

TEST(StepProfileTest, OpsAreChargedToTheScopeAroundThemOrToTheirOwnKind) {
  const torch::Tensor a = torch::randn({256, 256}), b = torch::randn({256, 256});
  StepProfiler profiler;
  (void)torch::mm(a, b);  // a matrix product on its own
  StepBreakdown only_mm = profiler.Take();
  EXPECT_GT(Seconds(only_mm, WorkKind::kMatmul), 0);
  EXPECT_EQ(Seconds(only_mm, WorkKind::kAttention), 0);
  EXPECT_EQ(Seconds(only_mm, WorkKind::kOptimizer), 0);

  (void)(a + b).relu();  // elementwise
  StepBreakdown elementwise = profiler.Take();
  EXPECT_GT(Seconds(elementwise, WorkKind::kElementwise), 0);
  EXPECT_EQ(Seconds(elementwise, WorkKind::kMatmul), 0);

  {
    RECORD_FUNCTION(model::kAttentionScope, std::vector<c10::IValue>());
    (void)torch::softmax(torch::mm(a, b), -1);  // a product and a softmax, both attention's
  }
  StepBreakdown attention = profiler.Take();
  EXPECT_GT(Seconds(attention, WorkKind::kAttention), 0);
  EXPECT_EQ(Seconds(attention, WorkKind::kMatmul), 0);
  EXPECT_EQ(Seconds(attention, WorkKind::kElementwise), 0);

  {
    RECORD_FUNCTION(kOptimizerScope, std::vector<c10::IValue>());
    (void)torch::mm(a, b);
    (void)(a * 2);
  }
  StepBreakdown optimizer = profiler.Take();
  EXPECT_GT(Seconds(optimizer, WorkKind::kOptimizer), 0);
  EXPECT_EQ(Seconds(optimizer, WorkKind::kMatmul), 0);
  EXPECT_EQ(Seconds(optimizer, WorkKind::kElementwise), 0);
  EXPECT_GE(optimizer.ops, 2);
}

TEST(StepProfileTest, ATrainingRunSpendsTimeInEveryKindAndNoMoreThanItsWallTime) {
  cart::testing::TempDir dir;
  testing::MakeData(dir);
  config::RunConfig c = testing::TinyRun();
  c.data.train_data = dir.File("synth.bin");
  c.train.eval_every = 0;
  c.train.checkpoint_every = 0;
  c.train.clip = 1.0;
  TrainOptions o;
  o.out_dir = dir.File("run");
  o.device = "cpu";
  o.write_checkpoints = false;
  std::optional<StepProfiler> profiler;
  o.on_step = [&](int64_t step, double) {
    if (step == 2) profiler.emplace();  // the two first steps set things up
  };
  const auto start = std::chrono::steady_clock::now();
  CART_ASSERT_OK(Train(c, o).status());
  ASSERT_TRUE(profiler.has_value());
  const StepBreakdown b = profiler->Take();
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (WorkKind k :
       {WorkKind::kMatmul, WorkKind::kAttention, WorkKind::kElementwise, WorkKind::kOptimizer}) {
    EXPECT_GT(Seconds(b, k), 0) << WorkKindName(k);
  }
  EXPECT_GT(b.ops, 100);
  EXPECT_LE(b.total_seconds(), wall);  // own times do not count a callee twice
}

}  // namespace
}  // namespace cart::train
