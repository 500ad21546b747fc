#include "worker/system_metrics.h"

#include "gtest/gtest.h"

namespace cart::worker {
namespace {

TEST(SystemMetricsTest, ReportsProcessCpuAndMemoryWithOrWithoutNvml) {
  SystemMetrics system;
  system.Sample(0);
  volatile double x = 0;
  for (int i = 0; i < 20'000'000; ++i) x = x + i * 0.5;  // burn some CPU
  auto sample = system.Sample(0);
  ASSERT_TRUE(sample.count("sys/rss_mib"));
  EXPECT_GT(sample["sys/rss_mib"], 1.0);
  ASSERT_TRUE(sample.count("sys/cpu_percent"));
  EXPECT_GT(sample["sys/cpu_percent"], 0.0);
  EXPECT_EQ(sample.count("sys/gpu_util_percent") > 0, system.nvml_available());
}

TEST(SystemMetricsTest, DescribesTheCpuAndDisk) {
  DeviceDescription cpu = SystemMetrics::Cpu();
  EXPECT_EQ(cpu.kind, "cpu");
  EXPECT_FALSE(cpu.name.empty());
  EXPECT_GT(cpu.memory_mib, 512);
  EXPECT_GT(SystemMetrics::FreeDiskMib("/"), 0);
}

}  // namespace
}  // namespace cart::worker
