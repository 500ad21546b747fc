#include "report/stats.h"

#include <algorithm>
#include <boost/math/distributions/binomial.hpp>
#include <boost/math/distributions/chi_squared.hpp>
#include <boost/math/distributions/non_central_t.hpp>
#include <boost/math/distributions/normal.hpp>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "common/math_policy.h"
#include "common/student_t.h"
#include "store/results.h"

namespace cart::report::stats {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

bool AnyNaN(const std::vector<double>& x) {
  return std::any_of(x.begin(), x.end(), [](double v) { return std::isnan(v); });
}

// Fills the t test of an estimate whose value, se, df and interval are set (an estimate that
// cannot be tested has no interval either).
void FinishTest(Estimate& e, double null) {
  if (std::isnan(e.value) || std::isnan(e.se) || std::isnan(e.df)) {
    e.low = e.high = e.t = e.p = kNaN;
    return;
  }
  if (e.se == 0) {
    e.t = e.value == null ? 0
                          : std::copysign(std::numeric_limits<double>::infinity(), e.value - null);
    e.p = e.value == null ? 1 : 0;
    return;
  }
  e.t = (e.value - null) / e.se;
  e.p = StudentTTwoSided(e.t, e.df);
}

// Fills the interval and the test of an estimate whose value, se and df are set. Zero spread:
// the interval is the point.
void FinishEstimate(Estimate& e, double null, double level) {
  const double half = StudentTQuantile(0.5 + level / 2, e.df) * e.se;
  e.low = e.value - half;
  e.high = e.value + half;
  FinishTest(e, null);
}

Estimate AllNaN(int64_t n, int64_t n2) {
  Estimate e;
  e.value = e.low = e.high = e.se = e.df = e.t = e.p = kNaN;
  e.n = n;
  e.n2 = n2;
  return e;
}

}  // namespace

double NoncentralTCdf(double t, double df, double nc) {
  if (std::isnan(t) || std::isnan(df) || std::isnan(nc) || df <= 0) return kNaN;
  if (std::isinf(t)) return t > 0 ? 1 : 0;
  return std::clamp(
      boost::math::cdf(
          boost::math::non_central_t_distribution<double, cart::stats::MathPolicy>(df, nc), t),
      0.0, 1.0);
}

Estimate Mean(const std::vector<double>& x, double null, double level) {
  if (x.empty() || AnyNaN(x)) return AllNaN(static_cast<int64_t>(x.size()), 0);
  // The mean and its interval as the results tables compute them (common/student_t.h).
  const cart::stats::SampleMean m = cart::stats::MeanOf(x, level);
  Estimate e;
  e.n = m.n;
  e.value = m.mean;
  e.se = m.se;
  e.df = m.n < 2 ? kNaN : static_cast<double>(m.n - 1);
  e.low = m.low;
  e.high = m.high;
  FinishTest(e, null);
  return e;
}

Estimate PairedDifference(const std::vector<double>& a, const std::vector<double>& b,
                          double level) {
  if (a.size() != b.size()) return AllNaN(0, 0);
  std::vector<double> diff(a.size());
  for (size_t i = 0; i < a.size(); ++i) diff[i] = a[i] - b[i];
  return Mean(diff, 0, level);
}

Estimate WelchDifference(const std::vector<double>& a, const std::vector<double>& b, double level) {
  const int64_t na = static_cast<int64_t>(a.size()), nb = static_cast<int64_t>(b.size());
  if (a.empty() || b.empty() || AnyNaN(a) || AnyNaN(b)) return AllNaN(na, nb);
  const cart::stats::SampleMean ma = cart::stats::MeanOf(a), mb = cart::stats::MeanOf(b);
  Estimate e;
  e.n = na;
  e.n2 = nb;
  e.value = ma.mean - mb.mean;
  if (na < 2 || nb < 2) {
    e.se = e.df = kNaN;
  } else {
    const double va = ma.se * ma.se, vb = mb.se * mb.se;  // each mean's variance
    e.se = std::sqrt(va + vb);
    e.df = va + vb == 0 ? static_cast<double>(na + nb - 2)
                        : (va + vb) * (va + vb) / (va * va / (na - 1) + vb * vb / (nb - 1));
  }
  FinishEstimate(e, 0, level);
  return e;
}

Correlation Spearman(const std::vector<double>& x, const std::vector<double>& y) {
  Correlation c;
  if (x.size() != y.size() || AnyNaN(x) || AnyNaN(y)) {
    c.r = c.p = kNaN;
    c.n = x.size() == y.size() ? static_cast<int64_t>(x.size()) : 0;
    return c;
  }
  c.n = static_cast<int64_t>(x.size());
  c.r = store::RankCorrelation(store::Ranks(x, store::Goal::kMin),
                               store::Ranks(y, store::Goal::kMin));
  if (c.n < 3 || std::isnan(c.r)) {
    c.p = kNaN;
  } else if (std::abs(c.r) >= 1) {
    c.p = 0;
  } else {
    const double df = static_cast<double>(c.n - 2);
    c.p = StudentTTwoSided(c.r * std::sqrt(df / (1 - c.r * c.r)), df);
  }
  return c;
}

std::vector<double> Holm(const std::vector<double>& p) {
  std::vector<size_t> order;
  for (size_t i = 0; i < p.size(); ++i) {
    if (!std::isnan(p[i])) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] < p[b]; });
  std::vector<double> adjusted(p.size(), kNaN);
  const double m = static_cast<double>(order.size());
  double running = 0;  // the step-down maximum keeps the adjusted values in the raw order
  for (size_t k = 0; k < order.size(); ++k) {
    running = std::max(running, std::min(1.0, (m - k) * p[order[k]]));
    adjusted[order[k]] = running;
  }
  return adjusted;
}

double Power(double nc, double df, double alpha) {
  const double critical = StudentTQuantile(1 - alpha / 2, df);
  if (std::isnan(critical) || std::isnan(nc)) return kNaN;
  return 1 - NoncentralTCdf(critical, df, nc) + NoncentralTCdf(-critical, df, nc);
}

double DetectableEffect(double se, double df, double alpha, double power) {
  if (std::isnan(se) || std::isnan(df) || se <= 0 || df <= 0) return kNaN;
  // Power rises with the noncentrality: bisect for the one that gives `power`.
  double lo = 0, hi = 1;
  while (Power(hi, df, alpha) < power) {
    lo = hi;
    hi *= 2;
    if (hi > 1e6) return kNaN;
  }
  for (int i = 0; i < 60; ++i) {
    const double mid = (lo + hi) / 2;
    (Power(mid, df, alpha) < power ? lo : hi) = mid;
  }
  return se * (lo + hi) / 2;
}

double McNemar(int64_t b, int64_t c, bool exact) {
  if (b < 0 || c < 0) return kNaN;
  const int64_t n = b + c;
  if (n == 0) return 1;
  if (exact) {
    const boost::math::binomial_distribution<double, cart::stats::MathPolicy> dist(
        static_cast<double>(n), 0.5);
    return std::min(1.0, 2 * boost::math::cdf(dist, static_cast<double>(std::min(b, c))));
  }
  const double d = std::abs(static_cast<double>(b - c)) - 1;
  const double statistic = d * d / static_cast<double>(n);
  const boost::math::chi_squared_distribution<double, cart::stats::MathPolicy> chi2(1);
  return boost::math::cdf(boost::math::complement(chi2, statistic));
}

Estimate McNemarDifference(int64_t b, int64_t c, int64_t n, double level) {
  Estimate e;
  e.n = n;
  if (n <= 0 || b < 0 || c < 0 || b + c > n) {
    e.value = e.low = e.high = e.se = e.t = e.p = kNaN;
    return e;
  }
  const double nd = static_cast<double>(n), diff = static_cast<double>(b - c);
  e.value = diff / nd;
  e.se = std::sqrt(std::max(0.0, static_cast<double>(b + c) - diff * diff / nd)) / nd;
  const boost::math::normal_distribution<double, cart::stats::MathPolicy> normal;
  const double z = boost::math::quantile(normal, 0.5 + level / 2);
  e.low = e.value - z * e.se;
  e.high = e.value + z * e.se;
  e.t = e.se > 0 ? e.value / e.se : 0;
  e.df = kNaN;
  e.p = McNemar(b, c, /*exact=*/b + c <= 50);
  return e;
}

Estimate PairedBootstrap(const std::vector<std::vector<double>>& d, int resamples, uint64_t seed,
                         double level) {
  Estimate e;
  e.value = e.low = e.high = e.se = e.t = e.p = e.df = kNaN;
  const size_t seeds = d.size();
  if (seeds == 0 || d[0].empty() || resamples < 2) return e;
  const size_t items = d[0].size();
  double total = 0;
  for (const std::vector<double>& row : d) {
    if (row.size() != items) return e;
    for (double x : row) {
      if (std::isnan(x)) return e;
      total += x;
    }
  }
  e.n = static_cast<int64_t>(items);
  e.n2 = static_cast<int64_t>(seeds);
  e.value = total / static_cast<double>(items * seeds);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick_seed(0, seeds - 1), pick_item(0, items - 1);
  std::vector<double> stats(static_cast<size_t>(resamples));
  std::vector<size_t> drawn_items(items);
  std::vector<size_t> drawn_seeds(seeds);
  for (double& stat : stats) {
    for (size_t& s : drawn_seeds) s = pick_seed(rng);
    for (size_t& i : drawn_items) i = pick_item(rng);
    double sum = 0;
    for (size_t s : drawn_seeds) {
      const std::vector<double>& row = d[s];
      for (size_t i : drawn_items) sum += row[i];
    }
    stat = sum / static_cast<double>(items * seeds);
  }
  double mean = 0, sq = 0;
  for (double x : stats) mean += x;
  mean /= static_cast<double>(resamples);
  for (double x : stats) sq += (x - mean) * (x - mean);
  e.se = std::sqrt(sq / static_cast<double>(resamples - 1));
  // A handful of seeds resampled understates their spread (by (k − 1) / k), so the interval and
  // p read the bootstrap's standard error against Student's t on k − 1 degrees of freedom (the
  // items' n − 1 with one seed), not the percentiles.
  e.df = static_cast<double>(seeds > 1 ? seeds - 1 : items - 1);
  if (!(e.df > 0)) {  // one item of one seed: nothing to resample
    e.low = e.high = e.se = e.t = e.p = kNaN;
    return e;
  }
  if (!(e.se > 0)) {  // every resample the same: the difference is exact
    e.low = e.high = e.value;
    e.p = e.value == 0 ? 1 : 0;
    e.t = 0;
    return e;
  }
  const double q = StudentTQuantile(0.5 + level / 2, e.df);
  e.low = e.value - q * e.se;
  e.high = e.value + q * e.se;
  e.t = e.value / e.se;
  e.p = StudentTTwoSided(e.t, e.df);
  return e;
}

double PowerForSeeds(double d, double n, Design design, double alpha) {
  const bool two = design == Design::kTwoArms;
  const double df = two ? 2 * n - 2 : n - 1;
  if (!(df > 0) || std::isnan(d)) return kNaN;
  return Power(std::abs(d) * std::sqrt(two ? n / 2 : n), df, alpha);
}

double SeedsForPower(double d, Design design, double alpha, double power) {
  if (!std::isfinite(d) || d == 0 || !(alpha > 0 && alpha < 1) || !(power > 0 && power < 1)) {
    return kNaN;
  }
  // Power rises with n: bisect on log n from just above the smallest n with a degree of freedom.
  double lo = design == Design::kTwoArms ? 1.0 + 1e-9 : 1.0 + 1e-9, hi = 4;
  while (PowerForSeeds(d, hi, design, alpha) < power) {
    lo = hi;
    hi *= 2;
    if (hi > 1e9) return kNaN;
  }
  if (PowerForSeeds(d, lo, design, alpha) >= power) return lo;
  for (int i = 0; i < 100 && hi - lo > 1e-12 * hi; ++i) {
    const double mid = std::sqrt(lo * hi);
    (PowerForSeeds(d, mid, design, alpha) < power ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}

}  // namespace cart::report::stats
