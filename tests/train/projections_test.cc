// Merged projections in a whole training run (model/layers.h MergesProjections, chosen by
// TrainOptions::merged_projections): the parameters are the same tensors either way, so a
// checkpoint written by a merged run resumes in a separate one and the other way round, and the
// losses agree with a run that never crossed to float rounding (the tolerance below).

#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/test_support.h"
#include "tests/train/train_fixtures.h"
#include "train/device.h"
#include "train/trainer.h"

namespace cart::train {
namespace {

class MergedProjectionsRunTest : public testing::TinyRunTest {
 protected:
  std::vector<double> LossesOf(const std::string& name) { return testing::Losses(MetricsOf(name)); }
};

const char* Label(bool merged) { return merged ? "merged" : "separate"; }

TEST_F(MergedProjectionsRunTest, TrainingAndResumeCrossBetweenMergedAndSeparateProjections) {
  for (bool merged : {false, true}) {
    TrainOptions o;
    o.out_dir = dir_.File(Label(merged));
    o.merged_projections = merged;
    std::vector<std::string> logs;
    o.on_log = [&logs](const std::string& s) { logs.push_back(s); };
    CART_ASSERT_OK(Train(config_, o).status());
    bool said = false;
    for (const std::string& l : logs) {
      said |= l == (merged ? "projections: merged (q with kv_down, k_up with v_up, gate with up)"
                           : "projections: one matmul each");
    }
    EXPECT_TRUE(said) << "the log says how the projections ran";
  }
  for (bool first : {false, true}) {
    const std::string name = std::string(Label(first)) + "-then-" + Label(!first);
    TrainOptions o;
    o.out_dir = dir_.File(name);
    o.merged_projections = first;
    o.stop_after = 4;
    CART_ASSERT_OK(Train(config_, o).status());
    TrainOptions resume;
    resume.out_dir = dir_.File(name);
    resume.resume = true;
    resume.merged_projections = !first;
    CART_ASSERT_OK(Train(config::RunConfig{}, resume).status());
  }
  const std::vector<double> reference = LossesOf("separate");
  ASSERT_EQ(reference.size(), 12u);
  EXPECT_GT(std::abs(reference.front() - reference.back()), 0.1) << "it learned";
  for (const std::string name : {"merged", "separate-then-merged", "merged-then-separate"}) {
    testing::ExpectLossesNear(LossesOf(name), reference, 1e-5, name);
  }
  // Up to the crossing, a run is the run it began as, to the bit.
  const std::vector<double> crossed = LossesOf("separate-then-merged");
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(crossed[i], reference[i]) << "step " << i + 1;
  const std::vector<double> merged = LossesOf("merged");
  const std::vector<double> crossed_back = LossesOf("merged-then-separate");
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(crossed_back[i], merged[i]) << "step " << i + 1;
}

TEST(MergedProjectionsDefaultTest, OnForCudaOffForTheCpu) {
  EXPECT_FALSE(DefaultMergedProjections(c10::Device(c10::kCPU)));
  EXPECT_TRUE(DefaultMergedProjections(c10::Device(c10::kCUDA, 0)));
}

// What a worker tells cartd of its kernels (the memory estimate's): this build's LibTorch, the
// device, the projections it trains with by default.
TEST(MergedProjectionsDefaultTest, AWorkerReportsThisBuildsKernels) {
  const config::MemoryKernels cpu = KernelsOn(c10::Device(c10::kCPU));
  EXPECT_EQ(cpu.libtorch_major, TORCH_VERSION_MAJOR);
  EXPECT_FALSE(cpu.cuda);
  EXPECT_FALSE(cpu.merged_projections);
  const config::MemoryKernels gpu = KernelsOn(c10::Device(c10::kCUDA, 0));
  EXPECT_TRUE(gpu.cuda);
  EXPECT_TRUE(gpu.merged_projections);
}

}  // namespace
}  // namespace cart::train
