// The CUDA paths, on a machine with a CUDA device and a CUDA LibTorch: the same model gives the
// same logits on the GPU as on the CPU, bf16 autocast training runs and learns, a GPU checkpoint
// loads on the CPU, zero-shot scoring agrees across devices, and training resumes exactly on the
// GPU from its own checkpoint. Every test skips, saying why, where LibTorch sees no CUDA device.

#include <torch/cuda.h>
#include <torch/torch.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "data/synth.h"
#include "gtest/gtest.h"
#include "model/language_model.h"
#include "model/layers.h"
#include "tests/support/test_support.h"
#include "train/checkpoint.h"
#include "train/trainer.h"
#include "train/zero_shot.h"

namespace cart::train {
namespace {

using ::cart::testing::TempDir;

#define SKIP_WITHOUT_CUDA()                                          \
  if (!torch::cuda::is_available()) {                                \
    GTEST_SKIP() << "no CUDA device: LibTorch " << TORCH_VERSION     \
                 << " reports torch::cuda::is_available() == false"; \
  }

config::ModelConfig SmallCart() {
  config::ModelConfig c;
  c.vocab = 64;
  c.d = 128;
  c.P = 2;
  c.R = 3;
  return c;
}

TEST(CudaTest, CartLogitsOnTheGpuMatchTheCpuInFp32) {
  SKIP_WITHOUT_CUDA();
  auto cpu = model::BuildModel(SmallCart(), 11);
  auto gpu = model::BuildModel(SmallCart(), 11);
  ASSERT_TRUE(cpu.ok() && gpu.ok());
  (*gpu)->to(torch::kCUDA);
  torch::NoGradGuard no_grad;
  (*cpu)->eval();
  (*gpu)->eval();
  torch::Tensor ids = torch::randint(0, 64, {2, 48}, torch::kInt64);
  torch::Tensor a = (*cpu)->Forward(ids);
  torch::Tensor b = (*gpu)->Forward(ids.to(torch::kCUDA)).to(torch::kCPU);
  // TF32 may be on for matmuls on Ampere and later: allow its 10-bit mantissa.
  EXPECT_LT((a - b).abs().max().item<double>(), 2e-2);
  EXPECT_TRUE(b.isfinite().all().item<bool>());
}

// Merged projections (model/layers.h), on by default on CUDA, against separate ones on the same
// card, forward and backward; and RMSNorm, which takes LibTorch's fused kernel on CUDA where it
// exists, against the CPU's written-out one.
TEST(CudaTest, MergedProjectionsAndTheFusedRmsNormMatchTheirReferences) {
  SKIP_WITHOUT_CUDA();
  auto built = model::BuildModel(SmallCart(), 12);
  ASSERT_TRUE(built.ok());
  std::shared_ptr<model::LanguageModel> m = *built;
  m->to(torch::kCUDA);
  const torch::Tensor ids = torch::randint(0, 64, {2, 48}, torch::kInt64).to(torch::kCUDA);
  auto pass = [&](bool merged) {
    model::SetMergedProjections(*m, merged);
    m->zero_grad();
    torch::Tensor logits = m->Forward(ids);
    logits.pow(2).mean().backward();
    std::vector<torch::Tensor> grads;
    for (const auto& p : m->parameters()) grads.push_back(p.grad().to(torch::kCPU));
    return std::pair{logits.to(torch::kCPU), grads};
  };
  const auto [separate, separate_grads] = pass(false);
  const auto [merged, merged_grads] = pass(true);
  EXPECT_LT((merged - separate).abs().max().item<double>(), 2e-2);  // TF32, as above
  for (size_t i = 0; i < merged_grads.size(); ++i) {
    const double scale = separate_grads[i].abs().max().item<double>();
    EXPECT_LE((merged_grads[i] - separate_grads[i]).abs().max().item<double>(),
              2e-2 * std::max(scale, 1e-6))
        << "gradient " << i;
  }
  model::RMSNorm norm(128);
  {
    torch::NoGradGuard no_grad;
    norm->weight.uniform_(0.5, 1.5);
  }
  const torch::Tensor x = torch::randn({4, 16, 128});
  const torch::Tensor on_cpu = norm(x);
  norm->to(torch::kCUDA);
  const torch::Tensor on_gpu = norm(x.to(torch::kCUDA)).to(torch::kCPU);
  EXPECT_LT((on_gpu - on_cpu).abs().max().item<double>(), 1e-5);
}

class CudaTrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    data::SynthOptions o;
    o.chain.vocab = 64;
    o.chain.order = 1;
    o.chain.seed = 5;
    o.tokens = 400'000;
    o.val_tokens = 16'384;
    o.out = dir_.File("synth.bin");
    auto r = data::WriteSynthetic(o);
    ASSERT_TRUE(r.ok()) << r.status();
    entropy_ = r->train.entropy_rate_nats.value_or(0);
    config_.model = SmallCart();
    config_.train.steps = 120;
    config_.train.seq_len = 128;
    config_.train.batch = 16;
    config_.train.accum = 1;
    config_.train.lr = 3e-3;
    config_.train.lr_min = 3e-4;
    config_.train.warmup = 10;
    config_.train.log_every = 10;
    config_.train.eval_every = 60;
    config_.train.checkpoint_every = 60;
    config_.train.eval_sequences = 16;
    config_.data.train_data = dir_.File("synth.bin");
    config_.data.val_data["synth"] = dir_.File("synth.val.bin");
  }

  std::vector<double> Losses(const std::string& run) {
    std::vector<double> out;
    std::ifstream in(run + "/metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line);
      if (j.contains("loss")) out.push_back(j["loss"].get<double>());
    }
    return out;
  }

  TempDir dir_;
  config::RunConfig config_;
  double entropy_ = 0;
};

TEST_F(CudaTrainTest, Bf16AutocastTrainingLearnsAndItsCheckpointLoadsOnTheCpu) {
  SKIP_WITHOUT_CUDA();
  TrainOptions options;
  options.out_dir = dir_.File("run");
  options.device = "cuda:0";
  auto result = Train(config_, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->finished);
  EXPECT_FALSE(result->leak_suspected);
  std::vector<double> losses = Losses(options.out_dir);
  ASSERT_GE(losses.size(), 10u);
  EXPECT_LT(losses.back(), losses.front() - 0.5) << "bf16 training did not learn";
  EXPECT_GT(losses.back(), entropy_ - 0.05) << "below the entropy floor: a leak";

  // The checkpoint written from the GPU loads on the CPU and scores like the GPU model.
  auto manifest = LatestValidCheckpoint(options.out_dir + "/checkpoints", nullptr);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  auto cpu = model::BuildModel(config_.model, 0);
  auto gpu = model::BuildModel(config_.model, 0);
  ASSERT_TRUE(cpu.ok() && gpu.ok());
  ASSERT_TRUE(LoadCheckpoint(*manifest, **cpu, nullptr).ok());
  for (const torch::Tensor& p : (*cpu)->parameters()) {
    ASSERT_TRUE(p.device().is_cpu()) << "loading moved the CPU model to " << p.device();
  }
  (*gpu)->to(torch::kCUDA);
  ASSERT_TRUE(LoadCheckpoint(*manifest, **gpu, nullptr).ok());
  for (const torch::Tensor& p : (*gpu)->parameters()) ASSERT_TRUE(p.device().is_cuda());
  std::vector<ContinuationRequest> requests = {{{1, 2, 3, 4}, {5, 6}}, {{9, 9, 9}, {10}}};
  auto a = ScoreContinuations(**cpu, requests, {});
  auto b = ScoreContinuations(**gpu, requests, {});
  ASSERT_TRUE(a.ok() && b.ok());
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_NEAR((*a)[i].logprob, (*b)[i].logprob, 2e-2) << "request " << i;
  }
}

TEST_F(CudaTrainTest, ResumeOnTheGpuContinuesFromItsCheckpoint) {
  SKIP_WITHOUT_CUDA();
  TrainOptions straight;
  straight.out_dir = dir_.File("straight");
  straight.device = "cuda:0";
  ASSERT_TRUE(Train(config_, straight).ok());
  TrainOptions first = straight;
  first.out_dir = dir_.File("split");
  first.stop_after = 60;
  auto part = Train(config_, first);
  ASSERT_TRUE(part.ok()) << part.status();
  EXPECT_EQ(part->steps_done, 60);
  TrainOptions second = first;
  second.stop_after = 0;
  second.resume = true;
  auto rest = Train(config_, second);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(rest->steps_done, 120);
  std::vector<double> a = Losses(straight.out_dir), b = Losses(first.out_dir);
  ASSERT_EQ(a.size(), b.size());
  // CUDA kernels (atomics in backward) are not bit-reproducible; the resumed run must still
  // follow the straight one closely, which a restart from scratch or a lost optimizer would not.
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 0.05) << "log line " << i;
}

// A step recorded as a CUDA graph (TrainOptions::cuda_graph) trains as the same step run without
// the graph: the replays run the kernels the eager capturable steps ran, so the losses follow the
// capturable run closely (atomics in backward make CUDA runs differ in the last bits), the log
// says the step was recorded, and a run resumed from a graph run's checkpoint records it again.
TEST_F(CudaTrainTest, AStepRecordedAsACudaGraphTrainsAsTheStepWithout) {
  SKIP_WITHOUT_CUDA();
  config_.train.eval_every = 0;
  TrainOptions plain;
  plain.out_dir = dir_.File("capturable");
  plain.device = "cuda:0";
  plain.capturable_step = true;
  ASSERT_TRUE(Train(config_, plain).ok());
  TrainOptions graph = plain;
  graph.out_dir = dir_.File("graph");
  graph.capturable_step = false;
  graph.cuda_graph = true;
  graph.stop_after = 60;
  std::vector<std::string> logs;
  graph.on_log = [&logs](const std::string& s) { logs.push_back(s); };
  auto first = Train(config_, graph);
  ASSERT_TRUE(first.ok()) << first.status();
  graph.stop_after = 0;
  graph.resume = true;
  auto rest = Train(config_, graph);
  ASSERT_TRUE(rest.ok()) << rest.status();
  int recorded = 0;
  for (const std::string& l : logs) recorded += l.find("step recorded as a CUDA graph") == 0;
  EXPECT_EQ(recorded, 2) << "once per attempt";
  std::vector<double> a = Losses(plain.out_dir), b = Losses(graph.out_dir);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 0.05) << "log line " << i;
}

// A background checkpoint (the worker's) copies from the GPU on a side stream into page-locked
// memory while training goes on (train::HostCopies): the snapshot must hold the weights and
// moments of the step it was taken at, to the bit, even though the weights are changed in place
// right behind it. The model is wide (d 1024, ~450 MB of weights and moments to copy, some
// milliseconds over PCIe) so that the in-place change, queued at once on the training stream,
// would overtake the copies if BeforeUpdate did not make that stream wait for them.
TEST(CudaTest, ASnapshotFromTheGpuHoldsItsStepsValuesWhileTheNextStepRuns) {
  SKIP_WITHOUT_CUDA();
  config::ModelConfig wide = SmallCart();
  wide.d = 1024;
  auto built = model::BuildModel(wide, 13);
  auto copy = model::BuildModel(wide, 14);
  ASSERT_TRUE(built.ok() && copy.ok());
  std::shared_ptr<model::LanguageModel> m = *built;
  m->to(torch::kCUDA);
  torch::optim::AdamW optimizer(m->parameters(), torch::optim::AdamWOptions(1e-2));
  const torch::Tensor ids = torch::randint(0, 64, {4, 64}, torch::kInt64).to(torch::kCUDA);
  auto step = [&] {
    optimizer.zero_grad();
    m->Forward(ids).pow(2).mean().backward();
    optimizer.step();
  };
  step();
  std::vector<torch::Tensor> at_snapshot;
  for (const auto& p : m->parameters()) at_snapshot.push_back(p.detach().to(torch::kCPU));
  CheckpointSnapshot snapshot(*copy);
  ASSERT_TRUE(snapshot.Take(*m, optimizer).ok());
  snapshot.BeforeUpdate();
  {  // changes every weight the copies read, at once, on the training stream
    torch::NoGradGuard no_grad;
    for (torch::Tensor& p : m->parameters()) p.add_(1.0);
  }
  step();
  snapshot.WaitForCopies();
  const std::vector<torch::Tensor> copied = snapshot.model().parameters();
  ASSERT_EQ(copied.size(), at_snapshot.size());
  bool moved = false;
  for (size_t i = 0; i < copied.size(); ++i) {
    EXPECT_TRUE(copied[i].is_pinned()) << "parameter " << i;
    EXPECT_TRUE(torch::equal(copied[i], at_snapshot[i])) << "parameter " << i;
    moved |= !torch::equal(m->parameters()[i].detach().to(torch::kCPU), at_snapshot[i]);
  }
  EXPECT_TRUE(moved) << "the second step changed the weights";
}

}  // namespace
}  // namespace cart::train
