// bench-sequential: a Monte Carlo of the planner's procedure for a family of 16 claims (the
// paper's), each a paired t test over seeds (docs/study.md "Planning seeds"): Holm's step-down
// over Lan–DeMets O'Brien–Fleming-like boundaries at three looks, against a fixed design of the
// same power with Holm's test at the end. Prints the family-wise error under the null (all claims,
// and half of them), the power at the design effect, and the seeds each design spends, with the
// Monte Carlo standard errors.
//
//   bench-sequential [--studies N] [--effect D] [--power P]

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "report/sequential.h"
#include "report/stats.h"

using cart::report::stats::Design;
using cart::report::stats::FamilyOutcome;
using cart::report::stats::FamilySimulation;
using cart::report::stats::InflationFactor;
using cart::report::stats::SeedsForPower;
using cart::report::stats::SimulateFamily;
using cart::report::stats::Spending;

int main(int argc, char** argv) {
  int studies = 20000;
  double effect = 1.0, power = 0.8;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--studies")) studies = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--effect")) effect = std::atof(argv[i + 1]);
    if (!std::strcmp(argv[i], "--power")) power = std::atof(argv[i + 1]);
  }
  constexpr int kClaims = 16;
  constexpr double kAlpha = 0.05;
  // Each claim is planned at Holm's first, strictest level, α / 16.
  const int fixed = static_cast<int>(
      std::ceil(SeedsForPower(effect, Design::kOneSample, kAlpha / kClaims, power)));
  const std::vector<double> thirds = {1.0 / 3, 2.0 / 3, 1.0};
  const double inflation =
      InflationFactor(thirds, kAlpha / kClaims, Spending::kOBrienFleming, power);
  const int most = static_cast<int>(std::ceil(fixed * inflation));
  const std::vector<int> looks = {static_cast<int>(std::ceil(most / 3.0)),
                                  static_cast<int>(std::ceil(2 * most / 3.0)), most};
  std::printf(
      "16 claims, alpha %.2f with Holm, power %.2f at an effect of %.2f standard deviations\n"
      "fixed design: %d seeds per claim; sequential: looks at %d, %d, %d seeds (the fixed design "
      "x %.4f, O'Brien-Fleming-like spending)\n%d simulated studies per case\n\n",
      kAlpha, power, effect, fixed, looks[0], looks[1], looks[2], inflation, studies);
  auto run = [&](const char* name, int alternatives, uint64_t seed) {
    FamilySimulation spec;
    spec.effects.assign(kClaims, 0.0);
    for (int c = 0; c < alternatives; ++c) spec.effects[c] = effect;
    spec.fixed_seeds = fixed;
    spec.look_seeds = looks;
    spec.alpha = kAlpha;
    spec.studies = studies;
    spec.seed = seed;
    const FamilyOutcome o = SimulateFamily(spec);
    const double se_error = std::sqrt(kAlpha * (1 - kAlpha) / studies);
    std::printf("%s\n", name);
    if (alternatives < kClaims) {
      std::printf("  family-wise error: fixed %.4f, sequential %.4f (alpha %.2f; MC s.e. %.4f)\n",
                  o.fixed_familywise_error, o.sequential_familywise_error, kAlpha, se_error);
    }
    if (alternatives > 0) {
      const double se_power = std::sqrt(power * (1 - power) / (studies * alternatives));
      std::printf(
          "  power per true claim: fixed %.4f, sequential %.4f (target %.2f; MC s.e. %.4f)\n",
          o.fixed_power, o.sequential_power, power, se_power);
    }
    std::printf("  seeds per study: fixed %.1f, sequential %.1f (%.1f %% of fixed)\n",
                o.fixed_seeds, o.sequential_seeds, 100 * o.sequential_seeds / o.fixed_seeds);
  };
  auto peek = [&](uint64_t seed) {
    FamilySimulation spec;
    spec.effects.assign(kClaims, 0.0);
    spec.fixed_seeds = fixed;
    spec.look_seeds = looks;
    spec.studies = studies;
    spec.seed = seed;
    spec.unspent = true;
    std::printf(
        "every null true, looking at each look without spending\n  family-wise error "
        "%.4f: what the spending prevents\n",
        SimulateFamily(spec).sequential_familywise_error);
  };
  run("every null true", 0, 11);
  peek(11);
  run("half the nulls true", kClaims / 2, 12);
  run("every claim at the design effect", kClaims, 13);
  return 0;
}
