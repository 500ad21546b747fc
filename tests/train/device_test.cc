// Device names from flags and workers.

#include "train/device.h"

#include <torch/cuda.h>
#include <torch/version.h>

#include <cstdlib>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/test_support.h"

namespace cart::train {
namespace {

using ::cart::testing::StatusIs;
using ::testing::HasSubstr;

// Training processes ask LibTorch 2.1+'s CUDA allocator for expandable segments, unless the user
// configured the allocator; LibTorch 1.x does not know the option and gets nothing.
TEST(CudaAllocatorTest, ExpandableSegmentsUnlessTheUserConfiguredTheAllocator) {
  unsetenv("PYTORCH_CUDA_ALLOC_CONF");
  unsetenv("PYTORCH_ALLOC_CONF");
  const std::string set = ConfigureCudaAllocator();
  const char* env = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
  if (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)) {
    EXPECT_EQ(set, "expandable_segments:True");
    ASSERT_NE(env, nullptr);
    EXPECT_STREQ(env, "expandable_segments:True");
  } else {
    EXPECT_EQ(set, "");
    EXPECT_EQ(env, nullptr);
  }
  setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128", 1);
  EXPECT_EQ(ConfigureCudaAllocator(), "max_split_size_mb:128");
  EXPECT_STREQ(std::getenv("PYTORCH_CUDA_ALLOC_CONF"), "max_split_size_mb:128");
  unsetenv("PYTORCH_CUDA_ALLOC_CONF");
  setenv("PYTORCH_ALLOC_CONF", "backend:cudaMallocAsync", 1);  // the newer name counts too
  EXPECT_EQ(ConfigureCudaAllocator(), "backend:cudaMallocAsync");
  EXPECT_EQ(std::getenv("PYTORCH_CUDA_ALLOC_CONF"), nullptr);
  unsetenv("PYTORCH_ALLOC_CONF");
}

TEST(ResolveDeviceTest, CpuAndAutoAlwaysResolve) {
  auto cpu = ResolveDevice("cpu");
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_TRUE(cpu->is_cpu());
  auto automatic = ResolveDevice("auto");
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_EQ(automatic->is_cuda(), torch::cuda::is_available());
}

TEST(ResolveDeviceTest, UnknownNamesListTheAllowedForms) {
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "CPU"}) {
    EXPECT_THAT(ResolveDevice(bad), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr("allowed: auto, cpu, cuda, cuda:N")))
        << bad;
  }
}

TEST(ResolveDeviceTest, AbsentCudaDeviceSaysHowManyThereAre) {
  const int64_t n = torch::cuda::is_available() ? torch::cuda::device_count() : 0;
  EXPECT_THAT(ResolveDevice("cuda:" + std::to_string(n)),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("LibTorch sees " + std::to_string(n) + " CUDA device(s)")));
  if (n > 0) {
    auto last = ResolveDevice("cuda:" + std::to_string(n - 1));
    ASSERT_TRUE(last.ok()) << last.status();
    EXPECT_EQ(last->index(), n - 1);
  }
}

// Every run's log opens with where it trains; `--device auto` falling back to the CPU used to say
// nothing, and a card the driver lists but LibTorch cannot use went unnoticed.
TEST(DeviceLineTest, SaysWhereARunTrainsAndWarnsOfACardLibTorchDoesNotSee) {
  const c10::Device cpu(c10::kCPU);
  EXPECT_EQ(DeviceLine(cpu, false, "cpu", 2), "cpu, fp32");
  EXPECT_EQ(DeviceLine(cpu, false, "auto", 0), "cpu, fp32, because there is no CUDA device");
  const std::string warned = DeviceLine(cpu, false, "auto", 2);
  EXPECT_THAT(warned, HasSubstr("though the driver lists 2 NVIDIA GPU(s): WARNING, LibTorch sees "
                                "no CUDA device"));
  EXPECT_THAT(warned, HasSubstr(BuiltWithCuda() ? "driver older" : "has no CUDA"));
}

}  // namespace
}  // namespace cart::train
