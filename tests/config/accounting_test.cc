#include "config/accounting.h"

#include <cmath>

#include "config/devices.h"
#include "gtest/gtest.h"

namespace cart::config {
namespace {

ModelConfig Paper(int64_t d, int R = 6) {
  ModelConfig m;
  m.vocab = 32000;
  m.d = d;
  m.P = 6;
  m.R = R;
  return m;
}

// Rounds a parameter count to millions with two decimals, as docs/model.md §5 prints them.
double M(int64_t n) { return std::round(static_cast<double>(n) / 1e4) / 100.0; }

struct Row {
  int64_t d;
  double stored, effective, core, prelude;
};

TEST(AccountingTest, ReproducesTheSpecParameterTableExactly) {
  const Row rows[] = {{256, 14.37, 17.97, 0.72, 0.77},
                      {512, 41.05, 55.47, 2.88, 3.08},
                      {768, 75.34, 104.84, 5.90, 6.34},
                      {1024, 125.09, 178.84, 10.75, 11.54}};
  for (const Row& row : rows) {
    SCOPED_TRACE(row.d);
    const ParamCounts c = CountParams(Paper(row.d));
    EXPECT_DOUBLE_EQ(M(c.stored), row.stored);
    EXPECT_DOUBLE_EQ(M(c.effective), row.effective);
    EXPECT_DOUBLE_EQ(M(c.core_block), row.core);
    EXPECT_DOUBLE_EQ(M(c.prelude_layer), row.prelude);
  }
}

TEST(AccountingTest, MlpHiddenFollowsTheRoundingRule) {
  EXPECT_EQ(Paper(256).mlp_hidden(), 768);
  EXPECT_EQ(Paper(512).mlp_hidden(), 1536);
  EXPECT_EQ(Paper(768).mlp_hidden(), 2048);
  EXPECT_EQ(Paper(1024).mlp_hidden(), 2816);
}

TEST(AccountingTest, DenseBaselineAtD1024MatchesSevenAndTwelveLayers) {
  ModelConfig dense = Paper(1024);
  dense.model = ModelKind::kDense;
  dense.layers = 7;
  EXPECT_DOUBLE_EQ(std::round(CountParams(dense).stored / 1e5) / 10, 122.7);
  dense.layers = 12;
  EXPECT_DOUBLE_EQ(std::round(CountParams(dense).stored / 1e5) / 10, 186.9);

  EXPECT_EQ(MatchDenseDepth(Paper(1024), MatchTarget::kStored).layers, 7);
  EXPECT_EQ(MatchDenseDepth(Paper(1024), MatchTarget::kEffective).layers, 12);
}

TEST(AccountingTest, RecomputeCountsTheAnchorEveryLoopAndUnsharedStoresEveryCore) {
  const ModelConfig base = Paper(512);
  const ParamCounts b = CountParams(base);
  ModelConfig recompute = base;
  recompute.kv = KvMode::kRecompute;
  const ParamCounts r = CountParams(recompute);
  EXPECT_EQ(r.stored, b.stored);
  EXPECT_EQ(r.effective, b.stored + 5 * (b.core_block + b.anchor));

  ModelConfig unshared = base;
  unshared.core = CoreSharing::kUnshared;
  const ParamCounts u = CountParams(unshared);
  EXPECT_EQ(u.stored, b.stored + 5 * b.core_block);
  EXPECT_EQ(u.effective, u.stored);
}

TEST(AccountingTest, SelfAttentionCoreHasNoAnchorAndAFullLowRankAttention) {
  ModelConfig self = Paper(256);
  self.core_attn = CoreAttn::kSelf;
  const ParamCounts s = CountParams(self);
  const ParamCounts b = CountParams(Paper(256));
  EXPECT_EQ(s.anchor, 0);
  EXPECT_EQ(s.core_block, b.core_block + b.anchor);  // kv_down, k_up, v_up move into the core
}

TEST(AccountingTest, TrainingFlopsAreThreeTimesForwardAndGrowWithLoops) {
  const ModelConfig m = Paper(512);
  const FlopCounts f6 = CountFlops(m, 1024);
  const FlopCounts f8 = CountFlops(m, 1024, 8);
  EXPECT_DOUBLE_EQ(f6.train_per_token, 3 * f6.forward_per_token);
  EXPECT_GT(f8.forward_per_token, f6.forward_per_token);
  // Matmul FLOPs are at least 2 × effective non-embedding params + the logit projection.
  const ParamCounts c = CountParams(m);
  EXPECT_GT(f6.forward_per_token, 2.0 * (c.effective - c.embedding));
}

TEST(AccountingTest, MemoryEstimateGrowsWithWidthBatchAndFp32) {
  const ModelConfig m = Paper(512);
  const MemoryKernels k = GpuWorkerKernels();
  const int64_t base = EstimateTrainingBytes(m, {1024, 8, 1, true}, k);
  EXPECT_GT(EstimateTrainingBytes(m, {1024, 16, 1, true}, k), base);
  EXPECT_GT(EstimateTrainingBytes(m, {1024, 8, 1, false}, k), base);
  EXPECT_GT(EstimateTrainingBytes(Paper(1024), {1024, 8, 1, true}, k), base);
  // At least the 16 bytes of weights, gradients and moments per stored parameter.
  EXPECT_GT(base, 16 * CountParams(m).stored);
}

// What the kernels keep (docs/model.md §5 "Training memory"): written-out attention keeps a
// T x T tensor per head, block and sequence that a fused kernel does not, so the gap grows with
// T^2; held gradients (accumulation) add 4 bytes a parameter at most.
TEST(AccountingTest, WrittenOutAttentionKeepsTheTxTTensorsAFusedKernelDoesNot) {
  const ModelConfig m = Paper(512);
  MemoryKernels fused;  // LibTorch 2.x on CUDA, merged
  MemoryKernels math = fused;
  math.libtorch_major = 1;
  const double blocks = m.P + 1 + m.R;
  for (int64_t T : {1024, 4096}) {
    const double probs = blocks * 2 * m.n_heads() * static_cast<double>(T * T) * 6;  // bf16
    const int64_t gap = EstimateTrainingBytes(m, {T, 2, 1, true}, math) -
                        EstimateTrainingBytes(m, {T, 2, 1, true}, fused);
    EXPECT_GT(static_cast<double>(gap), probs) << "T " << T;
    EXPECT_LT(static_cast<double>(gap), probs * 1.25) << "T " << T;
  }
  const int64_t one = EstimateTrainingBytes(m, {1024, 2, 1, true}, fused);
  const int64_t held = EstimateTrainingBytes(m, {1024, 2, 4, true}, fused);
  EXPECT_GT(held, one);
  EXPECT_LE(held - one, 4 * CountParams(m).stored);
  EXPECT_EQ(DescribeKernels(math), "LibTorch 1.x, CUDA, merged projections");
  // Where gradients outweigh activations (a small model, short sequences), holding them between
  // micro-batches costs more than the activations a smaller micro-batch saves: the least memory a
  // run trains in is then the whole global batch at once, never more than as configured (the
  // store refuses a run whose floor is above its estimate).
  RunConfig small;
  small.model.d = 64;
  for (const auto& [vocab, seq_len] : {std::pair{256, 32}, std::pair{32000, 8}}) {
    small.model.vocab = vocab;
    small.train.seq_len = seq_len;
    for (const auto& [batch, accum] : {std::pair{8, 1}, std::pair{2, 4}, std::pair{1, 8}}) {
      small.train.batch = batch;
      small.train.accum = accum;
      EXPECT_LE(MinTrainingBytes(small, fused), EstimateTrainingBytes(small, fused))
          << "vocab " << vocab << ", " << batch << " x " << accum;
    }
  }
  // vocab 32,000 at T 8, a global batch of 2: 4 bytes of gradient per parameter (8 MiB) outweigh
  // one sequence's activations (under 4 MiB).
  small.train.batch = 2;
  small.train.accum = 1;
  EXPECT_EQ(MinTrainingBytes(small, fused), EstimateTrainingBytes(small, fused));
  EXPECT_EQ(FitMicroBatch(small, EstimateTrainingBytes(small, fused), fused)->batch, 2);
  small.train.batch = 1;
  small.train.accum = 2;  // the same global batch, configured with accumulation
  EXPECT_EQ(FitMicroBatch(small, MinTrainingBytes(small, fused), fused, 2)->batch, 2);
  // Not allowed to raise, it still takes the whole batch when nothing smaller fits: placement
  // offered the worker the run by that floor.
  EXPECT_EQ(FitMicroBatch(small, MinTrainingBytes(small, fused), fused)->batch, 2);
  EXPECT_TRUE(UsesBf16(DType::kAuto, fused));
  MemoryKernels cpu = fused;
  cpu.cuda = false;
  EXPECT_FALSE(UsesBf16(DType::kAuto, cpu));
  EXPECT_TRUE(UsesBf16(DType::kBFloat16, cpu));
}

}  // namespace
// The card table: the longest matching name wins, both precisions' peaks, and MFU from them.
TEST(DevicesTest, CardPeaksAndMfu) {
  const std::optional<CardPeak> ti = PeakOf("NVIDIA GeForce RTX 3090 Ti");
  ASSERT_TRUE(ti.has_value());
  EXPECT_STREQ(ti->name, "RTX 3090 Ti");
  const std::optional<CardPeak> card = PeakOf("NVIDIA GeForce RTX 3090");
  ASSERT_TRUE(card.has_value());
  EXPECT_DOUBLE_EQ(card->bf16_tflops, 71.0);
  EXPECT_DOUBLE_EQ(card->fp32_tflops, 35.6);
  EXPECT_FALSE(PeakOf("cpu").has_value());
  // 1 GFLOP per token at 35,500 tokens/s on a 71 TFLOP/s card: 50 %.
  EXPECT_DOUBLE_EQ(Mfu(1e9, 35'500, 71.0), 0.5);
  EXPECT_EQ(Mfu(1e9, 0, 71.0), 0);
  EXPECT_EQ(Mfu(1e9, 35'500, 0), 0);
}

}  // namespace cart::config
