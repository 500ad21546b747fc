// Energy per attempt, run and sweep end to end (docs/operations.md "Energy"): a real cart-worker
// training on the CPU reads RAPL through a powercap tree this test writes and advances (through
// CART_POWERCAP_DIR, as a box's /sys/class/powercap would), cartd prices it, and `cart runs
// show`, `cart sweep show`, `cart sweep ls` and /metrics say what it used; a worker without RAPL
// says "not measured" and no figure is made up.

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/strings.h"
#include "tests/integration/cluster.h"
#include "tests/support/test_support.h"

namespace cart::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

void WriteCounter(const std::string& path, uint64_t microjoules) {
  std::ofstream(path + ".tmp") << microjoules << "\n";
  std::filesystem::rename(path + ".tmp", path);
}

TEST(EnergyTest, ARunsEnergyIsReadFromRaplPricedAndShownAndAWorkerWithoutItSaysSo) {
  Cluster c;
  const std::string powercap = c.dir() + "/powercap";
  std::filesystem::create_directories(powercap + "/intel-rapl:0");
  const std::string counter = powercap + "/intel-rapl:0/energy_uj";
  WriteCounter(counter, 1'000'000);
  std::ofstream(powercap + "/intel-rapl:0/max_energy_range_uj") << "262143328850\n";
  // The package draws 20 W while the test runs: +1 J every 50 ms.
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> written{1'000'000};
  std::thread meter([&] {
    while (!stop) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      WriteCounter(counter, written += 1'000'000);
    }
  });
  c.StartCartd("energy_price_per_kwh: 0.30\nenergy_currency: EUR\nco2_grams_per_kwh: 400\n");
  const std::string data = c.SynthData();
  c.Cart({"sweep", "submit",
          c.WriteFile("e.yaml",
                      StrCat("name: stage2\nbase:\n", RunBase(data, 40, 20), "seeds: [1]\n"))});
  setenv("CART_POWERCAP_DIR", powercap.c_str(), 1);
  const pid_t worker = c.StartWorker("w1");
  unsetenv("CART_POWERCAP_DIR");
  const bool done =
      c.WaitFor([&] { return c.Runs("stage2")[0].state() == cart::v1::RUN_STATE_SUCCEEDED; },
                std::chrono::seconds(120));
  stop = true;
  meter.join();
  ASSERT_TRUE(done) << c.Log("worker-w1.log");
  c.Signal(worker, SIGTERM);
  c.Wait(worker);

  const cart::v1::GetRunResponse run = c.GetRun(c.Runs("stage2")[0].run_id());
  ASSERT_EQ(run.attempts_size(), 1);
  const cart::v1::AttemptView& a = run.attempts(0);
  ASSERT_TRUE(a.energy_measured());
  EXPECT_EQ(a.energy_source(), "rapl");
  EXPECT_GT(a.energy_j(), 0);
  EXPECT_LE(a.energy_j(), static_cast<double>(written - 1'000'000) / 1e6);
  const cart::v1::SpendingView& spent = run.spending();
  EXPECT_EQ(spent.measured_attempts(), 1);
  EXPECT_DOUBLE_EQ(spent.energy_kwh(), a.energy_j() / 3.6e6);
  EXPECT_DOUBLE_EQ(spent.cost(), spent.energy_kwh() * 0.30);
  EXPECT_DOUBLE_EQ(spent.co2_grams(), spent.energy_kwh() * 400);
  EXPECT_GT(spent.device_hours(), 0);
  const std::string shown = c.Cart({"runs", "show", StrCat(run.run().run_id())});
  EXPECT_THAT(shown, HasSubstr("energy: "));
  EXPECT_THAT(shown, HasSubstr(" Wh, rapl)"));
  EXPECT_THAT(shown, HasSubstr(" (1 of 1 attempts measured, rapl) · "));
  EXPECT_THAT(shown, HasSubstr(" EUR · "));
  EXPECT_THAT(shown, HasSubstr(" g CO2 · "));
  EXPECT_THAT(c.Cart({"sweep", "show", "stage2"}), HasSubstr("spent: "));
  EXPECT_THAT(c.Cart({"sweep", "ls"}), HasSubstr("kWh"));
  const std::string metrics = c.Http("/metrics");
  EXPECT_THAT(metrics, HasSubstr("cart_sweep_energy_joules{sweep=\"stage2\"}"));
  EXPECT_THAT(metrics, HasSubstr("cart_sweep_energy_measured_attempts{sweep=\"stage2\"} 1"));
  // Per claim: the stage 2 claims read this run (the study's default sweep names).
  EXPECT_THAT(metrics, HasSubstr("cart_claim_energy_measured_attempts{claim=\"rho_band\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("cart_claim_device_hours{claim=\"rho_band\"} "));

  // `cart report` over gRPC: what each claim and the sweep cost, priced at cartd's prices.
  c.Cart({"report", "--no-plots", "--out", c.dir() + "/report"});
  const std::string parts = ReadFile(c.dir() + "/report/tables/cost_parts.csv");
  EXPECT_THAT(parts, HasSubstr("part (sweep),runs,attempts,device-hours,measured attempts,kWh,EUR,"
                               "g CO2\nstage2 (stage2),1,1,"));
  EXPECT_THAT(ReadFile(c.dir() + "/report/tables/cost_claims.csv"), HasSubstr("\nrho_band,1,1,"));
  EXPECT_THAT(
      ReadFile(c.dir() + "/report/report.md"),
      HasSubstr("The whole study: " + spent.text().substr(0, spent.text().find(" · ")) + " · "));

  // A worker on a machine whose kernel exposes no RAPL: not measured, and its log says why.
  const std::string empty = c.dir() + "/no-powercap";
  std::filesystem::create_directories(empty);
  c.Cart(
      {"sweep", "submit",
       c.WriteFile("n.yaml", StrCat("name: n\nbase:\n", RunBase(data, 10, 10), "seeds: [1]\n"))});
  setenv("CART_POWERCAP_DIR", empty.c_str(), 1);
  c.StartWorker("w2");
  unsetenv("CART_POWERCAP_DIR");
  ASSERT_TRUE(c.WaitFor([&] { return c.Runs("n")[0].state() == cart::v1::RUN_STATE_SUCCEEDED; },
                        std::chrono::seconds(120)));
  const int64_t unmeasured = c.Runs("n")[0].run_id();
  const std::string plain = c.Cart({"runs", "show", StrCat(unmeasured)});
  EXPECT_THAT(plain, HasSubstr("energy: not measured"));
  EXPECT_THAT(plain, HasSubstr("spent: energy not measured · "));
  EXPECT_THAT(plain, Not(HasSubstr("EUR")));
  EXPECT_THAT(c.Cart({"runs", "logs", StrCat(unmeasured)}),
              HasSubstr(StrCat("energy: not measured: no RAPL package under ", empty)));
}

}  // namespace
}  // namespace cart::testing
