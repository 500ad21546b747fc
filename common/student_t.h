#pragma once

// Student's t distribution: its two-sided tail, its distribution function and its quantiles,
// from Boost.Math (students_t_distribution), and the mean of a sample with its t interval. The
// one place the project computes them: the results tables' 95 % intervals over seeds
// (store/results.h) and the claims' tests (report/stats.h) both use it. Pure functions, safe
// from any thread; checked against SciPy by tests/report/stats_test.cc.

#include <cstdint>
#include <vector>

namespace cart::stats {

// P(|T| >= |t|) for Student's t with df > 0 degrees of freedom (df may be fractional: Welch),
// computed directly (no 1 - cdf cancellation). NaN for a NaN argument or df <= 0.
double StudentTTwoSided(double t, double df);
// P(T <= t).
double StudentTCdf(double t, double df);
// The t with StudentTCdf(t, df) == p, for 0 < p < 1; NaN outside.
double StudentTQuantile(double p, double df);

// The mean of a sample with its spread and its two-sided Student's t interval at `level`
// (mean ± t((1 + level) / 2, n - 1) · se, se = std / √n).
struct SampleMean {
  int64_t n = 0;
  double mean;  // NaN when the sample is empty
  double std;   // sample standard deviation (n - 1); NaN when n < 2
  double se;    // std / √n; NaN when n < 2
  double low;   // the interval; NaN when n < 2 (zero spread: the point itself)
  double high;
};
// A NaN value (a diverged seed) makes every field but n NaN: it is never dropped.
SampleMean MeanOf(const std::vector<double>& x, double level = 0.95);

}  // namespace cart::stats
