// Perplexity evaluation as a run computes it (train/eval.h EvalCompute): several windows per
// forward pass and, for a bf16 run, under bf16 autocast. Batching changes the loss by float
// rounding only; bf16 by what bf16 does to the logits, within the tolerance stated below.

#include "train/eval.h"

#include <cmath>
#include <iostream>

#include "gtest/gtest.h"
#include "model/language_model.h"
#include "tests/support/test_support.h"
#include "tests/train/train_fixtures.h"

namespace cart::train {
namespace {

class EvalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    synth_ = testing::MakeData(dir_);
    config::RunConfig c = testing::TinyRun();
    auto m = model::BuildModel(c.model, 5);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = *m;
  }
  PerplexityResult Evaluate(EvalCompute compute) {
    auto r = EvaluatePerplexity(*model_, synth_.val_path, 32, 22, 0, compute);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : PerplexityResult{};
  }
  cart::testing::TempDir dir_;
  data::SynthResult synth_;
  std::shared_ptr<model::LanguageModel> model_;
};

TEST_F(EvalTest, BatchedWindowsGiveTheLossOfOneWindowAtATime) {
  const PerplexityResult one = Evaluate({1, false});
  const PerplexityResult batched = Evaluate({5, false});  // 22 windows: batches of 5 and a 2
  EXPECT_EQ(one.sequences, 22);
  EXPECT_EQ(batched.sequences, 22);
  EXPECT_NEAR(batched.mean_loss, one.mean_loss, 1e-6 * one.mean_loss);
  EXPECT_NEAR(batched.stderr_loss, one.stderr_loss, 1e-5 * one.stderr_loss + 1e-9);
  EXPECT_GT(one.mean_loss, 1.0);  // an untrained model over 32 tokens: near ln 32
}

// Stated tolerance: bf16 autocast within 1 % of the fp32 loss at this size (measured: the
// message below).
TEST_F(EvalTest, UnderBf16AutocastTheLossStaysNearFp32) {
  const PerplexityResult fp32 = Evaluate({4, false});
  const PerplexityResult bf16 = Evaluate({4, true});
  const double relative = std::abs(bf16.mean_loss - fp32.mean_loss) / fp32.mean_loss;
  EXPECT_LT(relative, 0.01);
  EXPECT_GT(relative, 0) << "bf16 ran: the loss is not fp32's to the bit";
  std::cout << "bf16 autocast vs fp32 validation loss: " << bf16.mean_loss << " vs "
            << fp32.mean_loss << " (" << relative << " relative)\n";
}

}  // namespace
}  // namespace cart::train
