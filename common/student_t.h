#pragma once

// Student's t distribution: its two-sided tail, its distribution function and its quantiles,
// from Boost.Math (students_t_distribution). The one place the project computes them: the
// results tables' 95 % intervals over seeds (store/results.h) and the claims' tests
// (report/stats.h) both use it. Pure functions, safe from any thread; checked against SciPy by
// tests/report/stats_test.cc.

namespace cart::stats {

// P(|T| >= |t|) for Student's t with df > 0 degrees of freedom (df may be fractional: Welch),
// computed directly (no 1 - cdf cancellation). NaN for a NaN argument or df <= 0.
double StudentTTwoSided(double t, double df);
// P(T <= t).
double StudentTCdf(double t, double df);
// The t with StudentTCdf(t, df) == p, for 0 < p < 1; NaN outside.
double StudentTQuantile(double p, double df);

}  // namespace cart::stats
