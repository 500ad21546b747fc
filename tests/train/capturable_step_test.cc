// The step a CUDA graph records (TrainOptions::capturable_step; train/cuda_graph.h), run without
// the graph on the CPU: inputs in fixed tensors, the learning rate and AdamW's counts on the
// device, ρ every step. Its losses agree with the usual step's to float rounding (the learning
// rate reaches the fused kernel as an fp32 tensor instead of a double), it is deterministic, and a
// run resumed from its checkpoint goes on exactly as one never stopped: the device's counts start
// from the checkpoint's. What only a GPU can check, the recording and its replay, is in
// tests/gpu/cuda_test.cc.

#include <torch/torch.h>

#include <string>
#include <vector>

#include "common/strings.h"
#include "gtest/gtest.h"
#include "tests/support/test_support.h"
#include "tests/train/train_fixtures.h"
#include "train/cuda_graph.h"
#include "train/device.h"
#include "train/optimizer.h"
#include "train/trainer.h"

namespace cart::train {
namespace {

using ::cart::testing::StatusIs;
using ::testing::HasSubstr;

class CapturableStepTest : public testing::TinyRunTest {
 protected:
  void SetUp() override {
    TinyRunTest::SetUp();
    config_.model.lti = true;  // ρ read from the fixed step's tensors
  }
};

// A graph needs a CUDA device: on the CPU the switch is refused, saying why, before training.
TEST_F(CapturableStepTest, ACudaGraphOnTheCpuIsRefusedSayingWhy) {
  TrainOptions o;
  o.out_dir = dir_.File("graph");
  o.device = "cpu";
  o.cuda_graph = true;
  const absl::StatusOr<TrainResult> r = Train(config_, o);
  EXPECT_THAT(r.status(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                   HasSubstr(HasFusedStepKernels() ? "CUDA" : "LibTorch 2.4")));
}

// Whether this LibTorch releases the memory of a graph recording that failed half-way is read
// from its header at compile time (train/cuda_graph.cc): 2.11's graph releases its pool only for
// a capture that ended, so Capture releases it then; 2.15's tracks the pool and releases it.
TEST(CudaGraphTest, KnowsWhetherLibTorchReleasesAFailedRecordingsMemory) {
  const bool releases = CudaGraph::LibTorchReleasesAbandonedPools();
  if (!BuiltWithCuda()) {
    EXPECT_FALSE(releases);
  } else if (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR <= 11) {
    EXPECT_FALSE(releases) << "LibTorch " << TORCH_VERSION;
  } else if (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 15) {
    EXPECT_TRUE(releases) << "LibTorch " << TORCH_VERSION;
  } else {
    GTEST_SKIP() << "LibTorch " << TORCH_VERSION << ": its graph's header has not been read";
  }
}

TEST_F(CapturableStepTest, LossesMatchTheUsualStepAndResumeIsExact) {
  if (!HasFusedStepKernels()) GTEST_SKIP() << "the capturable step needs LibTorch 2.4+";
  auto train = [&](const std::string& name, bool capturable, int64_t stop_after = 0) {
    TrainOptions o;
    o.out_dir = dir_.File(name);
    o.device = "cpu";
    o.capturable_step = capturable;
    o.stop_after = stop_after;
    CART_EXPECT_OK(Train(config_, o).status());
  };
  train("usual", false);
  train("capturable", true);
  train("again", true);
  train("resumed", true, /*stop_after=*/5);
  TrainOptions resume;
  resume.out_dir = dir_.File("resumed");
  resume.resume = true;
  resume.capturable_step = true;
  CART_ASSERT_OK(Train(config::RunConfig{}, resume).status());

  const std::vector<double> usual = testing::Losses(MetricsOf("usual"));
  const std::vector<double> capturable = testing::Losses(MetricsOf("capturable"));
  ASSERT_EQ(usual.size(), 12u);
  EXPECT_GT(usual.front() - usual.back(), 0.1) << "it learned";
  testing::ExpectLossesNear(capturable, usual, 1e-5, "capturable");
  EXPECT_EQ(testing::Losses(MetricsOf("again")), capturable) << "deterministic, to the bit";
  EXPECT_EQ(testing::Losses(MetricsOf("resumed")), capturable) << "resume is exact";
  // ρ and the per-loop norms are read from the fixed tensors on the logging steps.
  const std::vector<nlohmann::json> fixed = MetricsOf("capturable");
  const std::vector<nlohmann::json> eager = MetricsOf("usual");
  ASSERT_EQ(fixed.size(), eager.size());
  for (size_t i = 0; i < fixed.size(); ++i) {
    for (const char* key : {"rho_max", "rho_min", "grad_norm", "h_norm/1"}) {
      ASSERT_TRUE(fixed[i].contains(key)) << key;
      EXPECT_NEAR(fixed[i][key].get<double>(), eager[i][key].get<double>(),
                  1e-4 * std::abs(eager[i][key].get<double>()))
          << key << " at step " << i + 1;
    }
  }
}

}  // namespace
}  // namespace cart::train
