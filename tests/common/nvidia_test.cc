// common/nvidia.h: the cards NVML lists (a stand-in NVML with two cards, tests/worker/fake_nvml.cc,
// through CART_NVML_LIBRARY) and the ones CUDA_VISIBLE_DEVICES leaves a process.

#include "common/nvidia.h"

#include <cstdlib>

#include "gtest/gtest.h"

namespace cart {
namespace {

TEST(NvidiaTest, NvmlCountsTheDriversCardsAndNoneWithoutALibrary) {
  setenv("CART_NVML_LIBRARY", CART_FAKE_NVML, 1);
  EXPECT_EQ(NvmlGpuCount(), 2);
  setenv("CUDA_VISIBLE_DEVICES", "1", 1);
  EXPECT_EQ(UsableGpuCount(), 1);
  unsetenv("CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(UsableGpuCount(), 2);
  setenv("CART_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
  EXPECT_EQ(NvmlGpuCount(), 0);
  unsetenv("CART_NVML_LIBRARY");
}

TEST(NvidiaTest, CudaVisibleDevicesStopsAtItsFirstInvalidEntry) {
  EXPECT_EQ(VisibleGpuCount(2, std::nullopt), 2);
  EXPECT_EQ(VisibleGpuCount(2, ""), 0);
  EXPECT_EQ(VisibleGpuCount(2, "-1"), 0);
  EXPECT_EQ(VisibleGpuCount(2, "0,1"), 2);
  EXPECT_EQ(VisibleGpuCount(2, "1"), 1);
  EXPECT_EQ(VisibleGpuCount(2, "0,5,1"), 1);  // 5 is no card: it and what follows are ignored
  EXPECT_EQ(VisibleGpuCount(4, "GPU-8a6f1c2e-0000,GPU-77aa0000-1111"), 2);
  EXPECT_EQ(VisibleGpuCount(0, "0"), 0);
}

}  // namespace
}  // namespace cart
