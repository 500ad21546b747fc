#include "report/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "common/student_t.h"
#include "store/results.h"

namespace cart::report::stats {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

bool AnyNaN(const std::vector<double>& x) {
  return std::any_of(x.begin(), x.end(), [](double v) { return std::isnan(v); });
}

double NormalCdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

// The sample mean and standard deviation (n - 1); std is NaN for n < 2.
struct Moments {
  double mean = kNaN;
  double var = kNaN;
  int64_t n = 0;
};
Moments MomentsOf(const std::vector<double>& x) {
  Moments m;
  m.n = static_cast<int64_t>(x.size());
  if (x.empty()) return m;
  m.mean = std::accumulate(x.begin(), x.end(), 0.0) / m.n;
  if (m.n < 2) return m;
  double ss = 0;
  for (double v : x) ss += (v - m.mean) * (v - m.mean);
  m.var = ss / (m.n - 1);
  return m;
}

// Fills the interval and the test of an estimate whose value, se and df are set.
void FinishEstimate(Estimate& e, double null, double level) {
  if (std::isnan(e.value) || std::isnan(e.se) || std::isnan(e.df)) {
    e.low = e.high = e.t = e.p = kNaN;
    return;
  }
  if (e.se == 0) {
    e.low = e.high = e.value;
    e.t = e.value == null ? 0
                          : std::copysign(std::numeric_limits<double>::infinity(), e.value - null);
    e.p = e.value == null ? 1 : 0;
    return;
  }
  const double q = StudentTQuantile(0.5 + level / 2, e.df);
  e.low = e.value - q * e.se;
  e.high = e.value + q * e.se;
  e.t = (e.value - null) / e.se;
  e.p = StudentTTwoSided(e.t, e.df);
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
  // T' = (Z + nc) / S with S = sqrt(V / df), V chi-square on df: P(T' <= t) = E[Φ(t S - nc)],
  // integrated over the density of S by Simpson's rule. S has mean near 1 and spread near
  // 1 / sqrt(2 df); its log-density falls like -df s^2 / 2, below -200 past the upper end.
  const double upper = 1 + std::sqrt(400 / df);
  constexpr int kIntervals = 4000;  // even
  const double h = upper / kIntervals;
  const double log_norm = std::log(2.0) + (df / 2) * std::log(df / 2) - std::lgamma(df / 2);
  auto integrand = [&](double s) {
    if (s <= 0) return df == 1 ? std::exp(log_norm) * NormalCdf(-nc) : 0.0;
    const double log_density = log_norm + (df - 1) * std::log(s) - df * s * s / 2;
    return std::exp(log_density) * NormalCdf(t * s - nc);
  };
  double sum = integrand(0) + integrand(upper);
  for (int i = 1; i < kIntervals; ++i) sum += integrand(i * h) * (i % 2 ? 4 : 2);
  return std::clamp(sum * h / 3, 0.0, 1.0);
}

Estimate Mean(const std::vector<double>& x, double null, double level) {
  if (x.empty() || AnyNaN(x)) return AllNaN(static_cast<int64_t>(x.size()), 0);
  const Moments m = MomentsOf(x);
  Estimate e;
  e.n = m.n;
  e.value = m.mean;
  e.df = static_cast<double>(m.n - 1);
  e.se = m.n < 2 ? kNaN : std::sqrt(m.var / m.n);
  if (m.n < 2) e.df = kNaN;
  FinishEstimate(e, null, level);
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
  const Moments ma = MomentsOf(a), mb = MomentsOf(b);
  Estimate e;
  e.n = na;
  e.n2 = nb;
  e.value = ma.mean - mb.mean;
  if (na < 2 || nb < 2) {
    e.se = e.df = kNaN;
  } else {
    const double va = ma.var / na, vb = mb.var / nb;
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

}  // namespace cart::report::stats
