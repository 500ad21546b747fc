// EnergyMeter (worker/energy_meter.h): an attempt's energy from the card's NVML counter (the fake
// NVML, tests/worker/fake_nvml.cc) or the CPU packages' RAPL counters (a powercap tree this test
// writes, read through CART_POWERCAP_DIR), and "not measured" with its reason otherwise.

#include "worker/energy_meter.h"

#include <filesystem>
#include <fstream>

#include "common/strings.h"
#include "tests/support/test_support.h"
#include "worker/system_metrics.h"

namespace cart::worker {
namespace {

using ::cart::testing::TempDir;
using ::testing::DoubleNear;
using ::testing::HasSubstr;

void Write(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text << "\n";
}

class RaplTest : public ::testing::Test {
 protected:
  void SetUp() override { setenv("CART_POWERCAP_DIR", dir_.path().c_str(), 1); }
  void TearDown() override { unsetenv("CART_POWERCAP_DIR"); }
  std::string Zone(const std::string& name) { return dir_.File(name); }
  TempDir dir_;
};

TEST_F(RaplTest, AddsUpEveryPackageButNotItsSubzonesNorPsysAndAllowsForTheWrap) {
  Write(Zone("intel-rapl:0/energy_uj"), "1000000");
  Write(Zone("intel-rapl:0/max_energy_range_uj"), "262143328850");
  Write(Zone("intel-rapl:1/energy_uj"), "262143000000");  // about to wrap
  Write(Zone("intel-rapl:1/max_energy_range_uj"), "262143328850");
  Write(Zone("intel-rapl:0:0/energy_uj"), "5");  // the cores of package 0: part of it
  Write(Zone("intel-rapl:0/name"), "package-0");
  Write(Zone("intel-rapl:1/name"), "package-1");
  Write(Zone("intel-rapl:2/name"), "psys");  // the platform: the packages' energy and more
  Write(Zone("intel-rapl:2/energy_uj"), "7");
  EnergyMeter meter(nullptr, -1);
  ASSERT_EQ(meter.source(), "rapl") << meter.why_not();
  EXPECT_THAT(*meter.Joules(), DoubleNear(0, 1e-9));
  Write(Zone("intel-rapl:0/energy_uj"), "3500000");  // +2.5 J
  Write(Zone("intel-rapl:1/energy_uj"), "671149");   // wrapped: +328851 + 671149 µJ = +1 J
  Write(Zone("intel-rapl:0:0/energy_uj"), "999999999");
  Write(Zone("intel-rapl:2/energy_uj"), "888888888");
  EXPECT_THAT(*meter.Joules(), DoubleNear(3.5, 1e-9));
  Write(Zone("intel-rapl:0/energy_uj"), "4500000");  // +1 J more
  EXPECT_THAT(*meter.Joules(), DoubleNear(4.5, 1e-9));
}

TEST_F(RaplTest, WithoutRaplItSaysWhyAndMakesNoFigureUp) {
  EnergyMeter meter(nullptr, -1);
  EXPECT_EQ(meter.source(), "");
  EXPECT_THAT(meter.why_not(), HasSubstr(StrCat("no RAPL package under ", dir_.path().string())));
  EXPECT_FALSE(meter.Joules().has_value());
  Write(Zone("intel-rapl:0/energy_uj"), "not a number");
  EnergyMeter bad(nullptr, -1);
  EXPECT_EQ(bad.source(), "");
  EXPECT_THAT(bad.why_not(), HasSubstr("is not a counter"));
}

TEST_F(RaplTest, TheMachinesOwnPowercapWhenThereIsOne) {
  unsetenv("CART_POWERCAP_DIR");
  EnergyMeter meter(nullptr, -1);
  if (!std::filesystem::exists("/sys/class/powercap/intel-rapl:0/energy_uj")) {
    EXPECT_EQ(meter.source(), "");
    EXPECT_THAT(meter.why_not(), HasSubstr("/sys/class/powercap"));
    GTEST_SKIP() << "this machine's kernel exposes no RAPL package: " << meter.why_not();
  }
  if (meter.source().empty()) GTEST_SKIP() << "RAPL not readable here: " << meter.why_not();
  const std::optional<double> joules = meter.Joules();
  ASSERT_TRUE(joules.has_value());
  EXPECT_GE(*joules, 0);
}

class NvmlEnergyTest : public ::testing::Test {
 protected:
  void SetUp() override { setenv("CART_NVML_LIBRARY", CART_FAKE_NVML, 1); }
  void TearDown() override {
    unsetenv("CART_NVML_LIBRARY");
    unsetenv("FAKE_NVML_ENERGY_MJ");
  }
};

TEST_F(NvmlEnergyTest, ReadsTheCardsCounterFromTheAttemptsStart) {
  setenv("FAKE_NVML_ENERGY_MJ", "5000000", 1);  // card 1 reads twice this
  SystemMetrics system;
  ASSERT_TRUE(system.nvml_available());
  EnergyMeter meter(&system, 1);
  ASSERT_EQ(meter.source(), "nvml") << meter.why_not();
  setenv("FAKE_NVML_ENERGY_MJ", "5250000", 1);  // card 1: +500,000 mJ
  EXPECT_THAT(*meter.Joules(), DoubleNear(500, 1e-9));
}

TEST_F(NvmlEnergyTest, ACardWithoutTheCounterIsNotMeasured) {
  setenv("FAKE_NVML_ENERGY_MJ", "none", 1);
  SystemMetrics system;
  EnergyMeter meter(&system, 0);
  EXPECT_EQ(meter.source(), "");
  EXPECT_THAT(meter.why_not(), HasSubstr("Volta and later"));
  EXPECT_FALSE(meter.Joules().has_value());
}

}  // namespace
}  // namespace cart::worker
