#pragma once

// The statistics `cart report` decides the paper's claims with: Student's t (central and
// noncentral), the one-sample, paired and Welch t tests with their confidence intervals,
// Spearman's rank correlation with its test, Holm's correction, and the smallest effect a test
// could have detected. Pure functions over plain vectors; no state, safe from any thread.
//
// Conventions, the same in every function:
// - A NaN anywhere in a sample (a diverged seed) makes the whole result NaN: a run that diverged
//   is a fact about the config, never silently dropped. `n` still counts it.
// - p-values are two-sided. Intervals are two-sided at `level` (0.95 unless given).
// - Where a quantity cannot be estimated (one observation: no spread; zero spread: no scale) it
//   is NaN, and the caller says "cannot tell"; nothing is made up.
// Checked against SciPy 1.17 (tests/report/stats_reference.py writes the values stats_test reads).

#include <cstdint>
#include <vector>

#include "common/student_t.h"

namespace cart::report::stats {

// Student's t distribution itself (common/student_t.h, shared with the results tables).
using cart::stats::StudentTCdf;
using cart::stats::StudentTQuantile;
using cart::stats::StudentTTwoSided;
// P(T' <= t) for the noncentral t with df degrees of freedom and noncentrality nc (the statistic
// of a t test when the true effect is nc standard errors).
double NoncentralTCdf(double t, double df, double nc);

// An estimate (a mean, or a difference of means) with its interval and the t test of it against
// a null value.
struct Estimate {
  double value = 0;          // the mean, or the difference of means
  double low = 0, high = 0;  // the confidence interval; NaN when it cannot be estimated
  double se = 0;             // standard error of `value`
  double df = 0;             // degrees of freedom of the t test (Welch: fractional)
  double t = 0;              // (value - null) / se
  double p = 0;              // two-sided p-value; NaN when se cannot be estimated
  int64_t n = 0;             // observations: the sample, the pairs, or the first arm (Welch)
  int64_t n2 = 0;            // Welch: the second arm; otherwise 0
};

// The mean of x with its t interval, tested against `null`. n < 2: low, high, se and p are NaN.
// Zero spread: the interval is the point, p is 0 (or 1 when the mean equals null).
Estimate Mean(const std::vector<double>& x, double null = 0, double level = 0.95);
// mean(a[i] - b[i]) over pairs (a and b of equal length, pairs matched by the caller): the
// paired t test. Different lengths: every field NaN, n = 0.
Estimate PairedDifference(const std::vector<double>& a, const std::vector<double>& b,
                          double level = 0.95);
// mean(a) - mean(b) with Welch's unequal-variance t test (Welch–Satterthwaite df). Either arm
// with fewer than 2 observations: the interval, se and p are NaN.
Estimate WelchDifference(const std::vector<double>& a, const std::vector<double>& b,
                         double level = 0.95);

struct Correlation {
  double r = 0;  // Spearman's rank correlation; NaN when either side is constant
  double p = 0;  // two-sided, from t = r sqrt((n - 2) / (1 - r^2)) on n - 2 df (as SciPy's
                 // spearmanr); NaN when n < 3
  int64_t n = 0;
};
// Spearman's ρ of (x[i], y[i]), ties given their mean rank. Different lengths: NaN, n = 0.
Correlation Spearman(const std::vector<double>& x, const std::vector<double>& y);

// Holm's step-down adjustment of a family of p-values, in their given order: each adjusted value
// is at least its raw value, at most 1, and their order matches the raw values'. NaN entries are
// not counted in the family and stay NaN.
std::vector<double> Holm(const std::vector<double>& p);

// The two-sided power of a t test at `alpha` with df degrees of freedom when the true effect is
// `nc` standard errors.
double Power(double nc, double df, double alpha = 0.05);
// The smallest true effect that a two-sided t test at `alpha` with standard error `se` and df
// degrees of freedom detects with probability `power` (exact, from the noncentral t). NaN when
// se or df is NaN or se is 0.
double DetectableEffect(double se, double df, double alpha = 0.05, double power = 0.8);

// McNemar's test of two paired binary outcomes on the same items (one checkpoint scored at two
// loop counts, or two arms scored on one task's items): `b` items right only under the first,
// `c` right only under the second. Exact: the two-sided binomial p of min(b, c) of b + c at 1/2
// (statsmodels' mcnemar(exact=True)); else the chi-square on one degree of freedom of
// (|b − c| − 1)² / (b + c) (its continuity-corrected form). 1 when b + c is 0; NaN for a
// negative count.
double McNemar(int64_t b, int64_t c, bool exact = true);

// The difference of two binary outcomes on the same n items, as an Estimate: value (b − c) / n
// (the first's accuracy minus the second's), its Wald interval from the paired variance
// (b + c − (b − c)² / n) / n², and McNemar's p — exact while b + c ≤ 50, the continuity-corrected
// chi-square past it. n = items. NaN fields for n = 0.
Estimate McNemarDifference(int64_t b, int64_t c, int64_t n, double level = 0.95);

// A paired bootstrap over items and seeds: d[s][i] is item i's difference (first − second) under
// seed s; every seed scores the same items, so seeds and items are crossed and each resample
// draws seeds and items with replacement, independently; its statistic is the mean of d over the
// drawn seeds and items. value: the mean of d; se: the standard deviation of `resamples`
// statistics; the interval value ± t·se and the two-sided p of value / se read against Student's
// t on seeds − 1 degrees of freedom (items − 1 with one seed): resampling a handful of seeds
// understates their spread, and percentiles would be too narrow (docs/study.md "Paired tests
// over items"). n = items, n2 = seeds. Deterministic for a `seed`. NaN fields when d is empty,
// ragged, or holds a NaN.
Estimate PairedBootstrap(const std::vector<std::vector<double>>& d, int resamples = 2000,
                         uint64_t seed = 1, double level = 0.95);

// How a test pairs its runs (the planner's design of new seeds): one sample, or pairs matched by
// seed (n observations: their differences), or two independent arms of n runs each (Welch).
enum class Design { kOneSample, kTwoArms };
// The power of a two-sided t test at `alpha` with n observations (per arm: kTwoArms) when the
// true effect is d standard deviations (of one observation; of a pair's difference). n may be
// fractional, as a power solver treats it.
double PowerForSeeds(double d, double n, Design design, double alpha = 0.05);
// The n (fractional, as statsmodels' solve_power gives it) whose power is `power`; NaN when d
// is 0 or not finite, or alpha or power lies outside (0, 1). Round up for seeds.
double SeedsForPower(double d, Design design, double alpha = 0.05, double power = 0.8);

}  // namespace cart::report::stats
