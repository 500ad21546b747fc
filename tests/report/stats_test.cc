// report/stats against SciPy's values (stats_reference.json, written by stats_reference.py,
// which the stats_scipy_reference test re-runs), and the conventions its header states: NaN in,
// NaN out; one observation, no interval; Holm's adjustment monotone and capped.

#include "report/stats.h"

#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>

#include "gtest/gtest.h"
#include "report/sequential.h"
#include "store/results.h"

namespace cart::report::stats {
namespace {

using nlohmann::json;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

const json& Reference() {
  static const json* reference = [] {
    std::ifstream in(std::string(CART_SOURCE_DIR) + "/tests/report/stats_reference.json");
    return new json(json::parse(in));
  }();
  return *reference;
}

std::vector<double> Doubles(const json& j) { return j.get<std::vector<double>>(); }

// Agreement to a relative 1e-9 (an absolute 1e-12 near zero).
void ExpectClose(double expected, double actual, const std::string& what) {
  EXPECT_NEAR(actual, expected, 1e-9 * std::abs(expected) + 1e-12) << what;
}

void ExpectEstimate(const json& want, const Estimate& got, const std::string& what) {
  ExpectClose(want["value"], got.value, what + " value");
  ExpectClose(want["low"], got.low, what + " low");
  ExpectClose(want["high"], got.high, what + " high");
  ExpectClose(want["t"], got.t, what + " t");
  ExpectClose(want["p"], got.p, what + " p");
  ExpectClose(want["df"], got.df, what + " df");
}

TEST(StatsTest, ReferenceFileIsSciPys) {
  ASSERT_TRUE(Reference().contains("scipy"));
  EXPECT_GE(Reference()["t_cdf"].size(), 5u);
}

TEST(StatsTest, StudentTCdfAndTwoSidedTailMatchSciPy) {
  for (const json& c : Reference()["t_cdf"]) {
    const std::string what = c.dump();
    ExpectClose(c["cdf"], StudentTCdf(c["t"], c["df"]), what);
    ExpectClose(c["two_sided"], StudentTTwoSided(c["t"], c["df"]), what);
  }
}

TEST(StatsTest, StudentTQuantileMatchesSciPy) {
  for (const json& c : Reference()["t_quantile"]) {
    ExpectClose(c["t"], StudentTQuantile(c["p"], c["df"]), c.dump());
  }
  EXPECT_TRUE(std::isnan(StudentTQuantile(1.0, 3)));
  EXPECT_TRUE(std::isnan(StudentTQuantile(0.5, -1)));
}

TEST(StatsTest, NoncentralTCdfMatchesSciPyToOneInAMillion) {
  for (const json& c : Reference()["nct_cdf"]) {
    const double want = c["cdf"];
    EXPECT_NEAR(NoncentralTCdf(c["t"], c["df"], c["nc"]), want, 1e-6 * want + 1e-10) << c.dump();
  }
}

TEST(StatsTest, OneSamplePairedAndWelchMatchSciPy) {
  for (const json& c : Reference()["one_sample"]) {
    ExpectEstimate(c, Mean(Doubles(c["x"]), c["null"]), "one sample " + c["x"].dump());
  }
  for (const json& c : Reference()["paired"]) {
    ExpectEstimate(c, PairedDifference(Doubles(c["a"]), Doubles(c["b"])),
                   "paired " + c["a"].dump());
  }
  for (const json& c : Reference()["welch"]) {
    const Estimate e = WelchDifference(Doubles(c["a"]), Doubles(c["b"]));
    ExpectEstimate(c, e, "welch " + c["a"].dump());
    EXPECT_EQ(e.n, static_cast<int64_t>(c["a"].size()));
    EXPECT_EQ(e.n2, static_cast<int64_t>(c["b"].size()));
  }
}

TEST(StatsTest, SpearmanWithTiesMatchesSciPy) {
  for (const json& c : Reference()["spearman"]) {
    const Correlation r = Spearman(Doubles(c["x"]), Doubles(c["y"]));
    ExpectClose(c["r"], r.r, c.dump());
    ExpectClose(c["p"], r.p, c.dump());
  }
}

TEST(StatsTest, HolmMatchesItsDefinition) {
  for (const json& c : Reference()["holm"]) {
    const std::vector<double> got = Holm(Doubles(c["p"]));
    const std::vector<double> want = Doubles(c["adjusted"]);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ExpectClose(want[i], got[i], c.dump());
  }
}

TEST(StatsTest, DetectableEffectMatchesSciPysNoncentralT) {
  for (const json& c : Reference()["detectable"]) {
    const double want = c["effect"];
    EXPECT_NEAR(DetectableEffect(c["se"], c["df"]), want, 1e-5 * want) << c.dump();
  }
  // At the detectable effect the power is what was asked for.
  EXPECT_NEAR(Power(DetectableEffect(1.0, 4) / 1.0, 4), 0.8, 1e-6);
}

// The results tables' cells (store::Summarize) and the claims' one-sample test compute a mean and
// its 95 % interval once (common/student_t.h MeanOf): the same numbers, bit for bit.
TEST(StatsTest, TheResultsTablesAndTheClaimsShareOneMeanAndInterval) {
  for (const std::vector<double>& x : std::vector<std::vector<double>>{
           {1, 2, 3, 4}, {0.1, 0.7}, {3.25, 3.5, 2.875, 4.125, 3.0}, {2, 2, 2}}) {
    const store::CellStats cell = store::Summarize(x);
    const Estimate e = Mean(x);
    EXPECT_EQ(cell.mean, e.value);
    EXPECT_EQ(cell.ci_low, e.low);
    EXPECT_EQ(cell.ci_high, e.high);
    EXPECT_EQ(cell.n, e.n);
  }
}

TEST(StatsTest, ADivergedSeedMakesEveryResultNaN) {
  EXPECT_TRUE(std::isnan(Mean({1.0, kNaN, 2.0}).value));
  EXPECT_EQ(Mean({1.0, kNaN, 2.0}).n, 3);
  EXPECT_TRUE(std::isnan(PairedDifference({1.0, 2.0}, {kNaN, 1.0}).low));
  EXPECT_TRUE(std::isnan(WelchDifference({1.0, 2.0}, {3.0, kNaN}).p));
  EXPECT_TRUE(std::isnan(Spearman({1.0, 2.0, 3.0}, {1.0, kNaN, 3.0}).r));
}

TEST(StatsTest, OneObservationHasAValueButNoIntervalOrTest) {
  const Estimate e = Mean({0.8}, 0.9);
  EXPECT_DOUBLE_EQ(e.value, 0.8);
  EXPECT_EQ(e.n, 1);
  EXPECT_TRUE(std::isnan(e.low) && std::isnan(e.high) && std::isnan(e.p));
  EXPECT_TRUE(std::isnan(DetectableEffect(e.se, e.df)));
  const Estimate w = WelchDifference({1.0}, {2.0, 3.0});
  EXPECT_DOUBLE_EQ(w.value, -1.5);
  EXPECT_TRUE(std::isnan(w.p));
  EXPECT_TRUE(std::isnan(PairedDifference({1.0, 2.0}, {1.0}).value));
}

TEST(StatsTest, ZeroSpreadGivesThePointAndACertainTest) {
  const Estimate e = Mean({2.0, 2.0, 2.0}, 1.0);
  EXPECT_EQ(e.low, 2.0);
  EXPECT_EQ(e.high, 2.0);
  EXPECT_EQ(e.p, 0.0);
  EXPECT_EQ(Mean({1.0, 1.0}, 1.0).p, 1.0);
}

TEST(StatsTest, HolmSkipsNaNAndKeepsTheRawOrder) {
  const std::vector<double> adjusted = Holm({0.03, kNaN, 0.01, 0.04});
  EXPECT_TRUE(std::isnan(adjusted[1]));
  EXPECT_DOUBLE_EQ(adjusted[2], 0.03);  // smallest of three: × 3
  EXPECT_DOUBLE_EQ(adjusted[0], 0.06);  // × 2
  EXPECT_DOUBLE_EQ(adjusted[3], 0.06);  // × 1 = 0.04, raised to keep the order
  EXPECT_DOUBLE_EQ(Holm({0.9, 0.8})[0], 1.0);
}

TEST(StatsTest, SpearmanNeedsThreePointsForATest) {
  const Correlation two = Spearman({1.0, 2.0}, {2.0, 1.0});
  EXPECT_DOUBLE_EQ(two.r, -1.0);
  EXPECT_TRUE(std::isnan(two.p));
  EXPECT_TRUE(std::isnan(Spearman({1.0, 1.0, 1.0}, {1.0, 2.0, 3.0}).r));
  EXPECT_EQ(Spearman({1.0, 2.0, 3.0}, {1.0, 2.0, 3.0}).p, 0.0);
}

// The n a t test needs for a power, against statsmodels' solve_power (TTestPower for one sample
// or pairs, TTestIndPower for two arms), to 1e-6 of n.
TEST(StatsTest, SeedsForPowerMatchStatsmodels) {
  for (const json& c : Reference()["seeds_for_power"]) {
    const Design design = c["design"] == "one_sample" ? Design::kOneSample : Design::kTwoArms;
    const double n = SeedsForPower(c["d"], design, c["alpha"], c["power"]);
    const std::string what = c.dump();
    EXPECT_NEAR(n, c["n"].get<double>(), 1e-6 * c["n"].get<double>()) << what;
    EXPECT_NEAR(PowerForSeeds(c["d"], n, design, c["alpha"]), c["power"].get<double>(), 1e-9)
        << what;
  }
  EXPECT_TRUE(std::isnan(SeedsForPower(0, Design::kOneSample)));
  EXPECT_TRUE(std::isnan(SeedsForPower(0.5, Design::kOneSample, 0.05, 1.0)));
  EXPECT_TRUE(std::isnan(SeedsForPower(0.5, Design::kTwoArms, 0.0, 0.8)));
}

// McNemar's test against statsmodels' (exact binomial, and the corrected chi-square), to 1e-9.
TEST(StatsTest, McNemarMatchesStatsmodels) {
  for (const json& c : Reference()["mcnemar"]) {
    ExpectClose(c["p"], McNemar(c["b"], c["c"], c["exact"]), c.dump());
  }
  EXPECT_EQ(McNemar(0, 0), 1.0);
  EXPECT_TRUE(std::isnan(McNemar(-1, 3)));
}

// The difference of paired proportions: (b − c) / n with the paired variance, McNemar's p (exact
// up to 50 discordant items, as statsmodels' exact test, then the corrected chi-square).
TEST(StatsTest, McNemarDifferenceIsTheAccuracyDifferenceWithItsPairedSpread) {
  const Estimate e = McNemarDifference(30, 12, 200);
  EXPECT_DOUBLE_EQ(e.value, 18.0 / 200);
  EXPECT_NEAR(e.se, std::sqrt(42 - 18.0 * 18 / 200) / 200, 1e-15);
  EXPECT_NEAR(e.low, e.value - 1.959963984540054 * e.se, 1e-12);
  EXPECT_DOUBLE_EQ(e.p, McNemar(30, 12, true));
  EXPECT_DOUBLE_EQ(McNemarDifference(40, 20, 200).p, McNemar(40, 20, false));
  EXPECT_EQ(e.n, 200);
  EXPECT_TRUE(std::isnan(McNemarDifference(3, 4, 5).value));  // more discordant than items
}

// The paired bootstrap over items and seeds: its estimate is the mean difference; with one seed
// its spread is the items' standard error; and it keeps its level: over 400 seeded null studies
// (8 seeds × 60 items, a seed-wide offset beside item noise, so that seeds must be resampled)
// p < 0.05 in 2 % to 8.5 % of them (a true 5 % gives 20 of 400, binomial s.d. 4.4).
TEST(StatsTest, PairedBootstrapEstimatesTheMeanAndKeepsItsLevel) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> noise(0, 1);
  std::vector<std::vector<double>> one(1);
  for (int i = 0; i < 2000; ++i) one[0].push_back(0.1 + noise(rng));
  const Estimate e = PairedBootstrap(one, 2000, 3);
  double mean = 0, sq = 0;
  for (double x : one[0]) mean += x;
  mean /= 2000;
  for (double x : one[0]) sq += (x - mean) * (x - mean);
  const double se = std::sqrt(sq / 1999 / 2000);
  EXPECT_NEAR(e.value, mean, 1e-12);
  EXPECT_NEAR(e.se, se, 0.1 * se);
  EXPECT_LT(e.low, mean);
  EXPECT_GT(e.high, mean);
  EXPECT_LT(e.p, 0.01);  // 0.1 at se 0.022: z ≈ 4.5
  EXPECT_EQ(e.n, 2000);
  EXPECT_EQ(e.n2, 1);
  // Deterministic for a seed.
  EXPECT_EQ(PairedBootstrap(one, 500, 9).low, PairedBootstrap(one, 500, 9).low);

  int rejected = 0;
  for (int study = 0; study < 400; ++study) {
    std::vector<std::vector<double>> d(8);
    for (auto& row : d) {
      const double offset = 0.5 * noise(rng);
      for (int i = 0; i < 60; ++i) row.push_back(offset + noise(rng));
    }
    rejected += PairedBootstrap(d, 400, static_cast<uint64_t>(study)).p < 0.05;
  }
  EXPECT_GE(rejected, 8) << "of 400";
  EXPECT_LE(rejected, 34) << "of 400";
  EXPECT_TRUE(std::isnan(PairedBootstrap({{1, 2}, {3}}).value));  // ragged
  EXPECT_TRUE(std::isnan(PairedBootstrap({}).value));
  EXPECT_TRUE(std::isnan(PairedBootstrap({{0.5}}).p));  // one item of one seed: no spread to read
}

// Lan–DeMets boundaries from the recursive integration against SciPy's multivariate normal
// searched look by look (an independent method), to 2e-4 on Z; the first boundary is exact.
TEST(SequentialTest, BoundariesMatchAMultivariateNormalSearch) {
  for (const json& c : Reference()["sequential"]) {
    const Spending spending =
        c["spending"] == "pocock" ? Spending::kPocock : Spending::kOBrienFleming;
    const std::vector<double> t = Doubles(c["fractions"]);
    const std::vector<double> want = Doubles(c["boundaries"]);
    const std::vector<double> got = SequentialBoundaries(t, c["alpha"], spending);
    ASSERT_EQ(got.size(), want.size()) << c.dump();
    for (size_t k = 0; k < got.size(); ++k) EXPECT_NEAR(got[k], want[k], 2e-4) << c.dump() << k;
    // Under the null the crossings spend exactly the spending function's increments.
    const std::vector<double> crossed = CrossingProbabilities(t, got, 0);
    double total = 0;
    for (double p : crossed) total += p;
    EXPECT_NEAR(total, c["alpha"].get<double>(), 1e-6) << c.dump();
  }
}

TEST(SequentialTest, CrossingUnderADriftMatchesAMultivariateNormal) {
  for (const json& c : Reference()["crossing"]) {
    const Spending spending =
        c["spending"] == "pocock" ? Spending::kPocock : Spending::kOBrienFleming;
    const std::vector<double> t = Doubles(c["fractions"]);
    const std::vector<double> got = CrossingProbabilities(t, Doubles(c["boundaries"]), c["drift"]);
    const std::vector<double> want = Doubles(c["probabilities"]);
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < got.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-5) << c.dump() << k;
  }
}

// The spending functions' ends, and bad looks refused.
TEST(SequentialTest, SpendingEndsAtAlphaAndBadLooksAreRefused) {
  for (Spending s : {Spending::kOBrienFleming, Spending::kPocock}) {
    EXPECT_NEAR(SpentAlpha(s, 0.05, 1.0), 0.05, 1e-12);
    EXPECT_EQ(SpentAlpha(s, 0.05, 0.0), 0.0);
    EXPECT_LT(SpentAlpha(s, 0.05, 0.3), SpentAlpha(s, 0.05, 0.6));
  }
  // One look at the whole information is the fixed design: the usual 1.96.
  const std::vector<double> one = SequentialBoundaries({1.0}, 0.05, Spending::kOBrienFleming);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_NEAR(one[0], 1.959963984540054, 1e-6);
  EXPECT_NEAR(NominalLevel(one[0]), 0.05, 1e-6);
  EXPECT_TRUE(SequentialBoundaries({0.5, 0.4, 1.0}, 0.05, Spending::kPocock).empty());
  EXPECT_TRUE(SequentialBoundaries({0.5, 1.2}, 0.05, Spending::kPocock).empty());
  EXPECT_TRUE(SequentialBoundaries({0.5, 1.0}, 1.5, Spending::kPocock).empty());
  EXPECT_TRUE(SequentialBoundaries({}, 0.05, Spending::kPocock).empty());
}

// The procedure's promise, by simulation (bench-sequential prints the same with more studies):
// 16 claims, Holm over O'Brien–Fleming-like looks at a third, two thirds and all of the planned
// seeds. Under every null the family-wise error stays within α plus three Monte Carlo standard
// errors (10,000 studies: 0.0065), while looking at the same looks without spending breaks that
// bound by far, so the check has teeth; at the design effect the power reaches the target and the
// sequential design spends fewer seeds than the fixed one. Seeded: the same numbers every run.
TEST(SequentialTest, AMonteCarloKeepsTheFamilyWiseErrorAndReachesThePower) {
  constexpr int kClaims = 16, kStudies = 10000;
  constexpr double kAlpha = 0.05, kPower = 0.8, kEffect = 1.0;
  const int fixed = static_cast<int>(
      std::ceil(SeedsForPower(kEffect, Design::kOneSample, kAlpha / kClaims, kPower)));
  const double inflation =
      InflationFactor({1.0 / 3, 2.0 / 3, 1.0}, kAlpha / kClaims, Spending::kOBrienFleming, kPower);
  ASSERT_GT(inflation, 1.0);
  ASSERT_LT(inflation, 1.05);
  const int most = static_cast<int>(std::ceil(fixed * inflation));
  FamilySimulation spec;
  spec.fixed_seeds = fixed;
  spec.look_seeds = {(most + 2) / 3, (2 * most + 2) / 3, most};
  spec.alpha = kAlpha;
  spec.studies = kStudies;
  const double bound = kAlpha + 3 * std::sqrt(kAlpha * (1 - kAlpha) / kStudies);

  spec.effects.assign(kClaims, 0.0);
  spec.seed = 21;
  const FamilyOutcome null = SimulateFamily(spec);
  EXPECT_LE(null.sequential_familywise_error, bound);
  EXPECT_LE(null.fixed_familywise_error, bound);
  spec.unspent = true;
  EXPECT_GT(SimulateFamily(spec).sequential_familywise_error, 2 * bound);
  spec.unspent = false;

  spec.effects.assign(kClaims, kEffect);
  spec.seed = 22;
  const FamilyOutcome design = SimulateFamily(spec);
  const double power_se = std::sqrt(kPower * (1 - kPower) / (kStudies * kClaims));
  EXPECT_GE(design.sequential_power, kPower - 3 * power_se);
  EXPECT_GE(design.fixed_power, kPower - 3 * power_se);
  EXPECT_LT(design.sequential_seeds, design.fixed_seeds);

  // Half the nulls true: the error among them is bounded too (Holm's strong control).
  for (int c = 0; c < kClaims / 2; ++c) spec.effects[c] = 0;
  spec.seed = 23;
  EXPECT_LE(SimulateFamily(spec).sequential_familywise_error, bound);
}

}  // namespace
}  // namespace cart::report::stats
