// The training-memory estimate (config::EstimateTrainingBytes, docs/model.md §5 "Training memory")
// against what LibTorch's CPU allocator really holds (train::CpuTensorMemory): block by block, the
// bytes one application keeps for backward, and for whole training steps, the peak. Each build
// checks the kernels it has: Debian's LibTorch 1.13 writes attention out, LibTorch 2.x runs
// scaled_dot_product_attention; fp32 and bf16 autocast, merged and separate projections. What
// only a GPU runs (fused RMSNorm) is checked by gpu-check's bench.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <string>

#include "common/strings.h"
#include "config/accounting.h"
#include "model/layers.h"
#include "tests/support/test_support.h"
#include "tests/train/train_fixtures.h"
#include "train/device.h"
#include "train/precision.h"
#include "train/trainer.h"

namespace cart::train {
namespace {

namespace fs = std::filesystem;

// Bytes allocated while `f` runs and still held after it, its result included.
template <typename F>
int64_t KeptBy(F&& f) {
  CpuTensorMemory memory;
  const int64_t before = memory.live_bytes();
  const torch::Tensor out = f();
  return memory.live_bytes() - before;
}

struct Case {
  int64_t d;
  int64_t T;
  bool bf16;
  bool merged;
};

std::string Name(const Case& c) {
  return StrCat("d ", c.d, " T ", c.T, c.bf16 ? " bf16" : " fp32",
                c.merged ? " merged" : " separate");
}

class BlockMemoryTest : public ::testing::TestWithParam<Case> {};

// One application of each block kind, from inputs made beforehand as the model makes them (the
// residual stream an fp32 tensor that is not a leaf, so that autocast does not cache its cast; K
// and V split-head views of the anchor's projections), under a fresh autocast scope each (the
// weights' casts are the block's own).
TEST_P(BlockMemoryTest, EachBlockKeepsWhatTheEstimateCounts) {
  const Case c = GetParam();
  const int64_t B = 2;
  config::ModelConfig m;
  m.d = c.d;
  const int64_t h = m.mlp_hidden();
  config::MemoryKernels kernels = KernelsOn(torch::kCPU);
  kernels.merged_projections = c.merged;

  torch::Tensor leaf = torch::randn({B, c.T, c.d}).requires_grad_(true);
  const torch::Tensor x = leaf * 1.0;
  torch::Tensor anchor = torch::randn({B, c.T, c.d}).requires_grad_(true);
  torch::Tensor K = model::SplitHeads(anchor * 1.0);
  torch::Tensor V = model::SplitHeads(anchor * 2.0);
  if (c.bf16) {
    K = model::SplitHeads((anchor * 1.0).to(torch::kBFloat16));
    V = model::SplitHeads((anchor * 2.0).to(torch::kBFloat16));
  }
  const model::RopeTables rope = model::MakeRope(c.T, x);

  model::PreludeLayer prelude(c.d, h);
  model::CoreBlock cross(c.d, h, /*self_attention=*/false, /*causal=*/true);
  model::CoreBlock self(c.d, h, /*self_attention=*/true, /*causal=*/true);
  model::DenseLayer dense(c.d, h);
  for (torch::nn::Module* block : std::initializer_list<torch::nn::Module*>{
           prelude.get(), cross.get(), self.get(), dense.get()}) {
    model::SetMergedProjections(*block, c.merged);
  }
  struct Measured {
    config::BlockKind kind;
    const char* name;
    int64_t bytes;
  };
  auto run = [&](auto forward) {
    MixedPrecisionScope scope(c.bf16, torch::kCPU);
    return KeptBy(forward);
  };
  const Measured measured[] = {
      {config::BlockKind::kPrelude, "prelude", run([&] { return prelude->forward(x, rope); })},
      {config::BlockKind::kCrossCore, "cross-attention core",
       run([&] { return cross->forward(x, K, V, rope); })},
      {config::BlockKind::kSelfCore, "self-attention core",
       run([&] { return self->forward(x, K, V, rope); })},
      {config::BlockKind::kDense, "dense layer", run([&] { return dense->forward(x, rope); })},
  };
  for (const Measured& got : measured) {
    const config::BlockBytes b = config::BlockActivationBytes(m, got.kind, c.T, c.bf16, kernels);
    const double estimate = b.per_token * static_cast<double>(B * c.T) + b.fixed;
    // Every tensor is counted: to the byte on 1.13, within 1e-5 on 2.x.
    EXPECT_NEAR(estimate / static_cast<double>(got.bytes), 1.0, 0.00001)
        << Name(c) << ", " << got.name << ": estimate " << estimate << " B, measured " << got.bytes
        << " B, on " << config::DescribeKernels(kernels);
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, BlockMemoryTest,
                         ::testing::Values(Case{256, 256, false, false},
                                           Case{256, 256, false, true}, Case{256, 256, true, false},
                                           Case{256, 256, true, true}, Case{384, 512, false, false},
                                           Case{384, 512, true, true}));

// Whole training steps: the allocator's peak over two optimizer steps (the second with AdamW's
// moments) against the estimate for the step's shape, CART and dense, with accumulation.
TEST(TrainingMemoryTest, TheEstimateHoldsTheStepsPeakWithinItsMargin) {
  struct Step {
    const char* what;
    config::ModelKind model;
    int64_t d;
    int64_t T;
    int64_t batch;
    int64_t accum;
    config::DType dtype;
    int64_t vocab = 4096;
  };
  const Step steps[] = {
      {"cart fp32", config::ModelKind::kCart, 256, 256, 2, 1, config::DType::kFloat32},
      {"cart bf16", config::ModelKind::kCart, 256, 256, 2, 1, config::DType::kBFloat16},
      {"cart bf16 accum", config::ModelKind::kCart, 256, 512, 1, 2, config::DType::kBFloat16},
      {"dense fp32", config::ModelKind::kDense, 256, 256, 2, 1, config::DType::kFloat32},
      // Held gradients where the tied embedding's and the shared core's summed gradients weigh
      // most: a large vocabulary, short sequences.
      {"cart fp32 accum, vocab 32,000, T 32", config::ModelKind::kCart, 128, 32, 1, 2,
       config::DType::kFloat32, 32000},
  };
  cart::testing::TempDir dir;
  testing::MakeData(dir);  // 32 token ids: any vocabulary takes them
  for (const Step& s : steps) {
    config::RunConfig c;
    c.model.model = s.model;
    c.model.vocab = s.vocab;
    c.model.d = s.d;
    c.model.P = 2;
    c.model.R = 3;
    c.model.layers = 4;
    c.train.seq_len = s.T;
    c.train.batch = s.batch;
    c.train.accum = s.accum;
    c.train.dtype = s.dtype;
    c.train.steps = 2;
    c.train.warmup = 1;
    c.train.log_every = 2;
    c.train.eval_every = 0;
    c.train.checkpoint_every = 0;
    c.data.train_data = dir.File("synth.bin");
    TrainOptions options;
    options.out_dir = (dir.path() / StrCat(s.what, "-run")).string();
    options.device = "cpu";
    options.write_checkpoints = false;
    const config::MemoryKernels kernels = KernelsOn(torch::kCPU);
    int64_t peak = 0;
    {
      CpuTensorMemory memory;
      CART_ASSERT_OK(Train(c, options).status());
      peak = memory.peak_bytes();
    }
    const int64_t estimate = config::EstimateTrainingBytes(c, kernels);
    const double ratio = static_cast<double>(estimate) / static_cast<double>(peak);
    // Not below (an out-of-memory), and not far above (a micro-batch halved for nothing).
    EXPECT_GE(ratio, 1.0) << s.what << ": estimate " << estimate << ", peak " << peak;
    EXPECT_LE(ratio, 1.10) << s.what << ": estimate " << estimate << ", peak " << peak;
    std::cout << s.what << ": estimate / measured peak " << ratio << "\n";
  }
}

}  // namespace
}  // namespace cart::train
