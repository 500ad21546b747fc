// The attempt's environment record as the worker takes it (worker/environment.h): the LibTorch
// build's own settings parsed from both LibTorch lines' texts, the libraries mapped into this
// process, and a GPU's driver, VBIOS and compute capability from (the fake) NVML.

#include "worker/environment.h"

#include <sys/utsname.h>
#include <torch/version.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "common/sha256.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "train/optimizer.h"

namespace cart::worker {
namespace {

using ::testing::HasSubstr;

std::map<std::string, std::string> AsMap(const EnvironmentItems& items) {
  return std::map<std::string, std::string>(items.begin(), items.end());
}

TEST(EnvironmentTest, TheLibTorchBuildSettingsOfACudaWheelAndOfACpuBuildAreRead) {
  const std::string wheel =
      "PyTorch built with:\n  - GCC 13.3\n  - Build settings: BLAS_INFO=mkl, BUILD_TYPE=Release, "
      "COMMIT_SHA=d0f2af8b66, CUDA_FLAGS= -gencode arch=compute_86,code=sm_86, CUDA_VERSION=13.2, "
      "CUDNN_VERSION=9.26.0, CXX_COMPILER=/usr/bin/c++, TORCH_VERSION=2.15.0, USE_CUDA=1, "
      "USE_CUDNN=ON, \n";
  EXPECT_EQ(TorchBuildItems(wheel), (EnvironmentItems{{"torch.version", "2.15.0"},
                                                      {"torch.commit", "d0f2af8b66"},
                                                      {"torch.cuda", "13.2"},
                                                      {"torch.cudnn", "9.26.0"},
                                                      {"torch.blas", "mkl"}}));
  const std::string cpu =
      "PyTorch built with:\n  - Build settings: BLAS_INFO=open, BUILD_TYPE=Release, "
      "TORCH_VERSION=1.13.1, USE_CUDA=OFF, USE_CUDNN=OFF, \n";
  EXPECT_EQ(TorchBuildItems(cpu), (EnvironmentItems{{"torch.version", "1.13.1"},
                                                    {"torch.cuda", "none (CPU build)"},
                                                    {"torch.blas", "open"}}));
}

TEST(EnvironmentTest, TheProcessRecordIsWhatThisProcessLoadedAndRuns) {
  std::ifstream in("/proc/self/maps");
  std::stringstream maps;
  maps << in.rdbuf();
  const auto items = AsMap(ProcessEnvironment());
  // The LibTorch this test was compiled against is the one it loaded and the record names.
  EXPECT_EQ(items.at("torch.version"), TORCH_VERSION);
  EXPECT_THAT(maps.str(), HasSubstr(items.at("torch.library")));
  EXPECT_THAT(items.at("torch.library"), HasSubstr("libtorch"));
  // The BLAS: a library mapped into this process, by its path, or built into LibTorch.
  if (items.at("blas.library").rfind("none mapped", 0) != 0) {
    EXPECT_THAT(maps.str(), HasSubstr(items.at("blas.library")));
  } else {
    EXPECT_EQ(maps.str().find("libopenblas"), std::string::npos);
  }
  EXPECT_EQ(items.at("cart.binary_sha256"), Sha256File("/proc/self/exe"));
  EXPECT_THAT(items.at("cart.git_dirty"), ::testing::AnyOf("true", "false", "unknown"));
  utsname uts{};
  ASSERT_EQ(uname(&uts), 0);
  EXPECT_EQ(items.at("host"), uts.nodename);
  EXPECT_THAT(items.at("kernel"), HasSubstr(uts.release));
  EXPECT_EQ(
      MappedLibrary("7f00-7f01 r-xp 0 08:01 42 /usr/lib/x86_64-linux-gnu/libopenblasp-r0.3.21.so\n"
                    "7f02-7f03 r-xp 0 08:01 43 /usr/lib/libtorch_cpu.so.1.13\n",
                    {"libtorch_cpu.so"}),
      "/usr/lib/libtorch_cpu.so.1.13");
}

// A GPU's fields come from NVML (the fake's second card, an RTX 3090), after the process's.
TEST(EnvironmentTest, AnAttemptOnAGpuNamesItsCardDriverVbiosAndComputeCapability) {
  setenv("CART_NVML_LIBRARY", CART_FAKE_NVML, 1);
  std::optional<DeviceDescription> card;
  {
    SystemMetrics system;
    card = system.Gpu(1);
  }
  unsetenv("CART_NVML_LIBRARY");
  ASSERT_TRUE(card.has_value());
  const EnvironmentItems items =
      AttemptEnvironment(*card, "cuda:1", "bf16 autocast (dtype auto)", 4);
  EXPECT_EQ(items.front().first, ProcessEnvironment().front().first);
  const auto m = AsMap(items);
  EXPECT_EQ(m.at("device"), "cuda:1");
  EXPECT_EQ(m.at("device.name"), "NVIDIA GeForce RTX 3090");
  EXPECT_EQ(m.at("gpu.uuid"), "GPU-fake0000-0000-0000-0000-000000000001");
  EXPECT_EQ(m.at("gpu.driver"), "550.54.14");
  EXPECT_EQ(m.at("gpu.vbios"), "94.02.42.00.A9");
  EXPECT_EQ(m.at("gpu.compute_capability"), "8.6");
  EXPECT_EQ(m.at("precision"), "bf16 autocast (dtype auto)");
  EXPECT_EQ(m.at("threads"), "4");
  EXPECT_EQ(m.at("step.projections"), "merged") << "merged on CUDA";
  EXPECT_EQ(m.at("step.optimizer"), train::StepKernelsName(train::DefaultStepKernels()));
  // Every item as cartd stores it: a key of [a-z0-9_.], one line of at most 1,024 bytes.
  for (const auto& [key, value] : items) {
    EXPECT_THAT(key, ::testing::MatchesRegex("[a-z0-9_.]+"));
    EXPECT_EQ(value.find('\n'), std::string::npos) << key;
    EXPECT_LE(value.size(), 1024u) << key;
  }
  EXPECT_THAT(m.at("cart.version"), ::testing::Not(::testing::IsEmpty()));
}

}  // namespace
}  // namespace cart::worker
