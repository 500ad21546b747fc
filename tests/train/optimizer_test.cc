// The two implementations of the optimizer step (train/optimizer.h): LibTorch 2.4+'s fused AdamW
// and foreach clipping against the per-tensor path, on the CPU (LibTorch has CPU kernels for
// both). They compute the same formulas in another order, so they agree to float rounding:
// the tolerances below are stated per test. In a build against an older LibTorch (Debian's 1.13)
// the fused tests skip, saying so, and asking for the fused kernels is an error.

#include "train/optimizer.h"

#include <torch/torch.h>

#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/language_model.h"
#include "tests/support/test_support.h"
#include "tests/train/train_fixtures.h"
#include "train/internal/optimizer_state.h"
#include "train/trainer.h"

namespace cart::train {
namespace {

using ::cart::testing::TempDir;

#define SKIP_WITHOUT_FUSED_KERNELS()                                                     \
  if (!HasFusedStepKernels()) {                                                          \
    GTEST_SKIP() << "this LibTorch (" << TORCH_VERSION << ") has no fused step kernels"; \
  }

// The largest |a - b| / max(|b|, floor) over two lists of tensors of the same shapes.
double MaxRelativeDifference(const std::vector<torch::Tensor>& a,
                             const std::vector<torch::Tensor>& b, double floor = 1e-3) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const torch::Tensor scale = b[i].abs().clamp_min(floor);
    worst = std::max(worst, ((a[i] - b[i]).abs() / scale).max().item<double>());
  }
  return worst;
}

// Two copies of a small model with matrices and 1-D parameters, and an AdamW over each with the
// trainer's two groups (decay for matrices, none for the rest).
struct Twin {
  torch::nn::Sequential net{torch::nn::Linear(16, 32),
                            torch::nn::LayerNorm(torch::nn::LayerNormOptions({32})),
                            torch::nn::Linear(32, 8)};
  std::unique_ptr<torch::optim::AdamW> optimizer;

  explicit Twin(const Twin* from = nullptr) {
    torch::NoGradGuard no_grad;
    if (from != nullptr) {
      for (size_t i = 0; i < net->parameters().size(); ++i) {
        net->parameters()[i].copy_(from->net->parameters()[i]);
      }
    }
    std::vector<torch::Tensor> decay, no_decay;
    for (const auto& p : net->parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
    auto options = [](double wd) {
      return std::make_unique<torch::optim::AdamWOptions>(
          torch::optim::AdamWOptions(3e-3).betas({0.9, 0.95}).weight_decay(wd).eps(1e-8));
    };
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(decay, options(0.1));
    groups.emplace_back(no_decay, options(0.0));
    optimizer = std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(3e-3));
  }
  void Backward(const torch::Tensor& x) {
    optimizer->zero_grad();
    net->forward(x).pow(2).mean().backward();
  }
  std::vector<torch::Tensor> State() {
    std::vector<torch::Tensor> out;
    for (const auto& p : net->parameters()) {
      const auto& s = static_cast<const torch::optim::AdamWParamState&>(
          *optimizer->state().at(internal::StateKey(p)));
      out.push_back(s.exp_avg());
      out.push_back(s.exp_avg_sq());
    }
    return out;
  }
  std::vector<int64_t> Steps() {
    std::vector<int64_t> out;
    for (const auto& p : net->parameters()) {
      out.push_back(static_cast<const torch::optim::AdamWParamState&>(
                        *optimizer->state().at(internal::StateKey(p)))
                        .step());
    }
    return out;
  }
};

TEST(OptimizerTest, FusedAdamWFollowsThePerTensorStepWithinFloatRounding) {
  SKIP_WITHOUT_FUSED_KERNELS();
  torch::manual_seed(11);
  Twin per_tensor;
  Twin fused(&per_tensor);
  for (int step = 1; step <= 20; ++step) {
    const torch::Tensor x = torch::randn({4, 16});
    per_tensor.Backward(x);
    fused.Backward(x);
    // The learning rate changes every step, as the schedule changes it.
    for (Twin* t : {&per_tensor, &fused}) {
      for (auto& g : t->optimizer->param_groups()) {
        static_cast<torch::optim::AdamWOptions&>(g.options()).lr(3e-3 / std::sqrt(step));
      }
    }
    AdamWStep(*per_tensor.optimizer, StepKernels::kPerTensor);
    AdamWStep(*fused.optimizer, StepKernels::kFused);
  }
  // Both keep the state torch::optim::AdamW keeps, with the same step counts.
  EXPECT_EQ(fused.Steps(), per_tensor.Steps());
  EXPECT_EQ(per_tensor.Steps().front(), 20);
  // Stated tolerance: 20 steps of fp32 arithmetic in another order stay within 1e-5 relative
  // (measured here: see the assertion's message on failure).
  const double weights =
      MaxRelativeDifference(fused.net->parameters(), per_tensor.net->parameters());
  const double moments = MaxRelativeDifference(fused.State(), per_tensor.State(), 1e-6);
  EXPECT_LT(weights, 1e-5);
  EXPECT_LT(moments, 1e-4);
  std::cout << "fused vs per-tensor AdamW after 20 steps: weights " << weights << ", moments "
            << moments << " (max relative difference)\n";
  // And they did move: the comparison is not between two untouched models.
  Twin untouched;
  EXPECT_GT(MaxRelativeDifference(untouched.net->parameters(), per_tensor.net->parameters()), 1e-3);
}

TEST(OptimizerTest, ForeachClippingEqualsThePerTensorClipping) {
  SKIP_WITHOUT_FUSED_KERNELS();
  for (double max_norm : {0.05, 1e6}) {  // clipping, and a bound that never clips
    torch::manual_seed(5);
    Twin a;
    Twin b(&a);
    const torch::Tensor x = torch::randn({3, 16});
    a.Backward(x);
    b.Backward(x);
    const torch::Tensor na = ClipGradNorm(a.net->parameters(), max_norm, StepKernels::kPerTensor);
    const torch::Tensor nb = ClipGradNorm(b.net->parameters(), max_norm, StepKernels::kFused);
    // Stated tolerance: the norms within 1e-6 relative, the scaled gradients within 1e-6.
    EXPECT_NEAR(nb.item<double>(), na.item<double>(), 1e-6 * na.item<double>()) << max_norm;
    std::vector<torch::Tensor> ga, gb;
    for (size_t i = 0; i < a.net->parameters().size(); ++i) {
      ga.push_back(a.net->parameters()[i].grad());
      gb.push_back(b.net->parameters()[i].grad());
    }
    EXPECT_LT(MaxRelativeDifference(gb, ga, 1e-8), 1e-6) << max_norm;
    if (max_norm < 1) {  // it clipped: the norm after is max_norm
      EXPECT_NEAR(torch::stack(at::_foreach_norm(gb, 2)).norm(2).item<double>(), max_norm, 1e-6);
    }
  }
}

TEST(OptimizerTest, AskingForFusedKernelsThatAreNotThereIsAnError) {
  if (HasFusedStepKernels()) {
    EXPECT_EQ(DefaultStepKernels(), StepKernels::kFused);
    GTEST_SKIP() << "this LibTorch (" << TORCH_VERSION << ") has the fused kernels";
  }
  EXPECT_EQ(DefaultStepKernels(), StepKernels::kPerTensor);
  Twin t;
  t.Backward(torch::randn({2, 16}));
  EXPECT_THROW(AdamWStep(*t.optimizer, StepKernels::kFused), std::invalid_argument);
  EXPECT_THROW(ClipGradNorm(t.net->parameters(), 1.0, StepKernels::kFused), std::invalid_argument);
}

class StepKernelsRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SKIP_WITHOUT_FUSED_KERNELS();
    testing::MakeData(dir_);
    config_ = testing::TinyRun();
    config_.data.train_data = dir_.File("synth.bin");
    config_.train.eval_every = 0;
  }
  std::vector<double> LossesOf(const std::string& name) {
    return testing::Losses(testing::ReadMetrics(dir_.File(name + "/metrics.jsonl")));
  }
  TempDir dir_;
  config::RunConfig config_;
};

// A whole training run (CART with its clipping, two groups, accumulation) under each, and a
// checkpoint crossing from one to the other both ways: the losses agree within 1e-5 relative.
TEST_F(StepKernelsRunTest, TrainingAndResumeCrossBetweenThePerTensorAndTheFusedStep) {
  config_.train.clip = 0.5;  // small enough that it clips
  for (StepKernels k : {StepKernels::kPerTensor, StepKernels::kFused}) {
    TrainOptions o;
    o.out_dir = dir_.File(StepKernelsName(k));
    o.step_kernels = k;
    std::vector<std::string> logs;
    o.on_log = [&logs](const std::string& s) { logs.push_back(s); };
    CART_ASSERT_OK(Train(config_, o).status());
    bool said = false;
    for (const std::string& l : logs) said |= l.find("optimizer step: ") == 0;
    EXPECT_TRUE(said) << "the log names the optimizer step's kernels";
  }
  // Resumed under the other kernels from the step-4 checkpoint of each.
  for (auto [first, second] : {std::pair{StepKernels::kPerTensor, StepKernels::kFused},
                               std::pair{StepKernels::kFused, StepKernels::kPerTensor}}) {
    const std::string name =
        std::string(StepKernelsName(first)) + "-then-" + StepKernelsName(second);
    TrainOptions o;
    o.out_dir = dir_.File(name);
    o.step_kernels = first;
    o.stop_after = 4;
    CART_ASSERT_OK(Train(config_, o).status());
    TrainOptions resume;
    resume.out_dir = dir_.File(name);
    resume.resume = true;
    resume.step_kernels = second;
    CART_ASSERT_OK(Train(config::RunConfig{}, resume).status());
  }
  const std::vector<double> reference = LossesOf("per-tensor");
  ASSERT_EQ(reference.size(), 12u);
  EXPECT_GT(std::abs(reference.front() - reference.back()), 0.1) << "it learned";
  for (const std::string name : {"fused", "per-tensor-then-fused", "fused-then-per-tensor"}) {
    testing::ExpectLossesNear(LossesOf(name), reference, 1e-5, name);
  }
  // The first four steps of a run that began per-tensor are that run's, to the bit.
  const std::vector<double> crossed = LossesOf("per-tensor-then-fused");
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(crossed[i], reference[i]) << "step " << i + 1;
}

}  // namespace
}  // namespace cart::train
