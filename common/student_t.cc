#include "common/student_t.h"

#include <cmath>
#include <limits>

namespace cart::stats {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The continued fraction of the incomplete beta function, by the modified Lentz method; it
// converges quickly for x < (a + 1) / (a + b + 2), which the caller arranges.
double BetaContinuedFraction(double a, double b, double x) {
  constexpr double kTiny = 1e-300;
  constexpr double kEpsilon = 1e-16;
  auto guard = [](double v) { return std::abs(v) < kTiny ? kTiny : v; };
  double c = 1;
  double d = 1 / guard(1 - (a + b) * x / (a + 1));
  double h = d;
  for (int m = 1; m <= 1000; ++m) {
    // The even step of the fraction, then the odd one.
    double term = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m));
    d = 1 / guard(1 + term * d);
    c = guard(1 + term / c);
    h *= d * c;
    term = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1));
    d = 1 / guard(1 + term * d);
    c = guard(1 + term / c);
    const double step = d * c;
    h *= step;
    if (std::abs(step - 1) < kEpsilon) break;
  }
  return h;
}

// The regularized incomplete beta function I_x(a, b).
double IncompleteBeta(double a, double b, double x) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const double log_front =
      std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x);
  if (x < (a + 1) / (a + b + 2)) {
    return std::exp(log_front) * BetaContinuedFraction(a, b, x) / a;
  }
  return 1 - std::exp(log_front) * BetaContinuedFraction(b, a, 1 - x) / b;
}

}  // namespace

double StudentTTwoSided(double t, double df) {
  if (std::isnan(t) || std::isnan(df) || df <= 0) return kNaN;
  if (std::isinf(t)) return 0;
  return IncompleteBeta(df / 2, 0.5, df / (df + t * t));
}

double StudentTCdf(double t, double df) {
  const double tail = StudentTTwoSided(t, df) / 2;
  return t > 0 ? 1 - tail : tail;
}

double StudentTQuantile(double p, double df) {
  if (std::isnan(p) || std::isnan(df) || df <= 0 || p <= 0 || p >= 1) return kNaN;
  if (p == 0.5) return 0;
  if (p < 0.5) return -StudentTQuantile(1 - p, df);
  // Bisection on the upper tail, which StudentTTwoSided gives without cancellation.
  const double tail = 2 * (1 - p);
  double lo = 0, hi = 1;
  while (StudentTTwoSided(hi, df) > tail) {
    lo = hi;
    hi *= 2;
    if (hi > 1e300) return std::numeric_limits<double>::infinity();
  }
  for (int i = 0; i < 200 && hi - lo > 1e-15 * hi; ++i) {
    const double mid = (lo + hi) / 2;
    (StudentTTwoSided(mid, df) > tail ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}

}  // namespace cart::stats
