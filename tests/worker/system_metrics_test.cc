#include "worker/system_metrics.h"

#include <cstdlib>

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

TEST(SystemMetricsTest, ReadsTheCpuDeviceWithoutNvmlOrWithoutAGpuIndex) {
  SystemMetrics system;
  system.ReadDevice(-1, 1);
  volatile double x = 0;
  for (int i = 0; i < 20'000'000; ++i) x = x + i * 0.5;  // burn some CPU
  DeviceReading r = system.ReadDevice(-1, 1);
  EXPECT_GT(r.process_cpu_percent, 0.0);
  EXPECT_GT(r.utilization, 0.0);
  EXPECT_LE(r.utilization, 1.0);
  EXPECT_EQ(r.memory_used_mib, r.process_rss_mib);
  EXPECT_EQ(r.memory_total_mib, SystemMetrics::Cpu().memory_mib);
  EXPECT_FALSE(r.temperature_c.has_value());
  EXPECT_FALSE(r.throttle_reasons.has_value());
  EXPECT_GT(r.wall_time_us, int64_t{1'700'000'000} * 1'000'000);  // Unix time, not uptime
}

// The GPU side through the fake NVML (tests/worker/fake_nvml.c), loaded as the real one would be.
class FakeNvmlTest : public ::testing::Test {
 protected:
  void SetUp() override { setenv("CART_NVML_LIBRARY", CART_FAKE_NVML, 1); }
  void TearDown() override {
    for (const char* v :
         {"CART_NVML_LIBRARY", "FAKE_NVML_UTIL", "FAKE_NVML_TEMP", "FAKE_NVML_THROTTLE"}) {
      unsetenv(v);
    }
  }
};

TEST_F(FakeNvmlTest, DescribesEachCardWithItsUuidAndFindsItByBusId) {
  SystemMetrics system;
  ASSERT_TRUE(system.nvml_available());
  EXPECT_EQ(system.GpuCount(), 2);
  std::optional<DeviceDescription> card = system.Gpu(1);
  ASSERT_TRUE(card.has_value());
  EXPECT_EQ(card->name, "NVIDIA GeForce RTX 3090");
  EXPECT_EQ(card->memory_mib, 24 * 1024);
  EXPECT_EQ(card->uuid, "GPU-fake0000-0000-0000-0000-000000000001");
  EXPECT_EQ(system.IndexOfPciBusId("00000000:41:00.0"), 1);
  EXPECT_FALSE(system.Gpu(2).has_value());
}

TEST_F(FakeNvmlTest, ReadsUtilisationMemoryTemperaturePowerClocksAndThrottleReasons) {
  SystemMetrics system;
  ASSERT_TRUE(system.nvml_available());
  DeviceReading r = system.ReadDevice(1, 4);
  EXPECT_DOUBLE_EQ(r.utilization, 0.73);
  EXPECT_EQ(r.memory_used_mib, 3 * 1024);
  EXPECT_EQ(r.memory_total_mib, 24 * 1024);
  EXPECT_EQ(r.temperature_c, 64.0);
  EXPECT_EQ(r.power_w, 342.25);
  EXPECT_EQ(r.sm_clock_mhz, 1695);
  EXPECT_EQ(r.memory_clock_mhz, 9751);
  EXPECT_EQ(r.throttle_reasons, uint64_t{0});
  EXPECT_GT(r.process_rss_mib, 0);
  // The card heats up and slows down: the next reading says so.
  setenv("FAKE_NVML_UTIL", "100", 1);
  setenv("FAKE_NVML_TEMP", "91", 1);
  setenv("FAKE_NVML_THROTTLE", "0x40", 1);
  r = system.ReadDevice(1, 4);
  EXPECT_DOUBLE_EQ(r.utilization, 1.0);
  EXPECT_EQ(r.temperature_c, 91.0);
  EXPECT_EQ(r.throttle_reasons, uint64_t{0x40});
  // The per-step metrics read the same card.
  auto sample = system.Sample(1);
  EXPECT_EQ(sample["sys/gpu_temp_c"], 91.0);
  EXPECT_EQ(sample["sys/gpu_power_w"], 342.25);
}

}  // namespace
}  // namespace cart::worker
