#pragma once

// Group-sequential looks at a claim (docs/study.md "Planning seeds"): each look after a batch of
// new seeds spends part of the significance level by a Lan–DeMets α-spending function, so that
// deciding at the 2nd, 3rd, … look keeps the chance of any false decision at α. Two-sided,
// symmetric boundaries on the standardized statistic Z, computed by the recursive numerical
// integration of Armitage, McPherson and Rowe (1969) over the density of the score S = Z √t,
// whose increments between looks are independent. Pure functions, safe from any thread; checked
// against SciPy's multivariate normal (tests/report/stats_reference.py) by stats_test.

#include <cstdint>
#include <utility>
#include <vector>

namespace cart::report::stats {

enum class Spending {
  // α*(t) = 2 − 2 Φ(z_{1−α/2} / √t): little at early looks, nearly all of α at the last
  // (O'Brien–Fleming-like).
  kOBrienFleming,
  // α*(t) = α ln(1 + (e − 1) t): about even across looks (Pocock-like).
  kPocock,
};

// The two-sided level spent by information fraction t (0 ≤ t ≤ 1; α*(1) = α).
double SpentAlpha(Spending spending, double alpha, double t);

// The boundaries c_k (|Z_k| ≥ c_k decides at look k) for looks at information fractions
// `fractions` (increasing, each in (0, 1]), so that under the null the chance of crossing at
// look k, not before, is α*(t_k) − α*(t_{k−1}). A look whose increment is nothing gets an
// infinite boundary. Empty when the fractions are not increasing within (0, 1] or alpha is not
// in (0, 1).
std::vector<double> SequentialBoundaries(const std::vector<double>& fractions, double alpha,
                                         Spending spending);

// The chance of first crossing each boundary, look by look, when the drift is `drift` (the
// expected Z at t = 1: the effect in standard errors of the full design). Their sum is the power
// (drift > 0) or the type-I error spent (drift 0).
std::vector<double> CrossingProbabilities(const std::vector<double>& fractions,
                                          const std::vector<double>& boundaries, double drift);

// The two-sided nominal level of a boundary: a test at look k decides when its p < this.
double NominalLevel(double boundary);

// How many times the fixed design's seeds a sequential design needs at its last look for the same
// power at `alpha`: (drift_sequential / drift_fixed)², each the drift at which the crossings sum
// to `power` (normal theory). Slightly above 1 for O'Brien–Fleming-like spending. NaN for looks
// SequentialBoundaries refuses or a power outside (alpha, 1).
double InflationFactor(const std::vector<double>& fractions, double alpha, Spending spending,
                       double power);

// Holm's step-down over sequential looks, after Maurer and Bretz (2013): a family of m claims,
// each looked at on the same information fractions; at a look, the undecided claims are taken by
// ascending p, and the i-th of them (r claims decided before, at this look or earlier) is decided
// when its p is below the nominal level of the boundary at this look for the level α / (m − r);
// the first that is not stops the step-down. A claim decided stays decided. Boundaries for each
// level are computed once.
class SequentialHolm {
 public:
  // Empty boundaries (every Decide nothing) when SequentialBoundaries refuses the looks.
  SequentialHolm(std::vector<double> fractions, double alpha, Spending spending, int claims);
  // Looking without spending: every look tested at the fixed design's levels (α / j), the
  // error this class exists to prevent; the simulation shows what it costs.
  static SequentialHolm Unspent(int looks, double alpha, int claims);

  // At look `look` (0-based), the claims still undecided with their two-sided p (claim index,
  // p), `decided_before` claims decided at earlier looks: the indexes decided now.
  std::vector<int> Decide(int look, std::vector<std::pair<int, double>> undecided,
                          int decided_before) const;
  // The nominal level at look `look` for the level α / j.
  double Level(int look, int j) const;

 private:
  SequentialHolm() = default;
  std::vector<std::vector<double>> boundaries_;  // [j − 1][look]: boundaries at level α / j
  int claims_ = 0;
};

// A Monte Carlo of a family of claims, each a one-sample t test of seeds drawn N(effect, 1)
// (a paired difference in its standard deviations), decided (a) with a fixed design — every
// claim gets `fixed_seeds` and Holm's test at α — and (b) sequentially — looks at `look_seeds`
// (increasing; the last the maximum), each undecided claim getting seeds up to the next look,
// decided by SequentialHolm. Deterministic for a seed.
struct FamilySimulation {
  std::vector<double> effects;  // one per claim, in standard deviations; 0: the null holds
  int fixed_seeds = 0;          // the fixed design's seeds per claim
  std::vector<int> look_seeds;  // the sequential design's seeds at each look
  double alpha = 0.05;
  Spending spending = Spending::kOBrienFleming;
  int studies = 1000;
  uint64_t seed = 1;
  bool unspent = false;  // look without spending (SequentialHolm::Unspent): for comparison
};
struct FamilyOutcome {
  // Studies in which some claim whose null holds was decided (either sign), per design.
  double fixed_familywise_error = 0, sequential_familywise_error = 0;
  // Among claims whose null does not hold, the share decided on the true side, per design.
  double fixed_power = 0, sequential_power = 0;
  // Seeds used per study, on average (a sequential claim stops at the look that decides it).
  double fixed_seeds = 0, sequential_seeds = 0;
};
FamilyOutcome SimulateFamily(const FamilySimulation& spec);

}  // namespace cart::report::stats
