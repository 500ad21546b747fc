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

// On a GPU the breakdown charges each kernel by its name (GpuStepProfiler). Names as LibTorch 2.x
// and cuBLAS give them: a fused attention kernel mentions CUTLASS in its template arguments and
// still counts as attention; the loss's softmax is not attention.
TEST(KindOfKernelTest, KernelsAreChargedByTheirNames) {
  const std::pair<const char*, WorkKind> cases[] = {
      {"ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn", WorkKind::kMatmul},
      {"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_"
       "segment_k_off_kernel__5x_cublas",
       WorkKind::kMatmul},
      {"nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NNT", WorkKind::kMatmul},
      {"cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8", WorkKind::kMatmul},
      {"void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, "
       "false, cutlass::bfloat16_t>, false, true>(pytorch_flash::Flash_fwd_params)",
       WorkKind::kAttention},
      {"fmha_cutlassB_f32_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<"
       "cutlass::arch::Sm80, float, true, false, false, 64, 64, 64, false>::Params)",
       WorkKind::kAttention},
      // cuDNN's attention backend: kernels it generates at run time, named by cuDNN's frontend
      // (this form: "cudnn_generated_fort_native_sdpa_<arch>_..."), with no "flash" in them.
      {"cudnn_generated_fort_native_sdpa_sm90_knob_7_64x128x128_4x1x1_kernel0_0",
       WorkKind::kAttention},
      {"void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
       "namespace)::TensorListMetadata<5>, at::native::(anonymous namespace)::FusedAdamMathFunctor"
       "<float, 5, (at::native::ADAM_MODE)1, false>, double*, float, float, float, float, float, "
       "bool, float*, float*>",
       WorkKind::kOptimizer},
      {"void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
       "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, "
       "at::detail::Array<char*, 3>)",
       WorkKind::kElementwise},
      {"void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
       "at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)",
       WorkKind::kElementwise},
      {"Memcpy HtoD (Pinned -> Device)", WorkKind::kElementwise},
  };
  for (const auto& [name, kind] : cases) {
    EXPECT_EQ(WorkKindName(KindOfKernel(name)), std::string(WorkKindName(kind))) << name;
  }
}

// Without a CUDA device (or a CUDA LibTorch 2.x) there are no kernels to time: said, not faked.
TEST(KindOfKernelTest, TheGpuProfilerSaysWhyItCannotRun) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a CUDA device is present";
  const absl::Status available = GpuStepProfiler::Available();
  EXPECT_EQ(available.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(available.message().empty());
}

}  // namespace
}  // namespace cart::train
