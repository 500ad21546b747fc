#pragma once

// Group-sequential looks at a claim (docs/study.md "Planning seeds"): each look after a batch of
// new seeds spends part of the significance level by a Lan–DeMets α-spending function, so that
// deciding at the 2nd, 3rd, … look keeps the chance of any false decision at α. Two-sided,
// symmetric boundaries on the standardized statistic Z, computed by the recursive numerical
// integration of Armitage, McPherson and Rowe (1969) over the density of the score S = Z √t,
// whose increments between looks are independent. Pure functions, safe from any thread; checked
// against SciPy's multivariate normal (tests/report/stats_reference.py) by stats_test.

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

}  // namespace cart::report::stats
