// The training loop on real LibTorch CPU training over a synthetic Markov source.

#include "train/trainer.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <type_traits>

#include "common/process.h"
#include "common/strings.h"
#include "data/synth.h"
#include "gtest/gtest.h"
#include "model/language_model.h"
#include "tests/support/test_support.h"
#include "tests/train/train_fixtures.h"
#include "train/checkpoint.h"
#include "train/eval.h"

namespace cart::train {
namespace {

using ::cart::testing::StatusIs;
using ::cart::testing::TempDir;
using ::testing::HasSubstr;

using testing::Losses;
using testing::MakeData;
using testing::ReadMetrics;
using testing::TinyRun;

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    synth_ = MakeData(dir_);
    config_ = TinyRun();
    config_.data.train_data = dir_.File("synth.bin");
    config_.data.val_data["synth"] = synth_.val_path;
  }
  // Trains 8 of the run's 12 steps into run/ (checkpoints at 4 and 8), without evaluations.
  void TrainEightSteps() {
    config_.train.eval_every = 0;
    TrainOptions o;
    o.out_dir = dir_.File("run");
    o.stop_after = 8;
    CART_ASSERT_OK(Train(config_, o).status());
    ASSERT_EQ(ListCheckpoints(dir_.File("run/checkpoints")).back().step, 8);
  }
  // Resumes run/ to its end, its log lines into `logs`.
  absl::StatusOr<TrainResult> ResumeRun(std::vector<std::string>* logs) {
    TrainOptions resume;
    resume.out_dir = dir_.File("run");
    resume.resume = true;
    resume.on_log = [logs](const std::string& s) { logs->push_back(s); };
    return Train(config::RunConfig{}, resume);
  }
  TempDir dir_;
  data::SynthResult synth_;
  config::RunConfig config_;
};

// What cartd does for a small device (config::FitMicroBatch): a lower micro-batch with more
// accumulation, the same global batch. The optimisation must be the same, up to float summation.
TEST_F(TrainerTest, LowerMicroBatchWithMoreAccumulationTrainsTheSameModel) {
  std::vector<std::vector<double>> runs;
  std::vector<double> val;
  for (const auto& [batch, accum] :
       std::vector<std::pair<int64_t, int64_t>>{{4, 2}, {2, 4}, {1, 8}}) {
    config::RunConfig c = config_;
    c.train.batch = batch;
    c.train.accum = accum;
    TrainOptions o;
    o.out_dir = dir_.File(StrCat("run-", batch));
    CART_ASSERT_OK_AND_ASSIGN(TrainResult r, Train(c, o));
    ASSERT_TRUE(r.finished);
    auto metrics = ReadMetrics(o.out_dir + "/metrics.jsonl");
    runs.push_back(Losses(metrics));
    for (const auto& m : metrics) {
      if (m.contains("val_loss/synth")) val.push_back(m["val_loss/synth"].get<double>());
    }
  }
  ASSERT_EQ(runs[0].size(), 12u);
  for (size_t k = 1; k < runs.size(); ++k) {
    ASSERT_EQ(runs[k].size(), runs[0].size());
    for (size_t i = 0; i < runs[0].size(); ++i) {
      EXPECT_NEAR(runs[k][i], runs[0][i], 2e-4) << "split " << k << ", step " << i + 1;
    }
  }
  ASSERT_EQ(val.size(), 6u);  // two evals per run
  EXPECT_NEAR(val[3], val[1], 2e-4);
  EXPECT_NEAR(val[5], val[1], 2e-4);
}

TEST_F(TrainerTest, TrainsWritesMetricsConfigAndCheckpoints) {
  TrainOptions o;
  o.out_dir = dir_.File("run");
  std::vector<MetricRecord> seen;
  o.on_metrics = [&](const MetricRecord& r) { seen.push_back(r); };
  CART_ASSERT_OK_AND_ASSIGN(TrainResult r, Train(config_, o));
  EXPECT_TRUE(r.finished);
  EXPECT_EQ(r.steps_done, 12);
  auto metrics = ReadMetrics(dir_.File("run/metrics.jsonl"));
  std::vector<double> losses = Losses(metrics);
  ASSERT_EQ(losses.size(), 12u);
  EXPECT_LT(losses.back(), losses.front() - 0.3);  // it learns: ln 32 = 3.47 at the start
  EXPECT_NEAR(losses.front(), std::log(32.0), 0.3);
  EXPECT_EQ(seen.size(), metrics.size());
  const nlohmann::json& first = metrics.front();
  for (const char* key : {"lr", "grad_norm", "tokens_per_s", "rho_max", "rho_mean", "rho_min",
                          "h_norm/0", "rel_update/1", "rss_mib"}) {
    EXPECT_TRUE(first.contains(key)) << key;
  }
  // Eval records at steps 6 and 12 with perplexity and the entropy floor.
  int evals = 0;
  for (const auto& m : metrics) {
    if (m.contains("val_ppl/synth")) {
      ++evals;
      EXPECT_NEAR(m["val_ppl/synth"].get<double>(), std::exp(m["val_loss/synth"].get<double>()),
                  1e-9);
      EXPECT_DOUBLE_EQ(m["entropy_floor/synth"].get<double>(), *synth_.val.entropy_rate_nats);
    }
  }
  EXPECT_EQ(evals, 2);
  // keep_checkpoints = 2: steps 8 and 12 remain.
  auto ckpts = ListCheckpoints(dir_.File("run/checkpoints"));
  ASSERT_EQ(ckpts.size(), 2u);
  EXPECT_EQ(ckpts[0].step, 8);
  EXPECT_EQ(ckpts[1].step, 12);
  CART_ASSERT_OK_AND_ASSIGN(config::RunConfig back,
                            config::LoadRunConfigFile(dir_.File("run/config.yaml")));
  EXPECT_EQ(config::ToYaml(back), config::ToYaml(config_));
}

// ρ is a property of the weights: the value recorded at step N must be σ(a) of the weights the
// step-N checkpoint holds (after N optimizer steps), not of the weights the step's forward pass
// saw (after N − 1).
TEST_F(TrainerTest, RhoIsRecordedAfterTheOptimizerStep) {
  TrainOptions o;
  o.out_dir = dir_.File("run");
  CART_ASSERT_OK_AND_ASSIGN(TrainResult r, Train(config_, o));
  ASSERT_TRUE(r.finished);
  std::map<int64_t, double> rho_at;
  for (const auto& m : ReadMetrics(dir_.File("run/metrics.jsonl"))) {
    if (m.contains("rho_max")) rho_at[m["step"].get<int64_t>()] = m["rho_max"].get<double>();
  }
  auto ckpts = ListCheckpoints(dir_.File("run/checkpoints"));
  ASSERT_EQ(ckpts.size(), 2u);
  for (const CheckpointManifest& c : ckpts) {
    CART_ASSERT_OK_AND_ASSIGN(auto m, model::BuildModel(config_.model, config_.train.seed));
    ASSERT_TRUE(LoadCheckpoint(c, *m, nullptr).ok());
    ASSERT_TRUE(rho_at.count(c.step)) << c.step;
    EXPECT_DOUBLE_EQ(rho_at[c.step], m->Rho().rho_max) << "step " << c.step;
    // ...and the weights moved σ(a) in that step, so the pre-step value would differ.
    ASSERT_TRUE(rho_at.count(c.step - 1)) << c.step - 1;
    EXPECT_NE(rho_at[c.step - 1], rho_at[c.step]) << "step " << c.step;
  }
}

TEST_F(TrainerTest, ResumeIsBitIdenticalToAnUninterruptedRun) {
  config_.train.eval_every = 0;
  TrainOptions straight;
  straight.out_dir = dir_.File("straight");
  CART_ASSERT_OK(Train(config_, straight).status());

  TrainOptions first_half;
  first_half.out_dir = dir_.File("split");
  first_half.stop_after = 6;
  CART_ASSERT_OK_AND_ASSIGN(TrainResult half, Train(config_, first_half));
  EXPECT_FALSE(half.finished);
  EXPECT_EQ(half.steps_done, 6);
  TrainOptions second_half;
  second_half.out_dir = dir_.File("split");
  second_half.resume = true;
  CART_ASSERT_OK_AND_ASSIGN(TrainResult rest, Train(config::RunConfig{}, second_half));
  EXPECT_TRUE(rest.finished);

  std::vector<double> a = Losses(ReadMetrics(dir_.File("straight/metrics.jsonl")));
  std::vector<double> b = Losses(ReadMetrics(dir_.File("split/metrics.jsonl")));
  ASSERT_EQ(a.size(), 12u);
  ASSERT_EQ(b.size(), 12u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "step " << i + 1;  // bitwise
}

TEST_F(TrainerTest, ExtendContinuesTheCosineToTheNewTotal) {
  config_.train.eval_every = 0;
  TrainOptions o;
  o.out_dir = dir_.File("run");
  CART_ASSERT_OK(Train(config_, o).status());
  TrainOptions extend;
  extend.out_dir = dir_.File("run");
  extend.resume = true;
  extend.extend_to = 16;
  CART_ASSERT_OK_AND_ASSIGN(TrainResult r, Train(config::RunConfig{}, extend));
  EXPECT_EQ(r.steps_done, 16);
  auto metrics = ReadMetrics(dir_.File("run/metrics.jsonl"));
  EXPECT_EQ(Losses(metrics).size(), 16u);
  EXPECT_NEAR(metrics.back()["lr"].get<double>(), config_.train.lr_min, 1e-12);
}

// `cart runs extend --schedule hold`: past lr_decay_steps the rate stays at lr_min, and the steps
// before it train exactly as a run of that many steps.
TEST_F(TrainerTest, PastItsDecayHorizonTheRateHoldsAtTheFloor) {
  config_.train.eval_every = 0;
  config::RunConfig short_run = config_;
  short_run.train.steps = 8;
  TrainOptions a;
  a.out_dir = dir_.File("short");
  CART_ASSERT_OK(Train(short_run, a).status());
  config::RunConfig held = config_;
  held.train.lr_decay_steps = 8;
  TrainOptions b;
  b.out_dir = dir_.File("held");
  CART_ASSERT_OK(Train(held, b).status());
  auto first = ReadMetrics(dir_.File("short/metrics.jsonl"));
  auto second = ReadMetrics(dir_.File("held/metrics.jsonl"));
  ASSERT_EQ(first.size(), 8u);
  ASSERT_EQ(second.size(), 12u);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(first[i]["lr"], second[i]["lr"]) << "step " << i + 1;
    EXPECT_EQ(first[i]["loss"], second[i]["loss"]) << "step " << i + 1;
  }
  for (size_t i = 8; i < 12; ++i) EXPECT_EQ(second[i]["lr"].get<double>(), 3e-4) << i + 1;
}

// A non-finite loss stops training where it happened, is reported as a divergence (not an
// error), and leaves no checkpoint of the diverged weights.
TEST_F(TrainerTest, ANonFiniteLossStopsTrainingAndSaysWhere) {
  config_.train.eval_every = 0;
  TrainOptions o;
  o.out_dir = dir_.File("parent");
  o.stop_after = 4;
  CART_ASSERT_OK(Train(config_, o).status());
  const CheckpointManifest good = ListCheckpoints(dir_.File("parent/checkpoints")).back();
  // The parent's weights with one NaN in them: what a derived run would start from.
  CART_ASSERT_OK_AND_ASSIGN(auto net, model::BuildModel(config_.model, 1));
  CART_ASSERT_OK(LoadCheckpoint(good, *net, nullptr));
  {
    torch::NoGradGuard no_grad;
    net->parameters().front().view(-1)[0] = std::numeric_limits<float>::quiet_NaN();
  }
  torch::optim::AdamW optimizer(net->parameters());
  CART_ASSERT_OK_AND_ASSIGN(
      CheckpointManifest poisoned,
      WriteCheckpoint(dir_.File("poisoned"), CheckpointState{4, 0, good.config_yaml}, *net,
                      optimizer, 1));
  TrainOptions child;
  child.out_dir = dir_.File("child");
  child.init_from = poisoned.path;
  CART_ASSERT_OK_AND_ASSIGN(TrainResult r, Train(config_, child));
  ASSERT_TRUE(r.diverged.has_value());
  EXPECT_EQ(r.diverged->step, 1);
  EXPECT_TRUE(std::isnan(r.diverged->loss));
  EXPECT_FALSE(r.finished);
  EXPECT_EQ(r.steps_done, 1);
  EXPECT_EQ(DivergenceMessage(*r.diverged),
            "loss became nan at step 1 (diverged; lower lr or check the data)");
  EXPECT_TRUE(ListCheckpoints(dir_.File("child/checkpoints")).empty());
  auto metrics = ReadMetrics(dir_.File("child/metrics.jsonl"));
  ASSERT_EQ(metrics.size(), 1u);
  EXPECT_EQ(metrics[0]["loss_nonfinite"], 1);
}

// With a discard hook (the worker's), retention hands the old files over instead of deleting
// them, their manifests already gone, so the checkpoint list never shows them.
TEST_F(TrainerTest, RetentionHandsOldCheckpointFilesToTheDiscardHook) {
  config_.train.eval_every = 0;
  std::vector<std::string> discarded;
  TrainOptions o;
  o.out_dir = dir_.File("run");
  o.discard_checkpoint = [&](const std::string& path) { discarded.push_back(path); };
  CART_ASSERT_OK(Train(config_, o).status());
  // Checkpoints at 4, 8 and 12 with 2 kept: step 4's file is handed over, still on disk.
  ASSERT_EQ(discarded.size(), 1u);
  EXPECT_THAT(discarded[0], HasSubstr("step-00000004.pt"));
  EXPECT_TRUE(std::filesystem::exists(discarded[0]));
  const std::vector<CheckpointManifest> listed = ListCheckpoints(dir_.File("run/checkpoints"));
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed.front().step, 8);
}

TEST_F(TrainerTest, CorruptNewestCheckpointIsReportedAndSkipped) {
  ASSERT_NO_FATAL_FAILURE(TrainEightSteps());
  auto ckpts = ListCheckpoints(dir_.File("run/checkpoints"));
  {
    // Flip every bit of the middle byte: writing a fixed value would change nothing in the 1 of
    // 256 files whose byte there already has it (seen once in CI).
    std::fstream f(ckpts.back().path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(ckpts.back().bytes / 2);
    const char byte = static_cast<char>(f.get());
    f.seekp(ckpts.back().bytes / 2);
    f.put(static_cast<char>(~byte));
  }
  EXPECT_THAT(VerifyCheckpoint(ckpts.back()),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("corrupt")));
  std::filesystem::resize_file(ckpts.back().path, ckpts.back().bytes - 10);
  EXPECT_THAT(VerifyCheckpoint(ckpts.back()),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("truncated")));

  std::vector<std::string> logs;
  CART_ASSERT_OK_AND_ASSIGN(TrainResult r, ResumeRun(&logs));
  EXPECT_EQ(r.steps_done, 12);
  ASSERT_GE(logs.size(), 4u);
  EXPECT_THAT(logs[0], HasSubstr("device: cpu, fp32"));  // every run says where it trains first
  EXPECT_THAT(logs[1], HasSubstr("optimizer step: "));   // and how its optimizer steps
  EXPECT_THAT(logs[2], HasSubstr("projections: one matmul each"));  // separate on the CPU
  EXPECT_THAT(logs[3], HasSubstr("checkpoint skipped"));
  EXPECT_THAT(StrJoin(logs, "\n"), HasSubstr("resumed from"));
  EXPECT_THAT(StrJoin(logs, "\n"), HasSubstr("step-00000004"));
}

// Checkpoints carry CRC-32C now; a manifest written before it carries zlib's CRC-32 under
// "crc32", and its checkpoint still verifies and resumes.
TEST_F(TrainerTest, AnOlderManifestsCrc32StillVerifiesAndResumes) {
  ASSERT_NO_FATAL_FAILURE(TrainEightSteps());
  auto ckpts = ListCheckpoints(dir_.File("run/checkpoints"));
  EXPECT_TRUE(ckpts.back().crc32c);
  const std::string json_path = dir_.File("run/checkpoints/step-00000008.json");
  nlohmann::json j = nlohmann::json::parse(cart::testing::ReadFile(json_path));
  ASSERT_TRUE(j.contains("crc32c"));
  const std::string bytes = cart::testing::ReadFile(ckpts.back().path);
  const uint32_t zlib_crc = static_cast<uint32_t>(
      crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
  ASSERT_NE(zlib_crc, j["crc32c"].get<uint32_t>());  // two different checksums
  j.erase("crc32c");
  j["crc32"] = zlib_crc;
  cart::testing::WriteFile(json_path, j.dump(2));
  ckpts = ListCheckpoints(dir_.File("run/checkpoints"));
  EXPECT_FALSE(ckpts.back().crc32c);
  CART_EXPECT_OK(VerifyCheckpoint(ckpts.back()));
  j["crc32"] = zlib_crc ^ 1u;  // and a wrong one is caught under its own name
  cart::testing::WriteFile(json_path, j.dump(2));
  EXPECT_THAT(VerifyCheckpoint(ListCheckpoints(dir_.File("run/checkpoints")).back()),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("CRC-32 does not match")));
  j["crc32"] = zlib_crc;
  cart::testing::WriteFile(json_path, j.dump(2));

  std::vector<std::string> logs;
  CART_ASSERT_OK_AND_ASSIGN(TrainResult r, ResumeRun(&logs));
  EXPECT_EQ(r.steps_done, 12);
  EXPECT_THAT(StrJoin(logs, "\n"), HasSubstr("step-00000008"));
}

// Background checkpoints (the worker's): the loop serializes into memory and a thread writes.
// The same run trained both ways leaves checkpoints of the same weights, and the same metrics;
// each checkpoint is announced once, in step order, on the training thread, after its manifest
// is on disk; retention and the discard hook work as before; the run resumes from them.
TEST_F(TrainerTest, BackgroundCheckpointsAreTheSameFilesAnnouncedInOrderOnTheTrainingThread) {
  config_.train.eval_every = 0;
  TrainOptions inline_write;
  inline_write.out_dir = dir_.File("inline");
  CART_ASSERT_OK(Train(config_, inline_write).status());

  const std::thread::id loop = std::this_thread::get_id();
  std::vector<int64_t> announced;
  std::vector<std::string> discarded, logs;
  bool on_loop = true, manifest_there = true;
  TrainOptions bg;
  bg.out_dir = dir_.File("bg");
  bg.background_checkpoints = true;
  bg.on_checkpoint = [&](const CheckpointManifest& m) {
    announced.push_back(m.step);
    on_loop = on_loop && std::this_thread::get_id() == loop;
    manifest_there = manifest_there && std::filesystem::exists(m.path) && VerifyCheckpoint(m).ok();
  };
  // The writing thread calls discard_checkpoint: it runs at the background niceness, the
  // training thread as it was.
  const int loop_niceness = ThisThreadsNiceness();
  int writer_niceness = -100;
  bg.discard_checkpoint = [&](const std::string& path) {
    discarded.push_back(path);
    writer_niceness = ThisThreadsNiceness();
  };
  bg.on_log = [&](const std::string& line) { logs.push_back(line); };
  CART_ASSERT_OK_AND_ASSIGN(TrainResult r, Train(config_, bg));
  EXPECT_EQ(writer_niceness, std::max(loop_niceness, bg.background_niceness));
  EXPECT_EQ(bg.background_niceness, 10);
  EXPECT_EQ(ThisThreadsNiceness(), loop_niceness);
  EXPECT_TRUE(r.finished);
  EXPECT_EQ(announced, (std::vector<int64_t>{4, 8, 12}));
  EXPECT_TRUE(on_loop);
  EXPECT_TRUE(manifest_there);
  EXPECT_THAT(r.last_checkpoint, HasSubstr("step-00000012.pt"));
  ASSERT_EQ(discarded.size(), 1u);
  EXPECT_THAT(discarded[0], HasSubstr("step-00000004.pt"));
  EXPECT_THAT(StrJoin(logs, "\n"),
              HasSubstr("copied in"));  // what the loop waited for, said apart

  const std::vector<CheckpointManifest> a = ListCheckpoints(dir_.File("inline/checkpoints"));
  const std::vector<CheckpointManifest> b = ListCheckpoints(dir_.File("bg/checkpoints"));
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  // Not byte for byte: LibTorch writes the optimizer's state in the order of a hash map keyed by
  // tensor addresses, which differ between two models in one process. The weights are compared.
  auto weights = [&](const CheckpointManifest& m) {
    auto model = model::BuildModel(config_.model, 1).value();
    EXPECT_TRUE(LoadCheckpoint(m, *model, nullptr).ok());
    return model->parameters();
  };
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].step, b[i].step);
    EXPECT_EQ(a[i].cursor, b[i].cursor);
    const std::vector<torch::Tensor> wa = weights(a[i]), wb = weights(b[i]);
    ASSERT_EQ(wa.size(), wb.size());
    for (size_t k = 0; k < wa.size(); ++k) {
      EXPECT_TRUE(torch::equal(wa[k], wb[k])) << "step " << a[i].step << ", tensor " << k;
    }
  }
  EXPECT_EQ(Losses(ReadMetrics(dir_.File("inline/metrics.jsonl"))),
            Losses(ReadMetrics(dir_.File("bg/metrics.jsonl"))));

  // Stopped at step 6 with background writes, then resumed the same way: bit for bit the run.
  TrainOptions half;
  half.out_dir = dir_.File("split");
  half.background_checkpoints = true;
  half.stop_after = 6;
  CART_ASSERT_OK(Train(config_, half).status());
  EXPECT_EQ(ListCheckpoints(dir_.File("split/checkpoints")).back().step, 6);
  TrainOptions rest = half;
  rest.stop_after = 0;
  rest.resume = true;
  CART_ASSERT_OK(Train(config::RunConfig{}, rest).status());
  EXPECT_EQ(Losses(ReadMetrics(dir_.File("inline/metrics.jsonl"))),
            Losses(ReadMetrics(dir_.File("split/metrics.jsonl"))));
}

// A killed write leaves AtomicFileWriter's temporary file, as large as a checkpoint; a resume
// removes it (and says so) instead of letting them pile up attempt after attempt.
TEST_F(TrainerTest, AResumeRemovesTheTemporaryFileOfAnInterruptedWrite) {
  ASSERT_NO_FATAL_FAILURE(TrainEightSteps());
  const std::string left = dir_.File("run/checkpoints/step-00000012.pt.tmp-4242-0");
  cart::testing::WriteFile(left, std::string(4096, 'x'));
  std::vector<std::string> logs;
  CART_ASSERT_OK_AND_ASSIGN(TrainResult r, ResumeRun(&logs));
  EXPECT_EQ(r.steps_done, 12);
  EXPECT_FALSE(std::filesystem::exists(left));
  EXPECT_THAT(StrJoin(logs, "\n"), HasSubstr("removed step-00000012.pt.tmp-4242-0 from "));
  EXPECT_THAT(StrJoin(logs, "\n"), HasSubstr("a write that was interrupted"));
}

// What an AdamW optimizer holds, in group order: each group's learning rate and weight decay,
// each parameter's step and moments (as one list of tensors; a step as a one-element tensor).
std::vector<torch::Tensor> OptimizerContents(torch::optim::AdamW& optimizer) {
  std::vector<torch::Tensor> out;
  for (auto& group : optimizer.param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    out.push_back(torch::tensor({o.lr(), o.weight_decay()}, torch::kFloat64));
    for (const torch::Tensor& p : group.params()) {
      // The state's key: the TensorImpl's address, as text before LibTorch 2.x.
      auto it = std::find_if(optimizer.state().begin(), optimizer.state().end(), [&](auto& kv) {
        if constexpr (std::is_same_v<std::decay_t<decltype(kv.first)>, std::string>) {
          std::ostringstream text;
          text << static_cast<const void*>(p.unsafeGetTensorImpl());
          return kv.first == text.str();
        } else {
          return kv.first == p.unsafeGetTensorImpl();
        }
      });
      if (it == optimizer.state().end()) {
        out.push_back(torch::tensor(-1, torch::kInt64));
        continue;
      }
      const auto& s = static_cast<const torch::optim::AdamWParamState&>(*it->second);
      out.push_back(torch::tensor(s.step(), torch::kInt64));
      out.push_back(s.exp_avg());
      out.push_back(s.exp_avg_sq());
    }
  }
  return out;
}

// Two groups as the trainer makes them (matrices decayed, the rest not).
std::unique_ptr<torch::optim::AdamW> TwoGroupAdamW(torch::nn::Module& model, double lr) {
  std::vector<torch::Tensor> decay, rest;
  for (const torch::Tensor& p : model.parameters()) (p.dim() >= 2 ? decay : rest).push_back(p);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(
                                 torch::optim::AdamWOptions(lr).weight_decay(0.1)));
  groups.emplace_back(rest, std::make_unique<torch::optim::AdamWOptions>(
                                torch::optim::AdamWOptions(lr).weight_decay(0.0)));
  return std::make_unique<torch::optim::AdamW>(std::move(groups), torch::optim::AdamWOptions(lr));
}

void StepWithGradients(torch::nn::Module& model, torch::optim::AdamW& optimizer, double g) {
  for (auto& p : model.parameters()) p.mutable_grad() = torch::full_like(p, g);
  optimizer.step();
}

// A snapshot taken on the training thread, written later while training went on, restores what
// the model and optimizer held when it was taken: the weights, each group's options (the
// learning rate of that step), each parameter's step and moments and the RNG state, as a
// checkpoint written at that moment does; a second snapshot reuses the first's memory; a model
// of another structure is refused.
TEST(CheckpointSnapshotTest, WrittenLaterItRestoresWhatWasThereWhenTaken) {
  TempDir dir;
  const config::ModelConfig mc = TinyRun().model;
  auto model = model::BuildModel(mc, 7).value();
  auto optimizer = TwoGroupAdamW(*model, 1e-3);
  StepWithGradients(*model, *optimizer, 0.5);
  CheckpointSnapshot snapshot(model::BuildModel(mc, 99).value());  // other values, overwritten
  CART_ASSERT_OK(snapshot.Take(*model, *optimizer));
  CheckpointState state{5, 17, "d: 64\n"};
  CheckpointWriteOptions w;
  w.durable = false;
  CART_ASSERT_OK_AND_ASSIGN(CheckpointManifest now,
                            WriteCheckpoint(dir.File("now"), state, *model, *optimizer, 2, w));
  const torch::Tensor rng_then = at::detail::getDefaultCPUGenerator().get_state();
  const void* first_copy = snapshot.model().parameters()[0].data_ptr();

  // Training goes on: other weights, moments, steps and learning rate, and the RNG moves.
  static_cast<torch::optim::AdamWOptions&>(optimizer->param_groups()[0].options()).lr(5e-4);
  StepWithGradients(*model, *optimizer, -2.0);
  torch::rand({16});
  state.rng_cpu = snapshot.rng();
  CART_ASSERT_OK_AND_ASSIGN(
      CheckpointManifest later,
      WriteCheckpoint(dir.File("later"), state, snapshot.model(), snapshot.optimizer(), 2, w));
  EXPECT_EQ(later.step, 5);
  EXPECT_EQ(later.cursor, 17);
  CART_EXPECT_OK(VerifyCheckpoint(later));

  auto restore = [&](const CheckpointManifest& m, std::vector<torch::Tensor>* weights,
                     std::vector<torch::Tensor>* moments, torch::Tensor* rng) {
    auto fresh = model::BuildModel(mc, 3).value();
    auto fresh_optimizer = TwoGroupAdamW(*fresh, 1.0);
    ASSERT_TRUE(LoadCheckpoint(m, *fresh, fresh_optimizer.get()).ok());
    *weights = fresh->parameters();
    *moments = OptimizerContents(*fresh_optimizer);
    *rng = at::detail::getDefaultCPUGenerator().get_state();
  };
  std::vector<torch::Tensor> wa, ma, wb, mb;
  torch::Tensor ra, rb;
  ASSERT_NO_FATAL_FAILURE(restore(now, &wa, &ma, &ra));
  ASSERT_NO_FATAL_FAILURE(restore(later, &wb, &mb, &rb));
  ASSERT_EQ(wa.size(), wb.size());
  for (size_t k = 0; k < wa.size(); ++k) EXPECT_TRUE(torch::equal(wa[k], wb[k])) << "weight " << k;
  ASSERT_EQ(ma.size(), mb.size());
  for (size_t k = 0; k < ma.size(); ++k) EXPECT_TRUE(torch::equal(ma[k], mb[k])) << "entry " << k;
  // The copy's options are the step's it was taken at (a loaded optimizer keeps its own).
  EXPECT_EQ(static_cast<const torch::optim::AdamWOptions&>(
                snapshot.optimizer().param_groups()[0].options())
                .lr(),
            1e-3);
  EXPECT_TRUE(torch::equal(ra, rng_then));
  EXPECT_TRUE(torch::equal(rb, rng_then));
  // And not what the model holds now.
  EXPECT_FALSE(torch::equal(wb[0], model->parameters()[0]));

  // A second snapshot copies into the same memory and holds the new values.
  CART_ASSERT_OK(snapshot.Take(*model, *optimizer));
  EXPECT_EQ(snapshot.model().parameters()[0].data_ptr(), first_copy);
  EXPECT_TRUE(torch::equal(snapshot.model().parameters()[0], model->parameters()[0]));
  const std::vector<torch::Tensor> mine = OptimizerContents(snapshot.optimizer()),
                                   theirs = OptimizerContents(*optimizer);
  ASSERT_EQ(mine.size(), theirs.size());
  for (size_t k = 0; k < mine.size(); ++k) EXPECT_TRUE(torch::equal(mine[k], theirs[k])) << k;

  config::ModelConfig narrow = mc;  // wider
  narrow.d = 128;
  auto other = model::BuildModel(narrow, 7).value();
  auto other_optimizer = TwoGroupAdamW(*other, 1e-3);
  EXPECT_THAT(snapshot.Take(*other, *other_optimizer),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("differs")));
}

TEST_F(TrainerTest, StopFlagCheckpointsAndReturnsEarly) {
  std::atomic<bool> stop{false};
  TrainOptions o;
  o.out_dir = dir_.File("run");
  o.stop = &stop;
  o.on_metrics = [&](const MetricRecord& r) {
    if (r.step == 3) stop = true;
  };
  CART_ASSERT_OK_AND_ASSIGN(TrainResult r, Train(config_, o));
  EXPECT_FALSE(r.finished);
  EXPECT_EQ(r.steps_done, 3);
  EXPECT_EQ(ListCheckpoints(dir_.File("run/checkpoints")).back().step, 3);
}

TEST_F(TrainerTest, BadInputsGetClearErrors) {
  TrainOptions o;
  o.out_dir = dir_.File("run");
  config::RunConfig c = config_;
  c.data.train_data = dir_.File("nope.bin");
  EXPECT_THAT(Train(c, o), StatusIs(absl::StatusCode::kNotFound, HasSubstr("nope")));
  c = config_;
  c.model.vocab = 16;
  EXPECT_THAT(Train(c, o), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("vocab")));
  TrainOptions resume;
  resume.out_dir = dir_.File("empty");
  resume.resume = true;
  EXPECT_THAT(Train(config_, resume),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("config.yaml")));
}

// The paper's leak (docs/model.md §7): with non-causal cross-attention the core reads the next
// token from the anchor, the validation loss falls below the entropy rate of the data — which no
// causal model can do — and the trainer raises leak_suspected. The causal model stays above.
TEST(LeakGuardTest, NonCausalModelFallsBelowTheEntropyFloorAndIsFlagged) {
  TempDir dir;
  data::SynthResult d = MakeData(dir, 200'000);
  config::RunConfig c = TinyRun();
  c.data.train_data = dir.File("synth.bin");
  c.data.val_data["synth"] = d.val_path;
  // Short windows, a large batch and a high LR: the recipe that shows the leak within seconds on
  // CPU (measured: val loss 0.93 vs floor 1.07 after 200 steps).
  c.train.steps = 300;
  c.train.seq_len = 16;
  c.train.batch = 16;
  c.train.accum = 1;
  c.train.lr = 1e-2;
  c.train.lr_min = 1e-3;
  c.train.warmup = 10;
  c.train.log_every = 50;
  c.train.eval_every = 100;
  c.train.checkpoint_every = 0;
  c.train.eval_sequences = 64;
  TrainOptions o;
  o.out_dir = dir.File("causal");
  CART_ASSERT_OK_AND_ASSIGN(TrainResult causal, Train(c, o));
  EXPECT_FALSE(causal.leak_suspected);
  c.model.cross_causal = false;
  o.out_dir = dir.File("leaky");
  CART_ASSERT_OK_AND_ASSIGN(TrainResult leaky, Train(c, o));
  EXPECT_TRUE(leaky.leak_suspected);
  const double floor = *d.val.entropy_rate_nats;
  double causal_val = 0, leaky_val = 0;
  for (const auto& m : ReadMetrics(dir.File("causal/metrics.jsonl"))) {
    if (m.contains("val_loss/synth")) causal_val = m["val_loss/synth"].get<double>();
  }
  for (const auto& m : ReadMetrics(dir.File("leaky/metrics.jsonl"))) {
    if (m.contains("val_loss/synth")) leaky_val = m["val_loss/synth"].get<double>();
  }
  std::printf("entropy floor %.4f, causal val loss %.4f, leaky val loss %.4f\n", floor, causal_val,
              leaky_val);
  EXPECT_GT(causal_val, floor - 0.05);
  EXPECT_LT(leaky_val, floor - 0.1);
}

}  // namespace
}  // namespace cart::train
